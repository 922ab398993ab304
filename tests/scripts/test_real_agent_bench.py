"""scripts/real_agent_bench.py: the no-op settings keep every event and matcher, a tool call's time is taken
between the model requests around it, and the cost per hook event is the difference of the columns over the
two events of an Edit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts import load_tool
from worker.agents.modelserver import ModelServer, Recorded, Say, Use

bench = load_tool("real_agent_bench")


def test_noop_settings_keep_events_and_matchers_and_run_true(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    hooks = {
        "PreToolUse": [
            {"matcher": "^(Edit)$", "hooks": [{"type": "command", "command": "/x/hookclient.py", "timeout": 60}]}
        ],
        "Stop": [
            {"hooks": [{"type": "command", "command": "/x/hookclient.py --fail-open"}, {"type": "http", "url": "u"}]}
        ],
    }
    settings.write_text(json.dumps({"hooks": hooks, "permissions": {"deny": ["NotebookEdit"]}}))
    bench.noop_settings(settings)
    data = json.loads(settings.read_text())
    assert data["permissions"] == {"deny": ["NotebookEdit"]}
    assert data["hooks"]["PreToolUse"] == [
        {"matcher": "^(Edit)$", "hooks": [{"type": "command", "command": "true", "timeout": 60}]}
    ]
    true = {"type": "command", "command": "true"}  # an http handler too: a no-op hook is a process that does nothing
    assert data["hooks"]["Stop"][0]["hooks"] == [true, true]


def test_edit_times_are_between_the_request_asking_and_the_one_answering() -> None:
    server = ModelServer(lambda conv: Say("x"))
    steps = [Use("Read", {}), Use("Edit", {}), Use("Edit", {}), Say("done")]
    server.requests.extend(
        Recorded("POST", "/v1/messages", {}, True, step, at)
        for step, at in zip(steps, (1.0, 1.5, 1.75, 2.5), strict=True)
    )
    server.requests.insert(2, Recorded("POST", "/v1/messages", {}, False, Say("ok"), 1.6))  # a side request
    run = bench.AgentRun("claude-code", 0, "", "", server, [])
    assert bench.edit_times(run) == pytest.approx([0.25, 0.75])


def test_summary_per_event_over_the_noop() -> None:
    out = bench.summarize({"noop": [0.1] * 19 + [0.3], "hooked": [0.2] * 19 + [0.5]})
    assert out["noop"]["calls"] == 20 and out["hooked"]["p50_ms"] == pytest.approx(200.0)
    assert out["added_per_event_p50_ms"] == pytest.approx(50.0)
    assert out["added_per_event_p95_ms"] == pytest.approx((out["hooked"]["p95_ms"] - out["noop"]["p95_ms"]) / 2)
