"""The ways in, as real processes: the HTTP route of a real `serve` (Claude Code's `http` hook type) and
the `edit-coordinator hook claude-code` command, against the service and against the embedded default.
Every refusal of the route is a 200 with a deny body; the command fails closed (exit 2) on its own errors
where it guards a write, and lets every other event go on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coordinator.state.embedded import stop_embedded_redis
from tests import REPO_ROOT
from tests.coordinator.agents.hooking import payload
from tests.coordinator.server.test_server import ServerProcess, token

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("hooked") / "repo"
    root.mkdir()
    server = ServerProcess(root)
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


def _post(served: ServerProcess, data: Any, tok: str | None, query: str = "") -> httpx.Response:
    headers = {"authorization": f"Bearer {tok}"} if tok else {}
    body = data if isinstance(data, bytes) else json.dumps(data).encode()
    return httpx.post(f"{served.url}/v1/hooks/claude-code{query}", content=body, headers=headers, timeout=30)


def _file(served: ServerProcess, name: str) -> Path:
    f = served.root / name
    f.write_text("def main():\n    return 1\n")
    return f


def _deny_reason(resp: httpx.Response) -> str:
    assert resp.status_code == 200, resp.text
    out = resp.json()["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny" and out["hookEventName"] == "PreToolUse"
    return str(out["permissionDecisionReason"])


def test_http_hook_guards_a_read_edit_cycle(served):
    f = _file(served, "cycle.py")
    admin = token(admin=True)
    ids = {"session_id": "http-1", "tool_use_id": "toolu_h1", "tool_input__file_path": str(f)}
    assert "has not been read" in _deny_reason(_post(served, payload("pre_edit", served.root, **ids), admin))
    read = payload("post_read", served.root, **ids, file__content=f.read_text())
    assert _post(served, read, admin).json() == {}
    assert _post(served, payload("pre_edit", served.root, **ids), admin).json() == {}
    f.write_text("def main():\n    return 2\n")
    assert _post(served, payload("post_edit", served.root, **ids), admin).json() == {}
    history = httpx.post(
        f"{served.url}/v1/history", json={"path": "cycle.py"}, headers={"authorization": f"Bearer {admin}"}
    )
    assert history.status_code == 200, history.text
    assert [e["session"] for e in history.json()["entries"]] == ["http-1"]
    # another session's edit on its old view is stale, naming who wrote; no server path leaks
    other = {"session_id": "http-2", "tool_use_id": "toolu_h2", "tool_input__file_path": str(f)}
    _post(served, payload("post_read", served.root, **other, file__content="def main():\n    return 1\n"), admin)
    reason = _deny_reason(_post(served, payload("pre_edit", served.root, **other), admin))
    # what it was shown is an earlier version of the file (in the history): its view, out of date
    assert "modified since you last read it" in reason and "http-1" in reason and str(served.root) not in reason


def test_http_hook_refusals_of_its_own_are_denies_in_a_200(served):
    data = payload("pre_edit", served.root, session_id="x")
    assert "token" in _deny_reason(_post(served, data, None))
    assert "signature" in _deny_reason(_post(served, data, "ec1.e30.AAAA"))
    unreadable = _post(served, b"{not json", token(admin=True))  # no event to answer in the shape of: a block
    assert unreadable.status_code == 200 and unreadable.json()["decision"] == "block"
    assert "could not be read" in unreadable.json()["reason"]
    assert "another session" in _deny_reason(_post(served, data, token("someone-else")))
    assert _post(served, data, token(admin=True), "?answer=command").json()["exit_code"] == 0
    assert httpx.post(f"{served.url}/v1/hooks/notepad", content=b"{}").status_code == 404


def test_the_route_lets_an_event_that_guards_no_write_go_on_and_logs_its_failure(served):
    """An error of the service's own on a Stop or PostToolUse (here: an event it cannot read) is "go on"
    (Claude Code's Stop keeps the agent going on a block), logged where `status` shows it; a PreToolUse
    that cannot be read is still refused."""
    from coordinator.agents import failures

    admin = token(admin=True)
    before, _ = failures.recent(served.root)
    for event in ("Stop", "SubagentStop", "PostToolUse"):
        data = {"hook_event_name": event, "cwd": str(served.root), "tool_name": "Edit"}  # no session_id
        for query in ("", "?answer=command"):
            resp = _post(served, data, admin, query)
            assert resp.status_code == 200 and resp.json() in ({}, {"exit_code": 0, "stdout": "", "stderr": "",
                                                                   "code": "invalid_argument"}), resp.text  # fmt: skip
    count, logged = failures.recent(served.root, 6)
    assert count == before + 6 and all("session_id" in f.what for f in logged)
    pre = _post(served, {"hook_event_name": "PreToolUse", "cwd": str(served.root)}, admin, "?answer=command").json()
    assert pre["exit_code"] == 2 and "session_id" in pre["stderr"]


def _hook(
    data: Any, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    argv = [sys.executable, "-m", "coordinator.cli", "hook", "claude-code", *args]
    raw = data if isinstance(data, str) else json.dumps(data)
    return subprocess.run(
        argv, input=raw, env={**base, "PYTHONPATH": str(REPO_ROOT), **(env or {})}, cwd=cwd or REPO_ROOT,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_command_hook_against_the_service(served):
    f = _file(served, "command.py")
    ids = {"session_id": "cmd-1", "tool_use_id": "toolu_c1", "tool_input__file_path": str(f)}
    env = {"EDIT_COORDINATOR_SERVER": served.url, "EDIT_COORDINATOR_TOKEN": token(admin=True)}
    denied = _hook(payload("pre_edit", served.root, **ids), env=env)
    assert denied.returncode == 0, denied.stderr
    assert "has not been read" in json.loads(denied.stdout)["hookSpecificOutput"]["permissionDecisionReason"]
    read = _hook(payload("post_read", served.root, **ids, file__content=f.read_text()), env=env)
    assert (read.returncode, read.stdout) == (0, "")
    allowed = _hook(payload("pre_edit", served.root, **ids), "--server", served.url, "--token", token(admin=True))
    assert (allowed.returncode, allowed.stdout) == (0, ""), allowed.stderr


def test_command_hook_against_the_service_loads_nothing_heavy(served):
    """The command hook runs once per tool call: on its way to a service it loads neither the engine, nor
    Redis, httpx, pydantic, http.client, nor dataclasses (which alone brings inspect)."""
    f = _file(served, "light.py")
    raw = payload("pre_edit", served.root, session_id="light-1", tool_use_id="toolu_l1", tool_input__file_path=str(f))
    probe = (
        "import io, sys\n"
        "from coordinator.cli import main\n"
        f"sys.stdin = io.TextIOWrapper(io.BytesIO({json.dumps(raw).encode()!r}))\n"
        f"code = main(['hook', 'claude-code', '--server', {served.url!r}, '--token', {token(admin=True)!r}])\n"
        "heavy = ('coordinator.engine', 'redis', 'httpx', 'pydantic', 'http.client', 'dataclasses', 'inspect')\n"
        "print(code, sorted(m for m in heavy if m in sys.modules), file=sys.stderr)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "has not been read" in r.stdout, r.stdout + r.stderr
    assert r.stderr.strip().splitlines()[-1] == "0 []", r.stderr


@pytest.mark.parametrize(
    ("stdin", "args", "said"),
    [
        ("{not json", [], "not JSON"),
        ('{"hook_event_name": "PreToolUse"}', [], "session_id"),
        (None, ["--server", "http://127.0.0.1:9", "--token", "t"], "cannot be reached"),
        (None, ["--server", "http://127.0.0.1:9"], "no token"),
    ],
)
def test_command_hook_fails_closed(tmp_path, stdin, args, said):
    data = stdin if stdin is not None else payload("pre_edit", tmp_path, session_id="s")
    r = _hook(data, *args)
    assert r.returncode == 2 and said in r.stderr and r.stdout == ""


def _stop_hook_service(root: Path) -> None:
    from coordinator.cli import hookservice

    assert hookservice.stop(root) or not (root / ".edit-coordinator" / "hook-service" / "pid").exists()


@pytest.mark.slow  # starts a hook service, then a process per event: ~20 s on 2 loaded cores
@pytest.mark.parametrize("service", ["1", "0"])
def test_command_hook_on_the_embedded_default_found_from_cwd(real_redis_root, service):
    """No service named: the repository's own hook service on its unix socket (started by the first hook),
    or with EDIT_COORDINATOR_HOOK_SERVICE=0 a coordinator in the hook's process; the same answers."""
    root = real_redis_root
    (root / ".git").mkdir()
    (root / "src").mkdir()
    f = root / "src" / "app.py"
    f.write_text("def main():\n    return 1\n")
    env = {"EDIT_COORDINATOR_HOOK_SERVICE": service}
    ids = {"session_id": "local-1", "tool_use_id": "toolu_l1"}
    try:
        elsewhere = root / "src"  # the hook runs in a subfolder: the root is found upwards
        assert _hook(payload("post_read", root, **ids, cwd=str(elsewhere)), env=env).returncode == 0
        first = _hook(payload("pre_edit", root, **ids), env=env)
        assert (first.returncode, first.stdout) == (0, ""), first.stderr
        f.write_text("def main():\n    return 2\n")
        assert _hook(payload("post_edit", root, **ids), env=env).returncode == 0
        other = _hook(payload("pre_edit", root, session_id="local-2", tool_use_id="toolu_l2"), env=env)
        assert "has not been read" in json.loads(other.stdout)["hookSpecificOutput"]["permissionDecisionReason"]
        sock = root / ".edit-coordinator" / "hook-service" / "sock"
        assert sock.exists() == (service == "1")
    finally:
        _stop_hook_service(root)
    history = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "history", "src/app.py", "--root", str(root)],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert history.returncode == 0 and "local-1" in history.stdout, history.stderr
