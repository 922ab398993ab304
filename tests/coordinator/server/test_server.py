"""The HTTP service, end to end: a real `edit-coordinator serve` process on 127.0.0.1 with the embedded
(real) Redis, driven by raw httpx calls and by `HttpClient`.

Properties guarded here: the service answers with the library's codes and messages (and one status per
code); a refused call does nothing; a retried write with the same Idempotency-Key is applied once, even
when the duplicates arrive together; a session token acts only as its own session; limits give a clear
4xx; a shutdown lets running calls finish and refuses new ones.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.client import Client, HttpClient, LocalClient
from coordinator.disk.locks import LockManager
from coordinator.engine import ReadResult, WriteResult
from coordinator.server import (
    ROUTES,
    STATUS_FOR_CODE,
    ServerConfig,
    mint_token,
    openapi_document,
    verify_token,
)
from coordinator.state.embedded import stop_embedded_redis
from tests import REPO_ROOT

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools")
pytest.importorskip("uvicorn", reason="the HTTP service needs uvicorn")

REPO = REPO_ROOT
SECRET = "test-secret-" + "x" * 40
LOOPBACK = "127.0.0.1"


# ---------------------------------------------------------------------------------------------------------
# A real server process
# ---------------------------------------------------------------------------------------------------------
class ServerProcess:
    """`edit-coordinator serve` on 127.0.0.1, port chosen by the kernel (or, with `uds`, on that unix socket).
    Always stopped by `stop()`."""

    def __init__(self, root: Path, *args: str, workers: int = 1, uds: str | None = None) -> None:
        self.root = root
        self.uds = uds
        self.url_file = root.parent / f"url-{uuid.uuid4().hex[:8]}.txt"
        self.log = root.parent / f"serve-{uuid.uuid4().hex[:8]}.log"
        env = {**os.environ, "EDIT_COORDINATOR_SECRET": SECRET, "PYTHONPATH": str(REPO)}
        env.pop("EDIT_COORDINATOR_SECRET_FILE", None)
        listener = ["--uds", uds] if uds else ["--host", LOOPBACK, "--port", "0"]
        cmd = [sys.executable, "-m", "coordinator.cli", "serve", "--root", str(root), *listener,
               "--workers", str(workers), "--url-file", str(self.url_file),
               "--durability", "none", *args]  # fmt: skip
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            self.url = self._wait_ready()
        except BaseException:
            self.stop()
            stop_embedded_redis(root / ".edit-coordinator")  # a failed start leaves no redis-server behind
            raise

    def _wait_ready(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while not self.url_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start:\n{self.log.read_text()}")
            time.sleep(0.02)
        url = self.url_file.read_text().strip()
        assert url == f"unix://{self.uds}" if self.uds else url.startswith(f"http://{LOOPBACK}:")
        base = "http://localhost" if self.uds else url
        while time.monotonic() < deadline:
            try:
                with httpx.Client(transport=httpx.HTTPTransport(uds=self.uds), timeout=2) as probe:
                    if probe.get(f"{base}/v1/health").status_code == 200:
                        return url
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not healthy:\n{self.log.read_text()}")

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def token(session: str | None = None, admin: bool = False, ttl_s: float = 3600) -> str:
    return mint_token(SECRET.encode(), session=session, admin=admin, ttl_s=ttl_s)


def auth(tok: str) -> dict[str, str]:
    return {"authorization": f"Bearer {tok}"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server (2 workers) for the module; its root holds the files of every test (distinct names)."""
    root = tmp_path_factory.mktemp("served") / "repo"
    root.mkdir()
    server = ServerProcess(
        root, "--lock-timeout", "0.5", "--max-body-bytes", str(256 * 1024), "--max-edits", "50", workers=2
    )
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


@pytest.fixture
def http(served: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=30) as c:
        yield c


def new_file(served: ServerProcess, text: str = "alpha\nbeta\ngamma\n") -> str:
    name = f"f_{uuid.uuid4().hex[:10]}.txt"
    (served.root / name).write_text(text)
    return name


