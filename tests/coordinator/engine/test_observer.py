"""The engine's observer hook (engine/observer.py): what a Coordinator tells it about lock waits and holds,
write outcomes (applied, rebased, conflict, refusal codes) and change events, and that it is told nothing
once the observer is removed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.disk.locks import HeldLock
from coordinator.engine.observer import APPLIED, CONFLICT, REBASED


class Recorder:
    def __init__(self) -> None:
        self.locks: list[tuple[float, float]] = []
        self.writes: list[tuple[str, str]] = []
        self.events = 0

    def lock_released(self, wait_s: float, hold_s: float) -> None:
        self.locks.append((wait_s, hold_s))

    def write_finished(self, operation: str, outcome: str) -> None:
        self.writes.append((operation, outcome))

    def event_published(self) -> None:
        self.events += 1


@pytest.fixture
def observed(coord: Coordinator) -> Recorder:
    rec = Recorder()
    coord.observe(rec)
    return rec


def test_outcomes_locks_and_events_of_plain_writes(coord: Coordinator, root: Path, observed: Recorder) -> None:
    s = coord.session("a")
    s.write("f.txt", "one\ntwo\n")
    s.edit("f.txt", "one", "ONE")
    with pytest.raises(CoordinatorError) as refused:
        s.edit("f.txt", "absent", "x")
    assert refused.value.code == ErrorCode.NO_MATCH
    assert observed.writes == [("write", APPLIED), ("edit", APPLIED), ("edit", "no_match")]
    assert observed.events == 2  # one per write that landed, none for the refusal
    assert len(observed.locks) == 3  # the refused edit took the lock too (the match is made under it)
    assert all(wait >= 0 and hold > 0 for wait, hold in observed.locks)


def test_stale_rebased_and_conflict_are_told_apart(coord: Coordinator, root: Path, observed: Recorder) -> None:
    (root / "g.txt").write_text("a\nb\nc\nd\ne\nf\n")
    strict, rebasing = coord.session("s"), coord.session("r", policy="rebase")
    strict.read("g.txt")
    rebasing.read("g.txt")
    (root / "g.txt").write_text("A\nb\nc\nd\ne\nf\n")  # an outside change of line 1
    with pytest.raises(CoordinatorError) as stale:
        strict.edit("g.txt", "f", "F")
    assert stale.value.code == ErrorCode.STALE
    rebasing.edit("g.txt", "f", "F")  # far from line 1: carried over
    (root / "g.txt").write_text("A\nb\nc\nd\ne\nF!\n")  # now a change of the very line it edits next
    with pytest.raises(CoordinatorError) as conflict:
        rebasing.edit("g.txt", "F", "FF")
    assert conflict.value.code == ErrorCode.STALE
    assert observed.writes == [("edit", "stale"), ("edit", REBASED), ("edit", CONFLICT)]


def test_lock_wait_is_the_acquisitions_own(
    coord: Coordinator, observed: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit that waits for a lock held elsewhere: the observer is told exactly the wait its acquisition
    measured, an acquisition that returned only once the other holder let go."""
    s = coord.session("w")
    s.write("h.txt", "x\n")
    held = coord.locks.acquire(coord.resolve("h.txt").key)
    taken: list[tuple[HeldLock, float]] = []
    acquire = coord.locks.acquire

    def recording(key: str, timeout: float | None = -1.0) -> HeldLock:
        got = acquire(key, timeout)
        taken.append((got, time.perf_counter()))
        return got

    monkeypatch.setattr(coord.locks, "acquire", recording)
    observed.locks.clear()
    writer = threading.Thread(target=lambda: s.edit("h.txt", "x", "y"))
    writer.start()
    writer.join(0.2)
    assert writer.is_alive()  # it cannot have the lock yet
    released_at = time.perf_counter()
    held.release()
    writer.join(10)
    [(edit_lock, returned_at)] = taken
    assert returned_at > released_at
    assert edit_lock.wait_s in [wait for wait, _ in observed.locks]
    assert edit_lock.wait_s > 0


def test_no_observer_no_calls(coord: Coordinator, observed: Recorder) -> None:
    coord.observe(None)
    coord.session("q").write("k.txt", "z\n")
    assert observed.writes == [] and observed.locks == [] and observed.events == 0


def test_an_agents_own_write_is_told_like_the_engines(coord: Coordinator, root: Path, observed: Recorder) -> None:
    (root / "n.txt").write_text("one\n")
    coord.session("agent").read("n.txt")
    prepared = coord.native.prepare_write("agent", "n.txt")
    (root / "n.txt").write_text("two\n")  # the agent's own tool writes the file
    assert coord.native.record_write("agent", prepared, "edit") is not None
    assert observed.writes == [("edit", APPLIED)]
    assert observed.events == 1
    assert len(observed.locks) == 2  # the lock taken before the write (pre-image) and after it (record)
