"""coordinator.clock: a write's time and its text (read back as exactly that time), made once for the last time."""

from __future__ import annotations

import time

import fakeredis
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import Coordinator, clock


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=False) | st.integers(), min_size=1, max_size=6))
def test_time_text_is_repr_whatever_was_asked_before(values: list[float]) -> None:
    for v in values:
        assert clock.time_text(v) == repr(v)
        assert clock.time_text(v) == repr(v)  # the kept one


def test_the_kept_text_is_given_again_for_the_same_time() -> None:
    t = time.time()
    first = clock.time_text(t)
    assert clock.time_text(t) is first
    assert clock.time_text(t + 1.0) == repr(t + 1.0)


def test_a_writes_view_event_and_history_entry_carry_one_time(tmp_path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.txt").write_text("x = 1\n")
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none") as coord:
        s = coord.session("s")
        s.read("a.txt")
        s.edit("a.txt", "x = 1", "x = 2")
        entry = coord.history_store.entries("a.txt")[-1]
        view = coord.state.get("s", "a.txt")
        event = coord.recent_events(5)[-1]
        assert view is not None and view.time == entry.time == event.time


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=0, max_value=4_102_444_800 * 10**9))
def test_a_time_now_makes_reads_back_from_its_text_as_exactly_that_float(ns: int) -> None:
    """`now()`'s text is the decimal of its nanoseconds, and float() of it is exactly the time returned (both
    are ns / 10**9 correctly rounded); the same float `time.time()` would be for those nanoseconds."""
    import pytest

    mp = pytest.MonkeyPatch()
    mp.setattr(clock, "_time_ns", lambda: ns)
    try:
        t = clock.now()
    finally:
        mp.undo()
    text = clock.time_text(t)
    assert text == f"{ns // 10**9}.{ns % 10**9:09d}"
    assert float(text) == t == ns / 10**9
    assert clock.time_text(t + 0.0 if t else 1.0) in (repr(t), repr(1.0))  # another object: its repr


def test_the_time_now_gives_is_the_clock_s() -> None:
    before = time.time()
    t = clock.now()
    assert before <= t <= time.time() and float(clock.time_text(t)) == t
