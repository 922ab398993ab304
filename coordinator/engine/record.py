"""Step 4 of the check-then-write, after the lock: record the write in Redis and report it.

One round trip: the session's new view, the path's version and content hash (SET, HSET), the session
registry now and then, the refusal counts of this process, the change event, the notice lookups and a lease
refresh when due, all on one pipeline. Losing it only costs a refusal later: the
session's next edit is judged against a view that Redis no longer confirms.

Decision: the record is sent when the write is done, not deferred to the session's next call: deferring
would leave other processes and sessions without the new version, its event and the writer's view for an
unbounded time (an agent may never call again), and notices, `watch`, the HTTP idempotency record and
another process of the same session all read them. What is overlapped is the wait: when none of the
replies is needed before the result is made (no notice lookup: the common case), the commands
go out on the state store's lane (coordinator/state/lane.py) before the snippet, the result and the
message are made, and the replies are read after, before the call returns (`_start_record`). The server
runs the record while this thread works; a failure is still reported in this very result. Otherwise the
round trip is made once the result is drafted (`_record`), since the notice comes from the replies.

Invariant 3, enforced here: a write that landed is never reported as failed. Nothing after the rename may
raise out of `after_lock`: a Redis failure (or anything unexpected, even a bug) becomes a warning in the
result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator.disk import fsio
from coordinator.engine.intervening import InterveningWrites, _Intervening
from coordinator.engine.leasing import NOT_DUE, LeaseGate
from coordinator.engine.resources import Disk, StateAccess
from coordinator.engine.results import WriteResult, evolve, result_of
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.frozen import fast_init
from coordinator.history import content_hash
from coordinator.state import events as events_mod
from coordinator.state.events import ReadTracker
from coordinator.state.views import KIND_WRITE, ReadState, StateStore
from coordinator.text import semantics

if TYPE_CHECKING:
    from coordinator.engine.plan import WritePlan
    from coordinator.engine.rebasing import AlreadyMade
    from coordinator.engine.steps import CheckedWrite, _PreLock, _Written

log = logging.getLogger("coordinator.engine")

UNRECORDED_WARNING = (
    "The change was written, but the coordination state could not be updated; read the file again before "
    "your next edit of it."
)
Extra = Callable[[Any], None]


def _no_notice(replies: list[Any]) -> str:
    return ""


class Recorder:
    """What happens once the lock is released: the record, the result, the tidying (module docstring).
    Its collaborators are the Coordinator's: the disk and the read state (resources.py), the lease gate
    (its refresh rides the record) and the intervening-writes lookup."""

    def __init__(self, disk: Disk, access: StateAccess, lease_gate: LeaseGate, intervening: InterveningWrites) -> None:
        self.disk = disk
        self.access = access
        self.lease_gate = lease_gate
        self.intervening = intervening

    def after_lock(self, req: CheckedWrite, pre: _PreLock, written: _Written) -> WriteResult:
        try:
            return self._record_and_report(req, pre, written)
        except Exception:  # the write stands (invariant 3): report it, with a warning, whatever went wrong
            log.exception("after writing %s: the result could not be completed", pre.rp.key)
            bare = self._result(req, pre, written, snippet="", seen=None)
            bare = evolve(bare, warnings=(UNRECORDED_WARNING,))
            try:
                return req.finish(bare)
            except Exception:
                return bare
        finally:
            self.tidy(written)  # (done already on the early path: then it does nothing)

    def already_made(self, req: CheckedWrite, pre: _PreLock, made: AlreadyMade) -> WriteResult:
        """The answer to an edit whose change another write already made (policy "rebase"): nothing was
        written; the session's view becomes what it read plus its own edit (as after a rebased edit, so its
        next edit is carried over from there), and the result names who made the change."""
        recorded, key = pre.recorded, pre.rp.key
        assert recorded is not None
        if self.intervening.made_by_itself(key, recorded, req.session, made.hunks):
            raise CoordinatorError(
                ErrorCode.STALE,
                f"{pre.rp.shown} has been modified since you last read it, by another call of this same session "
                f"({req.session}), and it made the very change your edit makes: whether you meant to make it "
                "twice cannot be told, so nothing was written. Read the file again, then redo your change on the "
                "current content if it is still needed.",
                changes=[[c.first, c.last] for c in made.rebased.changes],
                reason="made_by_this_session",
            )
        view_digest = content_hash(made.view_data)
        self.access.texts.put(view_digest, made.rebased.view)
        rs = ReadState(view_digest, made.mtime_ns, len(made.view_data), 0, 0, recorded.time, KIND_WRITE)
        warnings: tuple[str, ...] = ()
        try:
            self.access.call(lambda: self.access.store.record_read(req.session, key, rs))
            self.access.views.put(req.session, key, rs)
        except Exception as exc:
            self.access.views.drop(req.session, key)
            warnings = _unrecorded(key, exc)
        try:
            seen: _Intervening | None = self.intervening.since(key, recorded, req.session)
        except Exception:  # who made it is information only
            seen = None
        who = ", ".join(seen.sessions) if seen is not None and seen.sessions else "another write"
        message = (
            f"Your change is already in {key}: it was made by {who} at the same place since you read the file. "
            "Nothing was written (0 replacements). Read the file before relying on the lines around it."
        )
        if warnings:
            message += " Warning: " + " ".join(warnings)
        values = self._result_values(req, pre, seen, made, message, warnings)
        return result_of(values)

    def _result_values(
        self,
        req: CheckedWrite,
        pre: _PreLock,
        seen: _Intervening | None,
        made: AlreadyMade,
        message: str,
        warnings: tuple[str, ...],
    ) -> dict[str, Any]:
        """An already-made edit's result fields, in field order (`results.result_of`)."""
        rebased = made.rebased
        return {
            "path": pre.rp.key,
            "operation": req.operation,
            "created": False,
            "version": seen.last_version if seen is not None else 0,
            "hash": None,
            "message": message,
            "replacements": 0,
            "start_line": 1,
            "snippet": "",
            "timings": {},
            "warnings": warnings,
            "rebased": True,
            "changed_lines": tuple((c.first, c.last) for c in rebased.changes if c.last >= c.first),
            "intervening": seen.recent if seen is not None else (),
            "intervening_writes": seen.count if seen is not None else 0,
            "intervening_sessions": seen.sessions if seen is not None else (),
            "notice": "",
            "lease_token": None,
            "match": rebased.outcome.match,
            "match_lines": rebased.outcome.match_lines,
            "nearby_changes": (),
            "reverts": None,
            "discarded": (),
            "already_made": True,
            "placed_after": (),
            "placed_before": (),
        }

    def tidy(self, written: _Written) -> None:
        """The replace's directory work that needs no lock, done once the lock is released (while the
        record's round trip is under way when it is sent first): the replaced content's temporary is
        unlinked (fsio.atomic_replace's `old_names`), and a spare temporary made for the next write
        (spares.py). The early path calls it before the result is made; `after_lock` calls it when that has
        not happened (a second call would do nothing). Never raises (invariant 3: the write has landed)."""
        if written.tidied:
            return
        written.tidied = True
        try:
            old_temp = written.old_temp
            if old_temp is not None:
                written.old_temp = None
                fsio.remove_temp(self.disk.tmp_dfd, old_temp)
            self.disk.spares.refill()
        except Exception:  # a leftover temporary at worst, removed at a later open
            log.exception("after writing: tidying the temporaries failed")

    def _record_and_report(self, req: CheckedWrite, pre: _PreLock, written: _Written) -> WriteResult:
        # The write's time is its history entry's (taken under the lock, before the replace): the view and
        # the event carry the same time (and its text is made once, coordinator/clock.py). A write of this
        # path by another session after the lock is released has a later time, so it is never counted as
        # seen by this view.
        now = written.time
        rs, view_digest = self._new_view(req, pre, written, now)
        riders = self._riders(req.session, pre.rp.key)
        early = self._start_record(req, pre, written, rs, now, riders)
        if early is not None:
            return self._report_early(req, pre, written, early, view_digest)
        draft = self._draft(req, pre, written)
        notice, warnings = self._record(req, pre, written, rs, draft, now, riders)
        self._saw(req.session, pre.rp.key, view_digest)
        return req.finish(evolve(draft, notice=notice, warnings=warnings) if notice or warnings else draft)

    def _report_early(
        self,
        req: CheckedWrite,
        pre: _PreLock,
        written: _Written,
        early: Callable[[], tuple[str, ...]],
        view_digest: str | None,
    ) -> WriteResult:
        """The result of a write whose record is on its way (`_start_record`): everything the result needs
        but the record's outcome is made while the server runs the record (the draft, the caller's message,
        the tracker), then the replies are read. A record that failed makes the result again, with its
        warning (rare: the message is made twice then)."""
        try:
            self.tidy(written)
            draft = self._draft(req, pre, written)
            tracker = self.access.tracker
            if tracker is not None:
                tracker.saw(req.session, pre.rp.key, view_digest)
            result = req.finish(draft)
        except BaseException:
            early()  # its replies are read (the lane is released) whatever failed here
            raise
        warnings = early()
        return req.finish(evolve(draft, warnings=warnings)) if warnings else result

    def _saw(self, session: str, key: str, view_digest: str | None) -> None:
        if self.access.tracker is not None:
            self.access.tracker.saw(session, key, view_digest)

    def _new_view(
        self, req: CheckedWrite, pre: _PreLock, written: _Written, now: float
    ) -> tuple[ReadState | None, str | None]:
        """S's read state after its write (None when the write removed the file), and its hash."""
        plan, new_digest, new_st = written.plan, written.new_digest, written.new_st
        view_digest = new_digest
        if plan.rebased is not None and plan.view_data is not None:
            # S's view after a rebased edit never was on disk: it lives in this process's text cache (from
            # another process, or once evicted, S's next edit of P is refused as stale: the safe side).
            view_digest = content_hash(plan.view_data)
            self.access.texts.put(view_digest, plan.rebased.view)
        elif new_digest is not None and plan.new_text is not None and req.rebase_edits() is not None:
            self.access.texts.put(new_digest, plan.new_text)
        if new_digest is None or new_st is None:
            return None, view_digest
        if plan.rebased is not None and pre.recorded is not None:
            # S's view: what it saw plus its own edit. Its time stays that of S's last full view, so the
            # writes S has not seen are still found as "since then" next time.
            assert view_digest is not None
            size = len(plan.view_data or b"")
            return ReadState(view_digest, new_st.st_mtime_ns, size, 0, 0, pre.recorded.time, KIND_WRITE), view_digest
        return ReadState(new_digest, new_st.st_mtime_ns, new_st.st_size, 0, 0, now, KIND_WRITE), view_digest

    def _result(
        self, req: CheckedWrite, pre: _PreLock, written: _Written, snippet: str, seen: _Intervening | None
    ) -> WriteResult:
        """The result of the write, its message still empty (the caller's `finish` puts it in). Made from
        its fields' dict (`results.result_of`: every field, in field order), once per write: the usual
        write's values, then a rebased edit's (`_rebase_fields`) over them (an update keeps the order).

        The draft goes to `finish`, which may set its message in place (`results.set_message`): this class
        shows it to nobody else before, and reads it after `finish` only through `evolve` (a copy)."""
        plan = written.plan
        own = pre.leased.own
        values = {
            "path": pre.rp.key,
            "operation": req.operation,
            "created": not written.cur.exists,
            "version": written.version,
            "hash": written.new_digest,
            "message": "",
            "replacements": plan.replacements,
            "start_line": written.lines[0],
            "snippet": snippet,
            "timings": {"lock_wait_s": written.wait_s, "lock_hold_s": written.hold_s},
            "warnings": (),
            "rebased": False,
            "changed_lines": (),
            "intervening": (),
            "intervening_writes": 0,
            "intervening_sessions": (),
            "notice": "",
            "lease_token": own.token if own is not None else None,
            "match": plan.match,
            "match_lines": plan.match_lines,
            "nearby_changes": plan.nearby,
            "reverts": req.reverts,
            "discarded": (),
            "already_made": False,
            "placed_after": (),
            "placed_before": (),
        }
        if plan.rebased is not None or seen is not None:
            values.update(_rebase_fields(plan, seen))
        return result_of(values)

    def _draft(self, req: CheckedWrite, pre: _PreLock, written: _Written) -> WriteResult:
        """The result before the record's outcome (notice, warnings): the snippet, the intervening writes."""
        plan = written.plan
        snippet = ""
        if plan.new_text is not None and req.operation != "write":
            snippet = semantics.render_snippet_at(plan.new_text, plan.first_offset, plan.inserted_len, written.lines[0])
        seen = None
        if plan.rebased is not None and pre.recorded is not None:
            seen = self.intervening.since(pre.rp.key, pre.recorded, req.session, before_version=written.version)
        return self._result(req, pre, written, snippet, seen)

    def _riders(self, session: str, key: str) -> _Riders:
        """What else rides the post-write round trip this time: notice lookups (when due) and a lease
        snapshot refresh (when half-way to stale), each with what reads its replies."""
        notice_extra, notice_finish = notice_rider(self.access.tracker, self.access.store, session, key)
        lease_extra, apply_leases = self.lease_gate.rider()
        if notice_extra is None and lease_extra is None:
            return _NOTHING_RIDES
        return _Riders(notice_extra, notice_finish, lease_extra, apply_leases)

    def _start_record(
        self, req: CheckedWrite, pre: _PreLock, written: _Written, rs: ReadState | None, now: float, riders: _Riders
    ) -> Callable[[], tuple[str, ...]] | None:
        """The record sent before the result is made, when the result needs none of its replies (no notice
        lookups): the server runs it while this thread renders the snippet and
        the message (lane.py's `start`). A lease refresh due rides it too, last: its reply is handed to
        the lease gate when the replies are read. Returns what reads the replies and gives the result's
        warnings (call it exactly once); None: the record is made afterwards (`_record`)."""
        if rs is None or riders.notice is not None:
            return None
        key, version, lease, access = pre.rp.key, written.version, riders.lease, self.access
        event = (
            (access.namespace, (written.lines,), now, written.plan.rebased is not None)
            if access.publish_events
            else None
        )
        flush = access.refusals.flusher(access.store.refusals_key)  # (`_record_extra`'s commands, in its order)
        try:
            replies = access.call(
                access.store.start_record_write, req.session, key, rs, version, req.operation, written.new_digest,
                lease, event, flush,
            )  # fmt: skip
        except Exception as exc:
            access.views.drop(req.session, key)
            warnings = _unrecorded(key, exc)
            return lambda: warnings
        access.views.put(req.session, key, rs)

        def finish() -> tuple[str, ...]:
            try:
                got = access.call(replies)  # losing Redis forgets the cached views, as after any Redis call
            except Exception as exc:
                return _unrecorded(key, exc)
            if lease is not None:
                _apply(riders.apply_leases, got[-1])
            return ()

        return finish

    def _record(
        self,
        req: CheckedWrite,
        pre: _PreLock,
        written: _Written,
        rs: ReadState | None,
        draft: WriteResult,
        now: float,
        riders: _Riders,
    ) -> tuple[str, tuple[str, ...]]:
        """The one post-write round trip. Returns the notice and the warnings for the result."""
        key, session, version = pre.rp.key, req.session, written.version
        lease_at = [-1]  # where the lease refresh's reply is (-1: none)
        extra = _riding(self._record_extra(req, key, version, now, written), riders, lease_at)
        try:
            if rs is not None:
                replies = self.access.call(
                    lambda: self.access.store.record_write(
                        session, key, rs, version, req.operation, digest=written.new_digest, extra=extra
                    )
                )
                self.access.views.put(session, key, rs)
            else:
                self.access.views.drop(session, key)
                replies = self.access.call(
                    lambda: self.access.store.record_removal(session, key, version, req.operation, extra)
                )
        except Exception as exc:
            return "", _unrecorded(key, exc)
        if lease_at[0] >= 0:
            riders.apply_leases(replies[lease_at[0]])
        return riders.notice_finish(replies), ()

    def _record_extra(self, req: CheckedWrite, key: str, version: int, when: float, written: _Written) -> Extra:
        """What every record of a write carries besides the view and the path's head: this process's
        refusal counts and the change event (with the changed lines; none for a removal)."""
        ranges = [written.lines] if written.new_digest else []

        def extra(pipe: Any) -> None:
            self.access.refusals.queue_flush(pipe, self.access.store.refusals_key)
            if self.access.publish_events:
                events_mod.queue_event(
                    pipe,
                    self.access.namespace,
                    path=key,
                    session=req.session,
                    version=version,
                    operation=req.operation,
                    ranges=ranges,
                    when=when,
                    digest=written.new_digest,
                    rebased=written.plan.rebased is not None,
                )

        return extra


