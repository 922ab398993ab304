"""What the engine tells an observer about its work: lock waits and holds, the outcome of each write, the
change events it published. The HTTP service wires an observer to its Prometheus metrics
(server/metrics.py); the engine itself imports no metrics library.

Set one with `Coordinator.observe(observer)`; without one the engine makes no call at all. The calls are
made on the caller's thread, on the write path (a lock's release is inside the critical section's
`finally`), so an observer must be cheap and must not raise; what it is given are numbers and names from
small fixed sets, never a path or a session.
"""

from __future__ import annotations

from typing import Protocol

from coordinator.errors import CoordinatorError, ErrorCode

#: A write that landed as asked.
APPLIED = "applied"
#: A write that landed after policy "rebase" carried it over onto changes made since the session's view.
REBASED = "rebased"
#: A rebase that was tried and refused (the edit overlaps or touches a change made since): `stale` with
#: the changed lines. A plain `stale` is a view out of date with no rebase tried (policy "strict").
CONFLICT = "conflict"


class EngineObserver(Protocol):
    """Told about the engine's work; see the module docstring for the rules."""

    def lock_released(self, wait_s: float, hold_s: float) -> None:
        """A path lock was released: how long its acquisition waited and how long it was held (seconds)."""

    def write_finished(self, operation: str, outcome: str) -> None:
        """A write, edit, multi_edit, undo, redo or restore ended: `outcome` is APPLIED, REBASED, CONFLICT
        or the refusal's error code."""

    def event_published(self) -> None:
        """A change event went out with a write's record."""


def refusal_outcome(exc: CoordinatorError) -> str:
    """The outcome of a refused write: CONFLICT for a refused rebase, else the error code."""
    if exc.code == ErrorCode.STALE and "changes" in exc.details:
        return CONFLICT
    return exc.code.value
