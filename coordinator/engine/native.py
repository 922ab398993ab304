"""Public entries for writes the coordinator does not perform itself: an agent's own file tools, guarded
through its hooks (coordinator/agents/). The engine keeps the order of the I/O; the agents' adapter only
orders these steps around the agent's write.

- `judge_write` / `view_refusal`: would the session's write be refused as `not_read` / `stale` now (no
  lock, no change)?
- `prepare_write`: under the path's lock, judge the session's view against the bytes on disk once more and
  keep those bytes in the history as the pre-image (before the agent replaces the file).
- `record_write`: under the path's lock, the history entry of the agent's write (the kept pre-image and the
  bytes now on disk), then after the lock the session's new view, the path's version and head (the
  attribution) and the change event, in one round trip.
- `record_view`: after an agent's own read, the session's view from what it was shown (full or partial),
  or none when what it was shown is not the file.
- `forget_view`: drop a session's view; its next write is refused as unread.

The staleness rule stays `plan._view_refusal`'s (its one owner); the pre-image's storage is the history's
(`History.keep`, `History.record_kept`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from coordinator.disk import fsio
from coordinator.engine.coordinator import Coordinator
from coordinator.engine.observer import APPLIED
from coordinator.engine.plan import CurrentFile, _view_refusal
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.history import HistoryEntry, content_hash
from coordinator.state import events as events_mod
from coordinator.state.views import KIND_READ, KIND_WRITE, ReadState

__all__ = [
    "Judged",
    "NativeWrite",
    "forget_view",
    "judge_write",
    "path_key",
    "prepare_write",
    "record_view",
    "record_write",
    "view_refusal",
]


@dataclass(frozen=True)
class NativeWrite:
    """What `prepare_write` found under the lock: the path's key and the hash of the bytes kept as the
    pre-image (None: there was no file, the agent's write creates it)."""

    key: str
    before: str | None


def path_key(coord: Coordinator, path: str) -> str:
    """The path's key (POSIX, relative to the root), as leases and views name it."""
    return fsio.resolve(coord.root, path).key


def record_view(
    coord: Coordinator, session: str, path: str, shown: str, start_line: int = 1, num_lines: int | None = None
) -> bool:
    """After an agent's own read of `path`: record `session`'s view of the file if `shown` (the text the
    agent was shown, lines `start_line`.. of the file, `num_lines` of them; None: to the end) is what the
    file holds there now. A window short of the whole file is a partial view (an edit may follow; a whole
    write needs a full read). When what was shown is not the file (it changed in between, or the agent's
    tool showed something else), the session's view is dropped instead. Returns whether one was recorded."""
    rp = fsio.resolve(coord.root, path)
    cur = _current(coord, rp)
    try:
        text = cur.decoded().text if cur.exists else None
    except CoordinatorError:
        text = None
    lines = _text_lines(text) if text is not None else None
    start = max(start_line, 1)
    count = len(lines) - start + 1 if lines is not None and num_lines is None else (num_lines or 0)
    if lines is None or lines[start - 1 : start - 1 + count] != _text_lines(shown)[: max(count, 0)] or count < 0:
        forget_view(coord, session, path)
        return False
    assert cur.st is not None and cur.digest is not None
    partial = start > 1 or start - 1 + count < len(lines)
    offset, limit = (start, max(count, 1)) if partial else (0, 0)
    rs = ReadState(cur.digest, cur.st.st_mtime_ns, cur.st.st_size, offset, limit, time.time(), KIND_READ)
    coord.reader.record_read(session, rp.key, rs)
    return True


@dataclass(frozen=True)
class Judged:
    """`judge_write`'s answer: the path's key, the session's recorded view (None: none), and the refusal
    the write would get now (None: it may go on)."""

    key: str
    view: ReadState | None
    refusal: CoordinatorError | None


def judge_write(coord: Coordinator, session: str, path: str, *, whole: bool = False) -> Judged:
    """Would `session`'s write of `path` be refused as `not_read` or `stale` right now (no lock, nothing
    changed)? No refusal: its view is the file on disk, or the file does not exist yet (a write may create
    it). `whole`: the write replaces the whole file, so a partial view (a read of some lines) is not enough.
    A stale refusal after an outside change says so, and never names the session itself."""
    rp = fsio.resolve(coord.root, path)
    cur = _current(coord, rp)
    recorded = coord._state_call(lambda: coord.state.get(session, rp.key)) if cur.exists else None
    refusal = _judged(recorded, cur, rp, whole) if cur.exists else None
    return Judged(rp.key, recorded, _explained(coord, refusal, rp.key, session))


def view_refusal(coord: Coordinator, session: str, path: str, *, whole: bool = False) -> CoordinatorError | None:
    """`judge_write`'s refusal alone."""
    return judge_write(coord, session, path, whole=whole).refusal


def prepare_write(
    coord: Coordinator, session: str, path: str, *, whole: bool = False, view: ReadState | None = None
) -> NativeWrite:
    """Before the agent's own write of `path`, under the path's lock: the session's view is judged against
    the bytes on disk (raises `not_read` / `stale`, or the content's refusal), and those bytes are kept in
    the history as the write's pre-image. The caller holds the write ticket: no other hooked write of the
    path can come in between this and `record_write`. `view`: the session's view as `judge_write` just
    found it (saves a round trip; the disk decides either way), else it is looked up."""
    rp = fsio.resolve(coord.root, path)
    recorded = view if view is not None else coord._state_call(lambda: coord.state.get(session, rp.key))
    held = coord.locks.acquire(rp.key)
    try:
        cur = _current(coord, rp)
        coord.history_store.reconcile(held, rp.key, cur.digest)
        if not cur.exists:
            return NativeWrite(rp.key, None)
        refusal = _judged(recorded, cur, rp, whole)
        if refusal is None:
            assert cur.digest is not None
            try:
                coord.history_store.keep(held, rp.key, cur.data, cur.digest)
            except OSError as exc:
                raise fsio.os_error(exc, rp) from exc
            return NativeWrite(rp.key, cur.digest)
    finally:
        held.release()
    explained = _explained(coord, refusal, rp.key, session)
    assert explained is not None
    raise explained


def record_write(
    coord: Coordinator, session: str, prepared: NativeWrite, operation: str, call: str | None = None
) -> HistoryEntry | None:
    """After the agent's own write: the history entry (the pre-image `prepare_write` kept, and the bytes
    now on disk, attributed to `session`), then the session's new view, the path's version and the change
    event. None, and nothing recorded, when there is nothing to record: the file is unchanged or gone, or
    another write was recorded since `prepare_write` (then the session's next write is judged against the
    disk and refused as stale, the safe side). A Redis failure after the entry raises state_unavailable;
    the entry stands (the file holds it) and the session's next write is refused until it reads again."""
    rp = fsio.resolve(coord.root, prepared.key)
    held = coord.locks.acquire(rp.key)
    try:
        cur = _current(coord, rp)
        if not cur.exists or cur.digest == prepared.before:
            return None
        assert cur.st is not None and cur.digest is not None
        first, last = _changed_lines(coord, prepared, cur)
        try:
            entry = coord.history_store.record_kept(
                held,
                rp.key,
                before_digest=prepared.before,
                after=cur.data,
                after_digest=cur.digest,
                session=session,
                operation=operation,
                call=call,
                size_after=len(cur.data),
                first_line=first,
                last_line=last,
            )
        except OSError as exc:
            raise fsio.os_error(exc, rp) from exc
        st = cur.st
    finally:
        held.release()
    if entry is None:
        return None
    _record_state(coord, session, rp.key, entry, st, (first, last))
    return entry


def _record_state(
    coord: Coordinator, session: str, key: str, entry: HistoryEntry, st: os.stat_result, lines: tuple[int, int]
) -> None:
    """The Redis side of a recorded agent write: the session's view, the path's version and the change
    event in one round trip, then this process's cached view and the observer."""
    now = time.time()
    digest = entry.after
    rs = ReadState(digest or "", st.st_mtime_ns, st.st_size, 0, 0, now, KIND_WRITE)

    def event(pipe: object) -> None:
        if coord.publish_events:
            events_mod.queue_event(
                pipe,
                coord.namespace,
                path=key,
                session=session,
                version=entry.version,
                operation=entry.operation,
                ranges=[lines],
                when=now,
                digest=digest,
                rebased=False,
            )

    coord._views.drop(session, key)
    coord._state_call(
        lambda: coord.state.record_write(session, key, rs, entry.version, entry.operation, digest=digest, extra=event)
    )
    coord._views.put(session, key, rs)
    observer = coord.observer
    if observer is not None:  # an agent's own write, told as the engine's writes are (observer.py)
        observer.write_finished(entry.operation, APPLIED)
        if coord.publish_events:
            observer.event_published()


def keep_pending(coord: Coordinator, session: str, call_id: str, value: str, ttl_s: float) -> None:
    """Keep `value` (what a write's after-hook needs: its ticket and pre-image) between the two hook calls
    of one tool call, which may run in different processes, for `ttl_s` (the ticket's life). In Redis, like
    the views: losing it (a flush) only loses the record of that write, the session's next write being
    refused as stale."""
    key = _pending_key(coord, session, call_id)
    coord._state_call(lambda: coord.lease_store.r.set(key, value, ex=max(1, int(ttl_s) + 2)))


def take_pending(coord: Coordinator, session: str, call_id: str) -> str | None:
    """The value `keep_pending` kept for this tool call, removed as it is read (None: none, or it ran out)."""
    key = _pending_key(coord, session, call_id)
    raw = coord._state_call(lambda: coord.lease_store.r.getdel(key))
    return None if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)


