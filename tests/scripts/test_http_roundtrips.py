"""scripts/http_roundtrips.py: every edit's record reaches Redis, so the count sees at least one round trip
per edit, whichever way the engine sends it (redis-py's connection or the engine's own lane), and one more
with an idempotency key (its claim)."""

from __future__ import annotations

import re

from tests.scripts import run_tool


def _round_trips(*args: str) -> float:
    out = run_tool("http_roundtrips.py", *args)
    assert out.returncode == 0, out.stderr[-2000:]
    found = re.search(r"([\d.]+) round trips and ([\d.]+) commands per edit", out.stdout)
    assert found is not None, out.stdout
    return float(found.group(1))


def test_each_edit_is_counted_with_its_round_trips() -> None:
    plain = _round_trips("20", "nokeys")
    keyed = _round_trips("20", "keys")
    assert plain >= 1.0  # the edit's record, sent on the engine's lane
    assert keyed >= plain + 1.0  # the key's claim before the write