def versions(served: ServerProcess, name: str) -> int:
    with Coordinator(served.root) as c:
        return len(c.history(name))


# ---------------------------------------------------------------------------------------------------------
# Basics and parity with the library
# ---------------------------------------------------------------------------------------------------------
def test_health_needs_no_token_and_says_nothing_about_files(http: httpx.Client) -> None:
    r = http.get("/v1/health")
    assert r.status_code == 200
    assert r.json()["status"] == "ok" and r.json()["redis"] is True
    assert set(r.json()) == {"status", "version", "redis", "draining", "pid"}


def test_http_client_is_a_client_and_returns_library_types(served: ServerProcess) -> None:
    name = new_file(served)
    with HttpClient(served.url, secret=SECRET) as c:
        assert isinstance(c, Client)
        r = c.read("s-types", name)
        assert isinstance(r, ReadResult) and r.content == "alpha\nbeta\ngamma\n" and r.total_lines == 3
        w = c.edit("s-types", name, "beta", "BETA")
        assert isinstance(w, WriteResult) and w.replacements == 1 and isinstance(w.warnings, tuple)
        m = c.multi_edit(
            "s-types", name, [{"old_string": "alpha", "new_string": "A"}, {"old_string": "gamma", "new_string": "G"}]
        )
        assert m.operation == "multi_edit"
        assert (served.root / name).read_text() == "A\nBETA\nG\n"
        u = c.undo("s-types", name)
        assert u.operation == "undo" and (served.root / name).read_text() == "alpha\nBETA\ngamma\n"
        w2 = c.write("s-types", "sub/dir/new.txt", "x\n")
        assert w2.created and (served.root / "sub/dir/new.txt").read_text() == "x\n"


def test_one_session_across_worker_processes_sees_no_false_stale(served: ServerProcess) -> None:
    """Each call on a new connection, so calls land on either worker process (the health answer on the same
    connection names the worker): a session's own writes made through one worker never make its view stale
    in the other. Goes on until both workers have served edits."""
    lines = 200
    name = new_file(served, "".join(f"line {i}\n" for i in range(lines)))
    t = auth(token("s-across"))
    served_by: list[int] = []
    for i in range(lines):
        with httpx.Client(base_url=served.url, timeout=30) as c:
            served_by.append(c.get("/v1/health").json()["pid"])  # one connection: one worker process
            if i == 0:
                assert c.post("/v1/read", json={"path": name}, headers=t).status_code == 200
            r = c.post("/v1/edit", json={"path": name, "old_string": f"line {i}\n", "new_string": f"LINE {i}\n"},
                       headers=t)  # fmt: skip
            assert r.status_code == 200, r.text
        if i >= 15 and len(set(served_by)) == 2:
            break
    assert len(set(served_by)) == 2, served_by  # both workers served this session's edits
    edits = len(served_by)
    assert (served.root / name).read_text().count("LINE") == edits
    assert versions(served, name) == edits


def test_http_client_with_per_session_tokens(served: ServerProcess) -> None:
    name = new_file(served)
    with HttpClient(served.url, tokens={"s-map": token("s-map")}) as c:
        c.read("s-map", name)
        assert c.edit("s-map", name, "alpha", "ALPHA").replacements == 1
        with pytest.raises(CoordinatorError) as ei:
            c.read("s-unknown", name)  # no token for it: refused locally, nothing sent
        assert ei.value.code == ErrorCode.PERMISSION_DENIED
    with HttpClient(served.url, token=token("s-map")) as c, pytest.raises(CoordinatorError) as ei:
        c.read("s-other", name)  # a session token used for another session: refused by the service
    assert ei.value.code == ErrorCode.PERMISSION_DENIED and ei.value.details["service_code"] == "forbidden"
    assert ei.value.details["http_status"] == 403


