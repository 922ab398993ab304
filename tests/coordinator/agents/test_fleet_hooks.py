"""Stand-in agents (real processes, tests/coordinator/agents/standin.py) writing one shared file through
their own tools, hooked through a real `serve` (the `http` hook type and the command hook), against the same
loop unhooked: the oracle finds every acknowledged hooked write in the file; the refusals reach the agents
as deny reasons; a killed agent's write ticket runs out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coordinator.state.embedded import stop_embedded_redis
from tests import REPO_ROOT
from tests.coordinator.agents.standin import event
from tests.coordinator.server.test_server import ServerProcess, token

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools")

TICKET_TTL_S = "3"
TICKET_WAIT_S = "1"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("fleet") / "repo"
    root.mkdir()
    saved = {k: os.environ.get(k) for k in ("EDIT_COORDINATOR_TICKET_TTL_S", "EDIT_COORDINATOR_TICKET_WAIT_S")}
    os.environ.update(EDIT_COORDINATOR_TICKET_TTL_S=TICKET_TTL_S, EDIT_COORDINATOR_TICKET_WAIT_S=TICKET_WAIT_S)
    try:
        server = ServerProcess(root)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


def _start(served: ServerProcess, hooks: str, session: str, file: Path, edits: int, *extra: str) -> tuple[Any, Path]:
    out = file.parent / f"result-{hooks}-{session}.json"
    argv = [sys.executable, "-m", "tests.coordinator.agents.standin", "--hooks", hooks, "--server", served.url,
            "--token", token(admin=True), "--session", session, "--file", str(file), "--edits", str(edits),
            "--out", str(out), *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(argv, cwd=REPO_ROOT, env=env), out


def _fleet(
    served: ServerProcess, hooks: str, agents: int, edits: int, name: str
) -> tuple[list[str], list[str], dict[str, int]]:
    """Run `agents` stand-ins on one new file; (acknowledged markers, the file's lines, denials by word)."""
    file = served.root / name
    file.write_text("")
    go = file.parent / f"go-{hooks}-{name}"  # every agent's loop starts together, once all the processes are up
    started = [_start(served, hooks, f"{hooks}-agent-{k}", file, edits, "--go-file", str(go)) for k in range(agents)]
    deadline = time.monotonic() + 120
    while not all(Path(f"{out}.ready").exists() for _, out in started):
        assert all(proc.poll() is None for proc, _ in started) and time.monotonic() < deadline
        time.sleep(0.01)
    go.write_text("")
    acknowledged: list[str] = []
    denied: dict[str, int] = {}
    for proc, out in started:
        assert proc.wait(timeout=300) == 0
        result = json.loads(out.read_text())
        acknowledged += result["acknowledged"]
        for word, n in result["denied"].items():
            denied[word] = denied.get(word, 0) + n
    return acknowledged, file.read_text().splitlines(), denied


def test_hooked_agents_lose_nothing_where_unhooked_ones_do(served, capsys):
    acked, lines, denied = _fleet(served, "http", 4, 8, "shared_http.txt")
    assert len(acked) == 32 and sorted(lines) == sorted(acked)  # every acknowledged write is in the file, once
    assert "could not" not in denied and "other" not in denied  # refusals were the coordinator's, as deny reasons
    assert sum(denied.values()) > 0  # four agents on one file: some were told to read again or to wait
    (entry_count,) = {len(lines)}
    unhooked, unhooked_lines, _ = _fleet(served, "none", 4, 8, "shared_none.txt")
    lost = len(set(unhooked) - set(unhooked_lines))
    with capsys.disabled():
        print(f"\nhooked: {len(acked)} acknowledged, 0 lost ({entry_count} lines); denials {denied}")
        print(f"unhooked: {len(unhooked)} acknowledged, {lost} lost")
    admin = {"authorization": f"Bearer {token(admin=True)}"}
    history = httpx.post(f"{served.url}/v1/history", json={"path": "shared_http.txt"}, headers=admin, timeout=30)
    assert len(history.json()["entries"]) == 32  # each hooked write has its history entry, with its writer
    assert {e["session"] for e in history.json()["entries"]} == {f"http-agent-{k}" for k in range(4)}


@pytest.mark.slow  # a process per hook event: ~10 s
def test_command_hooked_agents_lose_nothing(served):
    acked, lines, denied = _fleet(served, "command", 2, 2, "shared_command.txt")
    assert len(acked) == 4 and sorted(lines) == sorted(acked)
    assert "could not" not in denied and "other" not in denied


@pytest.mark.slow  # a process per hook event, and the repository's hook service started by the first: ~15 s
def test_fast_client_hooked_agents_lose_nothing(served):
    """The command `init` writes: three agents start together, find no hook service, start one between them
    (under its start lock), then go through it; nothing is lost."""
    from coordinator.cli import hookservice

    try:
        acked, lines, denied = _fleet(served, "fast", 3, 3, "shared_fast.txt")
    finally:
        hookservice.stop(served.root)
    assert len(acked) == 9 and sorted(lines) == sorted(acked)
    assert "could not" not in denied and "other" not in denied


def _pre_write(served: ServerProcess, session: str, file: Path, tid: str) -> dict[str, Any]:
    admin = {"authorization": f"Bearer {token(admin=True)}"}
    data = event("pre_write", session, tid, file)
    resp = httpx.post(f"{served.url}/v1/hooks/claude-code", json=data, headers=admin, timeout=30)
    assert resp.status_code == 200
    return dict(resp.json())


def test_a_killed_agents_ticket_does_not_hold_the_others(served):
    """An agent killed between its PreToolUse and its PostToolUse (its file unchanged) holds the path for at
    most the holder's grace (1 s) when another session waits: the survivor's first write is let through,
    not refused for the dead ticket (which would otherwise last its whole life, 3 s here)."""
    file = served.root / "killed.txt"
    file.write_text("")
    proc, out = _start(served, "http", "doomed", file, 1, "--hold-after-pre")
    deadline = time.monotonic() + 60
    while not out.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # killed between its PreToolUse and its PostToolUse
    proc.wait(timeout=30)
    admin = {"authorization": f"Bearer {token(admin=True)}"}
    shown = {
        "type": "text",
        "file": {"filePath": str(file), "content": "", "numLines": 0, "startLine": 1, "totalLines": 0},
    }
    read = event("post_read", "survivor", "toolu_r", file, tool_response=shown)
    assert httpx.post(f"{served.url}/v1/hooks/claude-code", json=read, headers=admin, timeout=30).json() == {}
    assert _pre_write(served, "survivor", file, "toolu_s0") == {}


def _hook(served: ServerProcess, data: dict[str, Any]) -> dict[str, Any]:
    admin = {"authorization": f"Bearer {token(admin=True)}"}
    resp = httpx.post(f"{served.url}/v1/hooks/claude-code", json=data, headers=admin, timeout=30)
    assert resp.status_code == 200
    return dict(resp.json())


def test_a_late_write_after_a_lapsed_ticket_is_repaired_and_both_sessions_are_told(served):
    """Through a real `serve`: late's Edit is allowed, then stalls (a permission prompt); early waits out the
    holder's grace (1 s), edits another line and is acknowledged; late's write then lands on its old view.
    Nothing is lost: early's change is put back into late's result, the PostToolUse answer tells late, and
    early's next hook answer carries a notice."""
    file = served.root / "late.txt"
    file.write_text("a = 1\nb = 2\nc = 3\n")
    shown = {
        "type": "text",
        "file": {"filePath": str(file), "content": file.read_text(), "numLines": 3, "startLine": 1, "totalLines": 3},
    }
    for who in ("late", "early"):
        assert _hook(served, event("post_read", who, f"r_{who}", file, tool_response=shown)) == {}
    assert _hook(served, event("pre_edit", "late", "t_late", file)) == {}
    seen = file.read_text()
    assert _hook(served, event("pre_edit", "early", "t_early", file)) == {}  # after the grace, not refused
    file.write_text(file.read_text().replace("c = 3", "c = 30"))
    _hook(served, event("post_edit", "early", "t_early", file))
    file.write_text(seen.replace("a = 1", "a = 10"))  # the late write, made on late's old view
    told = _hook(served, event("post_edit", "late", "t_late", file))
    assert "put back" in told["hookSpecificOutput"]["additionalContext"]
    assert file.read_text() == "a = 10\nb = 2\nc = 30\n"
    notice = _hook(served, event("post_read", "early", "r2_early", file, tool_response=shown))
    assert "overwritten by a late edit of session late" in notice["hookSpecificOutput"]["additionalContext"]
