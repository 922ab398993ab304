"""The asyncio scenario's collector accounting (coordinator_bench/asyncrun.py `_GcPasses`): a stall is
"outside GC" only when no timed collector pass overlapped the tick that was late."""

from __future__ import annotations

from coordinator_bench.asyncrun import TICK_S, _GcPasses


def _passes(*spans: tuple[float, int, float]) -> _GcPasses:
    p = _GcPasses()
    p.passes = list(spans)  # (end, generation, duration)
    return p


def test_a_stall_overlapped_by_a_full_pass_is_not_outside_even_behind_later_short_passes() -> None:
    # A 17 ms full pass, then several short young passes inside the same late tick.
    p = _passes((10.000, 2, 0.017), *((10.0005 + i * 0.0004, 0, 0.0002) for i in range(6)))
    figures = p.figures([(10.003, 0.020), (20.0, 0.004)])
    assert figures["loop_gc_passes"] == [6, 0, 1]
    assert round(figures["loop_gc_max_ms"], 3) == 17.0
    assert round(figures["loop_stall_outside_gc_ms"], 3) == 4.0  # only the tick at 20 s, which no pass overlaps


def test_a_pass_ending_just_after_the_tick_woke_still_counts() -> None:
    # The stop callback may run just after the woken loop thread took the GIL: the end follows t1 slightly.
    p = _passes((10.00005, 2, 0.014))
    assert p.figures([(10.0, 0.014 - TICK_S)])["loop_stall_outside_gc_ms"] == 0.0
    assert p.figures([(12.0, 0.009)])["loop_stall_outside_gc_ms"] > 8.9
