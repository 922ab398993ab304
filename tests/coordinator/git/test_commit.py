"""`commit_session` on real git repositories: exactly one session's writes, nothing else touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.git.commit import SESSION_TRAILER, commit_session
from tests.coordinator.git.conftest import edit, git, tree_bytes


def show(repo: Path, rev: str, path: str) -> str:
    return git(repo, "show", f"{rev}:{path}")


def test_commit_holds_only_the_sessions_change(repo: Path, gcoord: Coordinator) -> None:
    edit(gcoord, "s1", "a.py", "a2\n", "A2 by s1\n")
    edit(gcoord, "s2", "a.py", "a15\n", "A15 by s2\n")
    edit(gcoord, "s2", "b.py", "b1\n", "B1 by s2\n")
    before = tree_bytes(repo)
    result = commit_session(str(repo), "s1", "s1's change")
    assert result.paths == ("a.py",)
    assert tree_bytes(repo) == before  # the working tree is byte-identical
    committed = show(repo, "HEAD", "a.py")
    assert "A2 by s1\n" in committed and "A15 by s2" not in committed and "a15\n" in committed
    assert git(repo, "diff", "HEAD", "--name-only").split() == ["a.py", "b.py"]  # s2's stays uncommitted
    assert git(repo, "diff", "--cached", "--name-only") == ""
    changed = [
        ln for ln in git(repo, "diff", "HEAD", "--", "a.py").splitlines() if ln[:1] in "+-" and ln[1:2] not in "+-"
    ]
    assert changed == ["-a15", "+A15 by s2"]  # only s2's line differs from HEAD
    assert f"{SESSION_TRAILER}: s1" in git(repo, "log", "-1", "--format=%B")
    assert git(repo, "log", "-1", "--format=%an <%ae>").strip() == "Ada <ada@example.com>"


def test_next_commit_starts_after_the_last(repo: Path, gcoord: Coordinator) -> None:
    edit(gcoord, "s1", "a.py", "a2\n", "A2\n")
    commit_session(str(repo), "s1", "one")
    with pytest.raises(CoordinatorError) as exc:
        commit_session(str(repo), "s1", "again")
    assert exc.value.code is ErrorCode.NO_CHANGE
    edit(gcoord, "s1", "a.py", "a3\n", "A3\n")
    second = commit_session(str(repo), "s1", "two")
    diff = git(repo, "diff", "HEAD~1", "HEAD")
    assert "+A3" in diff and "+A2" not in diff and second.paths == ("a.py",)


def test_a_commit_made_outside_is_recognised(repo: Path, gcoord: Coordinator) -> None:
    edit(gcoord, "s1", "b.py", "b3\n", "B3\n")
    git(repo, "commit", "-q", "-am", "by hand")
    head = git(repo, "rev-parse", "HEAD")
    result = commit_session(str(repo), "s1", "nothing new")
    assert result.commit is None and result.recognised == ("b.py",)
    assert git(repo, "rev-parse", "HEAD") == head


def test_inseparable_change_is_refused_naming_the_other(repo: Path, gcoord: Coordinator) -> None:
    edit(gcoord, "s2", "a.py", "a5\n", "a5 by s2\n")
    edit(gcoord, "s1", "a.py", "a5 by s2\n", "a5 by s2 and s1\n")  # s1 rewrites s2's line
    head = git(repo, "rev-parse", "HEAD")
    with pytest.raises(CoordinatorError) as exc:
        commit_session(str(repo), "s1", "mine")
    assert exc.value.code is ErrorCode.STALE
    assert "s2" in exc.value.message and "--include-others" in exc.value.message
    assert "lines 5 of HEAD's version" in exc.value.message, exc.value.message
    # One refusal in its own words: no other refusal's text (its advice to read the file again) nested inside.
    assert "read_file" not in exc.value.message and "read the file" not in exc.value.message.lower()
    assert exc.value.message.count("Cannot commit") == 1 and "(The " not in exc.value.message
    assert git(repo, "rev-parse", "HEAD") == head  # nothing committed
    both = commit_session(str(repo), "s1", "both", include_others=True)
    assert show(repo, both.commit or "", "a.py") == (repo / "a.py").read_text()


def test_concurrent_ref_move_is_retried_and_nothing_lost(repo: Path, gcoord: Coordinator) -> None:
    edit(gcoord, "s1", "a.py", "a1\n", "A1\n")
    edit(gcoord, "s2", "b.py", "b1\n", "B1\n")

    def other_commit_lands(attempt: int) -> None:
        if attempt == 1:
            commit_session(str(repo), "s2", "s2 first")

    result = commit_session(str(repo), "s1", "s1", before_ref_update=other_commit_lands)
    assert result.attempts == 2
    log = git(repo, "log", "--format=%s").split("\n")
    assert log[:3] == ["s1", "s2 first", "first"]
    assert show(repo, "HEAD", "b.py").startswith("B1\n") and show(repo, "HEAD", "a.py").startswith("A1\n")


def test_staged_changes_of_others_stay_staged(repo: Path, gcoord: Coordinator) -> None:
    edit(gcoord, "s1", "a.py", "a1\n", "A1\n")
    (repo / "b.py").write_text("staged by a person\n")
    git(repo, "add", "b.py")
    commit_session(str(repo), "s1", "s1")
    assert git(repo, "diff", "--cached", "--name-only").split() == ["b.py"]
    assert git(repo, "diff", "--name-only", "--", "a.py") == ""  # index follows the new commit for a.py


def test_new_and_created_files(repo: Path, gcoord: Coordinator) -> None:
    gcoord.session("s1").write("pkg/new.py", "x = 1\n")
    result = commit_session(str(repo), "s1", "add new")
    assert result.paths == ("pkg/new.py",)
    assert show(repo, "HEAD", "pkg/new.py") == "x = 1\n"
    assert git(repo, "status", "--porcelain") == ""


def test_pre_commit_hook_is_not_run(repo: Path, gcoord: Coordinator) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\ntouch hook-ran\nexit 1\n")
    hook.chmod(0o755)
    edit(gcoord, "s1", "a.py", "a1\n", "A1\n")
    assert commit_session(str(repo), "s1", "no hooks").commit
    assert not (repo / "hook-ran").exists()


def test_not_a_git_repository_and_empty_message(tmp_path: Path) -> None:
    with pytest.raises(CoordinatorError) as exc:
        commit_session(str(tmp_path), "s1", "m")
    assert exc.value.code is ErrorCode.INVALID_ARGUMENT and "git init" in exc.value.message
    with pytest.raises(CoordinatorError) as exc:
        commit_session(str(tmp_path), "s1", "  \n")
    assert "message" in exc.value.message


@pytest.mark.parametrize("name", [":colon.py", ":(top)odd.py", ":!bang.py", "*.py", "x[ab].py"])
def test_names_git_reads_as_pathspec_magic_commit_as_files(repo: Path, gcoord: Coordinator, name: str) -> None:
    """Every plumbing call takes paths literally: these names used to block the whole commit (an "outside
    change" or io_error) because git read them as pathspec magic or globs."""
    (repo / name).write_text("one\n")
    git(repo, "add", "--", f":(literal){name}")
    git(repo, "commit", "-q", "-m", "odd name")
    edit(gcoord, "s1", name, "one\n", "two\n")
    edit(gcoord, "s1", "a.py", "a2\n", "A2\n")
    result = commit_session(str(repo), "s1", "odd names")
    assert sorted(result.paths) == sorted(["a.py", name])
    assert show(repo, "HEAD", name) == "two\n" and "A2\n" in show(repo, "HEAD", "a.py")
    assert git(repo, "status", "--porcelain") == ""
