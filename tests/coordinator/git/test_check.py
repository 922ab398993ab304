"""`commit --check CMD`: CMD runs on the commit's tree in a scratch folder; the branch moves only on exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.git.commit import commit_session
from tests.coordinator.git.conftest import edit, git, tree_bytes


def test_a_passing_check_lands_and_ran_on_the_commits_tree(repo: Path, gcoord: Coordinator) -> None:
    edit(gcoord, "s1", "a.py", "a2\n", "A2 by s1\n")
    edit(gcoord, "s2", "b.py", "b1\n", "B1 by s2\n")  # uncommitted: not in s1's commit, so not in its tree
    check = f"grep -q 'A2 by s1' a.py && ! grep -q 'B1 by s2' b.py && test \"$PWD\" != {repo} && test ! -e .git"
    result = commit_session(str(repo), "s1", "checked", check=check)
    assert result.commit == git(repo, "rev-parse", "HEAD").strip() and result.checks == 1
    assert "A2 by s1" in git(repo, "show", "HEAD:a.py")


def test_a_failing_check_leaves_tree_index_and_branch(repo: Path, gcoord: Coordinator) -> None:
    edit(gcoord, "s1", "a.py", "a2\n", "A2 by s1\n")
    head, index, tree = git(repo, "rev-parse", "HEAD"), (repo / ".git" / "index").read_bytes(), tree_bytes(repo)
    with pytest.raises(CoordinatorError) as exc:
        commit_session(str(repo), "s1", "checked", check="seq 1 100; echo 'E   assert 1 == 2'; exit 3")
    assert exc.value.code is ErrorCode.CHECK_FAILED
    assert "exit 3" in exc.value.message and exc.value.message.endswith("100\nE   assert 1 == 2")
    assert "\n50\n" not in exc.value.message  # the tail, not the whole output
    assert git(repo, "rev-parse", "HEAD") == head and (repo / ".git" / "index").read_bytes() == index
    assert tree_bytes(repo) == tree and not (repo / ".git" / "index.lock").exists()
    assert commit_session(str(repo), "s1", "unchecked").paths == ("a.py",)  # the writes stayed uncommitted


def test_two_concurrent_checked_landings_both_end_on_the_branch(repo: Path, gcoord: Coordinator) -> None:
    """Both checks run at once; the second to land finds the branch moved, is rebuilt on top of the first and
    checked again on the new tree (which holds both changes)."""
    edit(gcoord, "s1", "a.py", "a2\n", "A2 by s1\n")
    edit(gcoord, "s2", "b.py", "b1\n", "B1 by s2\n")
    trace = repo.parent / "trace"
    trace.mkdir()
    # Each first check waits for the other to start (so both are built on the same HEAD), then records its tree.
    wait = f"touch {trace}/started.$$; while [ $(ls {trace} | grep -c started) -lt 2 ]; do sleep 0.05; done"
    check = f"{wait}; cat a.py b.py > {trace}/seen.$$"
    cli = [sys.executable, "-m", "coordinator.cli", "commit", "--root", str(repo), "--json", "--check", check]
    procs = [
        subprocess.Popen([*cli, "--session", s, "-m", f"by {s}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for s in ("s1", "s2")
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()[-800:]
        results.append(json.loads(out))
    assert sorted(r["checks"] for r in results) == [1, 2]
    assert sorted(git(repo, "log", "--format=%s").split("\n")[:2]) == ["by s1", "by s2"]
    assert "A2 by s1" in git(repo, "show", "HEAD:a.py") and "B1 by s2" in git(repo, "show", "HEAD:b.py")
    seen = [p.read_text() for p in trace.glob("seen.*")]
    assert len(seen) == 3 and sum("A2 by s1" in t and "B1 by s2" in t for t in seen) == 1  # the re-check
    assert git(repo, "status", "--porcelain") == "" and os.listdir(repo / ".git").count("index.lock") == 0


def test_the_check_sees_every_file_of_the_commit(repo: Path, gcoord: Coordinator) -> None:
    """Paths marked `export-ignore` (a project's tests often are) and `export-subst` files are written as
    committed: `git archive` left the first out, so a check running them passed on nothing, and rewrote the
    second."""
    (repo / "tests").mkdir()
    (repo / "tests" / "test_a.py").write_text("assert False\n")
    (repo / "version.txt").write_text("$Format:%H$\n")
    (repo / "tool.sh").write_text("#!/bin/sh\necho ok\n")
    (repo / "tool.sh").chmod(0o755)
    (repo / ".gitattributes").write_text("tests/ export-ignore\ntests/** export-ignore\nversion.txt export-subst\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "attributes")
    edit(gcoord, "s1", "a.py", "a2\n", "A2 by s1\n")
    check = "test -f tests/test_a.py && grep -qF '$Format:%H$' version.txt && test -x tool.sh && ./tool.sh"
    result = commit_session(str(repo), "s1", "checked", check=check)
    assert result.checks == 1 and result.commit == git(repo, "rev-parse", "HEAD").strip()
