"""GET /metrics on a real `edit-coordinator serve` (one worker process): the admin token reads the
Prometheus text format, which the official parser reads back with the counts of the calls made."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from coordinator.state.embedded import stop_embedded_redis
from tests.coordinator.server.test_server import ServerProcess, auth, token

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools")
parser = pytest.importorskip("prometheus_client.parser")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("metrics") / "repo"
    root.mkdir()
    server = ServerProcess(root, workers=1)
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_count_edits_refusals_and_leases(served: ServerProcess) -> None:
    (served.root / "m.txt").write_text("one\ntwo\nthree\n")
    session = auth(token("s-metrics"))
    with httpx.Client(base_url=served.url, timeout=30) as c:
        assert c.post("/v1/read", json={"path": "m.txt"}, headers=session).status_code == 200
        for old, new in (("one", "ONE"), ("two", "TWO")):
            r = c.post("/v1/edit", json={"path": "m.txt", "old_string": old, "new_string": new}, headers=session)
            assert r.status_code == 200, r.text
        Path(served.root / "m.txt").write_text("changed\noutside\n")  # the session's view is now stale
        r = c.post("/v1/edit", json={"path": "m.txt", "old_string": "changed", "new_string": "x"}, headers=session)
        assert r.status_code == 409 and r.json()["code"] == "stale", r.text
        lease = c.post("/v1/leases", json={"paths": ["docs/**"], "ttl_s": 60}, headers=session)
        assert lease.status_code == 200, lease.text
        scrape = c.get("/metrics", headers=auth(token(admin=True)))
    assert scrape.status_code == 200, scrape.text
    assert scrape.headers["content-type"].startswith("text/plain")
    got = _samples(scrape.text)
    assert got[("edit_coordinator_operations_total", (("operation", "edit"), ("outcome", "ok")))] == 2
    assert got[("edit_coordinator_operations_total", (("operation", "edit"), ("outcome", "stale")))] == 1
    assert got[("edit_coordinator_operations_total", (("operation", "read"), ("outcome", "ok")))] == 1
    assert got[("edit_coordinator_refusals_total", (("code", "stale"),))] == 1
    assert got[("edit_coordinator_operation_duration_seconds_count", (("operation", "edit"),))] == 3
    assert got[("edit_coordinator_leases_held", ())] == 1
    assert got[("edit_coordinator_sessions", ())] >= 1
    assert all("m.txt" not in str(labels) for _, labels in got)  # no paths as label values


def test_metrics_need_the_admin_token(served: ServerProcess) -> None:
    with httpx.Client(base_url=served.url, timeout=30) as c:
        missing = c.get("/metrics")
        assert missing.status_code == 401 and missing.json()["code"] == "unauthorized"
        assert "bearer token" in missing.json()["message"]
        forbidden = c.get("/metrics", headers=auth(token("s-other")))
        assert forbidden.status_code == 403 and "admin token" in forbidden.json()["message"]
