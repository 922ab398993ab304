"""`edit-coordinator stress --redis-url redis+cluster://...` and through Sentinel: edits acknowledged, none
lost, and the load reported per Redis primary."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from coordinator.state.connection import NodeLoad, shard_report


def test_shard_report_is_the_difference_per_primary() -> None:
    before = [NodeLoad("a:1", 100, 1.0, 3), NodeLoad("b:2", 50, 0.5, 1)]
    after = [NodeLoad("a:1", 400, 1.3, 5), NodeLoad("b:2", 150, 0.6, 2), NodeLoad("c:3", 500, 0.1, 9)]
    rows = shard_report(before, after, edits=100)
    assert [(r["node"], r["commands"], r["share"]) for r in rows] == [
        ("a:1", 300, 0.333),
        ("b:2", 100, 0.111),
        ("c:3", 500, 0.556),  # a primary that appeared during the run (a promoted replica) counts from 0
    ]
    assert rows[0]["commands_per_edit"] == 3.0 and rows[0]["cpu_us_per_edit"] == pytest.approx(3000.0)


@pytest.mark.parametrize("kind", ["cluster", "sentinel"])
def test_stress_through_a_deployment_loses_nothing_and_reports_each_primary(
    request: pytest.FixtureRequest, kind: str
) -> None:
    dep = request.getfixturevalue(f"{kind}_deployment")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    cmd = [sys.executable, "-m", "coordinator.cli", "stress", "--redis-url", dep.url]
    cmd += ["--workers", "3", "--duration", "1.5", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["summary"]["acknowledged"] > 0 and out["oracle"]["lost_updates"] == 0
    primaries = out["redis_primaries"]
    assert len(primaries) == (3 if kind == "cluster" else 1)
    assert sum(p["commands"] for p in primaries) > out["summary"]["acknowledged"]