def _script(c: Client, session: str, name: str) -> list[Any]:
    """The same calls through any Client: results (minus timings) and refusals (code, message)."""
    out: list[Any] = []

    def rec(fn: Any, *a: Any, **k: Any) -> None:
        try:
            res = fn(*a, **k).to_dict()
            res.pop("timings", None)
            out.append(res)
        except CoordinatorError as exc:
            out.append((exc.code, exc.message))

    rec(c.edit, session, name, "beta", "B")  # not_read
    rec(c.read, session, name)
    rec(c.read, session, name)  # unchanged
    rec(c.read, session, name, offset=2, limit=1)
    rec(c.edit, session, name, "nope", "B")  # no_match
    rec(c.edit, session, name, "a", "b")  # ambiguous
    rec(c.edit, session, name, "beta", "beta")  # no_change
    rec(c.edit, session, name, "beta", "B\u2019s")
    rec(c.edit, session, name, "a", "A", replace_all=True)
    rec(c.multi_edit, session, name, [{"old_string": "B", "new_string": "C"}, {"old_string": "xx", "new_string": "y"}])
    rec(c.write, session, name, "whole\n")
    rec(c.read, session, name.replace(".txt", ".tx"))  # did you mean
    rec(c.read, session, "../outside.txt")
    rec(c.read, session, "sub")
    rec(c.edit, session, "missing/dir/x.txt", "a", "b")
    rec(c.undo, session, name)
    rec(c.undo, session, name, version=999)
    return out


def _as_remote(message: str, root: Path) -> str:
    """A message as the service sends it: the root's own path shown relative to the root (invariant 5)."""
    real = os.path.realpath(root)
    return message.replace(real + "/", "").replace(real, ".")


def test_same_results_and_errors_as_in_process(served: ServerProcess, tmp_path: Path) -> None:
    """Parity: one script of calls, in-process on one root and over HTTP on another, gives equal answers."""
    local_root = tmp_path / "repo"
    local_root.mkdir()
    name = "parity.txt"
    text = "alpha\nbeta\ngamma\n"
    (local_root / name).write_text(text)
    (local_root / "sub").mkdir()
    (served.root / name).write_text(text)
    (served.root / "sub").mkdir(exist_ok=True)
    try:
        with LocalClient.open(str(local_root), durability="none") as local:
            expected = _script(local, "parity", name)
    finally:
        stop_embedded_redis(local_root / ".edit-coordinator")
    with HttpClient(served.url, secret=SECRET) as remote:
        got = _script(remote, "parity", name)
    assert len(got) == len(expected)
    for e, g in zip(expected, got, strict=True):
        if isinstance(e, tuple):
            assert isinstance(g, tuple) and g[0] == e[0], (e, g)
            assert g[1] == _as_remote(e[1], local_root).replace(str(local_root.parent), str(served.root.parent)), (e, g)
        else:
            assert g == e


def test_status_per_code_and_error_body(http: httpx.Client, served: ServerProcess) -> None:
    name = new_file(served)
    t = auth(token("s-status"))
    cases = [
        ("/v1/edit", {"path": name, "old_string": "alpha", "new_string": "x"}, "not_read"),
        ("/v1/read", {"path": "no/such/file.txt"}, "file_not_found"),
        ("/v1/read", {"path": "../x.txt"}, "outside_root"),
        ("/v1/read", {"path": "a\x00b"}, "invalid_argument"),
    ]
    for endpoint, body, code in cases:
        r = http.post(endpoint, json=body, headers=t)
        assert r.status_code == STATUS_FOR_CODE[code], r.text
        data = r.json()
        assert data["code"] == code and data["message"] and isinstance(data["details"], dict)
    http.post("/v1/read", json={"path": name}, headers=t)
    (served.root / name).write_text("changed outside\n")
    r = http.post("/v1/edit", json={"path": name, "old_string": "changed", "new_string": "x"}, headers=t)
    assert (r.status_code, r.json()["code"]) == (409, "stale")


def test_status_table_covers_every_library_code() -> None:
    for code in ErrorCode:
        assert 400 <= STATUS_FOR_CODE[code.value] < 600
    assert STATUS_FOR_CODE["stale"] == 409 and STATUS_FOR_CODE["file_not_found"] == 404
    assert STATUS_FOR_CODE["invalid_argument"] == 422 and STATUS_FOR_CODE["lock_timeout"] == 423
    assert STATUS_FOR_CODE["state_unavailable"] == 503 and STATUS_FOR_CODE["unauthorized"] == 401


