"""Auto-commit at a session's end: off by default, on by the variable or the project config."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.git.autocommit import AUTO_COMMIT_ENV, on_session_end
from tests.coordinator.git.conftest import edit, git


def test_off_by_default(repo: Path, gcoord: Coordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AUTO_COMMIT_ENV, raising=False)
    edit(gcoord, "s1", "a.py", "a1\n", "A1\n")
    head = git(repo, "rev-parse", "HEAD")
    assert on_session_end(str(repo), "s1") is None
    assert git(repo, "rev-parse", "HEAD") == head


def test_on_by_variable_commits_the_session(repo: Path, gcoord: Coordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(AUTO_COMMIT_ENV, "1")
    edit(gcoord, "s1", "a.py", "a1\n", "A1\n")
    edit(gcoord, "s2", "b.py", "b1\n", "B1\n")
    commit = on_session_end(str(repo), "s1")
    assert commit == git(repo, "rev-parse", "HEAD").strip()
    assert git(repo, "show", "--name-only", "--format=", commit).split() == ["a.py"]
    assert on_session_end(str(repo), "s1") is None  # nothing left


def test_on_by_config_and_variable_wins(repo: Path, gcoord: Coordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / ".edit-coordinator.toml").write_text("auto-commit = true\n")
    edit(gcoord, "s1", "a.py", "a1\n", "A1\n")
    monkeypatch.setenv(AUTO_COMMIT_ENV, "0")
    assert on_session_end(str(repo), "s1") is None
    monkeypatch.delenv(AUTO_COMMIT_ENV)
    assert on_session_end(str(repo), "s1") is not None
