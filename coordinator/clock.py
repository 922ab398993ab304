"""A write's time and its text (as the history's index line, the view record and the change event hold
it), the text made once for all three.

`now()` gives a write's time: `time.time_ns()` as seconds, the float nearest to ns / 10**9 (what
`time.time()` gives too), with its text made from the integer, `{seconds}.{nanoseconds:09d}`. That text
reads back (`float`) as exactly the float returned, since both are the correctly rounded value of the
same decimal; `repr(float)`'s search for the shortest such text costs about 6,000 instructions, the
integer's text about a tenth of that. The text of the last time made or asked for is kept and given
again (`time_text`): a write's time is written three times (the engine gives the history entry's time to
the view and the event, engine/record.py).

Invariant: `float(time_text(t)) == t`, exactly, for every float t: the text is `repr(t)`, or, for the time
`now()` made last, its decimal text. The memo is keyed by the float object itself (the same object is
handed from the entry to the record and the event; by value, 0.0 would be given -0.0's text), and threads
may race on it: any entry one of them leaves is a true pair.
"""

from __future__ import annotations

import time

_last: list[tuple[float, str]] = [(-1.0, repr(-1.0))]
_time_ns = time.time_ns
_NS = 1_000_000_000


def now() -> float:
    """The time now, in seconds since the epoch (as `time.time()`), with its text kept (module docstring)."""
    ns = _time_ns()
    t = ns / _NS  # int / int: correctly rounded, as float() rounds the text below
    s, frac = divmod(ns, _NS)
    _last[0] = (t, f"{s}.{frac:09d}")
    return t


def time_text(t: float) -> str:
    """A text that reads back as exactly `t`: the kept one for the last float object made or asked for,
    else `repr(t)` (kept)."""
    if type(t) is not float:
        return repr(t)
    last = _last[0]
    if last[0] is t:
        return last[1]
    text = repr(t)
    _last[0] = (t, text)
    return text