def _rebase_fields(plan: WritePlan, seen: _Intervening | None) -> dict[str, Any]:
    """A rebased edit's fields of its result: what others changed, the changes near its own, the
    intervening writes (`seen`)."""
    out: dict[str, Any] = {}
    rebased = plan.rebased
    if rebased is not None:
        out["rebased"] = True
        out["changed_lines"] = tuple((c.first, c.last) for c in rebased.changes if c.last >= c.first)
        out["nearby_changes"] = tuple((c.first, c.last) for c in rebased.nearby if c.last >= c.first)
        out["placed_after"] = tuple((c.first, c.last) for c in rebased.placed_after)
        out["placed_before"] = tuple((c.first, c.last) for c in rebased.placed_before)
    if seen is not None:
        out["intervening"] = seen.recent
        out["intervening_writes"] = seen.count
        out["intervening_sessions"] = seen.sessions
    return out


def notice_rider(
    tracker: ReadTracker | None, state: StateStore, session: str, key: str
) -> tuple[Extra | None, Callable[[list[Any]], str]]:
    """The notice lookups to add to a pipeline the call makes anyway, and how to read their replies."""
    keys = tracker.due(session, exclude=key) if tracker is not None else []
    if not keys or tracker is None:
        return None, _no_notice

    def extra(pipe: Any) -> None:
        state.queue_heads(pipe, keys)

    def finish(replies: list[Any]) -> str:
        found = tracker.notice(session, keys, replies[-len(keys) :])
        return found.text if found is not None else ""

    return extra, finish