def test_openapi_document_is_served_and_matches_routes(http: httpx.Client) -> None:
    r = http.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"].startswith("3.")
    for route in ROUTES:
        op = doc["paths"][route.path][route.method.lower()]
        assert str(route.ok_status) in op["responses"]
    edit = doc["paths"]["/v1/edit"]["post"]
    assert any(p["name"] == "Idempotency-Key" for p in edit["parameters"])
    assert doc["components"]["schemas"]["EditRequest"]["properties"]["path"]["maxLength"] == 4096
    assert doc["components"]["schemas"]["MultiEditRequest"]["properties"]["edits"]["maxItems"] == 50
    assert openapi_document(ServerConfig(root="."))["paths"].keys() == doc["paths"].keys()


def test_malformed_requests_are_refused_with_422(http: httpx.Client, served: ServerProcess) -> None:
    name = new_file(served)
    t = auth(token("s-malformed"))
    bodies = [
        b"{not json",
        b'{"path": "' + name.encode() + b'", "old_string": "\xff\xfe", "new_string": "x"}',
        b'{"path": "' + name.encode() + b'", "old_string": "\\ud800", "new_string": "x"}',
        json.dumps({"path": name, "old_string": 1, "new_string": "x"}).encode(),
        json.dumps({"path": name, "old_string": "a", "new_string": "b", "replace_all": "yes"}).encode(),
        json.dumps({"path": name, "old_string": "a", "new_string": "b", "oldString": "typo"}).encode(),
        json.dumps({"path": name, "old_string": "a", "new_string": "b", "policy": "yolo"}).encode(),
        json.dumps([1, 2, 3]).encode(),
        b"[" * 5000 + b"]" * 5000,
        b"",
    ]
    for body in bodies:
        r = http.post("/v1/edit", content=body, headers={**t, "content-type": "application/json"})
        assert r.status_code == 422, (body[:60], r.text)
        assert r.json()["code"] == "invalid_argument"
    assert (served.root / name).read_text() == "alpha\nbeta\ngamma\n"
    r = http.get("/v1/nothing-here", headers=t)
    assert (r.status_code, r.json()["code"]) == (404, "not_found")
    r = http.get("/v1/edit", headers=t)
    assert (r.status_code, r.json()["code"]) == (405, "method_not_allowed") and r.headers["allow"] == "POST"


# ---------------------------------------------------------------------------------------------------------
# Authentication
# ---------------------------------------------------------------------------------------------------------
def test_token_misuse_gets_401_or_403_and_does_nothing(http: httpx.Client, served: ServerProcess) -> None:
    name = new_file(served)
    owner = auth(token("s-owner"))
    assert http.post("/v1/read", json={"path": name}, headers=owner).status_code == 200
    edit = {"path": name, "old_string": "alpha", "new_string": "PWNED"}
    forged = mint_token(b"another-secret-of-enough-length", session="s-owner")
    expired = token("s-owner", ttl_s=-5)
    other = token("s-other")
    attempts: list[tuple[dict[str, str], dict[str, Any], int, str]] = [
        ({}, edit, 401, "unauthorized"),
        ({"authorization": "Basic czE6cHc="}, edit, 401, "unauthorized"),
        ({"authorization": "Bearer not-a-token"}, edit, 401, "unauthorized"),
        (auth(forged), edit, 401, "unauthorized"),
        (auth(expired), edit, 401, "unauthorized"),
        (auth(token("s-owner")[:-3] + "AAA"), edit, 401, "unauthorized"),
        (auth(other), {**edit, "session": "s-owner"}, 403, "forbidden"),  # acting as another session
    ]
    for i, (headers, body, status, code) in enumerate(attempts):
        r = http.post("/v1/edit", json=body, headers=headers)
        assert (r.status_code, r.json()["code"]) == (status, code), (i, r.text)
        if status == 401:
            assert r.headers["www-authenticate"].startswith("Bearer")
    # The other session's own token works for itself, but its view is its own: it has not read the file.
    r = http.post("/v1/edit", json=edit, headers=auth(other))
    assert r.json()["code"] == "not_read"
    # Admin-only endpoints refuse session tokens.
    for method, endpoint, body in [
        ("GET", "/v1/sessions", None),
        ("POST", "/v1/tokens", {"session": "x"}),
        ("POST", "/v1/admin/shutdown", None),
    ]:
        r = http.request(method, endpoint, json=body, headers=owner)
        assert (r.status_code, r.json()["code"]) == (403, "forbidden"), endpoint
    assert (served.root / name).read_text() == "alpha\nbeta\ngamma\n"
    assert versions(served, name) == 0
    # The history is open to a session token (it lists who wrote which lines when, no contents).
    r = http.post("/v1/history", json={"path": name}, headers=owner)
    assert r.status_code == 200 and r.json() == {"path": name, "entries": []}, r.text
    r = http.post("/v1/history", json={"path": "../elsewhere.txt"}, headers=owner)
    assert r.json()["code"] == "outside_root"
    assert http.get("/v1/health").json()["status"] == "ok"  # still serving


