"""`AsyncClient`: the `Client` operations, awaitable, for programs that run many conversations on one loop.

Two ways a call runs, one per kind of client:

- Remote (`AsyncClient.remote(url, ...)`, or `AsyncClient(http_client)`): the call is a coroutine on the
  caller's loop (`coordinator.client.async_http`: asyncio streams for http://, httpx's async transport for
  https://): no worker thread, and a long poll (`events()`, `poll_events(wait_s=...)`) is awaited. The
  operations and the rules (token, Idempotency-Key kept across retries, which failures are retried, the
  `tls_untrusted`, `unreachable` and service refusals) are `HttpClient`'s own, described once
  (`coordinator.client.calls`). At most `max_workers` calls are on the wire at once; the others wait their
  turn. Its connections belong to the loop that opened them; used on a new loop after that one ended
  (`asyncio.run` again), it opens new ones. An `HttpClient` made
  with a `transport=` that has no async side keeps the thread pool below. `tools.adispatch` and `submit`
  run blocking adapter code, so they still use a worker thread (started on first use).
- In process (`AsyncClient.local(root, ...)`, or `AsyncClient(local_client)`): the engine is blocking by
  design (an edit may wait for a file lock, every write touches the disk), so each call is handed to a
  bounded pool of `max_workers` threads and the loop only awaits the result. One agent waiting for a
  contended lock stalls no other agent on the loop.

In-process, the pool is one thread (`LOCAL_WORKERS`) and lock waits leave it: a call whose file lock is taken
stops before anything is read under the lock (`CallOptions(wait_for_lock=False)`, LockBusy)
and continues on a pool of waiters, threads that sleep in the kernel until the lock is handed to them. Why:
the engine's Python work holds the GIL, so more runnable threads do not edit faster, they only make the
loop wait longer for the GIL (figures: BENCHMARKS.md, "Figures behind design choices").

Cancellation is safe, and says which way it went, the same for both. A call whose task is cancelled before
it started (no worker picked it up; for a remote call: no request was sent, it was still waiting for its
turn) never runs: nothing was written. A call already started when its task is cancelled runs to its end
(the check-then-write is never cut in half) and its result is kept. For a remote call that means: the
request was sent, so the service finishes it; this client keeps reading its answer in the background (the
connection stays usable) and keeps that answer for the key. Pass `idempotency_key` to a write, edit,
multi_edit, undo, redo or restore to be able to ask again: the same key answers with the first call's result
(or its refusal), or runs it now if it never started, and `outcome(key)` says "done", "running", "not_run"
or "unknown". Remote, the key is also the request's Idempotency-Key: the service itself answers a repeat
with the first answer (for its `--idempotency-ttl`), so another process, or this one after the key was
forgotten here, gets the same answer by asking with the same session and key. A keyed remote call that
ended with the service `unreachable`, or in a refusal `coordinator.errors.CODES` marks retryable, is sent
again (same key) when asked again. Without a key,
`history(path)` tells whether a write landed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import sys
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from coordinator import errors
from coordinator.client import BoundSession, Client, EventPage, LocalClient, SessionStatus
from coordinator.client import operations as ops
from coordinator.client.operations import Operation
from coordinator.engine import CallOptions, LockBusy, ReadResult, WriteResult
from coordinator.errors import CoordinatorError
from coordinator.git.commit import CommitResult
from coordinator.history import HistoryEntry
from coordinator.state.events import ChangeEvent, Notice
from coordinator.state.leases import Lease

if TYPE_CHECKING:  # the HTTP client (and httpx) is imported only by a program that uses one
    from coordinator.client.async_http import AsyncHttpDriver
    from coordinator.client.calls import Call

T = TypeVar("T")
Outcome = Literal["done", "running", "not_run", "unknown"]

DEFAULT_WORKERS = 8  # remote: calls in flight at once (each mostly waits on its connection)
LOCAL_WORKERS = 1  # in-process: calls doing engine work at once (see the module docstring)
_LOCK_WAITERS = 64  # in-process: calls waiting for a file lock at once (asleep in the kernel)
_KEPT_KEYS = 10_000  # idempotency keys remembered per client (oldest finished ones dropped first)


def _driver_for(client: Client) -> AsyncHttpDriver | None:
    """The async driver of an `HttpClient` (None for any other client). The HTTP client's module, and
    httpx with it, is looked up, not imported: a program that made no `HttpClient` never loads them."""
    http = sys.modules.get("coordinator.client.http")
    if http is None or not isinstance(client, http.HttpClient):
        return None
    from coordinator.client.async_http import AsyncHttpDriver

    return AsyncHttpDriver.for_client(client)


class AsyncClient:
    """The coordinator's operations as coroutines, over any `Client` (see the module docstring).

    `AsyncClient.local(root, ...)` runs the engine in this process; `AsyncClient.remote(url, token=...)`
    talks to a service; `AsyncClient(client)` wraps a client you made (an `HttpClient` is driven
    asynchronously, any other client on the thread pool). `max_workers` bounds how many calls
    run at once (the others wait their turn without blocking the loop): in-process, how many do engine
    work at once (default `LOCAL_WORKERS`; calls waiting for a file lock do not count), remote, how many
    are in flight (default `DEFAULT_WORKERS`).
    """

    def __init__(self, client: Client, *, max_workers: int | None = None, owns: bool = False) -> None:
        self.client = client
        self._owns = owns
        self._coord = client.coord if isinstance(client, LocalClient) else None
        # In-process calls are first tried without waiting for a taken lock (`_start`); a client that is
        # not driven remotely runs its calls on the pool as they are.
        self._inline: Client = client
        if isinstance(client, LocalClient):
            self._inline = client.with_options(CallOptions(wait_for_lock=False))
        workers = max_workers or (LOCAL_WORKERS if self._coord is not None else DEFAULT_WORKERS)
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="edit-coordinator")
        self._waiters = concurrent.futures.ThreadPoolExecutor(_LOCK_WAITERS, thread_name_prefix="edit-coordinator-lock")
        self._blocking: concurrent.futures.ThreadPoolExecutor | None = None
        self._calls: OrderedDict[str, concurrent.futures.Future[Any] | _Flight[Any]] = OrderedDict()
        self._calls_lock = threading.Lock()
        # Remote: coroutines over the async driver; the pools' threads start on first use only, so such a
        # client starts none unless an adapter uses `submit`.
        self._remote = _driver_for(client)
        self._workers = workers
        self._turns = asyncio.Semaphore(workers)  # remote calls on the wire at once
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the remote connections belong to
        self._flying: set[asyncio.Task[Any]] = set()

    @classmethod
    def local(
        cls, root: str, redis_url: str | None = None, *, max_workers: int | None = None, **options: Any
    ) -> AsyncClient:
        """An engine in this process (`Coordinator(root, redis_url, **options)`), closed with the client."""
        return cls(LocalClient.open(root, redis_url, **options), max_workers=max_workers, owns=True)

    @classmethod
    def remote(cls, url: str, *, max_workers: int = DEFAULT_WORKERS, **options: Any) -> AsyncClient:
        """A service at `url` (`HttpClient(url, **options)`: token, tokens or secret, ca_file, ...), its calls
        coroutines on the caller's loop; closed with the client."""
        options.setdefault("max_connections", max_workers)
        from coordinator.client.http import HttpClient

        return cls(HttpClient(url, **options), max_workers=max_workers, owns=True)

    def session(self, session_id: str) -> AsyncSession:
        """One session's calls with the id filled in (the shape of `coordinator.Session`, awaitable)."""
        return AsyncSession(self, session_id)

    # -- files --------------------------------------------------------------------------------------------
    async def read(self, session: str, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        return await self.run(ops.Read(path=path, offset=offset, limit=limit, session=session))

    async def write(self, session: str, path: str, content: str, *, idempotency_key: str | None = None) -> WriteResult:
        op = ops.Write(path=path, content=content, session=session)
        return await self.run(op, idempotency_key=idempotency_key)

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
        op = ops.Edit(path=path, old_string=old_string, new_string=new_string, replace_all=replace_all, session=session)
        return await self.run(op, idempotency_key=idempotency_key)

    async def multi_edit(
        self, session: str, path: str, edits: Sequence[dict[str, Any]], *, idempotency_key: str | None = None
    ) -> WriteResult:
        op = ops.MultiEdit(path=path, edits=list(edits), session=session)  # type: ignore[arg-type]  # dicts: the engine checks them
        return await self.run(op, idempotency_key=idempotency_key)

    async def undo(
        self, session: str, path: str, version: int | None = None, *, idempotency_key: str | None = None
    ) -> WriteResult:
        op = ops.Undo(path=path, version=version, session=session)
        return await self.run(op, idempotency_key=idempotency_key)

    async def redo(self, session: str, path: str, *, idempotency_key: str | None = None) -> WriteResult:
        op = ops.Redo(path=path, session=session)
        return await self.run(op, idempotency_key=idempotency_key)

    async def commit(
        self, session: str, message: str, include_others: bool = False, *, idempotency_key: str | None = None
    ) -> CommitResult:
        op = ops.Commit(message=message, include_others=include_others, session=session)
        return await self.run(op, idempotency_key=idempotency_key)

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
        op = ops.Restore(path=path, to_version=to_version, before_version=before_version, session=session)
        return await self.run(op, idempotency_key=idempotency_key)

    async def history(self, path: str, limit: int = ops.History.limit) -> list[HistoryEntry]:
        return await self.run(ops.History(path=path, limit=limit))

    # -- leases -------------------------------------------------------------------------------------------
    async def lease(
        self, session: str, paths: str | Sequence[str], mode: str = ops.LeaseOp.mode, ttl_s: float = ops.LeaseOp.ttl_s
    ) -> list[Lease]:
        listed = [paths] if isinstance(paths, str) else list(paths)
        op = ops.LeaseOp(paths=listed, mode=mode, ttl_s=ttl_s, session=session)  # type: ignore[arg-type]  # the engine checks mode
        return await self.run(op)

    async def renew(self, session: str, lease_id: str | None = None, ttl_s: float = ops.Renew.ttl_s) -> list[Lease]:
        return await self.run(ops.Renew(lease_id=lease_id, ttl_s=ttl_s, session=session))

    async def release(self, session: str, lease_id: str | None = None, pattern: str | None = None) -> int:
        return await self.run(ops.Release(lease_id=lease_id, pattern=pattern, session=session))

    async def leases(self, session: str | None = None) -> list[Lease]:
        return await self.run(ops.Leases(session=session))

    async def break_lease(self, lease_id: str | None = None, session: str | None = None) -> list[Lease]:
        return await self.run(ops.BreakLease(lease_id=lease_id, session=session))

    # -- change events, notices, status -------------------------------------------------------------------
    async def poll_events(
        self,
        since: str | None = None,
        paths: Sequence[str] | None = None,
        wait_s: float = ops.PollEvents.wait_s,
        limit: int = ops.PollEvents.limit,
    ) -> EventPage:
        op = ops.PollEvents(since=since, paths=list(paths) if paths else None, wait_s=wait_s, limit=limit)
        if self._coord is not None and wait_s > 0:
            # In process, a long poll sleeps on its thread: on the pool of `submit`, never on the engine's.
            return await asyncio.wrap_future(self.submit(self.client.run, op))
        return await self.run(op)

    async def events(
        self, since: str | None = None, paths: Sequence[str] | None = None, wait_s: float = 25.0
    ) -> AsyncIterator[ChangeEvent]:
        """Follow the change events (oldest first) until the caller stops iterating; each wait is a long
        poll of at most `wait_s` seconds (awaited on the loop when remote, on a worker thread in process)."""
        page = await self.poll_events(since, paths, 0.0, 1)  # pins "$" to a cursor now
        cursor = page.cursor
        for event in page.events:
            yield event
        while True:
            page = await self.poll_events(cursor, paths, wait_s)
            cursor = page.cursor
            for event in page.events:
                yield event

    async def recent_events(self, count: int = ops.RecentEvents.count) -> list[ChangeEvent]:
        return await self.run(ops.RecentEvents(count=count))

    async def notices(self, session: str) -> Notice | None:
        return await self.run(ops.Notices(session=session))

    async def status(self, session: str) -> SessionStatus:
        return await self.run(ops.Status(session=session))

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
        """Wait for the calls that are running (remote ones included), then close the client if this object
        made it."""
        if self._flying:
            await asyncio.gather(*self._flying, return_exceptions=True)
        if self._remote is not None:
            await self._remote.aclose()
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def close(self) -> None:
        """Blocking close: the pools and, if this object made it, the client (use `aclose` on a loop: it also
        closes the remote connections)."""
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

    def _start(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        """Start one call; its future is done when the call is. Invariant (cancellation): the future can be
        cancelled only while no worker has picked the call up; once running (lock wait included) it runs
        to its end. In-process, a call whose file lock is taken moves to the waiters (module docstring):
        LockBusy guarantees nothing was read under the lock or written, and `resume()` continues it."""
        if self._coord is None:
            return self._pool.submit(fn, *args)
        outer: concurrent.futures.Future[T] = concurrent.futures.Future()

        def first() -> None:
            if not outer.set_running_or_notify_cancel():
                return  # cancelled before it started: nothing was done
            try:
                outer.set_result(fn(*args))
            except LockBusy as busy:
                self._waiters.submit(_settle, outer, busy.resume)
            except BaseException as exc:
                outer.set_exception(_kept(exc))

        self._pool.submit(first)
        return outer

    async def run(self, op: Operation[T], *, idempotency_key: str | None = None) -> T:
        """One declared operation (coordinator/client/operations.py), awaitable: a mutation with
        `idempotency_key` as the named write methods describe. Remote, the declaration's `Call` is sent
        on this loop; in process, it runs on the engine's pool, first without waiting for a taken lock."""
        remote = self._remote
        if idempotency_key is None or not op.mutates:
            if remote is None:
                return await asyncio.wrap_future(self._start(functools.partial(self._inline.run, op)))
            return await self._await(self._fly(remote.calls.run(op)))
        if remote is not None:
            return await self._remote_write(idempotency_key, remote.calls.run(op).keyed(idempotency_key))
        key = idempotency_key
        with self._calls_lock:
            fut = self._calls.get(key)
            if fut is None or fut.cancelled():  # never ran: run it now
                fut = self._start(functools.partial(self._inline.run, op))
                self._remember(key, fut)
        assert isinstance(fut, concurrent.futures.Future)
        # A cancelled await cancels `fut` only if no worker has started it (concurrent.futures semantics).
        return await asyncio.wrap_future(fut)

    async def _remote_write(self, key: str, call: Call[T]) -> T:
        with self._calls_lock:
            flight = self._calls.get(key)
            if not isinstance(flight, _Flight) or flight.cancelled() or flight.may_send_again():
                # Never sent, or it failed in a way the same call may overcome: send it (again) now. With the
                # same key, the service answers a request it already ran with that request's answer.
                flight = self._fly(call)
                self._remember(key, flight)
        return await self._await(flight)

    def _remember(self, key: str, entry: concurrent.futures.Future[Any] | _Flight[Any]) -> None:
        self._calls[key] = entry
        self._calls.move_to_end(key)
        self._forget_old()

    def _fly(self, call: Call[T]) -> _Flight[T]:
        """Start a remote call as a task of its own: it waits its turn, then is sent and read to its end."""
        assert self._remote is not None
        remote = self._remote
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or a new loop after the one before ended (asyncio.run again)
            if self._loop is not None:
                remote.rebind()
                self._turns = asyncio.Semaphore(self._workers)
            self._loop = loop
        flight: _Flight[T] = _Flight()

        async def go() -> T:
            async with self._turns:
                flight.sent = True  # from here on it runs to its end, whoever stops waiting for it
                return await remote.run(call)

        task = loop.create_task(go())
        flight.task = task
        self._flying.add(task)
        task.add_done_callback(self._landed)
        return flight

    def _landed(self, task: asyncio.Task[Any]) -> None:
        self._flying.discard(task)
        if not task.cancelled():
            task.exception()  # kept on the task for whoever asks again; not "never retrieved"

    async def _await(self, flight: _Flight[T]) -> T:
        """The flight's result. Cancelled while waiting: the call is cancelled too if it was not sent yet
        and nobody else waits for it (nothing was written); once sent it runs to its end."""
        flight.waiters += 1
        try:
            return await asyncio.shield(flight.task)
        except asyncio.CancelledError:
            if not flight.sent and flight.waiters == 1:
                flight.task.cancel()
            raise
        finally:
            flight.waiters -= 1

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
        outer.set_exception(_kept(exc))


def _kept(exc: BaseException) -> BaseException:
    """What a call's future keeps of its exception: a refusal bare (`errors.bare_refusal`: its traceback
    would hold the frame that set it on the future, which holds the future); anything else with its
    traceback, for its reader."""
    return errors.bare_refusal(exc) if isinstance(exc, CoordinatorError) else exc


class _Flight(Generic[T]):
    """A remote call as `AsyncClient` tracks it: its task, whether its request was sent, who waits."""

    __slots__ = ("sent", "task", "waiters")

    def __init__(self) -> None:
        self.task: asyncio.Task[T]
        self.sent = False
        self.waiters = 0

    def cancelled(self) -> bool:
        return self.task.cancelled()

    def done(self) -> bool:
        return self.task.done()

    def may_send_again(self) -> bool:
        """It ended with the service `unreachable` (sent or not: with its key, the service runs a request
        once), or in a refusal that `coordinator.errors.CODES` marks retryable (`lock_timeout`,
        `overloaded`, ...): asking again with the same key sends it again."""
        if not self.task.done() or self.task.cancelled():
            return False
        exc = self.task.exception()
        if not isinstance(exc, CoordinatorError):
            return False
        code = exc.details.get("service_code", exc.code.value)
        return code == "unreachable" or errors.info(code).retryable


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

    async def commit(
        self, message: str, include_others: bool = False, *, idempotency_key: str | None = None
    ) -> CommitResult:
        return await self.client.commit(self.id, message, include_others, idempotency_key=idempotency_key)

    async def history(self, path: str, limit: int = ops.History.limit) -> list[HistoryEntry]:
        return await self.client.history(path, limit)

    async def lease(
        self, paths: str | Sequence[str], mode: str = ops.LeaseOp.mode, ttl_s: float = ops.LeaseOp.ttl_s
    ) -> list[Lease]:
        return await self.client.lease(self.id, paths, mode, ttl_s)

    async def renew(self, lease_id: str | None = None, ttl_s: float = ops.Renew.ttl_s) -> list[Lease]:
        return await self.client.renew(self.id, lease_id, ttl_s)

    async def release(self, lease_id: str | None = None, pattern: str | None = None) -> int:
        return await self.client.release(self.id, lease_id, pattern)

    async def leases(self) -> list[Lease]:
        return await self.client.leases(self.id)

    async def notices(self) -> Notice | None:
        return await self.client.notices(self.id)

    async def status(self) -> SessionStatus:
        return await self.client.status(self.id)
