"""The `Client` interface: every operation an agent session (or its operator) can ask of the coordinator.

Two transports implement it: `LocalClient` (in this process, over the engine's sessions) and `HttpClient`
(over `edit-coordinator serve`). Both return the same result types and raise `CoordinatorError` with the
same codes, so a program written against one runs unchanged against the other; the HTTP service, the MCP
server, the command line and the worker fleet are adapters over this interface.

`restore` is the one call for people rather than agents: it puts a whole file back as it was at a version
and discards every later version, whoever wrote it (the result's `discarded` lists them). It is not on
`BoundSession`, and not an MCP tool; over HTTP it needs the admin token.

Calls that act as a session take its id first (`client.edit("agent-7", path, old, new)`): one client can
serve many sessions, as a worker fleet does. `client.session("agent-7")` gives a `BoundSession`, the same
calls with the id filled in (the shape of `coordinator.Session`), for code that serves one session.

Adding an operation: one method here and in `LocalClient`; its request once in `coordinator.client.calls.Calls`
(same name and parameters) with a one-line `HttpClient` method that runs it (`AsyncClient` sends the same
`Call` through its async driver, found by name); then one line in each adapter's table
(`coordinator.server.routes.ROUTES`, `coordinator.tools.mcp_server.tool_specs`, `coordinator.cli.files`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from coordinator.engine import ReadResult, WriteResult
from coordinator.git.commit import CommitResult
from coordinator.history import HistoryEntry
from coordinator.state.events import ChangeEvent, Notice
from coordinator.state.leases import DEFAULT_TTL_S as DEFAULT_LEASE_TTL_S
from coordinator.state.leases import Lease

if TYPE_CHECKING:
    from coordinator.client.operations import Operation


@dataclass(frozen=True)
class SessionStatus:
    """What the coordinator knows about one session."""

    session: str
    last_seen: float | None  # unix time of its last recorded read or write; None if not registered
    leases: tuple[Lease, ...] = ()  # its live leases

    def to_dict(self) -> dict[str, Any]:
        return {"session": self.session, "last_seen": self.last_seen, "leases": [x.to_dict() for x in self.leases]}


@dataclass(frozen=True)
class EventPage:
    """Change events after a cursor. Pass `cursor` as `since` to the next call to continue without a gap."""

    events: tuple[ChangeEvent, ...]
    cursor: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"events": [e.to_dict() for e in self.events], "cursor": self.cursor}


@runtime_checkable
class Client(Protocol):
    """The coordinator's operations. `session` is a session id; the same id is the same session anywhere."""

    def run(self, op: Operation) -> Any:
        """One declared operation (coordinator/client/operations.py): the named methods below, generically."""
        ...

    # -- files --------------------------------------------------------------------------------------------
    def read(self, session: str, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult: ...

    def write(self, session: str, path: str, content: str) -> WriteResult: ...

    def edit(
        self, session: str, path: str, old_string: str, new_string: str, replace_all: bool = False
    ) -> WriteResult: ...

    def multi_edit(self, session: str, path: str, edits: Sequence[dict[str, Any]]) -> WriteResult: ...

    def undo(self, session: str, path: str, version: int | None = None) -> WriteResult: ...

    def redo(self, session: str, path: str) -> WriteResult: ...

    def restore(
        self, path: str, to_version: int | None = None, *, before_version: int | None = None, session: str | None = None
    ) -> WriteResult: ...

    def history(self, path: str, limit: int = 100) -> list[HistoryEntry]: ...

    # -- leases -------------------------------------------------------------------------------------------
    def lease(
        self, session: str, paths: str | Sequence[str], mode: str = "exclusive", ttl_s: float = DEFAULT_LEASE_TTL_S
    ) -> list[Lease]: ...

    def renew(self, session: str, lease_id: str | None = None, ttl_s: float = DEFAULT_LEASE_TTL_S) -> list[Lease]: ...

    def release(self, session: str, lease_id: str | None = None, pattern: str | None = None) -> int: ...

    def leases(self, session: str | None = None) -> list[Lease]: ...

    def break_lease(self, lease_id: str | None = None, session: str | None = None) -> list[Lease]: ...

    # -- change events, notices, status -------------------------------------------------------------------
    def poll_events(
        self,
        since: str | None = None,
        paths: Sequence[str] | None = None,
        wait_s: float = 0.0,
        limit: int = 200,
    ) -> EventPage: ...

    def events(
        self, since: str | None = None, paths: Sequence[str] | None = None, timeout_s: float | None = None
    ) -> Iterator[ChangeEvent]: ...

    def recent_events(self, count: int = 50) -> list[ChangeEvent]: ...

    def notices(self, session: str) -> Notice | None: ...

    def status(self, session: str) -> SessionStatus: ...

    def commit(self, session: str, message: str, include_others: bool = False) -> CommitResult: ...

    def close(self) -> None: ...


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

    def history(self, path: str, limit: int = 100) -> list[HistoryEntry]:
        return self.client.history(path, limit)

    def lease(
        self, paths: str | Sequence[str], mode: str = "exclusive", ttl_s: float = DEFAULT_LEASE_TTL_S
    ) -> list[Lease]:
        return self.client.lease(self.id, paths, mode, ttl_s)

    def renew(self, lease_id: str | None = None, ttl_s: float = DEFAULT_LEASE_TTL_S) -> list[Lease]:
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