def test_unauthenticated_request_is_answered_without_reading_the_body(served: ServerProcess) -> None:
    # A large body and no token: 401, not 413 (authentication comes first and nothing is parsed).
    r = httpx.post(f"{served.url}/v1/write", content=b"x" * (512 * 1024), timeout=10)
    assert r.status_code == 401


def test_token_roundtrip_and_issue_endpoint(http: httpx.Client) -> None:
    p = verify_token(SECRET.encode(), token("s-t"))
    assert p.role == "session" and p.session == "s-t" and p.expires_at > time.time()
    assert verify_token(SECRET.encode(), token(admin=True)).is_admin
    r = http.post("/v1/tokens", json={"session": "s-issued", "ttl_s": 60}, headers=auth(token(admin=True)))
    assert r.status_code == 200
    issued = r.json()["token"]
    r = http.get("/v1/session", headers=auth(issued))
    assert r.json()["session"] == "s-issued" and r.json()["role"] == "session"
    r = http.get("/v1/session", params={"session": "s-x"}, headers=auth(issued))
    assert r.status_code == 403


def test_token_command_prints_a_working_token(served: ServerProcess, http: httpx.Client) -> None:
    env = {**os.environ, "EDIT_COORDINATOR_SECRET": SECRET, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "token", "--root", str(served.root), "--session", "s-cli"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=30, check=True,
    )  # fmt: skip
    r = http.get("/v1/session", headers=auth(out.stdout.strip()))
    assert r.status_code == 200 and r.json()["session"] == "s-cli"


def test_undo_of_others_writes_needs_admin(served: ServerProcess) -> None:
    name = new_file(served)
    with HttpClient(served.url, secret=SECRET) as c, HttpClient(served.url, token=token(admin=True)) as admin:
        c.read("s-a", name)
        c.edit("s-a", name, "alpha", "A1")
        c.read("s-b", name)
        v2 = c.edit("s-b", name, "beta", "B1")
        c.read("s-a", name)
        with pytest.raises(CoordinatorError) as ei:
            c.undo("s-a", name, version=v2.version)  # s-b's write
        assert ei.value.code == ErrorCode.PERMISSION_DENIED and ei.value.details["service_code"] == "forbidden"
        assert (served.root / name).read_text() == "A1\nB1\ngamma\n"
        r = c.undo("s-a", name)  # reverts s-a's own edit; s-b's later write stays
        assert (served.root / name).read_text() == "alpha\nB1\ngamma\n" and r.reverts == 1
        admin.read("ops", name)
        admin.undo("ops", name, version=v2.version)
        assert (served.root / name).read_text() == "alpha\nbeta\ngamma\n"
        hist = admin.history(name)
        assert [e.operation for e in hist] == ["undo", "undo", "edit", "edit"] and hist[0].session == "ops"


