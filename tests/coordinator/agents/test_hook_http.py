"""Claude Code's http hooks into the repository's hook service (cli/hookservice.py `http_endpoint`, serve
--hook-http): `init` writes them where the settings are this machine's own; the loopback port answers the
hook route alone and only with the repository's key; the command hooks of SessionStart and UserPromptSubmit
start the service and name the agent's process, whose life keeps the service up; a changed config restarts
the service in place (no http hook could start it again)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from coordinator.agents.core import HOOK_KEY_HEADER
from coordinator.cli import hookservice
from coordinator.disk.layout import STATE_DIR_NAME, hook_service_dir
from tests import REPO_ROOT
from tests.coordinator.agents.hooking import payload

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="unix sockets and Linux process tools")


def _init(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "init", *args, "--root", str(root)],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO_ROOT,
    )  # fmt: skip


def _settings(root: Path, rel: str = ".claude/settings.local.json") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / rel).read_text())
    return data


def _post(endpoint: hookservice.HookHttp, event: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {HOOK_KEY_HEADER: endpoint.key if key is None else key}
    return httpx.post(f"{endpoint.url}/v1/hooks/claude-code", json=event, headers=headers, timeout=60)


def test_init_writes_http_hooks_for_this_machines_settings_and_command_hooks_for_shared_ones(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    assert _init(root, "claude-code", "--scope", "project").returncode == 0
    shared = _settings(root, ".claude/settings.json")["hooks"]
    assert {h["type"] for groups in shared.values() for g in groups for h in g["hooks"]} == {"command"}
    assert not (hook_service_dir(root / STATE_DIR_NAME) / hookservice.HTTP_FILE).exists()  # no key written
    refused = _init(root, "claude-code", "--scope", "project", "--hook-type", "http")
    assert refused.returncode != 0 and "--scope local" in refused.stderr and "key" in refused.stderr
    refused = _init(root, "codex", "--hook-type", "http")
    assert refused.returncode != 0 and "Claude Code's" in refused.stderr
    assert _init(root, "claude-code").returncode == 0
    local = _settings(root)["hooks"]
    kinds = {event: {h["type"] for g in groups for h in g["hooks"]} for event, groups in local.items()}
    assert kinds["SessionStart"] == kinds["UserPromptSubmit"] == {"command"}
    assert all(kinds[e] == {"http"} for e in ("PreToolUse", "PostToolUse", "Stop", "SessionEnd"))
    check = _init(root, "claude-code", "--check")
    assert check.returncode == 0, check.stdout


def test_the_hook_port_answers_the_hook_route_alone_and_only_with_the_key(real_redis_root: Path) -> None:
    root = real_redis_root
    (root / "a.py").write_text("x = 1\n")
    endpoint = hookservice.http_endpoint(root, create=True)
    assert endpoint is not None
    try:
        hookservice.start(str(root))
        edit = payload("pre_edit", root, session_id="s1", tool_use_id="t1", tool_input__file_path=str(root / "a.py"),
                       tool_input__old_string="x = 1", tool_input__new_string="x = 2")  # fmt: skip
        answer = _post(endpoint, edit).json()["hookSpecificOutput"]
        assert answer["permissionDecision"] == "deny" and "Read it first" in answer["permissionDecisionReason"]
        wrong = _post(endpoint, edit, key="x" * 43).json()["hookSpecificOutput"]  # a guarded write: refused
        assert wrong["permissionDecision"] == "deny" and "hook key" in wrong["permissionDecisionReason"]
        stop = _post(endpoint, payload("stop", root, session_id="s1"), key="x" * 43)
        assert stop.status_code == 200 and stop.content in (b"", b"{}")  # the end of a turn goes on
        token = (hook_service_dir(root / STATE_DIR_NAME) / "token").read_text().strip()
        for path in ("/v1/status", "/v1/health", "/metrics"):  # nothing else is answered on this port
            other = httpx.get(f"{endpoint.url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
            assert other.status_code == 404, (path, other.text)
        assert (root / "a.py").read_text() == "x = 1\n"
    finally:
        hookservice.stop(root)


def test_a_port_another_program_holds_is_refused_and_init_chooses_another(real_redis_root: Path) -> None:
    root = real_redis_root
    first = hookservice.http_endpoint(root, create=True)
    assert first is not None
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", first.port))
        holder.listen()
        with pytest.raises(OSError, match="another program holds the port"):
            hookservice.start(str(root))
        second = hookservice.http_endpoint(root, create=True)  # what `init claude-code` does again
        assert second is not None and second.port != first.port and second.key == first.key
    hookservice.stop(root)


def test_the_service_stays_while_an_agent_process_its_hooks_named_lives() -> None:
    from coordinator.agents.core import AGENT_PID_HEADER
    from coordinator.server import hooks

    agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        hooks._agents.clear()
        hooks._note_agent({AGENT_PID_HEADER: str(agent.pid)}, {"session_id": "s1"})
        hooks._note_agent({AGENT_PID_HEADER: "not a pid"}, {"session_id": "s2"})
        assert hooks.agents_alive()
        agent.kill()
        agent.wait()
        assert not hooks.agents_alive() and hooks._agents == {}
    finally:
        agent.kill()
        hooks._agents.clear()


def test_a_changed_config_restarts_the_http_hook_service_in_place(real_redis_root: Path) -> None:
    root = real_redis_root
    (root / "a.py").write_text("x = 1\n")
    endpoint = hookservice.http_endpoint(root, create=True)
    assert endpoint is not None
    read = payload("post_read", root, session_id="s1", tool_use_id="t1", tool_input__file_path=str(root / "a.py"))
    service = hook_service_dir(root / STATE_DIR_NAME)
    try:
        hookservice.start(str(root))
        pid = int((service / "pid").read_text())
        assert _post(endpoint, read).status_code == 200
        (root / ".edit-coordinator.toml").write_text('policy = "rebase"\n')
        assert _post(endpoint, read).status_code == 200  # answered; then the service runs itself again
        deadline = time.monotonic() + 60
        while (service / "log").read_text().count("serving") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        answered = None
        while answered is None and time.monotonic() < deadline:
            try:
                answered = _post(endpoint, read)
            except httpx.TransportError:
                time.sleep(0.05)
        assert answered is not None and answered.status_code == 200
        assert (service / "log").read_text().count("serving") == 2 and hookservice._alive(pid)
        assert int((service / "pid").read_text()) == pid  # the same process, run again (exec)
    finally:
        hookservice.stop(root)


def test_a_deep_repositorys_service_socket_goes_to_a_private_folder(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    service = hook_service_dir(deep / STATE_DIR_NAME)
    sock = hookservice.socket_of(service)
    assert sock.parent == Path("/tmp") / f"edit-coordinator-{os.getuid()}" and len(str(sock)) < 108
    assert hookservice.socket_of(hook_service_dir(tmp_path / STATE_DIR_NAME)).parent == hook_service_dir(
        tmp_path / STATE_DIR_NAME
    )
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    with pytest.raises(OSError, match="not a private folder"):
        hookservice._own_private_folder(shared)


def test_an_event_over_the_limit_posted_by_claude_code_is_refused_as_too_large(real_redis_root: Path) -> None:
    """The http hooks' way to the same limit the hook client checks (test_hookclient): a refusal that says
    the event is over the limit, which a model does not retry as it would a service that did not answer."""
    from coordinator.cli.fasthook import MAX_EVENT_BYTES

    root = real_redis_root
    (root / "a.py").write_text("x = 1\n")
    endpoint = hookservice.http_endpoint(root, create=True)
    assert endpoint is not None
    try:
        hookservice.start(str(root))
        big = payload("pre_write", root, session_id="s1", tool_use_id="t1", tool_input__file_path=str(root / "a.py"),
                      tool_input__content="x" * (MAX_EVENT_BYTES + 10))  # fmt: skip
        answer = _post(endpoint, big)
        assert answer.status_code == 200
        said = answer.json()
        assert said["decision"] == "block" and "over this service's limit" in said["reason"], said
        assert (root / "a.py").read_text() == "x = 1\n"
    finally:
        hookservice.stop(root)
