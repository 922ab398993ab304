"""Who wrote a path since a session's view: the intervening-writes lookup in the history index."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.engine.options import KiB
from coordinator.errors import CoordinatorError
from coordinator.history import History
from coordinator.state.views import ReadState
from coordinator.text.codecs import decode_bytes
from coordinator.text.rebase import diff_texts

# How much of a history index tail is read to name the sessions behind intervening writes.
_INTERVENING_TAIL_BYTES = 256 * KiB
_INTERVENING_KEPT = 16  # the newest intervening writes listed in a result (all are counted)
# Index entries are appended in time order under the path's lock, but stamped just before the file is
# replaced, so an entry may carry a time slightly before the read that missed it.
_INTERVENING_SLACK_S = 1.0
_INTERVENING_FIRST_BYTES = 16 * KiB


@dataclass(frozen=True)
class _Intervening:
    """Other sessions' writes of one path since one session's view: how many, by whom, the newest few."""

    view_time: float
    last_version: int  # newest version looked at
    count: int
    sessions: tuple[str, ...]
    recent: tuple[dict[str, Any], ...]  # oldest first, at most _INTERVENING_KEPT


@dataclass(frozen=True)
class _Walk:
    found: list[dict[str, Any]]  # newest first
    newest: int
    stopped: bool  # found where to stop (so a longer tail would add nothing)
    whole: bool  # saw the whole index
    by_hash: bool  # stopped at the write that made, or replaced, the content the session saw

    def merge(self, known: _Intervening | None, view_time: float) -> _Intervening:
        found = self.found
        if not self.by_hash:
            found = [x for x in found if x["time"] >= view_time]
        fresh = list(reversed(found))
        if known is not None:
            recent = (list(known.recent) + fresh)[-_INTERVENING_KEPT:]
            sessions = tuple(dict.fromkeys([*known.sessions, *(str(x["session"]) for x in fresh)]))
            return _Intervening(
                view_time, max(known.last_version, self.newest), known.count + len(fresh), sessions, tuple(recent)
            )
        sessions = tuple(dict.fromkeys(str(x["session"]) for x in fresh))
        return _Intervening(view_time, self.newest, len(fresh), sessions, tuple(fresh[-_INTERVENING_KEPT:]))


class InterveningWrites:
    """The intervening writes of a path since a session's view, looked up in the history index; what was
    counted for a view is kept per process (see `since`)."""

    def __init__(self, history_store: History) -> None:
        self.history_store = history_store
        self._seen_writes: dict[tuple[str, str], _Intervening] = {}

    def since(self, key: str, recorded: ReadState, session: str, before_version: int | None = None) -> _Intervening:
        """Writes of `key` by other sessions since S's view (S has not seen them), from the history index.

        Walking back from the newest entry, the walk stops at the write that produced the content S saw
        (its `after` is S's hash), or just after the first write made over it (its `before` is). A view
        that never was on disk (S's own rebased edit) matches neither; then the writes stamped after the
        time of S's last full view count, and the walk stops at entries older than that. What an earlier
        call for the same view already counted is kept (per process), so a session that edits again and
        again without reading walks only the entries that are new since its last edit.
        """
        cache_key = (session, key)
        known = self._seen_writes.get(cache_key)
        if known is not None and known.view_time != recorded.time:
            known = None
        size = _INTERVENING_FIRST_BYTES
        while True:
            walk = self._walk_index_tail(key, size, recorded, session, before_version, known)
            if walk.stopped or walk.whole or size >= _INTERVENING_TAIL_BYTES:
                break
            size *= 4
        merged = walk.merge(known, recorded.time)
        if len(self._seen_writes) > 10_000:
            self._seen_writes.clear()
        self._seen_writes[cache_key] = merged
        return merged

    def _walk_index_tail(
        self,
        key: str,
        size: int,
        recorded: ReadState,
        session: str,
        before_version: int | None,
        known: _Intervening | None,
    ) -> _Walk:
        tail = self.history_store.tail(key, size)
        found: list[dict[str, Any]] = []
        newest = 0
        for e in tail.entries:  # newest first
            if before_version is not None and e.version >= before_version:
                continue
            newest = max(newest, e.version)
            if known is not None and e.version <= known.last_version:
                return _Walk(found, newest, True, tail.whole, False)
            if e.after == recorded.hash:
                return _Walk(found, newest, True, tail.whole, True)
            if e.time < recorded.time - _INTERVENING_SLACK_S:
                return _Walk(found, newest, True, tail.whole, False)  # older than S's view: the rest too
            if e.session != session:
                found.append(
                    {
                        "version": e.version,
                        "session": e.session,
                        "operation": e.operation,
                        "time": e.time,
                        "first_line": e.first_line,
                        "last_line": e.last_line,
                    }
                )
            if e.before == recorded.hash:
                return _Walk(found, newest, True, tail.whole, True)
        return _Walk(found, newest, False, tail.whole, False)

    def made_by_itself(self, key: str, recorded: ReadState, session: str, hunks: Sequence[tuple[str, str]]) -> bool:
        """Did `session` itself make one of `hunks` ((old text, new text) of whole lines) in a write of `key`
        since its view `recorded` (another call of the same session, in another coroutine, thread or
        process, racing with this one)? Walks the history index back to the view's version (or the view's
        time), diffing each of the session's own writes on the way. True also when a write cannot be read
        back, or the view's version is not within the walk's reach (the cautious answer)."""
        tail = self.history_store.tail(key, _INTERVENING_TAIL_BYTES)
        for e in tail.entries:  # newest first
            if e.after == recorded.hash:
                return False
            if e.session == session and self._entry_makes(key, e.before, e.after, hunks):
                return True
            if e.before == recorded.hash or e.time < recorded.time - _INTERVENING_SLACK_S:
                return False
        return not tail.whole

    def _entry_makes(self, key: str, before: str | None, after: str | None, hunks: Sequence[tuple[str, str]]) -> bool:
        if before is None or after is None:
            return True
        try:
            old = decode_bytes(self.history_store.load(before, key)).text
            new = decode_bytes(self.history_store.load(after, key)).text
        except (CoordinatorError, OSError):
            return True
        spans = diff_texts(old, new)
        made = {(old[x.a_start : x.a_start + x.a_len], new[x.b_start : x.b_start + x.b_len]) for x in spans}
        return any(h in made for h in hunks)

    def detail(self, key: str, recorded: ReadState, session: str, exc: CoordinatorError) -> str:
        """A refused rebase's sentence naming who changed the file since the view (and its details)."""
        seen = self.since(key, recorded, session)
        exc.details["intervening"] = list(seen.recent)
        exc.details["intervening_writes"] = seen.count
        if not seen.count:
            return ""
        return " Changed since your view by: " + _describe_writes(seen) + "."


def _describe_writes(seen: _Intervening) -> str:
    """ "agent-3 (version 12, lines 40-42), agent-5 (version 13, line 80)" (lines of that version), newest
    last; older ones summed up."""
    shown = list(seen.recent)[-6:]
    parts = []
    for w in shown:
        a, b = w.get("first_line"), w.get("last_line")
        where = f", line {a}" if a == b else f", lines {a}-{b}" if a and b else ""
        parts.append(f"{w.get('session')} (version {w.get('version')}{where})")
    if seen.count > len(shown):
        parts.insert(0, f"{seen.count - len(shown)} earlier writes")
    return ", ".join(parts)
