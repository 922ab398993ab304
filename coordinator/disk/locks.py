"""Per-path OS locks: one lock file per path under the state dir, never the data file, never deleted.

Why not filelock's `FileLock` here: its acquisition polls with `LOCK_NB` every `poll_interval` (50 ms by
default), so under contention the hand-off from one holder to the next waits for the next poll, and the tail
latency of a hot file is set by the poll interval rather than by the work done under the lock. We block in
the kernel instead (`flock(LOCK_EX)`), which wakes a waiter the moment the holder releases.

A blocking `flock` has no timeout. When a timeout is asked for and the lock is contended, the blocking call
runs in a waiter thread (it releases the GIL) while the caller waits on an event with the timeout. Waiter
threads are pooled per process (`_WaiterPool`): a contended acquisition hands its descriptor to an idle
thread, and a new thread is started only when every pooled one is busy waiting (a thread start costs more
CPU than the hand-off itself, and `hot` started threads by the thousand without the pool: BENCHMARKS.md,
"Figures behind design choices"). Idle threads exit after `_IDLE_S`. Each acquisition opens its own file
description, so:
- two threads of one process exclude each other exactly as two processes do (flock locks belong to the
  open file description, not to the process);
- a waiter abandoned after a timeout that later gets the lock simply closes its own descriptor, which
  releases the lock; it can never release a lock somebody else holds.

`try_acquire(key)` is the non-blocking form: the held lock, or None when somebody holds it (for callers
such as an event loop that must never wait, and run the call elsewhere when the lock is busy).

A process killed while holding a lock loses its descriptors, and the kernel releases the lock at once: no
lease, no stale lock to break.

filelock is still used where polling is harmless: the one-off start of the embedded Redis server.
"""

from __future__ import annotations

import errno
import fcntl
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from coordinator.errors import CoordinatorError, ErrorCode


def lock_name(key: str) -> str:
    """The lock file name for a path key: a hash, so any path maps to a short, safe file name."""
    return xxhash.xxh3_128_hexdigest(key.encode("utf-8", "surrogateescape")) + ".lock"


#: Told (wait_s, hold_s) when a lock is released: the engine's observer (engine/observer.py).
ReleaseHook = Callable[[float, float], None]


@dataclass(slots=True)
class HeldLock:
    """A lock being held. `wait_s` is how long the acquisition waited; `release()` is idempotent.
    `on_release`, when set, is told the wait and the hold once the lock is released (no hook, no call)."""

    key: str
    fd: int
    wait_s: float
    acquired_at: float = field(default_factory=time.perf_counter)
    _released: bool = False
    on_release: ReleaseHook | None = None

    def release(self) -> float:
        """Release the lock and return how long it was held, in seconds."""
        if self._released:
            return 0.0
        self._released = True
        held = time.perf_counter() - self.acquired_at
        # Closing the descriptor releases the flock; no explicit LOCK_UN needed (and none could be wrong).
        os.close(self.fd)
        if self.on_release is not None:
            self.on_release(self.wait_s, held)
        return held

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_IDLE_S = 30.0  # a pooled waiter thread with nothing to do for this long exits


class _Waiter:
    """Blocks in flock on its own descriptor; hands it over, or closes it if the caller gave up."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.done = threading.Event()
        self.error: OSError | None = None
        self._mutex = threading.Lock()
        self._abandoned = False
        self._finished = False

    def run(self) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:
            self.error = exc
        with self._mutex:
            self._finished = True
            if self._abandoned:
                os.close(self.fd)
        self.done.set()

    def abandon(self) -> bool:
        """Give up waiting. True if the wait had already ended (the caller then owns the descriptor)."""
        with self._mutex:
            if self._finished:
                return True
            self._abandoned = True
            return False


class _PoolThread:
    """One pooled waiter thread: runs the waits handed to it, one at a time."""

    def __init__(self, pool: _WaiterPool) -> None:
        self.pool = pool
        self.jobs: queue.SimpleQueue[_Waiter] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="ec-lock-wait", daemon=True)

    def _loop(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=_IDLE_S)
            except queue.Empty:
                if self.pool.retire(self):
                    return
                continue  # handed a job just as it timed out: take it
            job.run()
            self.pool.idle(self)


class _WaiterPool:
    """The process's waiter threads (see the module docstring). `started` counts threads ever started."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._idle: list[_PoolThread] = []
        self.started = 0

    def submit(self, waiter: _Waiter) -> None:
        with self._mutex:
            t = self._idle.pop() if self._idle else None
            if t is None:
                t = _PoolThread(self)
                self.started += 1
        if t.thread.ident is None:
            t.thread.start()
        t.jobs.put(waiter)

    def idle(self, t: _PoolThread) -> None:
        with self._mutex:
            self._idle.append(t)

    def retire(self, t: _PoolThread) -> bool:
        """An idle thread asks to exit: yes unless it was just handed a job."""
        with self._mutex:
            if t in self._idle:
                self._idle.remove(t)
                return True
            return False

    def idle_count(self) -> int:
        with self._mutex:
            return len(self._idle)

    def reset(self) -> None:
        """In a forked child: the parent's threads do not exist there."""
        self._mutex = threading.Lock()
        self._idle = []
        self.started = 0


