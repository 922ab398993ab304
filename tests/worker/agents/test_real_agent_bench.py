"""scripts/real_agent_bench.py hook-cost runs against the real Claude Code: every Edit of every column is
timed, and each session's edits are checked to be in the file (the script fails otherwise)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts import run_tool
from tests.worker.agents.installed import need

pytestmark = pytest.mark.agents


def test_hook_cost_times_every_edit_of_every_column(tmp_path: Path) -> None:
    need("claude-code")
    out = tmp_path / "cost.json"
    done = run_tool(
        "real_agent_bench.py", "hook-cost", "--edits", "3", "--rounds", "1", "--json", str(out), timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert [figures[col]["calls"] for col in ("noop", "noop-http", "command", "hooked")] == [3, 3, 3, 3]
    assert "over_noop_http_p50_ms" in figures
    assert "added_per_event_p50_ms" in figures and "per event" in done.stdout
