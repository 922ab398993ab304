"""Watchers cannot starve writers, on a real `edit-coordinator serve` with the embedded (real) Redis:

* change-event long polls have their own bound (--max-polls) and threads, apart from --max-concurrency: with
  more polls waiting than --max-concurrency allows calls, an edit is still answered, and a poll past the
  poll bound is refused with `overloaded` while edits go on;
* /v1/dashboard, while Redis hangs (SIGSTOP: its socket stays open, nothing answers), answers with the parts
  it could get and asks no Redis part after the first that failed (each would wait its own timeout).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from coordinator.disk.layout import redis_dir, state_dir_of
from coordinator.state.embedded import stop_embedded_redis
from coordinator.tokens import mint_token
from tests.coordinator.server.test_server import SECRET, ServerProcess, auth, token

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools")

MAX_CONCURRENCY = 2
MAX_POLLS = 6


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A service with a small call bound and poll bound (the dashboard test: the defaults)."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "f.txt").write_text("zero\n")
    bounds = ["--max-concurrency", str(MAX_CONCURRENCY), "--max-polls", str(MAX_POLLS), "--max-poll-wait", "60"]
    server = ServerProcess(root, *([] if "dashboard" in request.node.name else bounds))
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


def _poll(url: str, wait_s: float) -> httpx.Response:
    body = {"since": "$", "wait_s": wait_s}
    return httpx.post(f"{url}/v1/events", json=body, headers=auth(token(admin=True)), timeout=wait_s + 60)


def _waiting_poll(url: str, answers: list[httpx.Response]) -> None:
    """A watcher's long poll, asked again while the poll bound is full: the probes below take a poll's place
    for a moment, and a watcher that came at that moment is refused `overloaded` (as it should be)."""
    for _ in range(200):
        answer = _poll(url, 60)
        if answer.status_code != 429:
            break
        time.sleep(0.05)
    answers.append(answer)


def test_waiting_polls_leave_the_writers_their_room(served: ServerProcess) -> None:
    answers: list[httpx.Response] = []
    polls = [threading.Thread(target=_waiting_poll, args=(served.url, answers)) for _ in range(MAX_POLLS)]
    for t in polls:
        t.start()
    try:
        # The poll bound is full once a poll that would not wait is refused: then all MAX_POLLS wait.
        for _ in range(1000):  # the polls wait up to 60 s (the most a poll may ask) for an event
            probe = _poll(served.url, 0)
            if probe.status_code == 429:
                break
            time.sleep(0.05)
        assert probe.status_code == 429 and probe.json()["code"] == "overloaded", probe.text
        assert "--max-polls" in probe.json()["message"]
        # MAX_POLLS (> MAX_CONCURRENCY) polls wait, and the calls that read and change files are answered.
        headers = auth(token("writer"))
        with httpx.Client(base_url=served.url, headers=headers, timeout=30) as http:
            for step in range(3):
                r = http.post("/v1/read", json={"session": "writer", "path": "f.txt"})
                assert r.status_code == 200, r.text
                r = http.post(
                    "/v1/edit",
                    json={
                        "session": "writer",
                        "path": "f.txt",
                        "old_string": f"{'zero' if step == 0 else step}",
                        "new_string": str(step + 1),
                    },
                )
                assert r.status_code == 200, r.text
    finally:
        for t in polls:
            t.join(300)
    assert len(answers) == MAX_POLLS and all(a.status_code == 200 for a in answers)
    assert any(a.json()["events"] for a in answers)  # the waiting polls were woken by the edits
    assert (served.root / "f.txt").read_text() == "3\n"


def test_the_dashboard_asks_nothing_more_of_a_hung_redis(served: ServerProcess) -> None:
    viewer = mint_token(SECRET.encode(), viewer=True)
    with httpx.Client(base_url=served.url, headers=auth(viewer), timeout=60) as http:
        assert http.get("/v1/dashboard").json()["health"]["redis"] is True  # the service has met its Redis
        pid = int((redis_dir(state_dir_of(served.root.resolve())) / "redis.pid").read_text().strip())
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.perf_counter()
            r = http.get("/v1/dashboard")
            took = time.perf_counter() - started
        finally:
            os.kill(pid, signal.SIGCONT)
    assert r.status_code == 200, r.text
    snap = r.json()
    assert snap["health"]["redis"] is False and snap["notes"]["redis"]
    for part in ("events", "sessions", "leases", "refusals", "refusals_by_file", "cursor"):
        assert snap["notes"][part].startswith("not asked: Redis did not answer for redis"), (part, snap["notes"])
    print(f"dashboard answered in {took:.1f} s while Redis hung")