@fast_init
@dataclass(frozen=True)
class _Riders:
    """What rides one post-write round trip besides the record (see `_riders`)."""

    notice: Extra | None
    notice_finish: Callable[[list[Any]], str]
    lease: Extra | None
    apply_leases: Callable[[Any], None]


_NOTHING_RIDES = _Riders(None, _no_notice, *NOT_DUE)


def _riding(record_extra: Extra, riders: _Riders, lease_at: list[int]) -> Extra:
    """`record_extra` plus what rides the full round trip: the lease refresh and the notice lookups (last:
    their replies are read from the end). `lease_at[0]` gets where the lease refresh's reply is, counted from
    the first of these."""

    def extra(pipe: Any) -> None:
        base = len(pipe)
        record_extra(pipe)
        if riders.lease is not None:
            lease_at[0] = len(pipe) - base
            riders.lease(pipe)
        if riders.notice is not None:
            riders.notice(pipe)

    return extra


def _apply(apply_leases: Callable[[Any], None], reply: Any) -> None:
    """Hand the lease refresh's reply to the lease gate (the write is recorded: a failure here is logged
    and the snapshot is left as it was, to be refreshed by a later write or fetched before the lock)."""
    try:
        apply_leases(reply)
    except Exception:
        log.exception("the lease snapshot could not be refreshed from a write's record")


def _unrecorded(key: str, exc: Exception) -> tuple[str, ...]:
    """The warnings of a write whose record failed (a refusal of Redis is expected; anything else is logged)."""
    if not isinstance(exc, CoordinatorError):
        log.warning("recording the write of %s failed: %r", key, exc)
    return (UNRECORDED_WARNING,)
