"""All or nothing: a commit's ref, shared index and ledger marks move together, whatever fails in between.

Real processes: a child runs `commit_session` and kills itself (SIGKILL) just after step N of the landing
(`EC_GIT_FAULT_STEP`, coordinator/git/landing.py); the next commit, of any session, completes or drops what
the child left. Before this, `.git/index.lock` present made `commit` move the branch, fail on the index (exit
6) and leave the index staging the reverse of the session's change."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.git import landing
from coordinator.git.commit import commit_session
from tests.coordinator.git.conftest import edit, git, tree_bytes

CHILD = (
    "import sys\nfrom coordinator.git.commit import commit_session\ncommit_session(sys.argv[1], sys.argv[2], 'by s1')\n"
)


def _state(repo: Path) -> tuple[str, bytes, bool]:
    return (
        git(repo, "rev-parse", "HEAD").strip(),
        (repo / ".git" / "index").read_bytes(),
        (repo / ".git" / "index.lock").exists(),
    )


def _two_sessions(gcoord: Coordinator) -> None:
    edit(gcoord, "s1", "a.py", "a2\n", "A2 by s1\n")
    edit(gcoord, "s2", "b.py", "b1\n", "B1 by s2\n")


def _all_landed_once(repo: Path) -> None:
    assert not (repo / ".git" / "index.lock").exists()
    assert git(repo, "status", "--porcelain") == ""  # index == HEAD == tree: nothing staged in reverse
    a, b = git(repo, "show", "HEAD:a.py"), git(repo, "show", "HEAD:b.py")
    assert a.count("A2 by s1\n") == 1 and b.count("B1 by s2\n") == 1
    assert sorted(git(repo, "log", "--format=%s").split("\n")[:2]) == ["by s1", "by s2"]
    for session in ("s1", "s2"):
        with pytest.raises(CoordinatorError) as exc:
            commit_session(str(repo), session, "again")
        assert exc.value.code is ErrorCode.NO_CHANGE


@pytest.mark.parametrize("step", range(1, 8))
def test_a_kill_at_any_step_is_completed_or_dropped(repo: Path, gcoord: Coordinator, step: int) -> None:
    _two_sessions(gcoord)
    head, index, _ = _state(repo)
    tree = tree_bytes(repo)
    env = {**os.environ, landing.FAULT_ENV: str(step)}
    child = subprocess.run([sys.executable, "-c", CHILD, str(repo), "s1"], env=env, capture_output=True, text=True)
    assert child.returncode == -signal.SIGKILL, child.stderr[-800:]
    moved = git(repo, "rev-parse", "HEAD").strip() != head
    assert moved is (step >= 4)  # the compare-and-swap of step 4 is the commit point
    if step < 4:
        assert (repo / ".git" / "index").read_bytes() == index
    result = commit_session(str(repo), "s2", "by s2")  # another session's commit repairs first
    assert len(result.recovered) == 1
    assert ("completed" if step >= 4 else "dropped") in result.recovered[0]
    if step < 4:
        commit_session(str(repo), "s1", "by s1")
    _all_landed_once(repo)
    assert tree_bytes(repo) == tree  # the working tree is never touched


def test_index_lock_present_moves_nothing(repo: Path, gcoord: Coordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's reproduction: with .git/index.lock present the branch used to move and the index was left
    staging the reverse of the session's change."""
    monkeypatch.setattr(landing, "LOCK_WAIT_S", 0.2)
    _two_sessions(gcoord)
    (repo / ".git" / "index.lock").write_text("held by another git\n")
    head, index, _ = _state(repo)
    with pytest.raises(CoordinatorError) as exc:
        commit_session(str(repo), "s1", "by s1")
    assert exc.value.code is ErrorCode.LOCK_TIMEOUT and "did not move" in exc.value.message
    assert _state(repo) == (head, index, True)
    assert (repo / ".git" / "index.lock").read_text() == "held by another git\n"  # not ours: left alone
    (repo / ".git" / "index.lock").unlink()
    assert git(repo, "diff", "--cached", "--name-only") == ""
    commit_session(str(repo), "s1", "by s1")
    commit_session(str(repo), "s2", "by s2")
    _all_landed_once(repo)


def test_a_failure_after_the_ref_moved_rolls_back(
    repo: Path, gcoord: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk when the marks are written, after the compare-and-swap: the ref goes back by compare-and-swap
    and the message says so; the index, the lock and the ledger are as they were."""
    _two_sessions(gcoord)
    head, index, _ = _state(repo)

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(landing, "write_marks", full)
        with pytest.raises(CoordinatorError) as exc:
            commit_session(str(repo), "s1", "by s1")
    assert exc.value.code is ErrorCode.IO_ERROR and "rolled back" in exc.value.message
    assert _state(repo) == (head, index, False)
    commit_session(str(repo), "s1", "by s1")
    commit_session(str(repo), "s2", "by s2")
    _all_landed_once(repo)
