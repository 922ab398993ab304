"""coordinator_bench/hookcycle.py: a cycle sends Claude Code's three events of one Edit with the file's
path and strings put in, makes the edit itself, stops at a refusal, and its figures are per event and per
call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator_bench import hookcycle


def test_a_cycle_sends_the_three_events_of_one_edit_and_makes_it(tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []

    def send(raw: bytes) -> dict[str, Any]:
        sent.append(json.loads(raw))
        return {}

    cycle = hookcycle.Cycle(tmp_path, "a.py", "s_a")
    timings: list[list[float]] = []
    cycle.run(send, timings)
    cycle.run(send, timings)
    assert [(e["hook_event_name"], e["tool_name"]) for e in sent[:3]] == [
        ("PostToolUse", "Read"),
        ("PreToolUse", "Edit"),
        ("PostToolUse", "Edit"),
    ]
    assert sent[1]["tool_input"] == {**sent[1]["tool_input"], "file_path": str(tmp_path / "a.py")}
    assert (sent[4]["tool_input"]["old_string"], sent[4]["tool_input"]["new_string"]) == ("s_a = 1", "s_a = 2")
    assert sent[3]["tool_response"]["file"]["content"] == "s_a = 1\n"  # the Read shows the file as it is
    assert len(timings) == 2 and all(len(t) == 3 for t in timings)
    cycle.check()


def test_a_refused_event_stops_the_cycle_before_the_edit(tmp_path: Path) -> None:
    cycle = hookcycle.Cycle(tmp_path, "a.py", "s_a")
    with pytest.raises(SystemExit, match="pre_edit was not allowed"):
        cycle.run(lambda raw: {"decision": "block"} if b"PreToolUse" in raw else {}, [])
    assert (tmp_path / "a.py").read_text() == "s_a = 0\n"
    with pytest.raises(SystemExit, match="does not hold its 1 edits"):
        cycle.check()


def test_the_figures_are_per_event_and_per_call() -> None:
    out = hookcycle.cycle_figures([[0.001, 0.002, 0.003]] * 4)
    assert out["events"] == 12
    assert out["event_p50_ms"] == pytest.approx(2.0) and out["call_p50_ms"] == pytest.approx(6.0)
    assert out["event_mean_ms"] == pytest.approx(2.0)
