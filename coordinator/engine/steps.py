"""What one call of the check-then-write carries from step to step (write.py, record.py): the
request as asked, what step 1 found out, what step 3 did; and the lock's release."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coordinator.disk import fsio
from coordinator.disk.locks import HeldLock
from coordinator.engine.calls import CallOptions
from coordinator.engine.plan import CurrentFile, WritePlan
from coordinator.engine.results import WriteResult
from coordinator.history import PendingWrite
from coordinator.state.leases import LeaseCheck
from coordinator.state.views import ReadState
from coordinator.text import semantics

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
class _Request:
    """One write as asked: fixed for the whole call, including a resumed one (see LockBusy). Not frozen
    (a frozen dataclass's instance costs about twice the instructions to make, and two are made per
    write); nothing assigns to it after it is made."""

    session: str
    path: str
    operation: str
    transform: Transform
    may_create: bool
    rebase_specs: Sequence[semantics.EditSpec] | None
    finish: Callable[[WriteResult], WriteResult]
    options: CallOptions
    match: str = "exact"  # the edit's matching rule, for a rebase
    reverts: int | None = None  # an undo or redo: the version whose change it reverts (in the history entry)


@dataclass(slots=True)
class _PreLock:
    """What step 1 found out: where the file is, the session's view of it, what the leases say. Like
    `_Request`, made with slots and never assigned to."""

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
