"""A replay of real history: consecutive commits of this repository, split into one session per commit, written
on one checkout without committing, then committed one by one with `commit --session`; each commit's diff
equals the original's for the files it touched, though the working tree holds the later tasks' changes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from coordinator.git.commit import commit_session
from tests.conftest import coordinator_for
from tests.coordinator.git.conftest import git

TASKS = 8
MAX_FILE_BYTES = 200_000
SOURCE = Path(__file__).resolve().parent


def _source_git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(SOURCE), *args], capture_output=True, check=True).stdout.decode()


def _modified_only(commit: str) -> list[str] | None:
    rows = [
        r.split("\t") for r in _source_git("diff-tree", "--no-commit-id", "-r", "--name-status", commit).splitlines()
    ]
    if not rows or len(rows) > 6 or any(r[0] != "M" for r in rows):
        return None
    numstat = _source_git("diff-tree", "--no-commit-id", "-r", "--numstat", commit).splitlines()
    if any(r.startswith("-\t-\t") for r in numstat):
        return None  # a binary file (a plot redrawn): the sessions write text
    return [r[1] for r in rows]


def _window() -> list[tuple[str, list[str]]]:
    """TASKS consecutive first-parent commits that only modify a few existing files."""
    try:
        chain = _source_git("rev-list", "--first-parent", "--max-count=400", "HEAD").split()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return []
    run: list[tuple[str, list[str]]] = []
    for commit in reversed(chain):
        paths = _modified_only(commit)
        run = [*run, (commit, paths)] if paths else []
        if len(run) == TASKS:
            return run
    return []


def _show(commit: str, path: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(SOURCE), "show", f"{commit}:{path}"], capture_output=True, check=True
    ).stdout


def _diff_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln[:1] in "+-" and ln[1:3] not in ("++", "--")]


def test_replay_of_real_history(tmp_path: Path) -> None:
    window = _window()
    if not window:
        pytest.skip("no history of this repository with enough consecutive modifying commits")
    files = sorted({p for _, paths in window for p in paths})
    first = window[0][0]
    if any(len(_show(f"{first}~1", p)) > MAX_FILE_BYTES for p in files):
        pytest.skip("files too large for a quick replay")
    root = tmp_path / "replay"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".edit-coordinator/\n")
    for p in files:
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_bytes(_show(f"{first}~1", p))
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "base")
    with coordinator_for(root, None, durability="none") as coord:
        for i, (commit, paths) in enumerate(window):  # every task written before any is committed
            session = coord.session(f"task{i}")
            for p in paths:
                session.read(p)
                session.write(p, _show(commit, p).decode())
    for i, (commit, paths) in enumerate(window):
        result = commit_session(str(root), f"task{i}", f"replay of {commit[:10]}")
        assert set(result.paths) == set(paths)
        ours = git(root, "diff", "HEAD~1", "HEAD", "--", *paths)
        theirs = _source_git("diff", f"{commit}~1", commit, "--", *(f":(top){p}" for p in paths))
        assert _diff_lines(ours) == _diff_lines(theirs), commit
    assert git(root, "status", "--porcelain") == ""
