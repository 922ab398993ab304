"""The hooks' own failures log (coordinator/agents/failures.py): written by every way in, bounded, shown by
`status` (and `init --check`: tests/coordinator/cli/test_init.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from coordinator.agents import failures
from coordinator.disk.layout import hook_failures_file
from tests import REPO_ROOT
from tests.coordinator.agents.hooking import payload


def _repo(tmp_path: Path) -> Path:
    (tmp_path / ".edit-coordinator").mkdir()
    return tmp_path


def test_lines_round_trip_and_the_log_stays_small(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    failures.record(root, "codex", "Stop", "the service\nanswered 500")
    count, (one,) = failures.recent(root)
    assert count == 1 and (one.agent, one.event, one.what) == ("codex", "Stop", "the service answered 500")
    for i in range(3000):
        failures.record(root, "gemini", "AfterAgent", f"failure {i} " + "x" * 100)
    assert hook_failures_file(root / ".edit-coordinator").stat().st_size <= failures.MAX_BYTES + 1000
    count, newest = failures.recent(root, 1)
    assert newest[0].what.startswith("failure 2999") and count <= failures.KEEP_LINES + 2000
    assert failures.recent(root, 5, agent="codex")[0] == 0  # the first line was cut with the oldest


def test_no_state_folder_no_log(tmp_path: Path) -> None:
    failures.record(tmp_path, "codex", "Stop", "x")  # a hook never makes the state folder for a log line
    assert not (tmp_path / ".edit-coordinator").exists()
    assert failures.recent(tmp_path) == (0, []) and failures.summary(tmp_path) == []


def test_the_full_hook_lets_an_end_go_on_and_logs_why(tmp_path: Path) -> None:
    """`edit-coordinator hook` with its service unreachable: a Stop goes on (exit 0) where it used to exit 2,
    which kept the agent going; a PreToolUse is refused as before."""
    root = _repo(tmp_path)
    server = ["--server", "http://127.0.0.1:9", "--token", "t", "--root", str(root)]
    argv = [sys.executable, "-m", "coordinator.cli", "hook", "claude-code", *server]
    done = {}
    for name in ("stop", "session_end", "post_edit", "pre_edit"):
        event = json.dumps(payload(name, root))
        done[name] = subprocess.run(argv, input=event, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    for name in ("stop", "session_end", "post_edit"):
        assert (done[name].returncode, done[name].stdout, done[name].stderr) == (0, "", ""), name
    assert done["pre_edit"].returncode == 2 and "cannot be reached" in done["pre_edit"].stderr
    count, logged = failures.recent(root, 10)
    assert count == 4 and [f.event for f in logged] == ["Stop", "SessionEnd", "PostToolUse", "PreToolUse"]


def test_status_shows_them(tmp_path: Path) -> None:
    from coordinator.cli.repo import open_repo
    from coordinator.cli.status import gather_status, render_status

    root = _repo(tmp_path)
    failures.record(root, "gemini", "AfterAgent", "the hook service answered 500")
    data = gather_status(open_repo(str(root)), None)
    assert data["hook_failures"]["count"] == 1
    assert data["hook_failures"]["recent"][0]["event"] == "AfterAgent"
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(render_status(data))
    assert "1 hook failure(s) logged" in console.export_text()
