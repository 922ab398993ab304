"""Every operation from every adapter: the public names, the `Client` interface through both transports
(same results, same codes), the HTTP routes for leases, events, notices and status through a real `serve`
process, and the command line's read / edit / write and inspect-only commands as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import coordinator
from coordinator import Client, Coordinator, CoordinatorError, ErrorCode, HttpClient, LocalClient
from coordinator.errors import CODES, info
from coordinator.server import openapi_document
from coordinator.state.embedded import embedded_status, stop_embedded_redis
from tests import REPO_ROOT
from tests.coordinator.server.test_server import SECRET, ServerProcess, auth, token

REPO = REPO_ROOT


def test_public_names_are_pinned() -> None:
    """`coordinator.__all__` is exactly this list, and every name of the public Python API (docs/engine.md,
    "Library") is there."""
    assert sorted(coordinator.__all__) == sorted(
        ["AsyncClient", "AsyncSession", "BoundSession", "Client", "Coordinator", "CoordinatorError", "EditResult",
         "ErrorCode", "EventPage",
         "HistoryEntry", "HttpClient", "LocalClient", "ReadResult", "Session", "SessionStatus",
         "WriteResult", "tools"]
    )  # fmt: skip
    for name in coordinator.__all__:
        assert getattr(coordinator, name) is not None, name
    contract = ["Coordinator", "CoordinatorError", "ErrorCode", "Client", "HttpClient", "AsyncClient", "tools"]
    assert set(contract) <= set(coordinator.__all__)
    codes = ["not_read", "stale", "no_match", "ambiguous", "no_change", "file_exists", "file_not_found",
             "is_directory", "binary_file", "special_file", "too_large", "unsupported_encoding", "outside_root",
             "permission_denied", "lock_timeout", "state_unavailable", "invalid_argument", "io_error", "leased",
             "placeholder", "check_failed"]  # fmt: skip
    assert sorted(c.value for c in ErrorCode) == sorted(codes)
    for method in ("read", "write", "edit", "multi_edit", "undo", "redo", "restore", "history", "lease", "renew",
                   "release", "leases", "poll_events", "events", "recent_events", "notices", "status",
                   "close"):  # fmt: skip
        assert callable(getattr(Client, method)), method
    assert issubclass(LocalClient, Client) and issubclass(HttpClient, Client)
    for gone in ("InProcessClient",):  # an old name, removed
        assert not hasattr(coordinator, gone) and not hasattr(coordinator.client, gone)
    for fn in ("definitions", "dispatch", "adispatch", "ToolResult"):
        assert callable(getattr(coordinator.tools, fn)), fn


def test_one_table_for_every_code() -> None:
    """Each library code has one row, read by the service (status, Retry-After), the HTTP client (retry) and
    the MCP guide; lock_timeout is retryable everywhere, content refusals nowhere."""
    from coordinator.server import RETRY_AFTER_S, STATUS_FOR_CODE, TRANSIENT_CODES
    from coordinator.tools.mcp_server import ERROR_GUIDE

    for code in ErrorCode:
        row = CODES[code.value]
        assert STATUS_FOR_CODE[code.value] == row.http_status
        assert ERROR_GUIDE[code.value] == row.guidance and row.guidance
        assert (code.value in TRANSIENT_CODES) == row.retryable
        assert RETRY_AFTER_S.get(code.value) == row.retry_after_s
    assert info("lock_timeout").retryable and info("state_unavailable").retryable
    assert not info("stale").retryable and not info("no_match").retryable
    assert info("placeholder").http_status == 422 and info("unknown-code").http_status == 400


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("adapters") / "repo"
    root.mkdir()
    server = ServerProcess(root)
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


def _script(c: Any, root: Path, s: str) -> list[Any]:
    """Leases, history, events, notices and status through any Client: results as plain data, refusals
    as (code,)."""
    out: list[Any] = []

    def rec(fn: Any, *a: Any, shape: Any = None) -> Any:
        try:
            value = fn(*a)
        except CoordinatorError as exc:
            out.append((exc.code,))
            return None
        out.append(shape(value) if shape else value)
        return value

    def lease_shape(xs: list[Any]) -> list[Any]:
        return sorted((x.session, x.pattern, x.mode) for x in xs)  # leases granted together end together

    (root / "l.txt").write_text("one\ntwo\n")
    (root / "other.txt").write_text("x\n")
    mine = rec(c.lease, s, ["l.txt", "docs/"], "exclusive", 60.0, shape=lease_shape)
    rec(c.lease, f"{s}-b", "l.txt", "exclusive", 60.0, shape=lease_shape)  # leased
    rec(c.leases, s, shape=lease_shape)
    rec(c.renew, s, None, 120.0, shape=lease_shape)
    rec(c.read, f"{s}-b", "l.txt", shape=lambda r: r.content)
    rec(c.read, f"{s}-b", "other.txt", shape=lambda r: r.content)
    rec(c.edit, f"{s}-b", "l.txt", "one", "1", shape=lambda w: w.version)  # leased
    rec(c.read, s, "l.txt", shape=lambda r: r.total_lines)
    page = c.poll_events(None, ["l.txt"], 0.0, 10)
    rec(c.edit, s, "l.txt", "one", "1", shape=lambda w: (w.version, w.lease_token is not None))
    rec(c.release, s, None, "docs/")
    rec(c.release, s, None, None)
    rec(c.leases, s, shape=lease_shape)
    rec(lambda: c.poll_events(page.cursor, ["l.txt"], 5.0, 10), shape=lambda p: [(e.path, e.session) for e in p.events])
    rec(lambda: c.recent_events(1), shape=lambda es: [(e.path, e.operation, e.version) for e in es])
    rec(c.history, "l.txt", 10, shape=lambda es: [(e.version, e.session, e.operation) for e in es])
    rec(c.undo, s, "l.txt", None, shape=lambda w: (w.operation, w.version))
    rec(c.status, s, shape=lambda st: (st.session, st.last_seen is not None, st.leases))
    (root / "other2.txt").write_text("y\n")
    rec(c.read, f"{s}-b", "other2.txt", shape=lambda r: r.content)
    rec(c.read, s, "other2.txt", shape=lambda r: r.content)
    rec(c.edit, s, "other2.txt", "y", "z", shape=lambda w: w.version)
    rec(c.notices, f"{s}-b", shape=lambda n: None if n is None else (n.paths, n.writers))
    rec(c.notices, f"{s}-b", shape=lambda n: n)  # told once
    rec(c.poll_events, "not a cursor", None, 0.0, 10)  # invalid_argument
    rec(c.break_lease, None, None)  # invalid_argument
    assert mine is not None
    return out


def test_client_operations_same_through_both_transports(service: ServerProcess, tmp_path: Path) -> None:
    local_root = tmp_path / "repo"
    local_root.mkdir()
    try:
        with LocalClient.open(str(local_root), durability="none") as local:
            assert isinstance(local, Client)
            expected = _script(local, local_root, "p")
    finally:
        stop_embedded_redis(local_root / ".edit-coordinator")
    with HttpClient(service.url, secret=SECRET) as remote:
        assert isinstance(remote, Client)
        got = _script(remote, service.root, "p")
    assert got == expected
    assert expected[1] == (ErrorCode.LEASED,) and expected[6] == (ErrorCode.LEASED,)
    assert expected[12] == [("l.txt", "p")]  # the long poll saw the edit
    assert expected[20] == (("other2.txt",), ("p",)) and expected[21] is None
    assert expected[-2:] == [(ErrorCode.INVALID_ARGUMENT,), (ErrorCode.INVALID_ARGUMENT,)]


def test_openapi_has_the_lease_event_history_undo_routes() -> None:
    doc = openapi_document()
    paths = doc["paths"]
    for path, method in [("/v1/leases", "post"), ("/v1/leases", "get"), ("/v1/leases/renew", "post"),
                         ("/v1/leases/release", "post"), ("/v1/admin/leases/break", "post"), ("/v1/events", "post"),
                         ("/v1/events/recent", "post"), ("/v1/history", "post"), ("/v1/undo", "post"),
                         ("/v1/notices", "post"), ("/v1/session", "get")]:  # fmt: skip
        assert method in paths[path], (path, method)
    assert "423" in paths["/v1/leases"]["post"]["responses"]


def test_lease_routes_follow_the_token_rules(service: ServerProcess) -> None:
    """A session token leases only as itself; breaking a lease needs the admin token; a long poll wakes up on a
    write made while it waits."""
    (service.root / "t.txt").write_text("a\n")
    a, b = auth(token("tok-a")), auth(token("tok-b"))
    with httpx.Client(base_url=service.url, timeout=30) as c:
        r = c.post("/v1/leases", json={"paths": ["t.txt"], "session": "tok-b"}, headers=a)
        assert (r.status_code, r.json()["code"]) == (403, "forbidden")
        r = c.post("/v1/leases", json={"paths": ["t.txt"], "ttl_s": 60}, headers=a)
        assert r.status_code == 200 and r.json()["leases"][0]["session"] == "tok-a"
        lease_id = r.json()["leases"][0]["id"]
        r = c.post("/v1/leases", json={"paths": ["t.txt"]}, headers=b)
        assert (r.status_code, r.json()["code"]) == (423, "leased")
        assert [x["id"] for x in c.get("/v1/leases", headers=b).json()["leases"]] == [lease_id]
        assert c.get("/v1/session", headers=a).json()["leases"][0]["id"] == lease_id
        r = c.post("/v1/admin/leases/break", json={"lease_id": lease_id}, headers=a)
        assert (r.status_code, r.json()["code"]) == (403, "forbidden")
        r = c.post("/v1/admin/leases/break", json={"lease_id": lease_id}, headers=auth(token(admin=True)))
        assert r.status_code == 200 and [x["id"] for x in r.json()["leases"]] == [lease_id]
        assert c.get("/v1/leases", headers=b).json()["leases"] == []

        cursor = c.post("/v1/events", json={"wait_s": 0}, headers=b).json()["cursor"]
        answer: dict[str, Any] = {}
        poll = threading.Thread(
            target=lambda: answer.setdefault(
                "r", c.post("/v1/events", json={"since": cursor, "wait_s": 20, "paths": ["t.txt"]}, headers=b)
            )
        )
        poll.start()
        c.post("/v1/read", json={"path": "t.txt"}, headers=a)
        edit = {"path": "t.txt", "old_string": "a", "new_string": "b"}
        r = c.post("/v1/edit", json=edit, headers=a)
        assert (r.status_code, r.json()["code"]) == (423, "leased")  # its broken lease refuses it once
        c.post("/v1/read", json={"path": "t.txt"}, headers=a)
        assert c.post("/v1/edit", json=edit, headers=a).is_success
        poll.join(30)
        events = answer["r"].json()["events"]
        assert [(e["path"], e["session"], e["operation"]) for e in events] == [("t.txt", "tok-a", "edit")]


# --- the command line ------------------------------------------------------------------------------------
def run_cli(*args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None) -> Any:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    full_env.pop("EDIT_COORDINATOR_REDIS_URL", None) if "EDIT_COORDINATOR_REDIS_URL" not in (env or {}) else None
    return subprocess.run(
        [sys.executable, "-m", "coordinator.cli", *args], cwd=cwd, input=stdin, capture_output=True, text=True,
        env=full_env, timeout=60,
    )  # fmt: skip


@pytest.mark.slow  # about 8 s: .ci/run's step 1b runs it (the default run stays under 10 minutes)
def test_read_edit_write_from_the_shell(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    try:
        p = run_cli("write", "notes.txt", "--session", "me", stdin="first\nsecond\n", cwd=root)
        assert p.returncode == 0 and "created" in p.stdout.lower(), p.stderr
        p = run_cli("edit", "notes.txt", "--old", "first", "--new", "1st", "--session", "other", cwd=root)
        assert p.returncode == info("not_read").exit_status and p.stderr.startswith("edit-coordinator: [not_read]")
        assert p.stdout == ""
        p = run_cli("read", "notes.txt", "--session", "other", cwd=root)
        assert p.returncode == 0 and "     1\tfirst" in p.stdout
        (root / "notes.txt").write_text("first\nsecond\nthird\n")  # an outside editor
        p = run_cli("edit", "notes.txt", "--old", "first", "--new", "1st", "--session", "other", cwd=root)
        assert p.returncode == info("stale").exit_status and "[stale]" in p.stderr
        assert (root / "notes.txt").read_text() == "first\nsecond\nthird\n"
        run_cli("read", "notes.txt", "--session", "other", "--raw", cwd=root)
        p = run_cli("edit", "notes.txt", "--old", "first", "--new", "1st", "--session", "other", "--json", cwd=root)
        assert p.returncode == 0 and json.loads(p.stdout)["replacements"] == 1
        p = run_cli("edit", "notes.txt", "--old", "nothing", "--new", "x", "--session", "other", cwd=root)
        assert p.returncode == info("no_match").exit_status == 7 and "[no_match]" in p.stderr
        p = run_cli("read", "../outside.txt", cwd=root)
        assert p.returncode == info("outside_root").exit_status == 3
        assert (root / "notes.txt").read_text() == "1st\nsecond\nthird\n"
        p = run_cli("--help", cwd=root)
        assert "exit statuses:" in p.stdout and "EDIT_COORDINATOR_REDIS_URL" in p.stdout
    finally:
        stop_embedded_redis(root / ".edit-coordinator")


def test_inspect_commands_start_nothing_in_an_empty_folder(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    p = run_cli("leases", "list", cwd=empty)
    assert p.returncode == 0 and "No coordinator is running" in p.stdout
    p = run_cli("watch", "--timeout", "0.1", cwd=empty)
    assert p.returncode == info("state_unavailable").exit_status and "No coordinator is running" in p.stderr
    p = run_cli("status", cwd=empty)
    assert "not running" in p.stdout
    p = run_cli("history", "a.txt", cwd=empty)  # no such file and no history: file_not_found, nothing started
    assert p.returncode == info("file_not_found").exit_status and "a.txt" in p.stderr
    p = run_cli("redis", "status", cwd=empty)
    assert p.returncode == 1 and p.stdout.strip() == "not running"
    assert list(empty.iterdir()) == []  # no state folder, so no redis-server either


def test_redis_url_variable_is_honoured_by_leases_and_watch(tmp_path: Path) -> None:
    """A root whose coordination state lives on another Redis: without the variable nothing is running for
    it; with EDIT_COORDINATOR_REDIS_URL its live lease is listed and its events are followed."""
    host, root = tmp_path / "host", tmp_path / "repo"
    host.mkdir()
    root.mkdir()
    with Coordinator(host) as c:
        url = c.redis_url
    try:
        with Coordinator(root, url) as coord:
            coord.session("agent").lease("src/**")
            (root / "f.txt").write_text("a\n")
            coord.session("agent").read("f.txt")
            coord.session("agent").edit("f.txt", "a", "b")
            p = run_cli("leases", "list", cwd=root)
            assert "No coordinator is running" in p.stdout
            p = run_cli("leases", "list", "--json", cwd=root, env={"EDIT_COORDINATOR_REDIS_URL": url})
            assert p.returncode == 0 and [x["pattern"] for x in json.loads(p.stdout)] == ["src/**"]
            p = run_cli("watch", "--last", "1", "--timeout", "0.1", "--json", cwd=root,
                        env={"EDIT_COORDINATOR_REDIS_URL": url})  # fmt: skip
            assert p.returncode == 0 and json.loads(p.stdout.splitlines()[0])["path"] == "f.txt"
    finally:
        stop_embedded_redis(host / ".edit-coordinator")


def test_redis_status_is_a_table_or_json(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    try:
        assert run_cli("redis", "start", cwd=root).returncode == 0
        p = run_cli("redis", "status", cwd=root)
        assert p.returncode == 0 and "PID" in p.stdout and "unix://" in p.stdout
        p = run_cli("redis", "status", "--json", cwd=root)
        assert json.loads(p.stdout)["pid"] > 0
    finally:
        stop_embedded_redis(root / ".edit-coordinator")
    assert embedded_status(root / ".edit-coordinator") is None


def test_a_failed_serve_start_leaves_no_redis_server(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    with pytest.raises(RuntimeError, match="did not start"):
        ServerProcess(root, "--max-edits", "0")
    assert embedded_status(root / ".edit-coordinator") is None


def test_serve_with_two_workers_runs_under_its_own_supervisor(tmp_path: Path) -> None:
    """Two worker processes (the supervisor's children) serve one socket; SIGTERM stops them all, exit 0."""
    root = tmp_path / "repo"
    root.mkdir()
    server = ServerProcess(root, workers=2)
    try:
        pids: set[int] = set()
        deadline = time.monotonic() + 30
        while len(pids) < 2 and time.monotonic() < deadline:
            with httpx.Client(base_url=server.url, timeout=10) as c:  # a new connection each time
                pids.add(c.get("/v1/health").json()["pid"])
        assert len(pids) == 2 and server.proc.pid not in pids
        assert server.stop() == 0
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")
