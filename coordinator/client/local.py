"""`LocalClient`: the `Client` interface in this process, over the engine's sessions."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any, cast

from coordinator import arguments
from coordinator.client import operations as ops
from coordinator.client.base import BoundSession, EventPage, SessionStatus
from coordinator.client.operations import Operation
from coordinator.engine import CallOptions, Coordinator, ReadResult, Session, WriteResult
from coordinator.engine.options import Match, Policy
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.git.commit import CommitResult, commit_session
from coordinator.history import HistoryEntry
from coordinator.state.events import ChangeEvent, Notice
from coordinator.state.leases import Lease

MAX_EVENTS = 1000
_CURSOR_RE = ops.CURSOR_RE
MAX_WAIT_S = 60.0


class LocalClient:
    """Calls the engine directly. `owns`: close the coordinator with the client. `policy`: the sessions'
    policy ("strict" or "rebase"; None: the coordinator's). `match`: how their edits find old_string
    ("exact" or "flexible"; None: the coordinator's). Both are checked here, so a bad value is refused when
    the client is made rather than at its first edit."""

    def __init__(
        self, coord: Coordinator, owns: bool = False, policy: str | None = None, match: str | None = None
    ) -> None:
        self.coord = coord
        self._owns = owns
        self.policy: Policy | None = None if policy is None else _policy(policy)
        self.match: Match | None = None if match is None else _match(match)
        self.options = CallOptions()  # how its sessions' engine calls are shaped (`with_options`)

    def with_options(self, options: CallOptions) -> LocalClient:
        """This client, its sessions' engine calls shaped by `options` (engine/calls.py: LockBusy instead of
        waiting for a taken lock, a post-write hook); the copy never closes the coordinator."""
        twin = copy.copy(self)
        twin._owns = False
        twin.options = options
        return twin

    def _session(self, session: str) -> Session:
        return self.coord.session(session, self.policy, self.match, options=self.options)

    def engine_session(self, session: str, policy: str | None = None, match: str | None = None) -> Session:
        """The engine session for `session`, with a call's own write options over the client's."""
        chosen_policy = self.policy if policy is None else _policy(policy)
        chosen_match = self.match if match is None else _match(match)
        return self.coord.session(session, chosen_policy, chosen_match, options=self.options)

    def run(self, op: Operation) -> Any:
        """Run one declared operation (coordinator/client/operations.py) as the session it names."""
        return op.apply(self, getattr(op, "session", None))

    @classmethod
    def open(cls, root: str, redis_url: str | None = None, **options: Any) -> LocalClient:
        """A client over a new `Coordinator(root, redis_url, **options)` (`policy=`, `match=`, `durability=`,
        ...: the coordinator's defaults, which its sessions take), closed with the client."""
        return cls(Coordinator(root, redis_url, **options), owns=True)

    def session(self, session_id: str) -> BoundSession:
        self.coord.session(session_id)  # validates the id
        return BoundSession(self, session_id)

    def announce(self, session: str) -> None:
        """Put `session` in the session registry now, before its first call (so `status` lists an MCP
        server's session from its start). Over HTTP the first call does this."""
        self.coord.state.register(self._session(session).id)

    @property
    def default_read_lines(self) -> int:
        """How many lines a read without `limit` returns (the coordinator's setting)."""
        return self.coord.default_read_lines

    # -- the operations (each declared once, in operations.py) -----------------------------------------
    def read(self, session: str, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        return ops.Read(path=path, offset=offset, limit=limit, session=session).apply(self, session)

    def write(self, session: str, path: str, content: str) -> WriteResult:
        return ops.Write(path=path, content=content, session=session).apply(self, session)

    def edit(self, session: str, path: str, old_string: str, new_string: str, replace_all: bool = False) -> WriteResult:
        op = ops.Edit(path=path, old_string=old_string, new_string=new_string, replace_all=replace_all)
        return op.apply(self, session)

    def multi_edit(self, session: str, path: str, edits: Sequence[dict[str, Any]]) -> WriteResult:
        return ops.MultiEdit(path=path, edits=list(edits), session=session).apply(self, session)  # type: ignore[arg-type]  # dicts: the engine checks them

    def undo(self, session: str, path: str, version: int | None = None) -> WriteResult:
        return ops.Undo(path=path, version=version, session=session).apply(self, session)

    def redo(self, session: str, path: str) -> WriteResult:
        return ops.Redo(path=path, session=session).apply(self, session)

    def commit(self, session: str, message: str, include_others: bool = False) -> CommitResult:
        return ops.Commit(message=message, include_others=include_others, session=session).apply(self, session)

    def restore(
        self, path: str, to_version: int | None = None, *, before_version: int | None = None, session: str | None = None
    ) -> WriteResult:
        """For people: the whole file as it was right after `to_version` (0: before the first recorded
        version) or right before `before_version`, discarding every later version (`Coordinator.restore`;
        the result's `discarded` lists them). Runs as `session` (default "operator")."""
        op = ops.Restore(path=path, to_version=to_version, before_version=before_version, session=session)
        return op.apply(self, session)

    def history(self, path: str, limit: int = 100) -> list[HistoryEntry]:
        return ops.History(path=path, limit=limit).apply(self, None)

    def lease(
        self, session: str, paths: str | Sequence[str], mode: str = "exclusive", ttl_s: float = 300.0
    ) -> list[Lease]:
        op = ops.LeaseOp(paths=paths, mode=mode, ttl_s=ttl_s, session=session)  # type: ignore[arg-type]  # the engine checks them
        return op.apply(self, session)

    def renew(self, session: str, lease_id: str | None = None, ttl_s: float = 300.0) -> list[Lease]:
        return ops.Renew(lease_id=lease_id, ttl_s=ttl_s, session=session).apply(self, session)

    def release(self, session: str, lease_id: str | None = None, pattern: str | None = None) -> int:
        return ops.Release(lease_id=lease_id, pattern=pattern, session=session).apply(self, session)

    def leases(self, session: str | None = None) -> list[Lease]:
        return ops.Leases(session=session).apply(self, session)

    def break_lease(self, lease_id: str | None = None, session: str | None = None) -> list[Lease]:
        return ops.BreakLease(lease_id=lease_id, session=session).apply(self, None)

    def poll_events(
        self, since: str | None = None, paths: Sequence[str] | None = None, wait_s: float = 0.0, limit: int = 200
    ) -> EventPage:
        """Events after `since` ("$" or None: from now; "0": the oldest kept), waiting up to `wait_s` for
        the first. The cursor moves past every event read, shown or filtered out."""
        op = ops.PollEvents(since=since, paths=paths, wait_s=wait_s, limit=limit)  # type: ignore[arg-type]  # checked in poll_now
        return op.apply(self, None)

    def recent_events(self, count: int = 50) -> list[ChangeEvent]:
        return ops.RecentEvents(count=count).apply(self, None)

    def notices(self, session: str) -> Notice | None:
        """Files `session` read through this process that another session has written since (each change is
        told once). Known per process: a session served by several processes is told by each."""
        return ops.Notices(session=session).apply(self, session)

    def status(self, session: str) -> SessionStatus:
        return ops.Status(session=session).apply(self, session)

    def events(
        self, since: str | None = None, paths: Sequence[str] | None = None, timeout_s: float | None = None
    ) -> Iterator[ChangeEvent]:
        return self.coord.events(since=since, paths=paths, timeout_s=timeout_s)

    # -- the engine-side bodies the declarations' `apply` calls ---------------------------------------------
    def commit_now(self, session: str, message: str, include_others: bool) -> CommitResult:
        """A git commit of exactly `session`'s acknowledged, uncommitted writes (coordinator/git/commit.py);
        the working tree and every other session's changes stay as they are."""
        self.coord.session(session)  # validates the id
        return commit_session(str(self.coord.root), session, message, include_others=include_others)

    def history_now(self, path: str, limit: int) -> list[HistoryEntry]:
        _check_count(limit, "limit", 10_000)
        return self.coord.history(path)[:limit]

    def break_now(self, lease_id: str | None, session: str | None) -> list[Lease]:
        if lease_id is None and session is None:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give the lease id or the session whose leases end.")
        return self.coord.break_lease(lease_id=lease_id, session=session)

    def recent_now(self, count: int) -> list[ChangeEvent]:
        _check_count(count, "count", MAX_EVENTS)
        return self.coord.recent_events(count)

    def status_now(self, session: str) -> SessionStatus:
        s = self._session(session)
        return SessionStatus(session, self.coord.state.last_seen(session), tuple(s.leases()))

    def poll_now(self, since: str | None, paths: Sequence[str] | None, wait_s: float, limit: int) -> EventPage:
        _check_count(limit, "limit", MAX_EVENTS)
        wait: object = wait_s  # checked as it may come (JSON, a tool call): a bool is not a number here
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= MAX_WAIT_S:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"wait_s must be between 0 and {MAX_WAIT_S:.0f}.")
        if since is not None and not _CURSOR_RE.match(since):
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                f"since must be '$' (from now), '0' (the oldest kept) or an event id such as '1700000000000-0', "
                f"not {since[:40]!r}.",
            )
        cursor = since
        if since is None or since == "$":
            newest = self.coord.recent_events(1)
            cursor = newest[-1].id if newest else "0-0"
        got: list[ChangeEvent] = []
        stream = self.coord.events(
            since=cursor, paths=None, timeout_s=max(float(wait_s), 0.001), stop=lambda: bool(got)
        )
        matchers = _matchers(self.coord, paths)
        last = cursor
        for event in stream:
            last = event.id
            if matchers is None or any(m.fullmatch(event.path) for m in matchers):
                got.append(event)
                if len(got) >= limit:
                    break
        return EventPage(tuple(got), str(last))

    def close(self) -> None:
        if self._owns:
            self.coord.close()

    def __enter__(self) -> LocalClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _matchers(coord: Coordinator, paths: Sequence[str] | None) -> list[Any] | None:
    if not paths:
        return None
    from coordinator.state.leases import normalize_pattern, pattern_regex

    return [pattern_regex(normalize_pattern(p, coord.root)) for p in paths]


def _policy(value: str) -> Policy:
    return cast(Policy, arguments.check_policy(value))  # check_policy accepts only the Policy values


def _match(value: str) -> Match:
    return cast(Match, arguments.check_match(value))  # check_match accepts only the Match values


def _check_count(value: object, name: str, most: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{name} must be a whole number from 1 to {most}.")
