"""GET /metrics on a real `edit-coordinator serve` with two worker processes (serve's default): the admin
token reads the Prometheus text format, which the official parser reads back with the counts of the calls
made, whichever worker made them and whichever answers the scrape."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from coordinator.server import ServerConfig, create_app
from coordinator.server.metrics import ServiceMetrics, prepare_multiprocess_dir
from coordinator.state.embedded import stop_embedded_redis
from coordinator.tokens import mint_token
from tests.coordinator.server.test_server import SECRET, ServerProcess, auth, token

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools")
parser = pytest.importorskip("prometheus_client.parser")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
WRITES_OK = ("edit_coordinator_operations_total", ("operation", "write"), ("outcome", "ok"))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("metrics") / "repo"
    root.mkdir()
    server = ServerProcess(root, workers=2)
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


def _samples(text: str) -> Samples:
    found: Samples = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def _grown(before: Samples, after: Samples, name: str, *labels: tuple[str, str]) -> float:
    key = (name, tuple(sorted(labels)))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_metrics_count_edits_refusals_and_leases(served: ServerProcess) -> None:
    (served.root / "m.txt").write_text("one\ntwo\nthree\n")
    session = auth(token("s-metrics"))
    with httpx.Client(base_url=served.url, timeout=30) as c:
        before = _samples(c.get("/metrics", headers=auth(token(admin=True))).text)
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
        assert c.post("/v1/leases/release", json={}, headers=session).status_code == 200
    assert scrape.status_code == 200, scrape.text
    assert scrape.headers["content-type"].startswith("text/plain")
    got = _samples(scrape.text)
    operations = "edit_coordinator_operations_total"
    assert _grown(before, got, operations, ("operation", "edit"), ("outcome", "ok")) == 2
    assert _grown(before, got, operations, ("operation", "edit"), ("outcome", "stale")) == 1
    assert _grown(before, got, operations, ("operation", "read"), ("outcome", "ok")) == 1
    assert _grown(before, got, "edit_coordinator_refusals_total", ("code", "stale")) == 1
    assert _grown(before, got, "edit_coordinator_operation_duration_seconds_count", ("operation", "edit")) == 3
    assert got[("edit_coordinator_leases_held", (("mode", "exclusive"),))] == 1
    assert got[("edit_coordinator_leases_held", (("mode", "shared"),))] == 0
    assert got[("edit_coordinator_sessions", ())] >= 1
    assert all("m.txt" not in str(labels) and "s-metrics" not in str(labels) for _, labels in got)


def test_engine_lock_redis_and_history_figures(served: ServerProcess) -> None:
    """The engine's own figures: every write's outcome (applied, rebased, conflict, stale), its lock's wait
    and hold, the change events, Redis round trips, and the history's size, all from one scrape."""
    (served.root / "e.txt").write_text("a\nb\nc\nd\ne\nf\n")
    session = auth(token("s-engine"))
    with httpx.Client(base_url=served.url, timeout=30) as c:
        before = _samples(c.get("/metrics", headers=auth(token(admin=True))).text)

        def edit(old: str, new: str, policy: str = "rebase") -> httpx.Response:
            body = {"path": "e.txt", "old_string": old, "new_string": new, "policy": policy}
            return c.post("/v1/edit", json=body, headers=session)

        assert c.post("/v1/read", json={"path": "e.txt"}, headers=session).status_code == 200
        assert edit("a", "A").status_code == 200
        (served.root / "e.txt").write_text("A\nb\nc\nd\ne\nF\n")  # outside, far from the next edit
        rebased = edit("b", "B")
        assert rebased.status_code == 200 and rebased.json()["rebased"] is True, rebased.text
        (served.root / "e.txt").write_text("A\nB!\nc\nd\ne\nF\n")  # outside, on the very line edited next
        assert edit("B", "BB").json()["code"] == "stale"  # a rebase refused: a conflict
        assert edit("c", "C", policy="strict").json()["code"] == "stale"  # no rebase tried: plain stale
        after = _samples(c.get("/metrics", headers=auth(token(admin=True))).text)

    def grew(name: str, *labels: tuple[str, str]) -> float:
        key = (name, tuple(sorted(labels)))
        return after.get(key, 0.0) - before.get(key, 0.0)

    writes = "edit_coordinator_writes_total"
    assert grew(writes, ("operation", "edit"), ("outcome", "applied")) == 1
    assert grew(writes, ("operation", "edit"), ("outcome", "rebased")) == 1
    assert grew(writes, ("operation", "edit"), ("outcome", "conflict")) == 1
    assert grew(writes, ("operation", "edit"), ("outcome", "stale")) == 1
    assert grew("edit_coordinator_change_events_published_total") == 2
    # Each write took its file's lock once, but the conflict may be found before the lock (a path whose
    # views went stale lately has its rebase tried first, and a doomed one never takes the lock).
    assert 3 <= grew("edit_coordinator_lock_wait_seconds_count") <= 4
    assert grew("edit_coordinator_lock_hold_seconds_count") == grew("edit_coordinator_lock_wait_seconds_count")
    assert grew("edit_coordinator_lock_hold_seconds_sum") > 0
    assert grew("edit_coordinator_redis_round_trips_total") >= 4  # at least each landed write's record
    # The history's size is measured at most every 15 s per worker: present here, its values below.
    assert ("edit_coordinator_history_bytes", ()) in after and ("edit_coordinator_history_entries", ()) in after


