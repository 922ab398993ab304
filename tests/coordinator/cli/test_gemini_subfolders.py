"""`init gemini --subfolders`: the guard in the user's Gemini CLI settings that refuses a write of Gemini CLI
started in a subfolder of a hooked repository (where it loads none of the repository's hooks: at 0effb2a,
and without the guard, such an edit lands unguarded and nothing says so). The guard is a shell command, run
here by sh and bash in the folders Gemini CLI could start in; tests/worker/agents/test_real_agents.py runs it
in the real Gemini CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.cli import gemini_subfolders


def _init(repo: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "init", *args, "--root", str(repo)],
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / ".gemini").mkdir(parents=True)
    return tmp_path / "home"


def _guard(cwd: Path, home: Path, shell: str) -> subprocess.CompletedProcess[str]:
    command = gemini_subfolders.handler()["command"]
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run([shell, "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("how", [(), ("--http", "http://127.0.0.1:8765")], ids=["fast-client", "http"])
@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_the_guard_refuses_only_a_start_below_a_hooked_folder(tmp_path: Path, home: Path, shell: str, how) -> None:
    repo = tmp_path / "work" / "repo"
    (repo / "src" / "deep").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    assert _init(repo, home, "gemini", *how).returncode == 0  # the repository's hooks, as init writes them
    assert _init(repo, home, "gemini", "--subfolders", *how).returncode == 0
    (home / "project").mkdir()  # under HOME: the user's own settings file is no repository's

    for cwd in (repo, tmp_path / "elsewhere", tmp_path, home / "project", home):
        done = _guard(cwd, home, shell)
        assert (done.returncode, done.stderr) == (0, ""), (cwd, done.stderr)
    for cwd in (repo / "src", repo / "src" / "deep"):
        done = _guard(cwd, home, shell)
        assert done.returncode == 2, (cwd, done.stderr)
        assert f"started in {cwd}, a subfolder of the repository {repo}" in done.stderr
        assert f"start Gemini CLI in {repo}" in done.stderr and "Nothing was written" in done.stderr
    # a subfolder with hooks of its own (init run there too) loads them: nothing to refuse
    subprocess.run(["git", "init", "-q", str(repo / "src")], check=True)
    assert _init(repo / "src", home, "gemini", *how).returncode == 0
    assert _guard(repo / "src", home, shell).returncode == 0
    assert _guard(repo / "src" / "deep", home, shell).returncode == 2  # below it: that repository's refusal


def test_init_subfolders_writes_checks_and_removes_the_guard_keeping_the_users_settings(
    tmp_path: Path, home: Path
) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    user = home / ".gemini" / "settings.json"
    theirs = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "hooks": {"BeforeTool": [{"matcher": "run_shell_command", "hooks": [{"type": "command", "command": "x"}]}]},
    }
    user.write_text(json.dumps(theirs, indent=4))
    first = _init(repo, home, "gemini")
    assert "from a subfolder" in first.stdout and "--subfolders" in first.stdout, first.stdout
    assert _init(repo, home, "gemini", "--check", "--subfolders").returncode == 1

    done = _init(repo, home, "gemini", "--subfolders")
    assert done.returncode == 0 and "wrote the subfolder guard into" in done.stdout, done.stdout + done.stderr
    written = json.loads(user.read_text())
    assert written["security"] == theirs["security"]
    assert written["hooks"]["BeforeTool"][0] == theirs["hooks"]["BeforeTool"][0]
    assert written["hooks"]["BeforeTool"][1] == {"matcher": "^(write_file|replace)$",
                                                 "hooks": [gemini_subfolders.handler()]}  # fmt: skip
    again = _init(repo, home, "gemini", "--subfolders")
    assert "already has the subfolder guard" in again.stdout and json.loads(user.read_text()) == written
    checked = _init(repo, home, "gemini", "--check", "--subfolders")
    assert checked.returncode == 0 and "from a subfolder" not in checked.stdout, checked.stdout

    removed = _init(repo, home, "gemini", "--remove", "--subfolders")
    assert removed.returncode == 0 and json.loads(user.read_text()) == theirs, removed.stdout + removed.stderr
    wrong = _init(repo, home, "codex", "--subfolders")
    assert wrong.returncode != 0 and "init gemini" in wrong.stderr
