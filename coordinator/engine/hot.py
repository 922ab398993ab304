"""The check-then-write's hot path: the common call, as one short sequence of the engine's own steps.

Most writes are the common case: a file that exists, written by a session whose view of it this process
recorded (its last read or write of it was made here) and is still current, on a path whose views have
not gone out of date in this process lately (`_is_contended`), with no lease anywhere (the
lease snapshot is fresh and empty, and this process granted the session none), a lock that is free when
the caller asked not to wait for it, and `state_check="cached"`. `hot_write` runs such a call through the
same steps as the general path (write.py), without the general path's layers for what the common case
does not have: the cached-view retry, the early rebase, LockBusy, the lease decision and the fence, the
refusal of a missing file. Call options are the general path's too: a busy lock under
`wait_for_lock=False` is handed over (the general path raises LockBusy, whose resume waits), and a
post-write hook rides the record as on the general path (`_after_lock`). The HTTP service makes every
call with both options (it runs calls inline on its event loop), so it takes this path as well.

One owner per decision: the hot path makes none of its own. Every rule is applied by the function the
general path calls for it (`fsio.resolve` and `fsio.open_parent` for confinement, `_read_current` for the
read under the lock, `_view_refusal` for the staleness rule, the caller's transform for the change,
`_write_planned` for the size limit, history and the replace, `_after_lock` for the record and the
result). Where the common case does not hold, it hands the call over before anything is written:
`hot_write` returns None, and the general path runs the call from the start (reading the file again
under the lock, where it gives the refusal, the rebase or the creation). What the hot path finds out
before that is not kept: a view that is not current costs one more read of the file, never a wrong
answer; and since a contended path is left to the general path from the start, the lock is taken twice
only for the first stale view of a while. tests/coordinator/engine/test_hot.py pins that both paths give
the same results and refusals.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from coordinator.disk import fsio
from coordinator.engine.plan import _view_refusal
from coordinator.engine.results import WriteResult
from coordinator.engine.steps import _PreLock, _release, _Request, _Written
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.leases import LeaseCheck
from coordinator.state.views import ReadState

if TYPE_CHECKING:
    from coordinator.engine.write import _WriteSteps

_NO_LEASE = LeaseCheck(None, None)


def hot_write(eng: _WriteSteps, req: _Request) -> WriteResult | None:
    """`req` through the hot path (module docstring); None when it is not the common case, with nothing
    written (the caller then runs the general path)."""
    rp = fsio.resolve(eng.root, req.path)
    recorded = eng._views.get(req.session, rp.key)
    if (
        recorded is None
        or eng._is_contended(rp.key)  # views of it go stale here lately: the general path, lock taken once
        or eng.lease_gate.fresh() != []
        or eng.lease_gate.granted_any(req.session)
    ):
        return None
    eng._state_call(eng.state.alive)  # fail closed when Redis is gone, as the general path does
    try:
        dfd = fsio.open_parent(rp, eng.root, root_fd=eng._root_fd)
    except CoordinatorError as exc:
        if exc.code == ErrorCode.FILE_NOT_FOUND:
            return None  # the general path says so, with its "Did you mean"
        raise
    try:
        written = _locked(eng, req, rp, recorded, dfd)
    except CoordinatorError as exc:
        raise eng._decorate_refusal(exc, rp.key, recorded, req.session) from None
    finally:
        with contextlib.suppress(OSError):  # after a rename, nothing may turn the write into a failure
            os.close(dfd)
    if written is None:
        return None
    return eng._after_lock(req, _PreLock(rp, recorded, True, _NO_LEASE), written)


def _locked(eng: _WriteSteps, req: _Request, rp: fsio.ResolvedPath, recorded: ReadState, dfd: int) -> _Written | None:
    """Steps 2 and 3: the lock, the file read under it, the view judged, the plan written. None (nothing
    written) when the lock is busy and the caller does not wait for it, the file is missing, the view is
    not current, or the plan removes the file."""
    held = eng.locks.acquire(rp.key) if req.options.wait_for_lock else eng.locks.try_acquire(rp.key)
    if held is None:
        return None  # the general path raises LockBusy, with what its resume needs
    try:
        cur = eng._read_current(dfd, rp, held)
        if not cur.exists or _view_refusal(recorded, cur, rp) is not None:
            return None
        plan = req.transform(cur)
        if plan.new_data is None:
            return None
        written = eng._write_planned(req, rp, dfd, held, cur, plan, None)
    finally:
        hold_s = _release(held)
    written.wait_s, written.hold_s = held.wait_s, hold_s
    return written
