"""The check-then-write (see the package docstring)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from .. import fsio, rebase, semantics
from ..errors import CoordinatorError, ErrorCode
from ..history import content_hash
from ..state import KIND_WRITE, ReadState
from ..textio import decode_bytes, encode_text
from .intervening import _Intervening, _InterveningSteps
from .leasing import _LeaseSteps
from .options import Policy
from .plan import _CachedViewRefused, _changed_lines, _check_view, _Current, _Missing, _Plan
from .results import WriteResult

# A path whose view was found out of date this recently is "contended": a rebase there is tried before
# taking the lock (see Coordinator._early_rebase).
_CONTENDED_S = 2.0

_UMASK = os.umask(0o022)
os.umask(_UMASK)


class _WriteSteps(_LeaseSteps, _InterveningSteps):
    """Coordinator methods: the check-then-write and its rebase."""

    # -- the check-then-write -----------------------------------------------------------------------------
    def check_then_write(
        self,
        session: str,
        path: str,
        operation: str,
        transform: Callable[[_Current], _Plan],
        *,
        may_create: bool,
        policy: Policy = "strict",
        specs: Sequence[semantics.EditSpec] | None = None,
    ) -> WriteResult:
        """See `_check_then_write`. A refusal made against this process's cached view of the session is
        checked once more against Redis (another process of the same session may have read or written).

        policy "rebase" with `specs` (the edits of an edit / multi_edit): a file that changed since the
        session's view is not refused outright; the edits are carried over if they can be (rebase.py).
        """
        rebase_specs = specs if policy == "rebase" and specs else None
        try:
            try:
                return self._check_then_write(session, path, operation, transform, may_create, True, rebase_specs)
            except _CachedViewRefused as cv:
                if cv.refusal is not None:
                    key = cv.key
                    fresh = self._state_call(lambda: self.state.get(session, key))
                    if fresh is not None and fresh.hash == cv.cached.hash:
                        raise self._decorate_refusal(cv.refusal, key, fresh, session) from None
            return self._check_then_write(session, path, operation, transform, may_create, False, rebase_specs)
        except CoordinatorError as exc:
            self._refusals.add(exc.code.value)
            raise

    def _check_then_write(
        self,
        session: str,
        path: str,
        operation: str,
        transform: Callable[[_Current], _Plan],
        may_create: bool,
        use_cache: bool,
        rebase_specs: Sequence[semantics.EditSpec] | None = None,
    ) -> WriteResult:
        """Run `transform` on the file as it is on disk, under its lock, and write the result atomically.

        `transform` is pure with respect to the outside world: it sees the current bytes and returns the new
        ones, or raises CoordinatorError (then nothing is written). The view check (not_read / stale) is
        made here, against the bytes read under the lock, before `transform` runs; with `rebase_specs`, a
        failed view check becomes an attempt to rebase them instead (still under the lock, local data only).
        """
        rp = fsio.resolve(self.root, path)
        # 1. Outside the lock: S's read state and the leases, in at most one round trip (see `_pre_lock`).
        recorded, use_cache, leased = self._pre_lock(session, rp, use_cache)
        try:
            dfd = fsio.open_parent(rp, self.root, create=may_create)
        except CoordinatorError as exc:
            if exc.code == ErrorCode.FILE_NOT_FOUND and not may_create:  # (with create: a file in the way)
                raise self._missing(rp) from None
            raise
        try:
            early: tuple[str, _Plan] | None = None
            if rebase_specs is not None and recorded is not None and self._is_contended(rp.key):
                early = self._early_rebase(dfd, rp, recorded, rebase_specs, use_cache)
            # 2. The lock.
            held = self.locks.acquire(rp.key)
            try:
                # 3. Local disk work only: no network I/O while the lock is held.
                found = fsio.read_at(dfd, rp, self.max_file_bytes)
                plan: _Plan | None = None
                if found is None:
                    cur = _Current(exists=False)
                else:
                    data, st = found
                    fsio.check_writable(dfd, rp, st)  # the OS's own rule, before any other refusal
                    cur = _Current(exists=True, data=data, st=st, digest=content_hash(data))
                # A newest entry whose replace never happened is taken back before anything reads it.
                self.history_store.reconcile(held, rp.key, cur.digest)
                if found is not None:
                    if recorded is not None and recorded.hash != cur.digest:
                        if len(self._contended) > 100_000:
                            self._contended.clear()
                        self._contended[rp.key] = time.monotonic()
                    if early is not None and early[0] == cur.digest:
                        plan = early[1]  # carried over outside the lock onto these very bytes
                    elif recorded is not None and recorded.hash != cur.digest and rebase_specs is not None:
                        plan = self._rebase_plan(recorded, cur, rebase_specs, rp, use_cache)
                    elif use_cache and recorded.hash != cur.digest:
                        try:
                            _check_view(recorded, cur, rp)
                        except CoordinatorError as exc:
                            raise _CachedViewRefused(rp.key, recorded, exc) from None
                    else:
                        _check_view(recorded, cur, rp)
                if not cur.exists and not may_create:
                    raise _Missing
                if plan is None:
                    plan = transform(cur)
                if plan.new_data is not None and len(plan.new_data) > self.max_file_bytes:
                    raise CoordinatorError(
                        ErrorCode.TOO_LARGE,
                        f"The result would be {len(plan.new_data)} bytes, over the limit of "
                        f"{self.max_file_bytes}; nothing was written.",
                    )
                if leased.own is not None:
                    # Fencing: refused if the lease ran out while we waited, or a later lease wrote here.
                    try:
                        self.lease_store.enforce_fence(rp.key, leased.own)
                    except CoordinatorError:
                        self._forget_grant(session, leased.own.id)
                        raise
                # History first (pre-image, version, index entry): every write stays undoable. A disk error
                # here (a full disk, a read-only state folder) is a refusal like any other: nothing written.
                try:
                    if cur.exists:
                        assert cur.digest is not None and cur.st is not None
                        mode = cur.st.st_mode & 0o7777
                        owner = (cur.st.st_uid, cur.st.st_gid) if os.geteuid() == 0 else None
                    else:
                        mode = 0o666 & ~_UMASK
                        owner = None
                    new_digest = None if plan.new_data is None else content_hash(plan.new_data)
                    first_line, last_line = _changed_lines(plan)
                    # The pre-image (the bytes read under this lock), the new content and the index entry go
                    # in before the file is replaced, so that even a crash right after the rename leaves the
                    # write undoable; if the replace fails, the entry is taken back (history.py, invariant 3).
                    pending = self.history_store.begin(
                        held,
                        rp.key,
                        before=cur.data if cur.exists else None,
                        before_digest=cur.digest,
                        after=plan.new_data,
                        after_digest=new_digest,
                        session=session,
                        operation=operation,
                        size_before=len(cur.data),
                        size_after=len(plan.new_data or b""),
                        first_line=first_line,
                        last_line=last_line,
                    )
                except OSError as exc:
                    raise fsio.os_error(exc, rp) from exc
                try:
                    if plan.new_data is None:
                        fsio.remove_at(dfd, rp, self.fsync)
                        new_st = None
                    else:
                        new_st = fsio.atomic_replace(
                            dfd, rp, plan.new_data, mode, self.fsync, tmp_dfd=self._tmp_dfd, owner=owner
                        )
                except BaseException:
                    self.history_store.abort(held, pending)
                    raise
                self.history_store.commit(held, pending)
                entry = pending.entry
            finally:
                hold = held.release()
        except _Missing:
            raise self._missing(rp) from None
        except CoordinatorError as exc:
            raise self._decorate_refusal(exc, rp.key, recorded, session) from None
        finally:
            os.close(dfd)
        # 4. After the lock: S's new read state, P's version and content hash, the change event, and any
        # notices, in one round trip.
        warnings: list[str] = []
        now = time.time()
        view_digest = new_digest
        if plan.rebased is not None and plan.view_data is not None:
            # S's view after a rebased edit never was on disk: it lives in this process's text cache (from
            # another process, or once evicted, S's next edit of P is refused as stale: the safe side).
            view_digest = content_hash(plan.view_data)
            self._texts.put(view_digest, plan.rebased.view)
        elif rebase_specs is not None and new_digest is not None and plan.new_text is not None:
            self._texts.put(new_digest, plan.new_text)
        extra, finish = self._post_write_extra(
            session,
            rp.key,
            entry.version,
            operation,
            [(first_line, last_line)] if new_digest else [],
            now,
            new_digest,
            plan.rebased is not None,
        )
        notice = ""
        try:
            if new_digest is not None and new_st is not None:
                assert view_digest is not None
                if plan.rebased is not None and recorded is not None:
                    # S's view: what it saw plus its own edit. Its time stays that of S's last full view, so
                    # the writes S has not seen are still found as "since then" next time.
                    rs = ReadState(
                        view_digest, new_st.st_mtime_ns, len(plan.view_data or b""), 0, 0, recorded.time, KIND_WRITE
                    )
                else:
                    rs = ReadState(new_digest, new_st.st_mtime_ns, new_st.st_size, 0, 0, now, KIND_WRITE)
                replies = self._state_call(
                    lambda: self.state.record_write(
                        session, rp.key, rs, entry.version, operation, digest=new_digest, extra=extra
                    )
                )
                self._views.put(session, rp.key, rs)
            else:
                self._views.drop(session, rp.key)
                replies = self._state_call(
                    lambda: self.state.record_removal(session, rp.key, entry.version, operation, extra)
                )
            notice = finish(replies)
        except CoordinatorError:
            warnings.append(
                "The change was written, but the coordination state could not be updated; read the file "
                "again before your next edit of it."
            )
        if self.tracker is not None:
            self.tracker.saw(session, rp.key, view_digest)
        snippet = ""
        if plan.new_text is not None and operation != "write":
            snippet = semantics.render_snippet_at(plan.new_text, plan.first_offset, plan.inserted_len, first_line)
        changed_lines: tuple[tuple[int, int], ...] = ()
        seen: _Intervening | None = None
        if plan.rebased is not None and recorded is not None:
            changed_lines = tuple((c.first, c.last) for c in plan.rebased.changes if c.last >= c.first)
            seen = self._intervening(rp.key, recorded, session, before_version=entry.version)
        return WriteResult(
            path=rp.key,
            operation=operation,
            created=not cur.exists,
            version=entry.version,
            hash=new_digest,
            message="",
            replacements=plan.replacements,
            start_line=first_line,
            snippet=snippet,
            timings={"lock_wait_s": held.wait_s, "lock_hold_s": hold},
            warnings=tuple(warnings),
            rebased=plan.rebased is not None,
            changed_lines=changed_lines,
            intervening=seen.recent if seen is not None else (),
            intervening_writes=seen.count if seen is not None else 0,
            intervening_sessions=seen.sessions if seen is not None else (),
            notice=notice,
            lease_token=leased.own.token if leased.own is not None else None,
        )

    def _is_contended(self, key: str) -> bool:
        """Has a view of this path been out of date lately (in this process)?"""
        seen = self._contended.get(key)
        return seen is not None and time.monotonic() - seen < _CONTENDED_S

    def _early_rebase(
        self,
        dfd: int,
        rp: fsio.ResolvedPath,
        recorded: ReadState,
        specs: Sequence[semantics.EditSpec],
        use_cache: bool,
    ) -> tuple[str, _Plan] | None:
        """On a contended path, try the rebase before taking the lock, on the file as it is now.

        A refusal is final (nothing is written, and the bytes it was judged on are a real version of the
        file: writes replace it atomically), so a doomed edit never holds up the lock. A success is kept
        with the hash it was computed on; under the lock it is used only if the file still has that hash.
        """
        found = fsio.read_at(dfd, rp, self.max_file_bytes)
        if found is None:
            return None
        data, st = found
        cur = _Current(exists=True, data=data, st=st, digest=content_hash(data))
        if cur.digest == recorded.hash:
            return None
        plan = self._rebase_plan(recorded, cur, specs, rp, use_cache)
        assert cur.digest is not None
        return cur.digest, plan

    def _rebase_plan(
        self,
        recorded: ReadState,
        cur: _Current,
        specs: Sequence[semantics.EditSpec],
        rp: fsio.ResolvedPath,
        use_cache: bool,
    ) -> _Plan:
        """Under the lock: carry `specs` from S's view (`recorded`) over onto the current file, or raise.

        Local disk and CPU only: the view's content comes from the history's object store. A view whose
        content is gone (retention, or an outside change right after S's own write) gets the strict
        answer. With a cached view, any refusal is first checked against Redis (`_CachedViewRefused`).
        """
        try:
            base_text = self._texts.get(recorded.hash)
            if base_text is None:
                base_text = decode_bytes(self.history_store.load(recorded.hash, rp.key)).text
            current = cur.decoded()
        except CoordinatorError:
            try:
                _check_view(recorded, cur, rp)  # the strict answer
            except CoordinatorError as strict:
                if use_cache:
                    raise _CachedViewRefused(rp.key, recorded, strict) from None
                raise strict from None
            raise
        try:
            rb = rebase.rebase_edits(base_text, current.text, specs, name=rp.shown)
        except CoordinatorError as exc:
            exc.details["path"] = rp.key
            if use_cache:
                raise _CachedViewRefused(rp.key, recorded, exc) from None
            raise
        out = rb.outcome
        return _Plan(
            new_data=encode_text(out.text, current.encoding),
            new_text=out.text,
            replacements=out.replacements,
            first_offset=out.first_offset,
            inserted_len=out.inserted_len,
            rebased=rb,
            view_data=encode_text(rb.view, current.encoding),
        )

    def _decorate_refusal(
        self, exc: CoordinatorError, key: str, recorded: ReadState | None, session: str
    ) -> CoordinatorError:
        """Say who changed the file in a `stale` refusal (after the lock: these lookups may do I/O)."""
        if exc.code == ErrorCode.STALE:
            if "changes" in exc.details and recorded is not None:  # a refused rebase: name who changed it
                exc.message += self._intervening_detail(key, recorded, session, exc)
            else:
                exc.message += self._stale_detail(key)
        return exc

    def _stale_detail(self, key: str) -> str:
        try:
            meta = self.state.meta(key)
        except CoordinatorError:
            return ""
        if not meta.get("version"):
            return ""
        return f" Now version {meta['version']}, last written by session {meta.get('writer', '?')}."