def test_metrics_need_the_admin_or_a_viewer_token(served: ServerProcess) -> None:
    with httpx.Client(base_url=served.url, timeout=30) as c:
        missing = c.get("/metrics")
        assert missing.status_code == 401 and missing.json()["code"] == "unauthorized"
        assert "bearer token" in missing.json()["message"]
        forbidden = c.get("/metrics", headers=auth(token("s-other")))
        assert forbidden.status_code == 403 and "admin token or a viewer token" in forbidden.json()["message"]
        viewer = c.get("/metrics", headers=auth(mint_token(SECRET.encode(), viewer=True)))
        assert viewer.status_code == 200 and "edit_coordinator_operations_total" in viewer.text


def test_scrapes_total_the_calls_of_every_worker(served: ServerProcess) -> None:
    """Calls answered by either worker, and by a worker that was killed and replaced, are all in every
    scrape, whichever worker answers it (prometheus-client's multiprocess mode over a folder in the state
    folder)."""
    before = _samples(_scrape(served))
    writes_by_pid: dict[int, int] = {}
    for i in range(200):  # a new connection each time: the kernel hands it to either worker
        with httpx.Client(base_url=served.url, timeout=30) as c:
            pid = c.get("/v1/health").json()["pid"]
            body = {"path": f"w{i}.txt", "content": f"{i}\n"}
            r = c.post("/v1/write", json=body, headers=auth(token("s-workers")))  # same connection, same pid
            assert r.status_code == 200, r.text
        writes_by_pid[pid] = writes_by_pid.get(pid, 0) + 1
        if len(writes_by_pid) >= 2 and i >= 9:
            break
    assert len(writes_by_pid) >= 2, writes_by_pid
    total = sum(writes_by_pid.values())
    answered_by: set[int] = set()
    for _ in range(200):  # scrapes on new connections until both workers have answered one
        with httpx.Client(base_url=served.url, timeout=30) as c:
            pid = c.get("/v1/health").json()["pid"]
            got = _samples(c.get("/metrics", headers=auth(token(admin=True))).text)
        assert _grown(before, got, *WRITES_OK) == total
        applied = ("operation", "write"), ("outcome", "applied")
        assert _grown(before, got, "edit_coordinator_writes_total", *applied) == total
        assert _grown(before, got, "edit_coordinator_change_events_published_total") == total
        answered_by.add(pid)
        if answered_by >= set(writes_by_pid):
            break
    assert answered_by >= set(writes_by_pid)
    [folder] = (served.root / ".edit-coordinator" / "metrics").iterdir()  # the supervisor's own
    assert folder.name == str(served.proc.pid)
    assert {p.name for p in folder.iterdir()} >= {f"counter_{pid}.db" for pid in writes_by_pid}

    os.kill(next(iter(writes_by_pid)), signal.SIGKILL)  # the supervisor starts another worker
    after_kill = _samples(_scrape(served))
    assert _grown(before, after_kill, *WRITES_OK) == total


def _scrape(server: ServerProcess) -> str:
    """One scrape on a new connection; retried while a killed worker's connection is refused or reset."""
    for _ in range(100):
        try:
            with httpx.Client(base_url=server.url, timeout=30) as c:
                return c.get("/metrics", headers=auth(token(admin=True))).text
        except httpx.TransportError:
            continue
    raise AssertionError("no worker answered a scrape")


