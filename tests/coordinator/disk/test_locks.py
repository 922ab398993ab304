"""LockManager: blocking and non-blocking acquisition, across threads and real processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator.disk.locks import HeldLock, LockManager, lock_name, waiter_stats
from coordinator.errors import CoordinatorError, ErrorCode


def _hold_in_child(lock_dir: str, key: str, ready: mp.synchronize.Event, go: mp.synchronize.Event) -> None:
    locks = LockManager(Path(lock_dir))
    held = locks.acquire(key, timeout=None)
    ready.set()
    go.wait(30)
    held.release()


def _try_in_child(lock_dir: str, key: str, out: mp.queues.Queue) -> None:
    held = LockManager(Path(lock_dir)).try_acquire(key)
    out.put(held is not None)
    if held is not None:
        held.release()


def test_try_acquire_free_lock_is_held_and_excludes(tmp_path: Path) -> None:
    locks = LockManager(tmp_path / "locks")
    held = locks.try_acquire("a.txt")
    assert isinstance(held, HeldLock)
    assert locks.try_acquire("a.txt") is None  # a second description in this process is refused
    other = locks.try_acquire("b.txt")  # another key is independent
    assert other is not None
    other.release()
    held.release()
    again = locks.try_acquire("a.txt")
    assert again is not None
    again.release()


def test_try_acquire_refused_while_another_thread_holds(tmp_path: Path) -> None:
    locks = LockManager(tmp_path / "locks")
    held = locks.acquire("k")
    results: list[bool] = []
    t = threading.Thread(target=lambda: results.append(locks.try_acquire("k") is None))
    t.start()
    t.join()
    assert results == [True]
    held.release()


def test_try_acquire_across_real_processes(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    lock_dir = str(tmp_path / "locks")
    locks = LockManager(Path(lock_dir))
    ready, go = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_in_child, args=(lock_dir, "src/x.py", ready, go))
    child.start()
    try:
        assert ready.wait(60)
        assert locks.try_acquire("src/x.py") is None  # the child holds it
        go.set()
        child.join(60)
        assert child.exitcode == 0
        held = locks.try_acquire("src/x.py")  # the child's exit (release) frees it
        assert held is not None
        out: mp.queues.Queue = ctx.Queue()
        other = ctx.Process(target=_try_in_child, args=(lock_dir, "src/x.py", out))
        other.start()
        assert out.get(timeout=60) is False  # and now this process excludes a child's try
        other.join(60)
        held.release()
        other = ctx.Process(target=_try_in_child, args=(lock_dir, "src/x.py", out))
        other.start()
        assert out.get(timeout=60) is True
        other.join(60)
    finally:
        go.set()
        child.join(60)


def test_try_acquire_broken_lock_file_raises_coordinator_error(tmp_path: Path) -> None:
    locks = LockManager(tmp_path / "locks")
    (tmp_path / "locks" / lock_name("k")).mkdir()  # cannot be opened for writing: broken, not busy
    with pytest.raises(CoordinatorError) as info:
        locks.try_acquire("k")
    assert info.value.code is ErrorCode.IO_ERROR
    with pytest.raises(CoordinatorError) as info:
        locks.acquire("k", timeout=0.1)
    assert info.value.code is ErrorCode.IO_ERROR


def test_try_acquire_leaks_no_descriptor_when_busy(tmp_path: Path) -> None:
    locks = LockManager(tmp_path / "locks")
    held = locks.acquire("k")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        assert locks.try_acquire("k") is None
    assert len(os.listdir("/proc/self/fd")) == before
    held.release()


def test_acquire_times_out_with_lock_timeout(tmp_path: Path) -> None:
    locks = LockManager(tmp_path / "locks")
    held = locks.acquire("k")
    with pytest.raises(CoordinatorError) as info:
        locks.acquire("k", timeout=0.05)
    assert info.value.code is ErrorCode.LOCK_TIMEOUT
    held.release()
    locks.acquire("k", timeout=0.05).release()


def _wait_until(cond: Callable[[], bool]) -> None:
    """Wait for a condition (no timed assertion: the test's own timeout bounds it)."""
    while not cond():
        time.sleep(0.001)


def test_contended_acquisitions_reuse_pooled_waiter_threads(tmp_path: Path) -> None:
    """A contended acquisition with a timeout hands its wait to a pooled thread: 30 of them in a row
    start at most one new thread (one each before)."""
    locks = LockManager(tmp_path / "locks")
    started = waiter_stats()["started"]
    for _ in range(30):
        held = locks.acquire("k")
        with pytest.raises(CoordinatorError) as info:
            locks.acquire("k", timeout=0.001)  # busy: the wait goes to a pooled thread, then is abandoned
        assert info.value.code is ErrorCode.LOCK_TIMEOUT
        idle = waiter_stats()["idle"]
        held.release()  # the abandoned waiter gets the lock, closes its descriptor, and goes back idle
        _wait_until(lambda idle=idle: waiter_stats()["idle"] > idle)
        locks.acquire("k", timeout=0.001).release()  # and the lock is free again: nothing leaked
    assert waiter_stats()["started"] - started <= 1


def test_pooled_waiters_hand_the_lock_over_across_processes(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    lock_dir = str(tmp_path / "locks")
    locks = LockManager(Path(lock_dir))
    for _ in range(2):
        ready, go = ctx.Event(), ctx.Event()
        child = ctx.Process(target=_hold_in_child, args=(lock_dir, "p", ready, go))
        child.start()
        assert ready.wait(60)
        got: list[HeldLock] = []
        t = threading.Thread(target=lambda got=got: got.append(locks.acquire("p", timeout=60)))
        t.start()  # waits (in a pooled thread) while the child holds the lock
        go.set()
        t.join()
        child.join(60)
        assert len(got) == 1 and got[0].wait_s >= 0
        assert locks.try_acquire("p") is None  # really held by this process now
        got[0].release()


def test_a_lock_folder_removed_under_the_manager_is_made_again(tmp_path: Path) -> None:
    """The folder's descriptor is kept open; once the folder is gone, the next lock makes it again, and
    two managers still exclude each other through the new one."""
    import shutil

    lock_dir = tmp_path / "locks"
    locks, other = LockManager(lock_dir), LockManager(lock_dir)
    locks.acquire("a.txt").release()
    shutil.rmtree(lock_dir)
    held = locks.acquire("a.txt")
    try:
        assert (lock_dir / lock_name("a.txt")).is_file()
        assert other.try_acquire("a.txt") is None  # the same lock file, in the folder made again
    finally:
        held.release()
    again = other.try_acquire("a.txt")
    assert again is not None
    again.release()
    locks.close()
    other.close()