_POOL = _WaiterPool()
os.register_at_fork(after_in_child=_POOL.reset)


def waiter_stats() -> dict[str, int]:
    """Waiter threads started by this process so far, and how many are idle now (for benchmarks, tests)."""
    return {"started": _POOL.started, "idle": _POOL.idle_count()}


_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
_NAMES_MAX = 4096


class LockManager:
    """Hands out per-path exclusive locks backed by lock files in `lock_dir`."""

    def __init__(self, lock_dir: Path, timeout: float = 10.0) -> None:
        self.lock_dir = Path(lock_dir)
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        self.timeout = timeout
        self._dfd: int | None = None
        self.on_release: ReleaseHook | None = None  # given to every lock handed out from now on
        self._names: dict[str, str] = {}  # lock_name of the keys locked lately (a cache, bounded)

    def path_for(self, key: str) -> Path:
        return self.lock_dir / lock_name(key)

    def _open(self, key: str) -> int:
        name = self._names.get(key)
        if name is None:
            if len(self._names) >= _NAMES_MAX:
                self._names.clear()
            name = self._names[key] = lock_name(key)
        dfd = self._dfd
        if dfd is not None:  # the usual case: the lock folder is open, its file there
            try:
                return os.open(name, _OPEN_FLAGS, 0o600, dir_fd=dfd)
            except OSError:
                pass  # judged again below: a folder removed under us is made again
        try:
            return os.open(name, _OPEN_FLAGS, 0o600, dir_fd=self._dir_fd())
        except FileNotFoundError:  # the lock folder was removed under us: make it again
            self.close()
            self.lock_dir.mkdir(parents=True, exist_ok=True)
            return os.open(name, _OPEN_FLAGS, 0o600, dir_fd=self._dir_fd())

    def _dir_fd(self) -> int:
        """The lock folder, opened once: opening each lock file relative to it skips the path walk."""
        if self._dfd is None:
            self._dfd = os.open(self.lock_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return self._dfd

    def close(self) -> None:
        if self._dfd is not None:
            os.close(self._dfd)
            self._dfd = None

    def try_acquire(self, key: str) -> HeldLock | None:
        """Take the exclusive lock for `key` if it is free right now; never waits.

        Returns the held lock, or None when another holder (thread or process) has it; nothing is held
        then. A lock file that cannot be opened or locked for any other reason (permissions, a full or
        read-only state folder) raises CoordinatorError (`permission_denied` or `io_error`), as `acquire`
        does: "busy" and "broken" are different answers.
        """
        start = time.perf_counter()
        fd = self._open_or_raise(key)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError as exc:
            os.close(fd)
            raise _lock_os_error(key, exc) from exc
        return HeldLock(key, fd, time.perf_counter() - start, on_release=self.on_release)

    def _open_or_raise(self, key: str) -> int:
        try:
            return self._open(key)
        except OSError as exc:
            raise _lock_os_error(key, exc) from exc

    def acquire(self, key: str, timeout: float | None = -1.0) -> HeldLock:
        """Take the exclusive lock for `key`.

        timeout: seconds to wait; None waits forever; a negative value means the manager's default.
        Raises CoordinatorError(LOCK_TIMEOUT) when the wait runs out; nothing is held then.
        """
        if timeout is not None and timeout < 0:
            timeout = self.timeout
        start = time.perf_counter()
        fd = self._open_or_raise(key)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            now = time.perf_counter()
            return HeldLock(key, fd, now - start, now, False, self.on_release)
        except BlockingIOError:
            pass
        except OSError as exc:
            os.close(fd)
            raise _lock_os_error(key, exc) from exc
        if timeout is None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:
                os.close(fd)
                raise _lock_os_error(key, exc) from exc
            return HeldLock(key, fd, time.perf_counter() - start, on_release=self.on_release)
        waiter = _Waiter(fd)
        _POOL.submit(waiter)
        if waiter.done.wait(timeout) or waiter.abandon():
            if waiter.error is not None:
                os.close(fd)
                raise _lock_os_error(key, waiter.error)
            return HeldLock(key, fd, time.perf_counter() - start, on_release=self.on_release)
        raise CoordinatorError(
            ErrorCode.LOCK_TIMEOUT,
            f"Another session has held the lock on {key!r} for more than {timeout:g} s, so nothing was "
            "written. Try the same call again in a moment; if it keeps failing, another process may be "
            "stuck while editing this file.",
            path=key,
            timeout_s=timeout,
        )


def _lock_os_error(key: str, exc: OSError) -> CoordinatorError:
    if exc.errno in (errno.EACCES, errno.EPERM):
        code = ErrorCode.PERMISSION_DENIED
    else:
        code = ErrorCode.IO_ERROR
    return CoordinatorError(
        code,
        f"Could not lock {key!r} ({exc.strerror}); nothing was written. Check the state folder's "
        "permissions and free space, then try again.",
        path=key,
    )
