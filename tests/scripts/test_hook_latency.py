"""scripts/hook_latency.py: every column runs guarded edits for real (each file holds them), and the
figures are per event and per tool call, with the added latency over the no-op hook of the same type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts import load_tool, run_tool

hook_latency = load_tool("hook_latency")


def test_summary_per_event_per_call_and_added_over_the_noop() -> None:
    timings = {
        "http-noop": [[0.001, 0.001, 0.001]] * 4,
        "http-hook": [[0.002, 0.004, 0.003]] * 4,
        "command-noop": [[0.05, 0.05, 0.05]],
        "command-hook": [[0.07, 0.08, 0.09]],
    }
    out = hook_latency.summarize(timings)
    assert out["http-hook"]["events"] == 12
    assert out["http-hook"]["event_p50_ms"] == pytest.approx(3.0)
    assert out["http-hook"]["call_p50_ms"] == pytest.approx(9.0)
    assert out["http-hook"]["added_event_p50_ms"] == pytest.approx(2.0)
    assert out["command-hook"]["added_event_p50_ms"] == pytest.approx(30.0)
    assert "added_event_p50_ms" not in out["http-noop"]


@pytest.mark.slow  # a serve, a no-op server and a process per command-hook event: ~30 s on 2 cores
def test_every_column_runs_its_guarded_edits(tmp_path: Path) -> None:
    figures = tmp_path / "hooks.json"
    out = run_tool("hook_latency.py", "--cycles", "3", "--command-cycles", "1", "--rounds", "1", "--json", str(figures))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "every guarded edit is in its file" in out.stdout
    data = json.loads(figures.read_text())
    assert set(data) == set(hook_latency.COLUMNS)
    assert (
        data["http-hook"]["events"] == 9
        and data["command-hook"]["events"] == 3
        and data["command-service"]["events"] == 3
    )
