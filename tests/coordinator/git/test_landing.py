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


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


# A full disk at each step that writes: (what fails, the function, when it fails, what the message says).
FULL_DISK = {
    "journal": (os, "fsync", lambda a: "/landing/" in _fd_path(a[0]), "nothing was committed"),
    "lock token": (os, "write", lambda a: _fd_path(a[0]).endswith("index.lock"), "nothing was committed"),
    "index copy": (landing.shutil, "copy2", lambda a: Path(a[1]).name.startswith("index.ec-"), "nothing was committed"),
    "marks": (os, "fsync", lambda a: "/.marks-" in _fd_path(a[0]), "rolled back"),
    "index rename": (os, "replace", lambda a: Path(a[1]).name == "index", "rolled back"),
}


@pytest.mark.parametrize("where", list(FULL_DISK))
def test_a_full_disk_at_any_step_moves_all_or_nothing(
    repo: Path, gcoord: Coordinator, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """ENOSPC at each write of the landing, in the committing process: before the commit point nothing moved;
    after it the ref went back by compare-and-swap. Either way the branch, the index, the marks and git's lock
    are as they were, nothing half-written is left, and the message says which."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd")
    _two_sessions(gcoord)
    before = _state(repo)
    module, name, when, said = FULL_DISK[where]
    real = getattr(module, name)

    def full(*args: object, **kwargs: object) -> object:
        if when(args):
            if name == "copy2":  # half a file written, then the disk is full
                Path(str(args[1])).write_bytes(Path(str(args[0])).read_bytes()[:10])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(module, name, full)
        with pytest.raises(CoordinatorError) as exc:
            commit_session(str(repo), "s1", "by s1")
    assert exc.value.code is ErrorCode.IO_ERROR and said in exc.value.message
    assert _state(repo) == before
    state_git = repo / ".edit-coordinator" / "git"
    assert not list(landing.journal_dir(repo / ".edit-coordinator").glob("*"))
    assert not list((repo / ".git").glob("index.ec-*")) and not (state_git / "s1.json").exists()
    commit_session(str(repo), "s1", "by s1")
    commit_session(str(repo), "s2", "by s2")
    _all_landed_once(repo)


def test_a_held_ref_lock_is_not_taken_for_a_moved_branch(
    repo: Path, gcoord: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`refs/heads/main.lock` held by another git process: `update-ref` fails with the ref unmoved. That used
    to count as "the branch moved" five times over, then a `stale` refusal saying so."""
    monkeypatch.setattr(landing, "LOCK_WAIT_S", 0.2)
    _two_sessions(gcoord)
    before = _state(repo)
    ref_lock = repo / ".git" / "refs" / "heads" / "main.lock"
    ref_lock.write_text("held\n")
    with pytest.raises(CoordinatorError) as exc:
        commit_session(str(repo), "s1", "by s1")
    assert exc.value.code is ErrorCode.LOCK_TIMEOUT and "did not move" in exc.value.message
    assert "main.lock" in exc.value.message
    assert _state(repo) == before and ref_lock.read_text() == "held\n"
    ref_lock.unlink()
    commit_session(str(repo), "s1", "by s1")
    commit_session(str(repo), "s2", "by s2")
    _all_landed_once(repo)


def test_a_commit_that_cannot_go_back_says_it_landed_and_is_completed_next(
    repo: Path, gcoord: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the commit point when someone already committed on top: the ref cannot go back by
    compare-and-swap, so the message says the commit landed, and the next commit completes its index and
    marks."""
    _two_sessions(gcoord)
    real = landing.write_marks

    def on_top_then_full(*args: object) -> None:
        tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
        top = git(repo, "commit-tree", tree, "-p", "HEAD", stdin=b"on top\n").strip()
        git(repo, "update-ref", "refs/heads/main", top)
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(landing, "write_marks", on_top_then_full)
        with pytest.raises(CoordinatorError) as exc:
            commit_session(str(repo), "s1", "by s1")
    assert exc.value.code is ErrorCode.IO_ERROR and "landed" in exc.value.message
    assert "could not be moved back" in exc.value.message and "rolled back" not in exc.value.message
    assert git(repo, "log", "--format=%s", "-2").split("\n")[:2] == ["on top", "by s1"]
    assert landing.write_marks is real
    result = commit_session(str(repo), "s2", "by s2")
    assert len(result.recovered) == 1 and "completed" in result.recovered[0]
    assert not (repo / ".git" / "index.lock").exists() and git(repo, "status", "--porcelain") == ""
    with pytest.raises(CoordinatorError) as again:
        commit_session(str(repo), "s1", "again")  # its marks were completed: nothing left to commit
    assert again.value.code is ErrorCode.NO_CHANGE
