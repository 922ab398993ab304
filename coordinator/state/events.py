"""Change events and "files you read have changed" notices.

Events: every successful write appends one entry to a Redis stream, in the same pipeline as the writer's
read-state update (so it costs no extra round trip):
    ec:{<ns>}:events    stream, capped near `STREAM_MAXLEN` entries (approximate MAXLEN ~, O(1) trimming)
    fields: path, session, version, op, ranges ("40-42,80-80": changed lines of the new version, 1-based),
            time (unix seconds), hash (content after the write, "" when removed), rebased ("1"/"0")
`follow()` tails the stream with XREAD BLOCK; `Coordinator.events()` and `edit-coordinator watch` use it.
Events are a convenience feed, not a log of record: the history index on disk is that. An event can be
missing if Redis was unreachable right after a write (the write then carries a warning).

Notices: a session's results carry "N files you read have changed since: ..." when another session has
written a file this session read. Decisions, to keep the round trips flat:
* The current content hash of each path is kept in its meta hash (field `hash`, written by the same
  one-command update that records the version), so a notice check is one HMGET per tracked path.
* Which files a session has seen, and at which hash, is remembered per process (`ReadTracker`): the paths
  this process read or wrote for the session, the 32 most recent. Nothing extra is stored in Redis.
* The HMGETs ride on the pipeline the call makes anyway (the read-state update after a read or a write),
  at most once per `interval_s` (1 s) per session and only when the session has read other files: no extra
  round trip ever, and nothing at all for a session working on one file.
* Each change is reported once (until the session reads the file again). Only writes made through the
  coordinator are seen; an outside editor's change shows up as `stale` at the next edit, as before.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from coordinator.clock import time_text
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.connection import redis_call
from coordinator.state.lane import Batch, template
from coordinator.state.leases import pattern_regex

STREAM_MAXLEN = 10_000
_BLOCK_MS = 500


def stream_key(namespace: str) -> str:
    return f"ec:{{{namespace}}}:events"


@dataclass(frozen=True)
class ChangeEvent:
    """One successful write, as published on the stream."""

    id: str  # stream entry id ("<ms>-<seq>"): pass it as `since` to resume after this event
    path: str
    session: str
    version: int
    operation: str
    ranges: tuple[tuple[int, int], ...]  # changed lines of the new version, 1-based, inclusive
    time: float
    hash: str | None
    rebased: bool

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ranges"] = [list(r) for r in self.ranges]
        return d

    def describe(self) -> str:
        lines = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in self.ranges) or "-"
        stamp = time.strftime("%H:%M:%S", time.localtime(self.time))
        extra = " (rebased)" if self.rebased else ""
        return f"{stamp} v{self.version} {self.path} {self.operation} by {self.session}, lines {lines}{extra}"


def queue_event(
    pipe: Any,
    namespace: str,
    *,
    path: str,
    session: str,
    version: int,
    operation: str,
    ranges: Sequence[tuple[int, int]],
    when: float,
    digest: str | None,
    rebased: bool = False,
    maxlen: int = STREAM_MAXLEN,
) -> None:
    """Add the XADD of one write's event to `pipe` (the engine's post-write pipeline or a lane.py `Batch`:
    a raw command, so either takes it). On a `Batch`, packed from the path's kept template (`_xadd_template`):
    only the version, operation, ranges, time, hash and rebased flag are packed per write."""
    span = ranges_text(ranges)
    at, head, flag = time_text(when), digest or "", "1" if rebased else "0"
    if type(pipe) is not Batch:
        pipe.execute_command(*_xadd_args(namespace, path, session, maxlen, version, operation, span, at, head, flag))
        return
    v, o, r, t, h, f = b"%d" % version, operation.encode(), span.encode(), at.encode(), head.encode(), flag.encode()
    wire = _xadd_template(namespace, path, session, maxlen)
    pipe.add_packed(
        wire % (len(v), v, len(o), o, len(r), r, len(t), t, len(h), h, len(f), f),
        1, _xadd_command, namespace, path, session, maxlen, version, operation, span, at, head, flag,
    )  # fmt: skip


def ranges_text(ranges: Sequence[tuple[int, int]]) -> str:
    """The event's `ranges` field: changed lines as "a-b", comma-separated."""
    return f"{ranges[0][0]}-{ranges[0][1]}" if len(ranges) == 1 else ",".join(f"{a}-{b}" for a, b in ranges)


def xadd_template(namespace: str, path: str, session: str) -> bytes:
    """A write event's XADD with its constant arguments packed (`queue_event`'s, with the stream's cap);
    its six slots, in order: version, op, ranges, time, hash, rebased."""
    return _xadd_template(namespace, path, session, STREAM_MAXLEN)


