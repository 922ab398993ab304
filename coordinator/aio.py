"""`AsyncClient`: the `Client` operations, awaitable, for programs that run many conversations on one loop.

A blocking call (an edit may wait for a file lock, every write touches the disk) never runs on the event
loop: each call is handed to a bounded pool of worker threads, in-process over the engine (`local`) or over
HTTP keep-alive connections to `edit-coordinator serve` (`remote`). The loop only awaits the result, so one
agent waiting for a contended lock stalls no other agent on the loop.

In-process, the pool is small (`LOCAL_WORKERS`, 2) and lock waits leave it: a call whose file lock is taken
stops before anything is read under the lock (`Coordinator.call_options(wait_for_lock=False)`, LockBusy)
and continues on a pool of waiters, threads that sleep in the kernel until the lock is handed to them. Why:
the engine's Python work holds the GIL, so more runnable threads do not edit faster, they only make the
loop wait longer for the GIL. Measured side by side on the 2-core machine (16 coroutines, 8 sessions, 4
shared files, load ~3): 8 workers gave a largest loop stall of 87 ms (p99 36 ms) at 166 edits/s; 2
workers 29 ms (p99 6 ms) at 191 edits/s.

Cancellation is safe, and says which way it went. A call whose task is cancelled before a worker picked it
up never runs: nothing was written. A call already running when its task is cancelled runs to its end
(the check-then-write is never cut in half) and its result is kept. Pass `idempotency_key` to a write,
edit, multi_edit, undo, redo or restore to be able to ask again: the same key answers with the first call's result (or
runs it now if it never started), and `outcome(key)` says "done", "running", "not_run" or "unknown".
Without a key, `history(path)` tells whether a write landed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal, TypeVar

from .client import BoundSession, Client, EventPage, HttpClient, LocalClient, SessionStatus
from .engine import LockBusy, ReadResult, WriteResult
from .events import ChangeEvent, Notice
from .history import HistoryEntry
from .leases import Lease

T = TypeVar("T")
Outcome = Literal["done", "running", "not_run", "unknown"]

DEFAULT_WORKERS = 8  # remote: calls in flight at once (each mostly waits on its connection)
LOCAL_WORKERS = 2  # in-process: calls doing engine work at once (see the module docstring)
_LOCK_WAITERS = 64  # in-process: calls waiting for a file lock at once (asleep in the kernel)
_KEPT_KEYS = 10_000  # idempotency keys remembered per client (oldest finished ones dropped first)


class AsyncClient:
    """The coordinator's operations as coroutines, over any `Client` (see the module docstring).

    `AsyncClient.local(root, ...)` runs the engine in this process; `AsyncClient.remote(url, token=...)`
    talks to a service; `AsyncClient(client)` wraps a client you made. `max_workers` bounds how many calls
    run at once (the others wait their turn without blocking the loop): in-process, how many do engine
    work at once (default `LOCAL_WORKERS`; calls waiting for a file lock do not count), remote, how many
    are in flight (default `DEFAULT_WORKERS`).
    """

    def __init__(self, client: Client, *, max_workers: int | None = None, owns: bool = False) -> None:
        self.client = client
        self._owns = owns
        self._coord = client.coord if isinstance(client, LocalClient) else None
        workers = max_workers or (LOCAL_WORKERS if self._coord is not None else DEFAULT_WORKERS)
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="edit-coordinator")
        self._waiters = concurrent.futures.ThreadPoolExecutor(_LOCK_WAITERS, thread_name_prefix="edit-coordinator-lock")
        self._blocking: concurrent.futures.ThreadPoolExecutor | None = None
        self._calls: OrderedDict[str, concurrent.futures.Future[Any]] = OrderedDict()
        self._calls_lock = threading.Lock()

    @classmethod
    def local(
        cls, root: str, redis_url: str | None = None, *, max_workers: int | None = None, **options: Any
    ) -> AsyncClient:
        """An engine in this process (`Coordinator(root, redis_url, **options)`), closed with the client."""
        return cls(LocalClient.open(root, redis_url, **options), max_workers=max_workers, owns=True)

    @classmethod
    def remote(cls, url: str, *, max_workers: int = DEFAULT_WORKERS, **options: Any) -> AsyncClient:
        """A service at `url` (`HttpClient(url, **options)`: token, tokens or secret), closed with the client."""
        options.setdefault("max_connections", max_workers)
        return cls(HttpClient(url, **options), max_workers=max_workers, owns=True)

    def session(self, session_id: str) -> AsyncSession:
        """One session's calls with the id filled in (the shape of `coordinator.Session`, awaitable)."""
        return AsyncSession(self, session_id)

    # -- files --------------------------------------------------------------------------------------------
    async def read(self, session: str, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        return await self._run(self.client.read, session, path, offset, limit)

    async def write(self, session: str, path: str, content: str, *, idempotency_key: str | None = None) -> WriteResult:
        return await self._write(idempotency_key, self.client.write, session, path, content)

    async def edit(
        self,
        session: str,
        path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
        *,
        idempotency_key: str | None = None,
    ) -> WriteResult:
        return await self._write(idempotency_key, self.client.edit, session, path, old_string, new_string, replace_all)

    async def multi_edit(
        self, session: str, path: str, edits: Sequence[dict[str, Any]], *, idempotency_key: str | None = None
    ) -> WriteResult:
        return await self._write(idempotency_key, self.client.multi_edit, session, path, list(edits))

    async def undo(
        self, session: str, path: str, version: int | None = None, *, idempotency_key: str | None = None
    ) -> WriteResult:
        return await self._write(idempotency_key, self.client.undo, session, path, version)

    async def redo(self, session: str, path: str, *, idempotency_key: str | None = None) -> WriteResult:
        return await self._write(idempotency_key, self.client.redo, session, path)

    async def restore(
        self,
        path: str,
        to_version: int | None = None,
        *,
        before_version: int | None = None,
        session: str | None = None,
        idempotency_key: str | None = None,
    ) -> WriteResult:
        """For people: `Client.restore` (the whole file back as it was; the result's `discarded` lists what
        was thrown away)."""
        fn = functools.partial(self.client.restore, before_version=before_version, session=session)
        return await self._write(idempotency_key, fn, path, to_version)

    async def history(self, path: str, limit: int = 100) -> list[HistoryEntry]:
        return await self._run(self.client.history, path, limit)

    # -- leases -------------------------------------------------------------------------------------------
    async def lease(
        self, session: str, paths: str | Sequence[str], mode: str = "exclusive", ttl_s: float = 300.0
    ) -> list[Lease]:
        return await self._run(self.client.lease, session, paths, mode, ttl_s)

    async def renew(self, session: str, lease_id: str | None = None, ttl_s: float = 300.0) -> list[Lease]:
        return await self._run(self.client.renew, session, lease_id, ttl_s)

    async def release(self, session: str, lease_id: str | None = None, pattern: str | None = None) -> int:
        return await self._run(self.client.release, session, lease_id, pattern)

    async def leases(self, session: str | None = None) -> list[Lease]:
        return await self._run(self.client.leases, session)

    async def break_lease(self, lease_id: str | None = None, session: str | None = None) -> list[Lease]:
        return await self._run(self.client.break_lease, lease_id, session)

    # -- change events, notices, status -------------------------------------------------------------------
    async def poll_events(
        self, since: str | None = None, paths: Sequence[str] | None = None, wait_s: float = 0.0, limit: int = 200
    ) -> EventPage:
        return await self._run(self.client.poll_events, since, paths, wait_s, limit)

    async def events(
        self, since: str | None = None, paths: Sequence[str] | None = None, wait_s: float = 25.0
    ) -> AsyncIterator[ChangeEvent]:
        """Follow the change events (oldest first) until the caller stops iterating; each wait is a long
        poll of at most `wait_s` seconds on a worker thread."""
        page = await self.poll_events(since, paths, 0.0, 1)  # pins "$" to a cursor now
        cursor = page.cursor
        for event in page.events:
            yield event
        while True:
            page = await self.poll_events(cursor, paths, wait_s)
            cursor = page.cursor
            for event in page.events:
                yield event

    async def recent_events(self, count: int = 50) -> list[ChangeEvent]:
        return await self._run(self.client.recent_events, count)

    async def notices(self, session: str) -> Notice | None:
        return await self._run(self.client.notices, session)

    async def status(self, session: str) -> SessionStatus:
        return await self._run(self.client.status, session)

    # -- idempotency and lifecycle ------------------------------------------------------------------------
    def outcome(self, idempotency_key: str) -> Outcome:
        """What became of the call made with this key: "done" (it ran to its end: its result, or its
        refusal, is returned when asked again), "running", "not_run" (cancelled before it started: nothing
        was written) or "unknown" (no call with this key is remembered)."""
        with self._calls_lock:
            fut = self._calls.get(idempotency_key)
        if fut is None:
            return "unknown"
        if fut.cancelled():
            return "not_run"
        return "done" if fut.done() else "running"

    async def aclose(self) -> None:
        """Wait for the calls that are running, then close the client if this object made it."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._blocking is not None:
            self._blocking.shutdown(wait=True, cancel_futures=True)
        self._waiters.shutdown(wait=True)
        if self._owns:
            self.client.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        """Run `fn(*args)`, any blocking code that calls the client (`tools.adispatch`), on a worker thread.
        In-process such code waits for locks on its thread, so it has a pool of its own, as large as a
        remote client's (`DEFAULT_WORKERS`, or `max_workers` if larger): a lock wait there never holds up
        the client's own calls."""
        if self._coord is None:
            return self._pool.submit(fn, *args)
        with self._calls_lock:
            if self._blocking is None:
                self._blocking = concurrent.futures.ThreadPoolExecutor(
                    max(DEFAULT_WORKERS, self._pool._max_workers), thread_name_prefix="edit-coordinator-tools"
                )
        return self._blocking.submit(fn, *args)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self._start(fn, *args))

    def _start(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        """Start one call; its future is done when the call is. Invariant (cancellation): the future can be
        cancelled only while no worker has picked the call up; once running (lock wait included) it runs
        to its end. In-process, a call whose file lock is taken moves to the waiters (module docstring):
        LockBusy guarantees nothing was read under the lock or written, and `resume()` continues it."""
        if self._coord is None:
            return self._pool.submit(fn, *args)
        coord = self._coord
        outer: concurrent.futures.Future[T] = concurrent.futures.Future()

        def first() -> None:
            if not outer.set_running_or_notify_cancel():
                return  # cancelled before it started: nothing was done
            try:
                with coord.call_options(wait_for_lock=False):
                    outer.set_result(fn(*args))
            except LockBusy as busy:
                self._waiters.submit(_settle, outer, busy.resume)
            except BaseException as exc:
                outer.set_exception(exc)

        self._pool.submit(first)
        return outer

    async def _write(self, key: str | None, fn: Callable[..., T], *args: Any) -> T:
        if key is None:
            return await self._run(fn, *args)
        with self._calls_lock:
            fut = self._calls.get(key)
            if fut is None or fut.cancelled():  # never ran: run it now
                fut = self._start(fn, *args)
                self._calls[key] = fut
                self._calls.move_to_end(key)
                self._forget_old()
        # A cancelled await cancels `fut` only if no worker has started it (concurrent.futures semantics).
        return await asyncio.wrap_future(fut)

    def _forget_old(self) -> None:
        while len(self._calls) > _KEPT_KEYS:
            oldest = next(iter(self._calls))
            if not self._calls[oldest].done():
                break
            del self._calls[oldest]


def _settle(outer: concurrent.futures.Future[T], resume: Callable[[], T]) -> None:
    """Finish a call that waited for its lock: `outer` gets its result or its refusal."""
    try:
        outer.set_result(resume())
    except BaseException as exc:
        outer.set_exception(exc)


class AsyncSession:
    """One session's calls on an `AsyncClient`, with the session id filled in."""

    def __init__(self, client: AsyncClient, session_id: str) -> None:
        self.client = client
        self.id = session_id

    def __repr__(self) -> str:
        return f"AsyncSession({self.id!r})"

    def blocking(self) -> BoundSession:
        """The same session on the blocking client underneath (what `tools.adispatch` runs on the pool)."""
        return BoundSession(self.client.client, self.id)

    async def read(self, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        return await self.client.read(self.id, path, offset, limit)

    async def write(self, path: str, content: str, *, idempotency_key: str | None = None) -> WriteResult:
        return await self.client.write(self.id, path, content, idempotency_key=idempotency_key)

    async def edit(
        self,
        path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
        *,
        idempotency_key: str | None = None,
    ) -> WriteResult:
        return await self.client.edit(
            self.id, path, old_string, new_string, replace_all, idempotency_key=idempotency_key
        )

    async def multi_edit(
        self, path: str, edits: Sequence[dict[str, Any]], *, idempotency_key: str | None = None
    ) -> WriteResult:
        return await self.client.multi_edit(self.id, path, edits, idempotency_key=idempotency_key)

    async def undo(self, path: str, version: int | None = None, *, idempotency_key: str | None = None) -> WriteResult:
        return await self.client.undo(self.id, path, version, idempotency_key=idempotency_key)

    async def redo(self, path: str, *, idempotency_key: str | None = None) -> WriteResult:
        return await self.client.redo(self.id, path, idempotency_key=idempotency_key)

    async def history(self, path: str, limit: int = 100) -> list[HistoryEntry]:
        return await self.client.history(path, limit)

    async def lease(self, paths: str | Sequence[str], mode: str = "exclusive", ttl_s: float = 300.0) -> list[Lease]:
        return await self.client.lease(self.id, paths, mode, ttl_s)

    async def renew(self, lease_id: str | None = None, ttl_s: float = 300.0) -> list[Lease]:
        return await self.client.renew(self.id, lease_id, ttl_s)

    async def release(self, lease_id: str | None = None, pattern: str | None = None) -> int:
        return await self.client.release(self.id, lease_id, pattern)

    async def leases(self) -> list[Lease]:
        return await self.client.leases(self.id)

    async def notices(self) -> Notice | None:
        return await self.client.notices(self.id)

    async def status(self) -> SessionStatus:
        return await self.client.status(self.id)
