"""The viewer token on a real `edit-coordinator serve`: read-only. It reaches the inspection routes (sessions,
leases, events, history, health) and is refused, with nothing done, on every other route: no write, no
read as a session, no lease, no token, no shutdown."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from coordinator import CoordinatorError, ErrorCode
from coordinator.endpoint import HOOK_PATH
from coordinator.server import ROUTES, verify_token
from coordinator.state.embedded import stop_embedded_redis
from coordinator.tokens import claimed_session, mint_token
from tests.coordinator.agents.standin import event
from tests.coordinator.server.test_server import REPO, SECRET, ServerProcess, auth, token

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools")

# The whole list, on purpose: a route opened to viewers must be added here by someone who decided it.
VIEWER_ROUTES = {
    ("GET", "/v1/leases"),
    ("GET", "/v1/sessions"),
    ("POST", "/v1/events"),
    ("POST", "/v1/events/recent"),
    ("POST", "/v1/history"),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("viewer") / "repo"
    root.mkdir()
    server = ServerProcess(root, workers=1)
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


@pytest.fixture()
def http(served: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=30) as c:
        yield c


def viewer_token(ttl_s: float = 3600) -> str:
    return mint_token(SECRET.encode(), viewer=True, ttl_s=ttl_s)


def test_only_declared_inspection_routes_are_open_to_viewers() -> None:
    declared = {(r.method, r.path) for r in ROUTES if r.viewer}
    assert declared >= VIEWER_ROUTES
    assert all(not r.mutating for r in ROUTES if r.viewer)
    assert {p for _, p in declared - VIEWER_ROUTES} <= {p for _, p in declared if p.startswith("/v1/dashboard")}


def test_viewer_tokens_name_no_session_and_are_not_admin() -> None:
    p = verify_token(SECRET.encode(), viewer_token())
    assert (p.role, p.session, p.is_admin, p.is_viewer) == ("viewer", None, False, True)
    assert claimed_session(viewer_token()) is None  # a client given it acts as no session
    with pytest.raises(CoordinatorError) as ei:
        mint_token(SECRET.encode(), admin=True, viewer=True)
    assert ei.value.code == ErrorCode.INVALID_ARGUMENT


def test_viewer_reads_the_inspection_routes(served: ServerProcess, http: httpx.Client) -> None:
    (served.root / "seen.txt").write_text("one\ntwo\n")
    writer = auth(token("s-writer"))
    assert http.post("/v1/read", json={"path": "seen.txt"}, headers=writer).status_code == 200
    r = http.post("/v1/edit", json={"path": "seen.txt", "old_string": "one", "new_string": "ONE"}, headers=writer)
    assert r.status_code == 200, r.text
    assert http.post("/v1/leases", json={"paths": ["docs/**"], "ttl_s": 60}, headers=writer).status_code == 200
    viewer = auth(viewer_token())
    sessions = http.get("/v1/sessions", headers=viewer)
    assert sessions.status_code == 200 and "s-writer" in {s["session"] for s in sessions.json()["sessions"]}
    leases = http.get("/v1/leases", headers=viewer)
    assert [(x["session"], x["pattern"]) for x in leases.json()["leases"]] == [("s-writer", "docs/**")]
    recent = http.post("/v1/events/recent", json={"count": 10}, headers=viewer).json()["events"]
    assert [(e["session"], e["path"], e["operation"]) for e in recent][-1] == ("s-writer", "seen.txt", "edit")
    polled = http.post("/v1/events", json={"since": "0", "wait_s": 0}, headers=viewer)
    assert polled.status_code == 200 and any(e["path"] == "seen.txt" for e in polled.json()["events"])
    history = http.post("/v1/history", json={"path": "seen.txt"}, headers=viewer)
    assert history.status_code == 200 and [e["session"] for e in history.json()["entries"]] == ["s-writer"]


def _request_for(method: str, path: str) -> dict[str, Any]:
    """A body each route would accept from a session or the admin, so that only the role is refused."""
    bodies: dict[str, Any] = {
        "/v1/read": {"path": "kept.txt"},
        "/v1/write": {"path": "kept.txt", "content": "overwritten\n"},
        "/v1/edit": {"path": "kept.txt", "old_string": "kept", "new_string": "lost"},
        "/v1/multi_edit": {"path": "kept.txt", "edits": [{"old_string": "kept", "new_string": "lost"}]},
        "/v1/undo": {"path": "kept.txt"},
        "/v1/redo": {"path": "kept.txt"},
        "/v1/commit": {"message": "m"},
        "/v1/admin/restore": {"path": "kept.txt", "to_version": 0},
        "/v1/leases": {"paths": ["kept.txt"]},
        "/v1/leases/renew": {},
        "/v1/leases/release": {},
        "/v1/admin/leases/break": {"session": "s-writer"},
        "/v1/notices": {},
        "/v1/tokens": {"session": "s-new"},
    }
    return {"json": bodies.get(path)} if method == "POST" else {}


def test_viewer_is_refused_everywhere_else_and_nothing_is_done(served: ServerProcess, http: httpx.Client) -> None:
    (served.root / "kept.txt").write_text("kept\n")
    viewer = auth(viewer_token())
    # The hook route answers its refusals in a 200 body: test_viewer_cannot_act_through_the_hook_route.
    closed = [r for r in ROUTES if not r.viewer and r.auth != "none" and r.path != HOOK_PATH]
    assert {r.name for r in closed} >= {"write", "edit", "read", "lease", "token", "shutdown", "restore"}
    for route in closed:
        r = http.request(route.method, route.path, headers=viewer, **_request_for(route.method, route.path))
        assert (r.status_code, r.json()["code"]) == (403, "forbidden"), (route.path, r.text)
        assert "viewer token" in r.json()["message"]
    assert (served.root / "kept.txt").read_text() == "kept\n"
    assert http.get("/v1/health").json()["status"] == "ok"  # the shutdown was refused too
    admin = auth(token(admin=True))
    assert http.post("/v1/history", json={"path": "kept.txt"}, headers=admin).json()["entries"] == []
    assert http.get("/v1/leases", params={"session": "viewer"}, headers=admin).json()["leases"] == []


def test_a_session_token_still_cannot_list_sessions(http: httpx.Client) -> None:
    r = http.get("/v1/sessions", headers=auth(token("s-plain")))
    assert (r.status_code, r.json()["code"]) == (403, "forbidden")


def test_expired_viewer_token_is_unauthorized(http: httpx.Client) -> None:
    r = http.get("/v1/sessions", headers=auth(viewer_token(ttl_s=-1)))
    assert (r.status_code, r.json()["details"]["reason"]) == (401, "expired")


def test_admin_issues_viewer_tokens(http: httpx.Client) -> None:
    admin = auth(token(admin=True))
    r = http.post("/v1/tokens", json={"role": "viewer", "ttl_s": 60}, headers=admin)
    assert r.status_code == 200, r.text
    assert (r.json()["role"], r.json()["session"]) == ("viewer", None)
    issued = auth(r.json()["token"])
    assert http.get("/v1/sessions", headers=issued).status_code == 200
    assert http.post("/v1/read", json={"path": "kept.txt"}, headers=issued).status_code == 403
    bad = http.post("/v1/tokens", json={"role": "viewer", "session": "s-x"}, headers=admin)
    assert (bad.status_code, bad.json()["code"]) == (422, "invalid_argument") and "omit" in bad.json()["message"]
    none = http.post("/v1/tokens", json={"role": "session"}, headers=admin)
    assert (none.status_code, none.json()["code"]) == (422, "invalid_argument")
    by_viewer = http.post("/v1/tokens", json={"role": "viewer"}, headers=issued)
    assert by_viewer.status_code == 403  # a viewer cannot mint itself more tokens


def test_token_command_prints_a_viewer_token(served: ServerProcess, http: httpx.Client) -> None:
    env = {**os.environ, "EDIT_COORDINATOR_SECRET": SECRET, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "token", "--root", str(served.root), "--viewer", "--ttl", "60"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=30, check=True,
    )  # fmt: skip
    printed = out.stdout.strip()
    assert verify_token(SECRET.encode(), printed).role == "viewer"
    assert http.get("/v1/sessions", headers=auth(printed)).status_code == 200
    both = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "token", "--root", str(served.root), "--viewer", "--admin"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=30,
    )  # fmt: skip
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_remote_inspection_commands_take_a_viewer_token(served: ServerProcess) -> None:
    (served.root / "inspected.txt").write_text("i\n")
    writer = auth(token("s-inspected"))
    with httpx.Client(base_url=served.url, timeout=30) as c:
        c.post("/v1/read", json={"path": "inspected.txt"}, headers=writer)
        c.post("/v1/edit", json={"path": "inspected.txt", "old_string": "i", "new_string": "ii"}, headers=writer)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    env["PYTHONPATH"] = str(REPO)
    remote = ["--server", served.url, "--token", viewer_token()]
    for command in (["status", "--json"], ["history", "inspected.txt", "--json"], ["leases", "list"]):
        r = subprocess.run(
            [sys.executable, "-m", "coordinator.cli", *command, *remote],
            capture_output=True, text=True, env=env, cwd=served.root.parent, timeout=60,
        )  # fmt: skip
        assert r.returncode == 0, (command, r.stderr)
        if command[0] != "leases":
            assert "s-inspected" in r.stdout, command


def test_viewer_cannot_act_through_the_hook_route(served: ServerProcess, http: httpx.Client) -> None:
    (served.root / "hooked.txt").write_text("return 1\n")
    data = event("pre_write", "s-hooked", "toolu_v", served.root / "hooked.txt")
    answer = http.post("/v1/hooks/claude-code", json=data, headers=auth(viewer_token()))
    assert answer.json()["hookSpecificOutput"]["permissionDecision"] == "deny", answer.text
    admin = auth(token(admin=True))
    assert http.get("/v1/leases", params={"session": "s-hooked"}, headers=admin).json()["leases"] == []
