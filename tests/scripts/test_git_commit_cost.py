"""scripts/git_commit_cost.py: the plumbing side makes real commits of exactly N files, and the script prints
a figure per count."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.scripts import load_tool, run_tool


def test_plumbing_commit_changes_exactly_n_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(k, "bench")
    for k in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(k, "bench@example.com")
    tool = load_tool("git_commit_cost")
    root = tool._repo(tmp_path)
    tool.plumbing_commit(root, 3, 0)
    out = subprocess.run(["git", "show", "--name-only", "--format="], cwd=root, capture_output=True, check=True)
    assert out.stdout.decode().split() == ["src/m0.py", "src/m1.py", "src/m2.py"]
    assert subprocess.run(["git", "log", "--format=%s"], cwd=root, capture_output=True).stdout.split() == [
        b"round",
        b"0",
        b"base",
    ]


def test_the_script_reports_each_count() -> None:
    out = run_tool("git_commit_cost.py", "--files", "1,2", "--repeat", "1")
    assert out.returncode == 0, out.stderr
    assert "plumbing: 1 files" in out.stdout and "2 files" in out.stdout
