"""`Client`: every operation an agent session (or its operator) can ask of the coordinator, written once.

Each operation is declared once, in coordinator/client/operations.py (arguments, limits, defaults, result,
route, tool, and its execution against the engine); a client only carries declarations to where they run.
`Client` holds the named methods, one line each (`return self.run(ops.Edit(...))`); a transport is a
subclass that says what `run(op)` does: `LocalClient` runs `op.apply` on the engine in this process,
`HttpClient` sends the declaration's request to `edit-coordinator serve` (over TCP or a unix socket). Both
return the same result types and raise `CoordinatorError` with the same codes, so a program written against
one runs unchanged against the other; the HTTP service, the MCP server, the command line and the worker
fleet are adapters over this interface. `AsyncClient` (aio.py) has the same named methods, awaitable.

`restore` is the one call for people rather than agents: it puts a whole file back as it was at a version
and discards every later version, whoever wrote it (the result's `discarded` lists them). It is not on
`BoundSession`, and not an MCP tool; over HTTP it needs the admin token.

Calls that act as a session take its id first (`client.edit("agent-7", path, old, new)`): one client can
serve many sessions, as a worker fleet does. `client.session("agent-7")` gives a `BoundSession`, the same
calls with the id filled in (the shape of `coordinator.Session`), for code that serves one session.

Adding an operation: its declaration (operations.py, with the engine method it calls), one line here and
one in `AsyncClient`, and, where it has them, a line in `BoundSession` / `AsyncSession`, its tool
(tools/) and its command (cli/). The service's route and OpenAPI entry are made from the declaration.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any, TypeVar

from coordinator.client import operations as ops
from coordinator.client.operations import Operation
from coordinator.client.results import EventPage, SessionStatus
from coordinator.engine import ReadResult, WriteResult
from coordinator.git.commit import CommitResult
from coordinator.history import HistoryEntry
from coordinator.state.events import ChangeEvent, Notice
from coordinator.state.leases import Lease

__all__ = ["BoundSession", "Client", "EventPage", "SessionStatus", "follow", "plain"]

T = TypeVar("T")


class Client:
    """The coordinator's operations. `session` is a session id; the same id is the same session anywhere.
    Defaults are the declarations' own (`ops.History.limit` is `History`'s default `limit`)."""

    def run(self, op: Operation[T]) -> T:
        """One declared operation (coordinator/client/operations.py): what each transport does."""
        raise NotImplementedError

    def session(self, session_id: str) -> BoundSession:
        return BoundSession(self, session_id)

    # -- files --------------------------------------------------------------------------------------------
    def read(self, session: str, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        return self.run(ops.Read(path=path, offset=offset, limit=limit, session=session))

    def write(self, session: str, path: str, content: str) -> WriteResult:
        return self.run(ops.Write(path=path, content=content, session=session))

    def edit(self, session: str, path: str, old_string: str, new_string: str, replace_all: bool = False) -> WriteResult:
        op = ops.Edit(path=path, old_string=old_string, new_string=new_string, replace_all=replace_all, session=session)
        return self.run(op)

    def multi_edit(self, session: str, path: str, edits: Sequence[dict[str, Any]]) -> WriteResult:
        return self.run(ops.MultiEdit(path=path, edits=list(edits), session=session))  # type: ignore[arg-type]  # dicts: the engine checks them

    def undo(self, session: str, path: str, version: int | None = None) -> WriteResult:
        return self.run(ops.Undo(path=path, version=version, session=session))

    def redo(self, session: str, path: str) -> WriteResult:
        return self.run(ops.Redo(path=path, session=session))

    def commit(self, session: str, message: str, include_others: bool = False) -> CommitResult:
        """A git commit of exactly `session`'s uncommitted writes (docs/git.md)."""
        return self.run(ops.Commit(message=message, include_others=include_others, session=session))

    def restore(
        self, path: str, to_version: int | None = None, *, before_version: int | None = None, session: str | None = None
    ) -> WriteResult:
        """For people: the whole file as it was right after `to_version` (0: before the first recorded
        version) or right before `before_version`, discarding every later version (the result's `discarded`
        lists them; over HTTP it needs the admin token). Runs as `session` (default "operator")."""
        return self.run(ops.Restore(path=path, to_version=to_version, before_version=before_version, session=session))

    def history(self, path: str, limit: int = ops.History.limit) -> list[HistoryEntry]:
        """Versions of `path`, newest first (any token: a session token sees every file's history)."""
        return self.run(ops.History(path=path, limit=limit))

    # -- leases -------------------------------------------------------------------------------------------
    def lease(
        self, session: str, paths: str | Sequence[str], mode: str = ops.LeaseOp.mode, ttl_s: float = ops.LeaseOp.ttl_s
    ) -> list[Lease]:
        listed = [paths] if isinstance(paths, str) else list(paths)
        return self.run(ops.LeaseOp(paths=listed, mode=mode, ttl_s=ttl_s, session=session))  # type: ignore[arg-type]  # the engine checks mode

    def renew(self, session: str, lease_id: str | None = None, ttl_s: float = ops.Renew.ttl_s) -> list[Lease]:
        return self.run(ops.Renew(lease_id=lease_id, ttl_s=ttl_s, session=session))

    def release(self, session: str, lease_id: str | None = None, pattern: str | None = None) -> int:
        return self.run(ops.Release(lease_id=lease_id, pattern=pattern, session=session))

    def leases(self, session: str | None = None) -> list[Lease]:
        return self.run(ops.Leases(session=session))

    def break_lease(self, lease_id: str | None = None, session: str | None = None) -> list[Lease]:
        """End a lease by id, or every lease of a session, whoever holds it (over HTTP: the admin token)."""
        return self.run(ops.BreakLease(lease_id=lease_id, session=session))

    # -- change events, notices, status -------------------------------------------------------------------
    def poll_events(
        self,
        since: str | None = None,
        paths: Sequence[str] | None = None,
        wait_s: float = ops.PollEvents.wait_s,
        limit: int = ops.PollEvents.limit,
    ) -> EventPage:
        """Events after `since` ("$" or None: from now; "0": the oldest kept), waiting up to `wait_s` for
        the first. The cursor moves past every event read, shown or filtered out."""
        return self.run(ops.PollEvents(since=since, paths=list(paths) if paths else None, wait_s=wait_s, limit=limit))

    def events(
        self, since: str | None = None, paths: Sequence[str] | None = None, timeout_s: float | None = None
    ) -> Iterator[ChangeEvent]:
        """Follow the change events until `timeout_s` passes without one (None: forever)."""
        return follow(self, since, paths, timeout_s)

    def recent_events(self, count: int = ops.RecentEvents.count) -> list[ChangeEvent]:
        return self.run(ops.RecentEvents(count=count))

    def notices(self, session: str) -> Notice | None:
        """Files `session` read that another session has written since (each change is told once)."""
        return self.run(ops.Notices(session=session))

    def status(self, session: str) -> SessionStatus:
        return self.run(ops.Status(session=session))

    def close(self) -> None:
        """Release what the client holds (connections; the coordinator it made)."""

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def follow(
    client: Client, since: str | None, paths: Sequence[str] | None, timeout_s: float | None
) -> Iterator[ChangeEvent]:
    """`Client.events` from `poll_events`: follow until `timeout_s` passes without an event (None: forever)."""
    import time

    page = client.poll_events(since, paths, wait_s=0.0, limit=1)  # pins "$" to a cursor now
    cursor = page.cursor
    yield from page.events
    idle_since = time.monotonic()
    while True:
        wait = 25.0 if timeout_s is None else max(0.0, min(25.0, timeout_s - (time.monotonic() - idle_since)))
        page = client.poll_events(cursor, paths, wait_s=wait)
        cursor = page.cursor
        if page.events:
            idle_since = time.monotonic()
            yield from page.events
        elif timeout_s is not None and time.monotonic() - idle_since >= timeout_s:
            return


