"""The worked example runs as a user would run it, and shows refusals, recoveries and nothing lost."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests import REPO_ROOT

ROOT = REPO_ROOT


def test_orchestrator_example_refuses_recovers_and_loses_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "orchestrator.py"), "--rounds", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    out = run.stdout
    assert "16 agents, 12 tools each" in out
    assert re.search(r"-> \[stale\] counters-\d\.txt has been modified since you last read it", out)
    assert "re-reads" in out and "has been updated" in out
    summary = re.search(r"(\d+) edits acknowledged in (\d+) tool calls; .*stale (\d+).*; lost (\d+)$", out, re.M)
    assert summary is not None, out[-1000:]
    acked, calls, stale, lost = map(int, summary.groups())
    assert (acked, lost) == (48, 0) and stale > 0 and calls >= acked * 2 + stale
