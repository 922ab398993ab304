"""scripts/http_parse_cost.py: both sides parse the same answer (each asserts the body it got) and the
difference is printed."""

from __future__ import annotations

import re

from tests.scripts import run_tool


def test_both_parsers_read_the_answer_and_the_difference_is_reported() -> None:
    out = run_tool("http_parse_cost.py", "--calls", "50", "--rounds", "2")
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    costs = dict(re.findall(r"^(ours|h11)\s+([\d.]+) us CPU per call", out.stdout, re.M))
    assert set(costs) == {"ours", "h11"} and all(float(v) > 0 for v in costs.values()), out.stdout
    assert re.search(r"h11 costs -?[\d.]+ us more per call \([\d.]+x\)", out.stdout), out.stdout
