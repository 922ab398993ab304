"""A real git repository with a first commit, and a coordinator on it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator import Coordinator
from tests.conftest import coordinator_for

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(root: Path, *args: str, stdin: bytes | None = None) -> str:
    out = subprocess.run(["git", *args], cwd=root, input=stdin, capture_output=True, check=True)
    return out.stdout.decode()


@pytest.fixture(autouse=True)
def git_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)


@pytest.fixture
def repo(tmp_path: Path, git_identity: None) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".edit-coordinator/\n")
    (root / "a.py").write_text("".join(f"a{i}\n" for i in range(1, 21)))
    (root / "b.py").write_text("".join(f"b{i}\n" for i in range(1, 11)))
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    return root


@pytest.fixture
def gcoord(repo: Path, redis_url: str | None) -> Iterator[Coordinator]:
    coord = coordinator_for(repo, redis_url, durability="none")
    try:
        yield coord
    finally:
        coord.close()


def edit(coord: Coordinator, session: str, path: str, old: str, new: str) -> int:
    """`session` reads `path` and replaces `old` by `new`; the version written."""
    s = coord.session(session)
    s.read(path)
    return s.edit(path, old, new).version


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts and ".edit-coordinator" not in p.parts
    }