def test_history_size_gauges(tmp_path: Path) -> None:
    """The history's entries and bytes as a scrape gives them (an App in this process, on the embedded
    Redis): its first scrape measures the history as it is."""
    root = tmp_path / "repo"
    root.mkdir()
    app = create_app(ServerConfig(root=str(root), durability="none"), secret=b"k" * 32)
    app.open()
    try:
        s = app.coord.session("a")
        s.write("f.txt", "x" * 3000 + "\n")
        s.edit("f.txt", "x\n", "y\n")
        got = _samples(app.metrics.exposition().decode())
    finally:
        app.close()
        stop_embedded_redis(root / ".edit-coordinator")
    assert got[("edit_coordinator_history_entries", ())] == 2
    assert got[("edit_coordinator_history_bytes", ())] >= 2 * 3001  # both versions' contents, at least


def test_a_service_keeps_its_counts_apart_from_another_live_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two services on one root (TCP and a unix socket, say): each has a folder of its own, and a starting
    one removes only the folders of services that have exited."""
    metrics_dir = tmp_path / "metrics"
    live, dead = metrics_dir / str(os.getppid()), metrics_dir / "999999999"
    for folder in (live, dead):
        folder.mkdir(parents=True)
        (folder / "counter_1.db").write_bytes(b"x")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")  # put back as it was after the test
    mine = prepare_multiprocess_dir(metrics_dir)
    assert mine == os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(metrics_dir / str(os.getpid()))
    assert sorted(p.name for p in metrics_dir.iterdir()) == sorted([live.name, str(os.getpid())])
    assert (live / "counter_1.db").exists() and list(Path(mine).iterdir()) == []


def test_one_process_counts_in_a_registry_of_its_own() -> None:
    """Without the multiprocess folder (an App in a test, a one-worker serve), each ServiceMetrics counts
    in its own registry: two never share counts."""
    first, second = ServiceMetrics(dict), ServiceMetrics(dict)
    first.observe("edit", None, 0.01)
    first.write_finished("edit", "applied")
    first.lock_released(0.0001, 0.002)
    first.round_trip()
    first.error("ConnectionError")
    got, other = _samples(first.exposition().decode()), _samples(second.exposition().decode())
    assert got[("edit_coordinator_operations_total", (("operation", "edit"), ("outcome", "ok")))] == 1
    assert got[("edit_coordinator_writes_total", (("operation", "edit"), ("outcome", "applied")))] == 1
    assert got[("edit_coordinator_lock_hold_seconds_bucket", (("le", "0.0025"),))] == 1
    assert got[("edit_coordinator_lock_hold_seconds_bucket", (("le", "0.001"),))] == 0
    assert got[("edit_coordinator_redis_round_trips_total", ())] == 1
    assert got[("edit_coordinator_redis_errors_total", (("kind", "ConnectionError"),))] == 1
    assert ("edit_coordinator_operations_total", (("operation", "edit"), ("outcome", "ok"))) not in other


def test_recorded_counts_match_prometheus_clients_own_calls() -> None:
    """The service records through cached series and a bisected bucket: the exposition is the one that
    prometheus-client's own `labels(...).inc()` / `observe()` make from the same calls (bounds, zero, +Inf
    and NaN included)."""
    ours, theirs = ServiceMetrics(dict), ServiceMetrics(dict)
    amounts = [0.0, 1e-5, 2e-5, 0.0005, 0.00051, 0.5, 10.0, 30.0, 31.0, 1e9, float("nan"), 3e-4, 7e-6, 0.07]
    for i, amount in enumerate(amounts * 3):
        code = (None, "stale", "not_read")[i % 3]
        ours.observe("edit", code, amount)
        ours.lock_released(amount, amount / 2)
        ours.write_finished("edit", "applied" if code is None else code)
        ours.event_published()
        ours.round_trip()
        theirs.operations.labels("edit", code or "ok").inc()
        theirs.duration.labels("edit").observe(amount)
        if code is not None:
            theirs.refusals.labels(code).inc()
        theirs.lock_wait.observe(amount)
        theirs.lock_hold.observe(amount / 2)
        theirs.writes.labels("edit", "applied" if code is None else code).inc()
        theirs.events.inc()
        theirs.redis_round_trips.inc()

    def counted(metrics: ServiceMetrics) -> list[str]:
        return [line for line in metrics.exposition().decode().splitlines() if "_created" not in line]

    assert counted(ours) == counted(theirs)
    assert any(line.startswith("edit_coordinator_lock_hold_seconds_bucket") for line in counted(ours))