class BoundSession:
    """One session's view of a `Client`: the calls of `coordinator.Session`, with the id filled in."""

    def __init__(self, client: Client, session_id: str) -> None:
        self.client = client
        self.id = session_id

    def __repr__(self) -> str:
        return f"BoundSession({self.id!r}, {type(self.client).__name__})"

    def read(self, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        return self.client.read(self.id, path, offset, limit)

    def write(self, path: str, content: str) -> WriteResult:
        return self.client.write(self.id, path, content)

    def edit(self, path: str, old_string: str, new_string: str, replace_all: bool = False) -> WriteResult:
        return self.client.edit(self.id, path, old_string, new_string, replace_all)

    def multi_edit(self, path: str, edits: Sequence[dict[str, Any]]) -> WriteResult:
        return self.client.multi_edit(self.id, path, edits)

    def undo(self, path: str, version: int | None = None) -> WriteResult:
        return self.client.undo(self.id, path, version)

    def redo(self, path: str) -> WriteResult:
        return self.client.redo(self.id, path)

    def history(self, path: str, limit: int = ops.History.limit) -> list[HistoryEntry]:
        return self.client.history(path, limit)

    def lease(
        self, paths: str | Sequence[str], mode: str = ops.LeaseOp.mode, ttl_s: float = ops.LeaseOp.ttl_s
    ) -> list[Lease]:
        return self.client.lease(self.id, paths, mode, ttl_s)

    def renew(self, lease_id: str | None = None, ttl_s: float = ops.Renew.ttl_s) -> list[Lease]:
        return self.client.renew(self.id, lease_id, ttl_s)

    def release(self, lease_id: str | None = None, pattern: str | None = None) -> int:
        return self.client.release(self.id, lease_id, pattern)

    def leases(self) -> list[Lease]:
        return self.client.leases(self.id)

    def all_leases(self) -> list[Lease]:
        return self.client.leases(None)

    def notices(self) -> Notice | None:
        return self.client.notices(self.id)

    def commit(self, message: str, include_others: bool = False) -> CommitResult:
        """A git commit of exactly this session's uncommitted writes (docs/git.md)."""
        return self.client.commit(self.id, message, include_others)

    def status(self) -> SessionStatus:
        return self.client.status(self.id)


def plain(obj: Any) -> Any:
    """A result as JSON-ready data (dataclasses with `to_dict`, lists of them, plain values)."""
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, list | tuple):
        return [plain(x) for x in obj]
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    return obj
