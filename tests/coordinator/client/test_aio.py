"""AsyncClient: the loop never blocks on a lock wait, cancellation either completed or wrote nothing, and
many coroutines over many sessions lose nothing (on the embedded, real Redis)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator import AsyncClient, Coordinator, CoordinatorError, ErrorCode
from coordinator.disk.locks import HeldLock
from tests import coroutines


@pytest.fixture
def repo(real_redis_root: Path) -> Iterator[Path]:
    (real_redis_root / "a.txt").write_text("count = 0\n")
    yield real_redis_root


def _hold_lock(root: Path, path: str) -> tuple[Coordinator, HeldLock]:
    """Another coordinator takes the file's OS lock, as a writer in another process would."""
    other = Coordinator(root, durability="none")
    return other, other.locks.acquire(other.resolve(path).key)


async def _ticks_while(pending: asyncio.Future[object], ticks: int) -> int:
    """Count loop turns (each a 1 ms sleep) while `pending` is not done, up to `ticks`."""
    n = 0
    while not pending.done() and n < ticks:
        await asyncio.sleep(0.001)
        n += 1
    return n


def test_a_lock_wait_does_not_block_the_loop(repo: Path) -> None:
    async def main() -> None:
        async with AsyncClient.local(str(repo), durability="none") as client:
            s = client.session("a1")
            await s.read("a.txt")
            other, held = _hold_lock(repo, "a.txt")
            try:
                edit = asyncio.ensure_future(s.edit("a.txt", "count = 0", "count = 1"))
                # The edit waits for the lock on a worker thread; the loop keeps turning meanwhile.
                assert await _ticks_while(edit, 50) == 50
                assert not edit.done()
            finally:
                held.release()
                other.close()
            res = await edit
            assert res.version == 1 and (repo / "a.txt").read_text() == "count = 1\n"

    asyncio.run(main())


def test_a_lock_wait_leaves_the_engine_workers_free(repo: Path) -> None:
    """In-process, a call waiting for a file lock does not hold one of the (few) engine workers: with a
    single worker, a write to another file completes while an edit waits, then the edit lands."""

    async def main() -> None:
        async with AsyncClient.local(str(repo), durability="none", max_workers=1) as client:
            s = client.session("a1")
            await s.read("a.txt")
            other, held = _hold_lock(repo, "a.txt")
            try:
                edit = asyncio.ensure_future(s.edit("a.txt", "count = 0", "count = 1"))
                await _ticks_while(edit, 20)
                created = await asyncio.wait_for(s.write("b.txt", "other\n"), timeout=10)
                assert created.created and not edit.done()
            finally:
                held.release()
                other.close()
            assert (await edit).version == 1 and (repo / "a.txt").read_text() == "count = 1\n"

    asyncio.run(main())


def test_a_long_poll_leaves_the_engine_workers_free(repo: Path) -> None:
    """In-process, a long poll of the change events sleeps on a thread of its own, never on the engine's
    (one worker by default): an edit made meanwhile completes, and the poll wakes with its event."""

    async def main() -> None:
        async with AsyncClient.local(str(repo), durability="none") as client:
            s = client.session("a1")
            await s.read("a.txt")
            cursor = (await client.poll_events(None, None, 0.0, 1)).cursor
            poll = asyncio.ensure_future(client.poll_events(cursor, None, 20.0))
            await _ticks_while(poll, 20)
            res = await asyncio.wait_for(s.edit("a.txt", "count = 0", "count = 1"), timeout=5)
            page = await asyncio.wait_for(poll, timeout=10)
            assert res.version == 1 and [e.path for e in page.events] == ["a.txt"]

    asyncio.run(main())


def test_cancelled_before_it_ran_writes_nothing_and_runs_when_asked_again(repo: Path) -> None:
    async def main() -> None:
        async with AsyncClient.local(str(repo), durability="none", max_workers=1) as client:
            s = client.session("a1")
            await s.read("a.txt")
            other, held = _hold_lock(repo, "a.txt")
            gate = threading.Event()
            try:
                first = asyncio.ensure_future(s.edit("a.txt", "count = 0", "count = 1", idempotency_key="k1"))
                await _ticks_while(first, 20)
                assert client.outcome("k1") == "running"  # waiting for the lock (among the lock waiters)
                # The only engine worker is kept busy, so the next call is queued, not started.
                busy = client._pool.submit(gate.wait)
                second = asyncio.ensure_future(s.write("b.txt", "new\n", idempotency_key="k2"))
                await asyncio.sleep(0.01)
                second.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await second
                assert client.outcome("k2") == "not_run"
                first.cancel()  # already running: it runs to its end
                with pytest.raises(asyncio.CancelledError):
                    await first
                assert client.outcome("k1") == "running"
            finally:
                gate.set()
                held.release()
                other.close()
            assert busy.result(timeout=10) is True
            again = await s.edit("a.txt", "count = 0", "count = 1", idempotency_key="k1")
            assert client.outcome("k1") == "done" and again.version == 1  # the first call's own result
            assert (repo / "a.txt").read_text() == "count = 1\n"
            assert not (repo / "b.txt").exists()
            assert (await s.write("b.txt", "new\n", idempotency_key="k2")).created
            assert client.outcome("unknown-key") == "unknown"
            assert len(await client.history("a.txt")) == 1  # applied once

    asyncio.run(main())


def test_refusals_come_back_as_coordinator_errors(repo: Path) -> None:
    async def main() -> None:
        async with AsyncClient.local(str(repo), durability="none") as client:
            with pytest.raises(CoordinatorError) as info:
                await client.edit("never-read", "a.txt", "count = 0", "count = 1")
            assert info.value.code is ErrorCode.NOT_READ
            assert (repo / "a.txt").read_text() == "count = 0\n"

    asyncio.run(main())


def test_sixteen_coroutines_over_eight_sessions_lose_nothing(repo: Path) -> None:
    files = coroutines.prepare(repo)
    rounds = 6

    async def main() -> list[int]:
        async with AsyncClient.local(str(repo), durability="none", policy="rebase", max_workers=8) as client:
            jobs = [
                coroutines.increment_own_line(client, f"s{i % 8}", files[i % 4], f"s{i % 8} = ", rounds)
                for i in range(coroutines.COROUTINES)
            ]
            return await asyncio.gather(*jobs)

    acked = asyncio.run(main())
    assert acked == [rounds] * coroutines.COROUTINES
    coroutines.assert_every_increment_landed(repo, files, rounds)
