"""The check-then-write: one class, its common path beside its general path, in named steps (see the
package docstring for the why).

check_then_write                       public entry: the request, refusal counting
  _common_write                        the common case, straight through (below)
    _known_path                          the path's resolution, kept per path
    _common_locked, _common_read         the lock, the read, the view, the plan, history, the replace
  _with_cache_retry                    the general path: the cached-view retry
  _attempt
    _pre_lock                          1. before the lock: the session's view and the leases (LeaseGate)
    _locked_write                      2. the lock (or LockBusy for a caller that must not wait)
      _under_lock                      3. local disk only: read, hash, judge the view, transform,
        _read_and_plan                    history pre-image and index entry, temp file, rename
        _history_first
        _replace
    Recorder.after_lock (record.py)    4. after the lock: one round trip records the write

The common case: a file that exists, written by a session whose view of it this process recorded (its last
read or write of it was made here) and is still current, on a path whose views have not gone out of date in
this process lately (`_is_contended`), with no lease anywhere (the lease snapshot is fresh and empty, this
process granted the session none, and no write ticket is marked on the path), a lock that is free when the
caller asked not to wait for it, and `state_check="cached"`. `_common_write` runs such a call straight
through, without the general path's layers for what the common case does not have (the cached-view retry,
the early rebase, LockBusy, the lease decision and the fence, the refusal of a missing file), and with what
it needs computed once: the path's resolution is kept (`_KnownPath`), the history's head record is read once
under the lock for both the reconcile and the new entry. The text of the content written last is not kept by
its hash: proving that its bytes decode to exactly that text (no byte order mark, no control byte) scans
them as the decode does, and with a regular expression it cost more instructions than the decode it saved.
Call options are the general path's too: a busy lock under `wait_for_lock=False` is handed over (the general
path raises LockBusy, whose resume waits). The HTTP service makes every call with `wait_for_lock=False` (it
runs calls inline on its event loop), so it takes this path as well.

One owner per decision: the common path makes none of its own. Every rule is applied by the function the
general path calls for it (`fsio.resolve` and `fsio.open_parent` for confinement, `fsio.read_at` and
`fsio.check_writable` for the read under the lock, the history's `reconcile` and `begin`, the staleness
rule's comparison of hashes, the caller's transform for the change, `_write_planned` for the size limit,
history and the replace, `Recorder.after_lock` for the record and the result). Where the common case does not
hold, it hands the call over before anything is written: `_common_write` returns None, and the general
path runs the call from the start (resolving the path and reading the file again under the lock, where it
gives the refusal, the rebase or the creation). What the common path finds out before that is not kept: a
view that is not current costs one more read of the file, never a wrong answer (what it keeps per path is
the path's resolution and the hash of a clean content it wrote, `_KnownPath`, which only spares the next
decode of that very content its binary sniff); and since a contended path
is left to the general path from the start, the lock is taken twice only for the first stale view of a
while. tests/coordinator/engine/test_common_path.py and test_fastpath_differential.py pin that both paths give the
same results, refusals, files, history, views and events.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable

from coordinator.disk import fsio
from coordinator.disk.locks import HeldLock
from coordinator.engine.calls import LockBusy
from coordinator.engine.intervening import InterveningWrites
from coordinator.engine.leasing import LeaseGate, TicketSeen
from coordinator.engine.observer import APPLIED, REBASED, EngineObserver, refusal_outcome
from coordinator.engine.plan import (
    CurrentFile,
    WritePlan,
    _CachedViewRefused,
    _changed_lines,
    _Missing,
    _view_refusal,
    clean_digest,
)
from coordinator.engine.reading import missing_file
from coordinator.engine.rebasing import AlreadyMade, Rebaser
from coordinator.engine.record import UNRECORDED_WARNING, Recorder
from coordinator.engine.resources import Disk, StateAccess
from coordinator.engine.results import WriteResult
from coordinator.engine.steps import CheckedWrite, _PreLock, _release, _Written
from coordinator.errors import CoordinatorError, ErrorCode, bare_refusal
from coordinator.history import HeadRecord, content_hash
from coordinator.state.leases import Lease, LeaseCheck
from coordinator.state.views import ReadState, reset_note
from coordinator.text.codecs import decode_clean

_UMASK = os.umask(0o022)
os.umask(_UMASK)

OUTSIDE_WRITER = "outside"  # the author of a change no session accounts for (agentwrites.OUTSIDE)
log = logging.getLogger("coordinator.engine")

_NO_LEASE = LeaseCheck(None, None)
_KNOWN_PATHS_MAX = 1024
_TICKET_ROUNDS = 4  # a write that found a ticket marked, asked Redis, and came again: at most this often


class _KnownPath:
    """One path as the common path keeps it: its resolution (see `CheckThenWrite._known_path`) and the
    hash of the last content of it the common path wrote, when that content is clean (`plan.clean_digest`).

    Invariant: `clean` is only ever a hash whose content is clean, so a file read with that hash is
    decoded without the binary sniff, whoever wrote it and whenever (threads may race on it: any value
    one of them sets is such a hash)."""

    __slots__ = ("clean", "rp", "top")

    def __init__(self, rp: fsio.ResolvedPath) -> None:
        self.rp = rp
        self.clean: str | None = None
        self.top = "/" not in rp.key  # in the root itself: written through the root's own descriptor


class CheckThenWrite:
    """The check-then-write, its common path beside its general one (module docstring). It holds its
    collaborators, all made by the Coordinator: the disk and the read state (resources.py), the lease
    gate, the rebaser, the recorder and the intervening-writes lookup. `observer`: set by
    `Coordinator.observe`."""

    def __init__(
        self,
        disk: Disk,
        access: StateAccess,
        lease_gate: LeaseGate,
        rebaser: Rebaser,
        recorder: Recorder,
        intervening: InterveningWrites,
    ) -> None:
        self.disk = disk
        self.access = access
        self.lease_gate = lease_gate
        self.rebaser = rebaser
        self.recorder = recorder
        self.intervening = intervening
        self._known_paths: dict[str, _KnownPath] = {}  # path -> what the common path keeps of it
        self.observer: EngineObserver | None = None
        # Whether a replace keeps the file's owner (only root may give a file away). Asked once: a process
        # that drops root later has that fchown refused, which the replace ignores (fsio._fill_temp).
        self._as_root = os.geteuid() == 0

    def check_then_write(self, req: CheckedWrite) -> WriteResult:
        """Run the request's change on the file as it is on disk, under its lock, and write its plan
        atomically (`CheckedWrite`, steps.py, says what each field does).

        A refusal made against this process's cached view of the session is checked once more against Redis
        (another process of the same session may have read or written since).
        """
        if self.access.check == "cached":  # the common path first (it answers None when it hands over)
            try:
                done = self._common_write(req)
            except CoordinatorError as exc:
                raise self._refused(exc, req.operation) from None
            if done is not None:
                return done if self.observer is None else self._observed(done, req.operation)
        return self._counted(lambda: self._with_cache_retry(req), req.operation)

    # -- the common path ----------------------------------------------------------------------------------
    def _common_write(self, req: CheckedWrite) -> WriteResult | None:
        """`req` through the common path (module docstring); None when it is not the common case, with
        nothing written (the caller then runs the general path from the start)."""
        known = self._known_paths.get(req.path) or self._known_path(req.path)
        rp = known.rp
        recorded = self.access.views.get(req.session, rp.key)
        gate = self.lease_gate
        if (
            recorded is None
            or self.rebaser.is_contended(rp.key)  # views of it go stale here lately: the general path, lock taken once
            or gate.fresh() != []
            or gate.granted_any(req.session)
        ):
            return None
        self.access.call(self.access.store.alive)  # fail closed when Redis is gone, as the general path does
        if known.top:
            dfd = self.disk.root_fd  # a file of the root's own: its folder is the root, kept open (not closed here)
        else:
            try:
                dfd = fsio.open_parent(rp, self.disk.root, root_fd=self.disk.root_fd)
            except CoordinatorError:
                return None  # a missing folder, a link swapped in on the way: the general path resolves again
        try:
            written = self._common_locked(req, known, recorded, dfd)
        except CoordinatorError as exc:
            raise self._decorate_refusal(exc, rp.key, recorded, req.session) from None
        finally:
            if not known.top:
                try:
                    os.close(dfd)
                except OSError:  # after a rename, nothing may turn the write into a failure
                    pass
        if written is None:
            return None
        return self.recorder.after_lock(req, _PreLock(rp, recorded, True, _NO_LEASE), written)

    def _known_path(self, path: str) -> _KnownPath:
        """What the common path keeps per path: its resolution.

        A resolution is kept only for a path given as its own key (relative, plain names, no link on the
        way when it was resolved): every later write walks that key from the root's descriptor with
        O_NOFOLLOW (`fsio.open_parent`) and refuses a link in the file's place (`fsio.read_at`), so while
        the walk succeeds, the key is still what `fsio.resolve` would give, and when it fails the call is
        handed to the general path, which resolves the path again."""
        known = self._known_paths.get(path)
        if known is not None:
            return known
        rp = fsio.resolve(self.disk.root, path)
        known = _KnownPath(rp)
        if rp.key == rp.shown:
            if len(self._known_paths) >= _KNOWN_PATHS_MAX:
                self._known_paths.clear()
            self._known_paths[path] = known
        return known

    def _common_locked(self, req: CheckedWrite, known: _KnownPath, recorded: ReadState, dfd: int) -> _Written | None:
        """The lock, the file read under it, the view judged, the plan written. None (nothing written)
        when the lock is busy and the caller does not wait for it, the file is missing or not a plain file
        in place, the view is not current, or the plan removes the file."""
        rp = known.rp
        held = self.disk.locks.acquire(rp.key) if req.options.wait_for_lock else self.disk.locks.try_acquire(rp.key)
        if held is None:
            return None  # the general path raises LockBusy, with what its resume needs
        try:
            if self.lease_gate.marked(held):
                return None  # a write ticket is marked: the general path judges it (LeaseGate.check_mark)
            found = self._common_read(dfd, known, held)
            if found is None or found[0].digest != recorded.hash:
                return None
            cur, head = found
            plan = req.change(cur)
            if plan.new_data is None:
                return None
            written = self._write_planned(req, rp, dfd, held, cur, plan, None, head)
        finally:
            hold_s = _release(held)
        written.wait_s, written.hold_s = held.wait_s, hold_s
        known.clean = clean_digest(cur, plan, written.new_digest)  # (no disk work: judged after the lock)
        return written

    def _common_read(self, dfd: int, known: _KnownPath, held: HeldLock) -> tuple[CurrentFile, HeadRecord | None] | None:
        """`_read_current` for the common path, with the history's head read once (reconciled here, then
        given to `begin`). None: not the common case (the general path reads again and gives the refusal)."""
        rp = known.rp
        try:
            found = fsio.read_at(dfd, rp, self.disk.max_file_bytes)
        except CoordinatorError:
            return None
        if found is None:
            return None
        data, st = found
        fsio.check_writable(dfd, rp, st)
        digest = content_hash(data)
        head: HeadRecord | None
        try:
            head = self.disk.history.read_head(held)
        except OSError:
            head = None
        self.disk.history.reconcile(held, rp.key, digest, head)
        if digest == known.clean:
            return CurrentFile(True, data, st, digest, decode_clean(data), True), head
        return CurrentFile(True, data, st, digest), head

    def _counted(self, call: Callable[[], WriteResult], operation: str) -> WriteResult:
        """Refusals are counted by code (flushed to Redis on the next post-write round trip), and leave the
        engine as bare answers (`bare_refusal`); the observer, if any, is told every outcome."""
        try:
            result = call()
        except CoordinatorError as exc:
            raise self._refused(exc, operation) from None
        except LockBusy as busy:
            raise busy.wrap(lambda resume: self._counted(resume, operation)) from None
        return result if self.observer is None else self._observed(result, operation)

    def _refused(self, exc: CoordinatorError, operation: str) -> CoordinatorError:
        """A refusal counted by its code (and told to the observer), as the bare answer to raise."""
        self.access.refusals.add(exc.code.value)
        if self.observer is not None:
            self.observer.write_finished(operation, refusal_outcome(exc))
        return bare_refusal(exc)

    def _observed(self, result: WriteResult, operation: str) -> WriteResult:
        assert self.observer is not None
        self.observer.write_finished(operation, REBASED if result.rebased else APPLIED)
        if self.access.publish_events and UNRECORDED_WARNING not in result.warnings:
            self.observer.event_published()  # it rode the record, which did not fail
        return result

    def _with_cache_retry(self, req: CheckedWrite, first: Callable[[], WriteResult] | None = None) -> WriteResult:
        """Try with this process's cached view; a refusal it led to is confirmed in Redis or tried again.

        Invariant: a resumed call (`first`, LockBusy.resume) never raises LockBusy again: its retry waits
        for the lock, since whoever resumed it has taken on the wait and has no second resume to run."""
        try:
            try:
                return first() if first is not None else self._attempt(req, True)
            except LockBusy as busy:
                raise busy.wrap(lambda resume: self._with_cache_retry(req, resume)) from None
        except _CachedViewRefused as cv:
            self._confirm_cached_refusal(req.session, cv)
        if first is not None and not req.options.wait_for_lock:
            req = dataclasses.replace(req, options=dataclasses.replace(req.options, wait_for_lock=True))
        return self._attempt(req, False)

    def _confirm_cached_refusal(self, session: str, cv: _CachedViewRefused) -> None:
        """If Redis holds the very view the refusal was made on, the refusal stands (raised here)."""
        if cv.refusal is None:
            return
        fresh = self.access.call(lambda: self.access.store.get(session, cv.key))
        if fresh is not None and fresh.hash == cv.cached.hash:
            raise self._decorate_refusal(cv.refusal, cv.key, fresh, session) from None

    def _attempt(self, req: CheckedWrite, use_cache: bool) -> WriteResult:
        rp = fsio.resolve(self.disk.root, req.path)
        # 1. Before the lock: S's view and the leases, in at most one round trip (see `_pre_lock`).
        recorded, use_cache, leased = self._pre_lock(req.session, rp, use_cache)
        return self._locked_write(req, _PreLock(rp, recorded, use_cache, leased), req.options.wait_for_lock)

    def _pre_lock(
        self, session: str, rp: fsio.ResolvedPath, use_cache: bool
    ) -> tuple[ReadState | None, bool, LeaseCheck]:
        """S's read state for P and what the leases say, with at most one round trip, failing closed.

        Read state: from this process's cache when it has one (a cached view can only err towards a
        refusal, which is then checked against Redis), else from Redis. Leases: from the lease gate's
        snapshot while it is fresh, else fetched on the same pipeline as the read state. A conflicting
        lease raises `leased` here, before the lock.
        """
        gate = self.lease_gate
        use_cache = use_cache and self.access.check == "cached"
        recorded = self.access.views.get(session, rp.key) if use_cache else None
        leases = gate.fresh()
        if recorded is not None:
            if leases is None:
                leases = gate.fetch()  # this round trip also proves Redis is up
            else:
                self.access.call(self.access.store.alive)
        else:
            use_cache = False
            if leases is None:
                taken = time.monotonic()
                recorded, replies = self.access.call(
                    lambda: self.access.store.get_with(session, rp.key, gate.store.queue_live)
                )
                leases = gate.take(replies[0], taken)
            else:
                recorded = self.access.call(lambda: self.access.store.get(session, rp.key))
        return recorded, use_cache, gate.decide(session, rp, leases)

    def _locked_write(self, req: CheckedWrite, pre: _PreLock, wait: bool) -> WriteResult:
        """Steps 2-4, from the lock on: also what LockBusy.resume runs (so step 1 is never repeated). A write
        ticket found marked under the lock is judged by Redis after it (`LeaseGate.ticket_seen`: `leased`
        while it lives), and the write comes again with the leases just fetched."""
        for _ in range(_TICKET_ROUNDS):
            try:
                return self._locked_write_once(req, pre, wait)
            except TicketSeen as seen:
                leased = self.lease_gate.ticket_seen(req.session, pre.rp, seen)
                pre = _PreLock(pre.rp, pre.recorded, pre.use_cache, leased, pre.passed | {seen.mark.raw})
        raise CoordinatorError(
            ErrorCode.LEASED,
            f"Write tickets of {pre.rp.shown} were granted again and again while this write waited; nothing was "
            "written. Another session's agent is writing it: do something else first, then read it again.",
            path=pre.rp.key,
        )

    def _locked_write_once(self, req: CheckedWrite, pre: _PreLock, wait: bool) -> WriteResult:
        rp = pre.rp
        dfd = self._open_parent_for_write(rp, req.may_create)
        try:
            written = self._critical_section(req, pre, dfd, wait)
        except AlreadyMade as made:
            return self.recorder.already_made(req, pre, made)
        except _Missing:
            raise missing_file(rp, self.disk.root, self.disk.root_fd) from None
        except CoordinatorError as exc:
            raise self._decorate_refusal(exc, rp.key, pre.recorded, req.session) from None
        finally:
            with contextlib.suppress(OSError):  # after a rename, nothing may turn the write into a failure
                os.close(dfd)
        # 4. After the lock.
        return self.recorder.after_lock(req, pre, written)

    def _open_parent_for_write(self, rp: fsio.ResolvedPath, may_create: bool) -> int:
        try:
            return fsio.open_parent(rp, self.disk.root, create=may_create, root_fd=self.disk.root_fd)
        except CoordinatorError as exc:
            if exc.code == ErrorCode.FILE_NOT_FOUND and not may_create:  # (with create: a file in the way)
                raise missing_file(rp, self.disk.root, self.disk.root_fd) from None
            raise

    def _critical_section(self, req: CheckedWrite, pre: _PreLock, dfd: int, wait: bool) -> _Written:
        early: tuple[str, WritePlan] | None = None
        edits = req.rebase_edits()
        if edits is not None and pre.recorded is not None and self.rebaser.is_contended(pre.rp.key):
            early = self.rebaser.early(dfd, pre.rp, pre.recorded, edits, pre.use_cache)
        # 2. The lock.
        held = self._take_lock(req, pre, wait)
        try:
            # 3. Local disk work only: no network I/O while the lock is held. Another session's write ticket
            # first: the pre-lock decision may rest on a snapshot taken before its grant.
            self.lease_gate.check_mark(held, req.session, pre.passed)
            written = self._under_lock(req, pre, dfd, held, early)
        finally:
            hold_s = _release(held)
        written.wait_s, written.hold_s = held.wait_s, hold_s
        return written

    def _take_lock(self, req: CheckedWrite, pre: _PreLock, wait: bool) -> HeldLock:
        if wait:
            return self.disk.locks.acquire(pre.rp.key)
        held = self.disk.locks.try_acquire(pre.rp.key)
        if held is None:
            raise LockBusy(pre.rp.key, lambda: self._locked_write(req, pre, True))
        return held

    def _under_lock(
        self, req: CheckedWrite, pre: _PreLock, dfd: int, held: HeldLock, early: tuple[str, WritePlan] | None
    ) -> _Written:
        cur, plan = self._read_and_plan(req, pre, dfd, held, early)
        return self._write_planned(req, pre.rp, dfd, held, cur, plan, pre.leased.own)

    def _write_planned(
        self,
        req: CheckedWrite,
        rp: fsio.ResolvedPath,
        dfd: int,
        held: HeldLock,
        cur: CurrentFile,
        plan: WritePlan,
        own: Lease | None,
        head: HeadRecord | None = None,
    ) -> _Written:
        """The plan's size limit, the fence of the writer's own lease, history first, then the replace.
        `head`: the history's head record as read under this lock (the common path reads it once)."""
        if plan.new_data is not None and len(plan.new_data) > self.disk.max_file_bytes:
            raise CoordinatorError(
                ErrorCode.TOO_LARGE,
                f"The result would be {len(plan.new_data)} bytes, over the limit of {self.disk.max_file_bytes}; "
                "nothing was written.",
            )
        if own is not None:
            self.lease_gate.fence(req.session, rp.key, own)
        written = self._history_first(req, rp, held, cur, plan, head)
        written.new_st = self._replace(rp, dfd, held, written)
        return written

    def _read_and_plan(
        self, req: CheckedWrite, pre: _PreLock, dfd: int, held: HeldLock, early: tuple[str, WritePlan] | None
    ) -> tuple[CurrentFile, WritePlan]:
        """Read the file under the lock, judge the session's view against its bytes, run the transform."""
        cur = self._read_current(dfd, pre.rp, held)
        if not cur.exists:
            if not req.may_create:
                raise _Missing
            return cur, req.change(cur)
        plan = self._judge_view(req, pre, cur, early)
        return cur, plan if plan is not None else req.change(cur)

    def _read_current(self, dfd: int, rp: fsio.ResolvedPath, held: HeldLock) -> CurrentFile:
        """The file as it is, read under its lock: its bytes, their stat and hash. The OS's own write
        permission is checked before any other refusal can be made, and a newest history entry whose
        replace never happened is taken back before anything reads the history."""
        found = fsio.read_at(dfd, rp, self.disk.max_file_bytes)
        if found is None:
            cur = CurrentFile(exists=False)
        else:
            data, st = found
            fsio.check_writable(dfd, rp, st)
            cur = CurrentFile(exists=True, data=data, st=st, digest=content_hash(data))
        self.disk.history.reconcile(held, rp.key, cur.digest)
        return cur

    def _judge_view(
        self, req: CheckedWrite, pre: _PreLock, cur: CurrentFile, early: tuple[str, WritePlan] | None
    ) -> WritePlan | None:
        """Judge the session's view against the bytes on disk, once (`_view_refusal`, the one owner of the
        staleness rule), and act on the judgement: None when the view is current; a rebase's plan when
        policy "rebase" carried the edit over (outside the lock onto these very bytes, or here); else the
        refusal is raised (for a view from this process's cache, as `_CachedViewRefused`, to be confirmed
        in Redis)."""
        recorded, rp = pre.recorded, pre.rp
        refusal = _view_refusal(recorded, cur, rp)
        if refusal is None:
            return None
        if recorded is None:
            raise refusal  # not read: there is no view to carry over, nor a cached one
        self.rebaser.mark_contended(rp.key)
        if early is not None and early[0] == cur.digest:
            return early[1]  # carried over outside the lock onto these very bytes
        edits = req.rebase_edits()
        if edits is not None:
            return self.rebaser.plan(recorded, cur, edits, rp, pre.use_cache, refusal)
        if pre.use_cache:
            raise _CachedViewRefused(rp.key, recorded, refusal)
        raise refusal

    def _history_first(
        self,
        req: CheckedWrite,
        rp: fsio.ResolvedPath,
        held: HeldLock,
        cur: CurrentFile,
        plan: WritePlan,
        head: HeadRecord | None,
    ) -> _Written:
        """History first: the pre-image (the bytes read under this lock), the new content and the index
        entry go in before the file is replaced, so that even a crash right after the rename leaves the
        write undoable; if the replace fails, the entry is taken back (history, invariant 3). A disk error
        here (a full disk, a read-only state folder) is a refusal like any other: nothing written."""
        new_digest = None if plan.new_data is None else content_hash(plan.new_data)
        first_line, last_line = _changed_lines(plan)
        try:
            pending = self.disk.history.begin(
                held,
                rp.key,
                before=cur.data if cur.exists else None,
                before_digest=cur.digest,
                after=plan.new_data,
                after_digest=new_digest,
                session=req.session,
                operation=req.operation,
                size_before=len(cur.data),
                size_after=len(plan.new_data or b""),
                first_line=first_line,
                last_line=last_line,
                reverts=req.reverts,
                head=head,
            )
        except OSError as exc:
            raise fsio.os_error(exc, rp) from exc
        return _Written(cur, plan, pending.version, pending.time, new_digest, None, (first_line, last_line), pending)

    def _replace(self, rp: fsio.ResolvedPath, dfd: int, held: HeldLock, written: _Written) -> os.stat_result | None:
        """Temp file, then rename over the file (or remove it); on failure the history entry is taken back,
        on success it is marked applied."""
        plan, cur = written.plan, written.cur
        if cur.exists:
            assert cur.st is not None
            mode = cur.st.st_mode & 0o7777
            owner = (cur.st.st_uid, cur.st.st_gid) if self._as_root else None
        else:
            mode, owner = 0o666 & ~_UMASK, None
        assert written.pending is not None
        try:
            if plan.new_data is None:
                fsio.remove_at(dfd, rp, self.disk.fsync)
                new_st = None
            else:
                old: list[str] = []
                new_st = fsio.atomic_replace(
                    dfd,
                    rp,
                    plan.new_data,
                    mode,
                    self.disk.fsync,
                    tmp_dfd=self.disk.tmp_dfd,
                    owner=owner,
                    old_names=old,
                    spare=self.disk.spares.take(),  # made after an earlier write, outside the lock (spares.py)
                    spare_owner=self.disk.spares.owner,
                )
                written.old_temp = old[0] if old else None  # removed after the lock (`Recorder.tidy`)
        except BaseException:
            self.disk.history.abort(held, written.pending)
            raise
        try:  # after the rename: a failure here must not turn the write into an error (invariant 3)
            self.disk.history.commit(held, written.pending)
        except Exception:  # the next write's begin confirms the entry against the file's bytes
            log.exception("marking version %s of %s applied failed", written.version, rp.key)
        return new_st

    def _decorate_refusal(
        self, exc: CoordinatorError, key: str, recorded: ReadState | None, session: str
    ) -> CoordinatorError:
        """Say who changed the file in a `stale` refusal, and that the coordination state was reset in a
        `not_read` after lost state (after the lock: these lookups may do I/O)."""
        if exc.code == ErrorCode.NOT_READ:
            try:
                note = reset_note(self.access.store.epoch())
            except CoordinatorError:
                note = ""
            if note:
                exc.message += note
                exc.details["state_reset"] = True
        if exc.code == ErrorCode.STALE:
            if "changes" in exc.details and recorded is not None:  # a refused rebase: name who changed it
                exc.message += self.intervening.detail(key, recorded, session, exc)
            else:
                exc.message += self.stale_detail(key, session)
        return exc

    def stale_detail(self, key: str, refused: str | None = None) -> str:
        """Who changed the file since: the newest version's writer, or "outside the coordinator" when the
        file is not what that version left. After an outside change the writer is named only when it is not
        the refused session `refused` (naming the session itself would send its model looking for a session
        that does not exist)."""
        try:
            meta = self.access.store.meta(key)
        except CoordinatorError:
            return ""
        if not meta.get("version"):
            return ""
        version, writer = meta["version"], meta.get("writer", "?")
        if writer == OUTSIDE_WRITER:  # the tree watcher recorded the change: said as before it was recorded
            before = next((e for e in self.disk.history.entries(key) if e.session != OUTSIDE_WRITER), None)
            if before is None:
                return ""  # as when no version is recorded
            by = "" if before.session == refused else f" (written by session {before.session})"
            return f" It was changed outside the coordinator after version {before.version}{by}."
        if self._changed_outside(key, meta.get("hash", "")):
            # The newest version's writer is often the refused session itself: naming it would mislead.
            by = "" if writer == refused else f" (written by session {writer})"
            return f" It was changed outside the coordinator after version {version}{by}."
        return f" Now version {version}, last written by session {writer}."

    def _changed_outside(self, key: str, recorded_hash: str) -> bool:
        """Whether the file on disk is not what the newest recorded write left (its hash; "" for removed)."""
        try:
            with open(os.path.join(self.disk.root, key), "rb") as f:
                return content_hash(f.read()) != recorded_hash
        except FileNotFoundError:
            return recorded_hash != ""
        except OSError:
            return False  # unreadable now: say nothing rather than guess
