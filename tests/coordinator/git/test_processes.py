"""Real processes on one checkout: sessions edit overlapping files at once, then commit at once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.state.embedded import stop_embedded_redis
from tests.coordinator.git.conftest import git, tree_bytes

SESSIONS = 3
EDITOR = """
import sys
from coordinator import Coordinator
root, session, lines = sys.argv[1], sys.argv[2], [int(n) for n in sys.argv[3:]]
with Coordinator(root, policy="rebase") as coord:
    s = coord.session(session)
    for path, stem in (("a.py", "a"), ("b.py", "b")):
        for n in lines:
            s.read(path)
            s.edit(path, f"{stem}{n}\\n", f"{stem}{n} by {session}\\n")
"""


def _lines_of(i: int) -> list[int]:
    return [i + 1, i + 1 + SESSIONS * 2]  # disjoint lines in both files, interleaved between sessions


def _cli(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


@pytest.fixture
def stopped(repo: Path) -> Iterator[Path]:
    """The repository, whose embedded Redis (started by the editor processes) is stopped at the end."""
    yield repo
    stop_embedded_redis(repo / ".edit-coordinator")


def test_parallel_sessions_each_commit_exactly_their_own(stopped: Path) -> None:
    repo = stopped
    env = dict(os.environ)
    editors = [
        subprocess.Popen([sys.executable, "-c", EDITOR, str(repo), f"s{i}", *map(str, _lines_of(i))], env=env)
        for i in range(SESSIONS)
    ]
    assert [p.wait(timeout=120) for p in editors] == [0] * SESSIONS
    (repo / "note.txt").write_text("a person's uncommitted file\n")
    before = tree_bytes(repo)
    committers = [
        _cli("commit", "--session", f"s{i}", "-m", f"work of s{i}", "--root", str(repo)) for i in range(SESSIONS)
    ]
    outcomes = [p.communicate(timeout=120) for p in committers]
    assert [p.returncode for p in committers] == [0] * SESSIONS, outcomes
    assert tree_bytes(repo) == before  # the working tree byte-identical
    assert git(repo, "diff", "--cached") == ""
    assert git(repo, "status", "--porcelain").split() == ["??", "note.txt"]  # everything else committed
    log = git(repo, "log", "--format=%H %s").splitlines()
    assert len(log) == SESSIONS + 1  # no commit lost to a concurrent ref move
    for line in log[:-1]:
        commit, subject = line.split(" ", 1)
        session = subject.rsplit(" ", 1)[1]
        changed = [
            ln for ln in git(repo, "show", "--format=", commit).splitlines() if ln[:1] in "+-" and ln[1:2] not in "+-"
        ]
        i = int(session[1:])
        expected = []
        for stem in ("a", "b"):
            for n in _lines_of(i):
                expected += [f"-{stem}{n}", f"+{stem}{n} by {session}"]
        assert sorted(changed) == sorted(expected), (session, changed)