def xadd_commands(namespace: str, path: str, session: str, *fields: str | int) -> list[tuple[Any, ...]]:
    """The raw arguments of the XADD `xadd_template` packs, its six fields given."""
    return [_xadd_args(namespace, path, session, STREAM_MAXLEN, *fields)]


def _xadd_command(namespace: str, path: str, session: str, maxlen: int, *fields: str | int) -> list[tuple[Any, ...]]:
    """The raw arguments of an XADD packed from `_xadd_template`."""
    return [_xadd_args(namespace, path, session, maxlen, *fields)]


def _xadd_args(
    namespace: str, path: str, session: str, maxlen: int, *fields: str | int | None
) -> tuple[str | int | None, ...]:
    """A write event's XADD, its six changing fields (version, op, ranges, time, hash, rebased) in order
    (None in the template)."""
    version, operation, span, at, head, flag = fields
    return (
        "XADD", stream_key(namespace), "MAXLEN", "~", maxlen, "*", "path", path, "session", session,
        "version", version, "op", operation, "ranges", span, "time", at, "hash", head, "rebased", flag,
    )  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _xadd_template(namespace: str, path: str, session: str, maxlen: int) -> bytes:
    """A write event's XADD with its constant arguments packed once (lane.template)."""
    return template(*_xadd_args(namespace, path, session, maxlen, None, None, None, None, None, None))


def parse_event(entry_id: Any, fields: dict[Any, Any]) -> ChangeEvent | None:
    f = {_s(k): _s(v) for k, v in fields.items()}
    try:
        ranges = tuple(
            (int(a), int(b)) for a, b in (part.split("-", 1) for part in f.get("ranges", "").split(",") if part)
        )
        return ChangeEvent(
            id=_s(entry_id),
            path=f["path"],
            session=f["session"],
            version=int(f["version"]),
            operation=f.get("op", ""),
            ranges=ranges,
            time=float(f["time"]),
            hash=f.get("hash") or None,
            rebased=f.get("rebased") == "1",
        )
    except (KeyError, ValueError):
        return None  # not an entry of ours: skipped


def since_id(since: str | float | None) -> str:
    """A stream position: None or "$" = only new events; "0" = from the oldest kept; a float = from that
    unix time; otherwise an entry id."""
    if since is None or since == "$":
        return "$"
    if isinstance(since, int | float) and not isinstance(since, bool):
        return f"{max(0, int(since * 1000))}-0"
    if isinstance(since, str) and since:
        return since
    raise CoordinatorError(
        ErrorCode.INVALID_ARGUMENT, f"since must be '$', '0', an event id or a unix time, not {since!r}."
    )


def follow(
    client: Any,
    namespace: str,
    *,
    since: str | float | None = None,
    paths: Sequence[str] | None = None,
    timeout_s: float | None = None,
    block_ms: int = _BLOCK_MS,
    stop: Callable[[], bool] | None = None,
) -> Iterator[ChangeEvent]:
    """Yield change events as they are published (XREAD BLOCK), oldest first.

    since: see `since_id`. paths: lease-style patterns (`src/**/*.py`); only events of matching paths are
    yielded. timeout_s: stop after this long without any event (None: follow until `stop()` is true or the
    consumer stops iterating). Each blocking read lasts at most `block_ms`, below the client's socket
    timeout, so a quiet stream never looks like a dead server.
    """
    key = stream_key(namespace)
    cursor = since_id(since)
    if cursor == "$":
        # Resolve "$" once, so events published between two blocking reads are not skipped.
        last = redis_call(lambda: client.xrevrange(key, count=1))
        cursor = _s(last[0][0]) if last else "0-0"
    matchers = [pattern_regex(p) for p in paths] if paths else None
    if timeout_s is not None:
        block_ms = max(1, min(block_ms, int(timeout_s * 1000)))  # never 0: that would block forever
    idle_since = time.monotonic()
    while stop is None or not stop():
        reply = redis_call(functools.partial(client.xread, {key: cursor}, count=200, block=block_ms))
        got = False
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                cursor = _s(entry_id)
                event = parse_event(entry_id, fields)
                if event is None:
                    continue
                if matchers is not None and not any(m.fullmatch(event.path) for m in matchers):
                    continue
                got = True
                yield event
        if got:
            idle_since = time.monotonic()
        elif timeout_s is not None and time.monotonic() - idle_since >= timeout_s:
            return