# ---------------------------------------------------------------------------------------------------------
# Idempotency
# ---------------------------------------------------------------------------------------------------------
def test_repeated_request_id_returns_first_answer(http: httpx.Client, served: ServerProcess) -> None:
    name = new_file(served)
    t = auth(token("s-idem"))
    http.post("/v1/read", json={"path": name}, headers=t)
    body = {"path": name, "old_string": "alpha", "new_string": "alpha!"}
    h = {**t, "idempotency-key": "edit-1"}
    first = http.post("/v1/edit", json=body, headers=h)
    again = http.post("/v1/edit", json=body, headers=h)
    assert first.status_code == again.status_code == 200
    assert first.content == again.content and again.headers.get("idempotent-replayed") == "true"
    assert (served.root / name).read_text() == "alpha!\nbeta\ngamma\n" and versions(served, name) == 1
    # Same key, another request: refused, nothing done.
    r = http.post("/v1/edit", json={**body, "new_string": "other"}, headers=h)
    assert (r.status_code, r.json()["code"]) == (422, "idempotency_key_reused")
    # A refusal is an answer too: replayed as it was.
    bad = {**body, "old_string": "zzz"}
    r1 = http.post("/v1/edit", json=bad, headers={**t, "idempotency-key": "edit-2"})
    r2 = http.post("/v1/edit", json=bad, headers={**t, "idempotency-key": "edit-2"})
    assert r1.json()["code"] == "no_match" and r1.content == r2.content
    # Keys are per session: another session's identical key does not see this session's answer.
    t2 = auth(token("s-idem-2"))
    r = http.post("/v1/edit", json={**body, "session": "s-idem-2"}, headers={**t2, "idempotency-key": "edit-1"})
    assert r.json()["code"] == "not_read"


def test_concurrent_duplicates_apply_once(served: ServerProcess) -> None:
    name = new_file(served)
    t = auth(token("s-dup"))
    with httpx.Client(base_url=served.url, timeout=30, limits=httpx.Limits(max_connections=16)) as c:
        c.post("/v1/read", json={"path": name}, headers=t)
        body = {"path": name, "old_string": "beta", "new_string": "beta+1"}
        h = {**t, "idempotency-key": f"dup-{uuid.uuid4().hex}"}
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda _: c.post("/v1/edit", json=body, headers=h), range(12)))
    assert {a.status_code for a in answers} == {200}
    assert len({a.content for a in answers}) == 1
    assert sum(a.headers.get("idempotent-replayed") == "true" for a in answers) == 11
    assert (served.root / name).read_text() == "alpha\nbeta+1\ngamma\n" and versions(served, name) == 1


def _wait_for_claim(served: ServerProcess, session: str, idem_key: str, timeout: float = 20.0) -> None:
    """Until the service holds the pending claim of (session, key) in Redis: a request owns the key."""
    from coordinator.disk.layout import namespace_for
    from coordinator.server import IdempotencyStore
    from coordinator.state.embedded import embedded_status
    from coordinator.state.views import connect

    status = embedded_status(served.root / ".edit-coordinator")
    assert status is not None
    client = connect(status["url"])
    try:
        k = IdempotencyStore(client, namespace_for(served.root), ttl_s=60, wait_s=1).key(session, idem_key)
        deadline = time.monotonic() + timeout
        while (client.get(k) or b"")[:1] != b"P":
            assert time.monotonic() < deadline, "no request claimed the key"
            time.sleep(0.005)
    finally:
        client.close()


