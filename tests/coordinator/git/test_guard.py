"""The git guard in a shared tree where another session has uncommitted work."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.git.guard import check_shell_command, git_invocations
from tests.coordinator.git.conftest import edit

DESTRUCTIVE = [
    "git stash",
    "git stash push -m x",
    "git checkout -- a.py",
    "git checkout a.py",
    "git checkout .",
    "git checkout other-branch",
    "git switch other-branch",
    "git restore a.py",
    "git restore .",
    "git reset --hard",
    "git reset --hard HEAD~1",
    "git clean -fd",
    "git add -A",
    "git add .",
    "git add a.py",
    "git commit -a -m x",
    "git commit -am x",
    "git rebase main",
    "git merge feature",
    "git pull",
    "cd sub && git stash",
    "git -C . stash",
    "FOO=1 git reset --hard",
]
SAFE = [
    "git status",
    "git diff",
    "git diff --cached",
    "git log --oneline -5",
    "git show HEAD",
    "git stash list",
    "git add b.py",
    "git commit -m mine",
    "git commit -m mine -- b.py",
    "git checkout -b new-branch",
    "git clean -n",
    "git rebase --abort",
    "ls -la",
    "echo git stash",
]


@pytest.fixture
def shared(repo: Path, gcoord: Coordinator) -> Path:
    edit(gcoord, "other", "a.py", "a3\n", "A3 by other\n")  # another session's uncommitted work
    edit(gcoord, "me", "b.py", "b2\n", "B2 by me\n")  # the caller's own
    return repo


@pytest.mark.parametrize("command", DESTRUCTIVE)
def test_destructive_commands_are_refused(shared: Path, command: str) -> None:
    refusal = check_shell_command(command, str(shared), "me")
    assert refusal is not None
    assert "edit-coordinator commit --session me -m MSG" in refusal
    assert "a.py (other)" in refusal


@pytest.mark.parametrize("command", SAFE)
def test_read_only_and_own_commands_pass(shared: Path, command: str) -> None:
    assert check_shell_command(command, str(shared), "me") is None


def test_a_clean_shared_tree_allows_everything(repo: Path, gcoord: Coordinator) -> None:
    edit(gcoord, "me", "b.py", "b2\n", "B2\n")
    for command in ("git stash", "git add -A", "git commit -am x", "git reset --hard"):
        assert check_shell_command(command, str(repo), "me") is None


def test_a_change_made_outside_the_coordinator_counts_as_others(repo: Path) -> None:
    (repo / "a.py").write_text("changed by a person\n")
    refusal = check_shell_command("git stash", str(repo), "me")
    assert refusal is not None and "outside the coordinator" in refusal


def test_not_a_repository_passes(tmp_path: Path) -> None:
    assert check_shell_command("git stash", str(tmp_path), "me") is None


def test_invocations_are_found_in_compound_lines() -> None:
    assert git_invocations("git status && git -c a=b add -A; echo x | git log") == [
        ["status"],
        ["add", "-A"],
        ["log"],
    ]
    assert git_invocations("echo 'unbalanced") == []