def recent(client: Any, namespace: str, count: int = 50) -> list[ChangeEvent]:
    """The newest `count` events, oldest first."""
    raw = redis_call(lambda: client.xrevrange(stream_key(namespace), count=count))
    out = [e for e in (parse_event(i, f) for i, f in raw) if e is not None]
    out.reverse()
    return out


# ---------------------------------------------------------------------------------------------------------
# Notices
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Notice:
    """Files a session has read that another session has written since."""

    paths: tuple[str, ...]
    writers: tuple[str, ...]  # the last writer of each path, same order

    @property
    def text(self) -> str:
        n = len(self.paths)
        shown = ", ".join(f"{p} (by {w})" if w else p for p, w in zip(self.paths[:5], self.writers[:5], strict=True))
        more = f" and {n - 5} more" if n > 5 else ""
        return (
            f"{n} file{'s' if n != 1 else ''} you read {'have' if n != 1 else 'has'} changed since: {shown}{more}. "
            f"Read {'them' if n != 1 else 'it'} again before editing."
        )


class ReadTracker:
    """Per process: the files each session has seen (path -> content hash), and when it was last told.

    Bounded: `max_paths` most recent paths per session, `max_sessions` sessions (least recent dropped).
    Thread-safe (one coordinator may serve many sessions from many threads).
    """

    def __init__(self, max_paths: int = 32, interval_s: float = 1.0, max_sessions: int = 10_000) -> None:
        self.max_paths = max_paths
        self.interval_s = interval_s
        self.max_sessions = max_sessions
        self._seen: OrderedDict[str, OrderedDict[str, str]] = OrderedDict()
        self._told: dict[tuple[str, str], str] = {}
        self._checked: dict[str, float] = {}
        self._lock = threading.Lock()

    def saw(self, session: str, key: str, digest: str | None) -> None:
        """The session has just seen `key` with content `digest` (None: it no longer exists)."""
        with self._lock:
            self._saw(session, key, digest)

    def _saw(self, session: str, key: str, digest: str | None) -> None:
        paths = self._seen.get(session)
        if paths is None:
            if len(self._seen) >= self.max_sessions:
                old, _ = self._seen.popitem(last=False)
                self._checked.pop(old, None)
            paths = self._seen[session] = OrderedDict()
        else:
            self._seen.move_to_end(session)
        if self._told:
            self._told.pop((session, key), None)
        if digest is None:
            paths.pop(key, None)
            return
        paths[key] = digest
        paths.move_to_end(key)
        while len(paths) > self.max_paths:
            gone, _ = paths.popitem(last=False)
            self._told.pop((session, gone), None)

    def seen(self, session: str) -> list[str]:
        """The paths tracked for `session`, oldest first (what an on-demand notice check looks up)."""
        with self._lock:
            return list(self._seen.get(session, ()))

    def due(self, session: str, exclude: str, now: float | None = None) -> list[str]:
        """Paths to look up for `session` now (empty: no check due, or nothing else to check)."""
        paths = self._seen.get(session)  # a first look without the lock (each step is atomic): a session
        if not paths or (len(paths) == 1 and exclude in paths):  # tracking no other path has none due
            return []
        with self._lock:
            return self._due(session, exclude, now)

    def _due(self, session: str, exclude: str, now: float | None) -> list[str]:
        paths = self._seen.get(session)
        if not paths or (len(paths) == 1 and exclude in paths):
            return []
        now = time.monotonic() if now is None else now
        if now - self._checked.get(session, -1e18) < self.interval_s:
            return []
        self._checked[session] = now
        return [k for k in paths if k != exclude]

    def notice(self, session: str, keys: Sequence[str], heads: Sequence[Any]) -> Notice | None:
        """Turn the HMGET(hash, writer) replies for `keys` into a notice of changes not yet reported."""
        with self._lock:
            return self._notice(session, keys, heads)

    def _notice(self, session: str, keys: Sequence[str], heads: Sequence[Any]) -> Notice | None:
        paths: Mapping[str, str] = self._seen.get(session, {})
        changed: list[str] = []
        writers: list[str] = []
        for key, reply in zip(keys, heads, strict=True):
            if not isinstance(reply, list | tuple) or len(reply) != 2:
                continue  # a failed lookup: no notice, never an error
            head, writer = (_s(v) if v is not None else None for v in reply)
            seen = paths.get(key)
            if head is None or seen is None or head == seen or writer == session:
                continue
            if self._told.get((session, key)) == head:
                continue
            self._told[(session, key)] = head
            changed.append(key)
            writers.append(writer or "")
        if not changed:
            return None
        return Notice(tuple(changed), tuple(writers))


def _s(v: Any) -> str:
    return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)
