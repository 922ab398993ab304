"""What one call of the check-then-write carries from step to step (write.py, record.py): the
request as asked (`CheckedWrite`, public: what `Coordinator.check_then_write` takes), what step 1 found
out, what step 3 did; and the lock's release."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.disk import fsio
from coordinator.disk.locks import HeldLock
from coordinator.engine.calls import DEFAULT_OPTIONS, CallOptions
from coordinator.engine.options import Policy
from coordinator.engine.plan import CurrentFile, Edits, WritePlan
from coordinator.engine.results import WriteResult
from coordinator.history import PendingWrite
from coordinator.state.leases import LeaseCheck
from coordinator.state.views import ReadState

Transform = Callable[[CurrentFile], WritePlan]


def _release(held: HeldLock) -> float:
    """Release the lock; closing its descriptor cannot fail in a way that un-does a write."""
    try:
        return held.release()
    except OSError:
        return 0.0


def _same(result: WriteResult) -> WriteResult:
    return result


@dataclass(slots=True)
class CheckedWrite:
    """One call of the check-then-write, as asked: the one value every step reads, fixed for the whole call
    (a resumed one included, see LockBusy).

    session, path: who writes what. operation: recorded in history and events ("write", "edit",
        "multi_edit", "undo", ...).
    change: the transform `CurrentFile -> WritePlan` (plan.py), pure with respect to the outside world: it
        sees the current bytes and returns the new ones, or raises CoordinatorError (then nothing is
        written). The view check (not_read / stale) is made before it runs, against the bytes read under
        the lock. An `Edits` is such a transform and is also what a rebase carries over.
    may_create: whether a missing file may be created (else file_not_found, with a "Did you mean").
    policy: "rebase" with an `Edits` change: a file that changed since the session's view is not refused
        outright; the edits are carried over if they can be (rebasing.py). Any other change is judged
        strictly.
    finish: turns the engine's result into the one returned (a Session sets its message here).
    options: how the caller shapes the call (calls.py: a busy lock raising LockBusy).
    reverts: an undo or redo, the version whose change it reverts (kept in the history entry).

    Not frozen (a frozen dataclass's instance costs about twice the instructions to make); nothing assigns
    to it after it is made."""

    session: str
    path: str
    operation: str
    change: Transform
    may_create: bool = False
    policy: Policy = "strict"
    finish: Callable[[WriteResult], WriteResult] = _same
    options: CallOptions = DEFAULT_OPTIONS
    reverts: int | None = None

    def rebase_edits(self) -> Edits | None:
        """The edits a rebase carries over: the change, when it is an `Edits` under policy "rebase"."""
        change = self.change
        return change if self.policy == "rebase" and type(change) is Edits else None


@dataclass(slots=True)
class _PreLock:
    """What step 1 found out: where the file is, the session's view of it, what the leases say. Like
    `CheckedWrite`, made with slots and never assigned to."""

    rp: fsio.ResolvedPath
    recorded: ReadState | None
    use_cache: bool  # `recorded` came from this process's cache (a refusal is checked again in Redis)
    leased: LeaseCheck
    passed: frozenset[bytes] = frozenset()  # write-ticket marks Redis was asked about: no such lease lives


@dataclass(slots=True)
class _Written:
    """What step 3 did: the file as found, the plan, its history entry's version and time (the entry itself
    is `pending.entry`, made only when asked) and the new file's stat."""

    cur: CurrentFile
    plan: WritePlan
    version: int
    time: float
    new_digest: str | None
    new_st: os.stat_result | None
    lines: tuple[int, int]
    pending: PendingWrite | None = None
    wait_s: float = 0.0
    hold_s: float = 0.0
    old_temp: str | None = None  # the replaced content's temporary in the state folder, removed after the lock
    tidied: bool = False  # `Recorder.tidy` has run
