"""The one percentile definition of the fleet, the stress command and the benchmarks.

Percentiles are the standard library's: `statistics.quantiles(data, n=1000, method="inclusive")`, the
definition of numpy's default (linear interpolation between closest ranks, p0 the minimum, p100 the
maximum). Every percentile of the project's figures comes from `percentiles` below, so that two tables never
disagree by a rank. The resolution is 0.1 percentile: asking for p99.95 is an error, not a silent rounding.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

_STEPS = 1000  # cut points per 100 percentiles: p0.1 .. p99.9


def _step(q: float) -> int:
    k = round(q * _STEPS / 100.0)
    if not 0 <= k <= _STEPS or abs(k * 100.0 / _STEPS - q) > 1e-9:
        raise ValueError(f"percentile {q!r} is not a multiple of {100 / _STEPS:g} in 0..100")
    return k


def percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float] | None:
    """The values at percentiles `qs` (each in 0..100, a multiple of 0.1) of `values`; None when empty."""
    steps = [_step(q) for q in qs]
    if not values:
        return None
    if len(values) == 1:
        return [float(values[0])] * len(steps)
    data = sorted(values)
    cuts = statistics.quantiles(data, n=_STEPS, method="inclusive")
    return [float(data[0]) if k == 0 else float(data[-1]) if k == _STEPS else cuts[k - 1] for k in steps]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The value at percentile `q` (0..100) of `values`; None when empty."""
    out = percentiles(values, [q])
    return None if out is None else out[0]