def _pending_key(coord: Coordinator, session: str, call_id: str) -> str:
    return f"ec:{{{coord.namespace}}}:hook-ticket:{session}:{call_id}"


def forget_view(coord: Coordinator, session: str, path: str) -> None:
    """Drop `session`'s view of `path`: what it was shown is not the file (its next write is `not_read`)."""
    rp = fsio.resolve(coord.root, path)
    coord._views.drop(session, rp.key)
    coord._state_call(lambda: coord.state.forget(session, rp.key))


def _current(coord: Coordinator, rp: fsio.ResolvedPath) -> CurrentFile:
    """The file as it is now (a missing file, or a missing folder on the way, is `exists=False`)."""
    try:
        dfd = fsio.open_parent(rp, coord.root, root_fd=coord._root_fd)
    except CoordinatorError as exc:
        if exc.code == ErrorCode.FILE_NOT_FOUND:
            return CurrentFile(exists=False)
        raise
    try:
        found = fsio.read_at(dfd, rp, coord.max_file_bytes)
    finally:
        os.close(dfd)
    if found is None:
        return CurrentFile(exists=False)
    data, st = found
    return CurrentFile(exists=True, data=data, st=st, digest=content_hash(data))


def _judged(
    recorded: ReadState | None, cur: CurrentFile, rp: fsio.ResolvedPath, whole: bool
) -> CoordinatorError | None:
    """The staleness rule (`_view_refusal`), and for a write of the whole file, a full view."""
    refusal = _view_refusal(recorded, cur, rp)
    partial = recorded is not None and recorded.kind == KIND_READ and (recorded.offset > 1 or recorded.limit > 0)
    if refusal is None and whole and partial:
        assert recorded is not None
        return CoordinatorError(
            ErrorCode.NOT_READ,
            f"{rp.shown} was read only in part (lines from {max(recorded.offset, 1)}); a write replaces the "
            "whole file. Read the whole file first, then write it.",
            path=rp.key,
        )
    return refusal