def test_duplicates_waiting_for_a_taken_lock_apply_once(served: ServerProcess) -> None:
    """The first request finds the file's lock taken and moves to the thread pool (keeping its claim on the
    key); its duplicates wait for its answer. One version, one answer for all."""
    name = new_file(served)
    t = auth(token("s-dup-lock"))
    body = {"path": name, "old_string": "gamma", "new_string": "gamma+1"}
    h = {**t, "idempotency-key": f"dup-lock-{uuid.uuid4().hex}"}
    with httpx.Client(base_url=served.url, timeout=30, limits=httpx.Limits(max_connections=8)) as c:
        c.post("/v1/read", json={"path": name}, headers=t)
        held = LockManager(served.root / ".edit-coordinator" / "locks").acquire(name)
        try:
            with ThreadPoolExecutor(6) as pool:
                futures = [pool.submit(c.post, "/v1/edit", json=body, headers=h) for _ in range(6)]
                _wait_for_claim(served, "s-dup-lock", h["idempotency-key"])  # the first waits for the lock
                held.release()
                answers = [f.result() for f in futures]
        finally:
            held.release()
    assert {a.status_code for a in answers} == {200}, [a.text for a in answers]
    assert len({a.content for a in answers}) == 1
    assert (served.root / name).read_text() == "alpha\nbeta\ngamma+1\n" and versions(served, name) == 1


def test_lock_timeout_is_not_kept_so_the_retry_applies(http: httpx.Client, served: ServerProcess) -> None:
    name = new_file(served)
    t = auth(token("s-lock"))
    http.post("/v1/read", json={"path": name}, headers=t)
    h = {**t, "idempotency-key": "lock-1"}
    body = {"path": name, "old_string": "gamma", "new_string": "GAMMA"}
    held = LockManager(served.root / ".edit-coordinator" / "locks").acquire(name)
    try:
        r = http.post("/v1/edit", json=body, headers=h)
        assert (r.status_code, r.json()["code"]) == (423, "lock_timeout") and r.headers["retry-after"]
        assert (served.root / name).read_text() == "alpha\nbeta\ngamma\n"
    finally:
        held.release()
    r = http.post("/v1/edit", json=body, headers=h)
    assert r.status_code == 200 and "idempotent-replayed" not in r.headers
    assert (served.root / name).read_text() == "alpha\nbeta\nGAMMA\n"


