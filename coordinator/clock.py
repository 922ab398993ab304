"""The text of a write's time (its `repr`, as the history's index line, the view record and the change
event hold it), made once for all three.

`repr(float)` finds the shortest text that reads back as the same float, which costs about 6,000
instructions, and a write's time is written three times: the engine gives the history entry's time to the
view and the event (engine/record.py), so the last time's text is kept and given again. Invariant: the
answer is always exactly `repr(t)`; the memo is keyed by the float object itself (the same object is handed
from the entry to the record and the event; by value, 0.0 would be given -0.0's text), and threads may
race on it: any entry one of them leaves is a true pair.
"""

from __future__ import annotations

_last: list[tuple[float, str]] = [(-1.0, repr(-1.0))]


def time_text(t: float) -> str:
    """`repr(t)`, kept for the last float object asked for."""
    if type(t) is not float:
        return repr(t)
    last = _last[0]
    if last[0] is t:
        return last[1]
    text = repr(t)
    _last[0] = (t, text)
    return text