def _text_lines(text: str) -> list[str]:
    """The lines of a text as a reader compares them: CRLF as LF, no final empty line."""
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _explained(coord: Coordinator, refusal: CoordinatorError | None, key: str, session: str) -> CoordinatorError | None:
    """A stale refusal says who changed the file, or that it changed outside the coordinator (never naming
    the refused session as the writer then)."""
    if refusal is not None and refusal.code == ErrorCode.STALE:
        refusal.message += coord.writer.stale_detail(key, session)
    return refusal


def _changed_lines(coord: Coordinator, prepared: NativeWrite, cur: CurrentFile) -> tuple[int, int]:
    """The lines of the new file that the agent's write changed (1, 1 when the texts cannot be compared)."""
    if prepared.before is None:
        return 1, max(cur.data.count(b"\n"), 1)
    try:
        old = coord.history_store.load(prepared.before, prepared.key).decode("utf-8")
        new = cur.data.decode("utf-8")
    except (CoordinatorError, UnicodeDecodeError):
        return 1, 1
    return _differing_lines(old.split("\n"), new.split("\n"))


def _differing_lines(old: list[str], new: list[str]) -> tuple[int, int]:
    """The first and last line of `new` that differ from `old` (common head and tail left out)."""
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    first = head + 1
    return first, max(len(new) - tail, first)