class _LoseFirstAnswer(httpx.HTTPTransport):
    """Delivers every request, but loses the first answer to an edit (as a dropped connection would)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0
        self.keys: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.url.path == "/v1/edit":
            self.keys.append(request.headers["idempotency-key"])
            if self.lost == 0:
                self.lost += 1
                response.read()
                response.close()
                raise httpx.ReadError("connection lost", request=request)
        return response


def test_http_client_retries_with_the_same_key(served: ServerProcess) -> None:
    name = new_file(served)
    transport = _LoseFirstAnswer()
    with HttpClient(served.url, secret=SECRET, transport=transport, backoff_s=0.01) as c:
        c.read("s-retry", name)
        res = c.edit("s-retry", name, "alpha", "ALPHA")
    assert res.replacements == 1 and transport.lost == 1
    assert len(transport.keys) == 2 and transport.keys[0] == transport.keys[1]
    assert (served.root / name).read_text() == "ALPHA\nbeta\ngamma\n" and versions(served, name) == 1


def test_http_client_unreachable_is_state_unavailable() -> None:
    with (
        HttpClient("http://127.0.0.1:9", secret=SECRET, retries=1, backoff_s=0.01, connect_timeout=1) as c,
        pytest.raises(CoordinatorError) as ei,
    ):
        c.read("s", "a.txt")
    assert ei.value.code == ErrorCode.STATE_UNAVAILABLE


# ---------------------------------------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------------------------------------
def test_limits_give_clear_4xx(http: httpx.Client, served: ServerProcess) -> None:
    name = new_file(served)
    t = auth(token("s-limits"))
    big = {"path": name, "content": "x" * (300 * 1024)}
    r = http.post("/v1/write", json=big, headers=t)
    assert (r.status_code, r.json()["code"]) == (413, "too_large")

    def chunks() -> Iterator[bytes]:
        yield b'{"path": "' + name.encode() + b'", "content": "'
        for _ in range(40):
            yield b"y" * 8192
        yield b'"}'

    r = httpx.post(f"{served.url}/v1/write", content=chunks(), headers=t, timeout=10)  # chunked, no length
    assert (r.status_code, r.json()["code"]) == (413, "too_large")
    r = http.post("/v1/read", json={"path": "a/" * 2100 + "x"}, headers=t)
    assert (r.status_code, r.json()["code"]) == (422, "invalid_argument")
    edits = [{"old_string": f"a{i}", "new_string": "b"} for i in range(51)]
    r = http.post("/v1/multi_edit", json={"path": name, "edits": edits}, headers=t)
    assert (r.status_code, r.json()["code"]) == (422, "invalid_argument") and "50" in r.json()["message"]
    r = http.post("/v1/edit", json={"path": name, "old_string": "a", "new_string": "b"},
                  headers={**t, "idempotency-key": "bad key with spaces"})  # fmt: skip
    assert (r.status_code, r.json()["code"]) == (422, "invalid_argument")
    assert (served.root / name).read_text() == "alpha\nbeta\ngamma\n"
    assert http.get("/v1/health").status_code == 200


def test_overload_and_graceful_shutdown(tmp_path: Path) -> None:
    """Concurrency limit -> 429 overloaded; shutdown lets the running edit finish and refuses new work."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.txt").write_text("one\ntwo\n")
    server = ServerProcess(root, "--max-concurrency", "1", "--lock-timeout", "20", workers=1)
    try:
        t = auth(token("s-shut"))
        admin = auth(token(admin=True))
        with httpx.Client(base_url=server.url, timeout=30) as c1, httpx.Client(base_url=server.url, timeout=30) as c2:
            assert c1.post("/v1/read", json={"path": "a.txt"}, headers=t).status_code == 200
            held = LockManager(root / ".edit-coordinator" / "locks").acquire("a.txt")
            result: dict[str, httpx.Response] = {}
            slow = threading.Thread(
                target=lambda: result.setdefault(
                    "r", c1.post("/v1/edit", json={"path": "a.txt", "old_string": "one", "new_string": "1"}, headers=t)
                )
            )
            slow.start()
            try:
                deadline = time.monotonic() + 10
                while True:  # wait until the edit is in flight (it then blocks on the lock)
                    r = c2.post("/v1/read", json={"path": "a.txt"}, headers=t)
                    if r.status_code == 429 or time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
                assert (r.status_code, r.json()["code"]) == (429, "overloaded") and r.headers["retry-after"]
                r = c2.post("/v1/admin/shutdown", headers=admin)
                assert r.status_code == 202 and r.json()["status"] == "shutting_down"
                # The service stops only once the running edit has ended: until then it listens, and
                # refuses new writes.
                r = c2.post("/v1/write", json={"path": "new.txt", "content": "x"}, headers=t)
                assert (r.status_code, r.json()["code"]) == (503, "shutting_down"), r.text
                assert server.proc.poll() is None
            finally:
                held.release()
            slow.join(30)
        assert result["r"].status_code == 200, result["r"].text
        assert (root / "a.txt").read_text() == "1\ntwo\n"
        assert not (root / "new.txt").exists()
        server.proc.wait(20)
        assert server.proc.returncode == 0
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


def test_redis_down_fails_closed_over_http(tmp_path: Path) -> None:
    """Redis gone: health says so (503), and an edit is refused with state_unavailable; nothing is written."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    server = ServerProcess(root, workers=1)
    try:
        t = auth(token("s-down"))
        with httpx.Client(base_url=server.url, timeout=30) as c:
            assert c.post("/v1/read", json={"path": "a.txt"}, headers=t).status_code == 200
            stop_embedded_redis(root / ".edit-coordinator")
            r = c.get("/v1/health")
            assert r.status_code == 503 and r.json()["redis"] is False
            r = c.post(
                "/v1/edit",
                json={"path": "a.txt", "old_string": "one", "new_string": "1"},
                headers={**t, "idempotency-key": "down-1"},
            )
            assert (r.status_code, r.json()["code"]) == (503, "state_unavailable") and r.headers["retry-after"]
        assert (root / "a.txt").read_text() == "one\n"
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")
