"""The README's path for a new user, with the real Claude Code: `init claude-code` (as the README gives it),
a guarded session that edits a file, the session found by `status`, the dashboard's data read with a viewer
token from `token --viewer`, and `commit --session` of that session's id committing its change alone while
another program's uncommitted change stays in the working tree."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest

from coordinator.client import HttpClient
from tests.coordinator.server.test_server import SECRET, ServerProcess
from worker.agents.runner import Sandbox, coordinator_cli, git, run_agent
from worker.agents.scripts import Tools, sequence

pytestmark = pytest.mark.agents

Make = Callable[..., Sandbox]


def test_a_guarded_claude_code_session_is_seen_and_committed_alone(sandbox: Make) -> None:
    box = sandbox("claude-code", {"a.txt": "total = 1\n", "b.txt": "kept = 1\n"})
    root = str(box.repo)
    (box.repo / "b.txt").write_text("kept = 2\n")  # another program's uncommitted work
    tools = Tools("claude-code", box.repo)
    run = run_agent(box, sequence([tools.read("a.txt"), tools.edit("a.txt", "total = 1", "total = 2")]))
    assert run.returncode == 0, run.stderr[-3000:]
    (session,) = run.sessions

    # The session has ended, and with it the hook service and the embedded Redis: `status` names the session
    # by its writes, says the Redis is not running (no failure), and starts nothing.
    shown = coordinator_cli("status", "--root", root)
    assert session in shown.stdout and "the embedded Redis server is not running" in shown.stdout, shown.stdout
    listed = json.loads(coordinator_cli("status", "--root", root, "--json").stdout)
    assert [w["session"] for w in listed["recent_writes"]] == [session], listed["recent_writes"]

    server = ServerProcess(box.repo)
    try:
        same_secret = {**os.environ, "EDIT_COORDINATOR_SECRET": SECRET}  # the secret the test's service uses
        viewer = coordinator_cli("token", "--viewer", "--root", root, "--ttl", "600", env=same_secret).stdout.strip()
        with HttpClient(server.url, token=viewer) as client:
            fleet = client.dashboard()
        assert session in [s["session"] for s in fleet["sessions"]], fleet["sessions"]
    finally:
        server.stop()

    before = git(box.repo, "rev-parse", "HEAD").strip()
    done = coordinator_cli("commit", "--session", session, "-m", "The session's work", "--root", root)
    assert session in done.stdout or "a.txt" in done.stdout, done.stdout
    assert git(box.repo, "rev-parse", "HEAD~1").strip() == before
    assert git(box.repo, "diff", "--name-only", "HEAD~1", "HEAD").split() == ["a.txt"]
    assert git(box.repo, "show", "HEAD:a.txt") == "total = 2\n"
    assert (box.repo / "b.txt").read_text() == "kept = 2\n"
    assert git(box.repo, "status", "--porcelain").split() == ["M", "b.txt"]
