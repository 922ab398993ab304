"""A Redis primary SIGKILLed while 4 real processes edit one file, on a Redis Cluster and behind Sentinel.

Each run starts its own deployment from the system's redis-server (the kill would break the session-wide
ones of conftest.py). What must hold: nothing acknowledged is lost, no edit reported as refused is in the
file, no exception other than CoordinatorError reaches a caller, and every process has edits acknowledged
again after the failover. How long the refusals last is measured by `python -m worker.failover`, not here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.deployments import system_redis_server
from worker.failover import run_drill

pytestmark = pytest.mark.skipif(
    system_redis_server() is None,
    reason="redis-server is not installed (apt-get install -y redis-server; .ci/run installs it)",
)


@pytest.mark.parametrize("topology", ["cluster", "sentinel"])
def test_primary_killed_while_four_processes_edit(tmp_path: Path, topology: str) -> None:
    report = run_drill(topology, tmp_path, workers=4, before=8, after=8, timeout_s=120)
    assert report.raw == [], report.raw
    assert report.lost == 0 and report.phantom == 0, report.to_dict()
    assert report.final == dict(enumerate(report.acked))
    assert all(n >= 8 for n in report.acked_after_kill), report.to_dict()
    assert set(report.refusals) <= {"stale", "not_read", "state_unavailable"}, report.refusals
