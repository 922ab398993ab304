"""The atomic replace per durability mode: rename(2) with fsync, renameat2(RENAME_EXCHANGE) without.

What each mode promises after a process crash (old or new content, whole; never a mix) is tested with a
real process killed between the swap and the removal of the old content.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from coordinator import Coordinator, fsio
from coordinator.engine import write as write_mod
from tests import REPO_ROOT


def _setup(tmp_path: Path) -> tuple[str, fsio.ResolvedPath, int, int]:
    root = tmp_path / "repo"
    (root / "d").mkdir(parents=True)
    (tmp_path / "tmp").mkdir()
    rp = fsio.resolve(str(root), "d/f.txt")
    dfd = os.open(root / "d", os.O_RDONLY | os.O_DIRECTORY)
    tfd = os.open(tmp_path / "tmp", os.O_RDONLY | os.O_DIRECTORY)
    return str(root), rp, dfd, tfd


@pytest.mark.parametrize("fsync", [False, True])
def test_replace_over_an_existing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool) -> None:
    root, rp, dfd, tfd = _setup(tmp_path)
    Path(rp.abs).write_bytes(b"old\n")
    swaps: list[bool] = []
    real = fsio._exchange
    monkeypatch.setattr(fsio, "_exchange", lambda *a: swaps.append(real(*a)) or swaps[-1])
    with open(rp.abs, "rb") as reader:  # a reader of the old file keeps reading the old content
        st = fsio.atomic_replace(dfd, rp, b"new\n", 0o640, fsync, tmp_dfd=tfd)
        assert Path(rp.abs).read_bytes() == b"new\n" and reader.read() == b"old\n"
        assert st.st_ino == os.stat(rp.abs).st_ino != os.fstat(reader.fileno()).st_ino
    assert st.st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path / "tmp") == [] and os.listdir(Path(root) / "d") == ["f.txt"]
    assert swaps == ([] if fsync else [True])  # the swap without fsync, rename with it


def test_the_old_content_left_for_the_caller_is_named_and_removed_by_it(tmp_path: Path) -> None:
    _, rp, dfd, tfd = _setup(tmp_path)
    Path(rp.abs).write_bytes(b"old\n")
    old: list[str] = []
    fsio.atomic_replace(dfd, rp, b"new\n", 0o644, False, tmp_dfd=tfd, old_names=old)
    assert Path(rp.abs).read_bytes() == b"new\n"
    assert os.listdir(tmp_path / "tmp") == old and (tmp_path / "tmp" / old[0]).read_bytes() == b"old\n"
    fsio.remove_temp(tfd, old[0])
    assert os.listdir(tmp_path / "tmp") == []


def test_the_engine_removes_the_old_content_after_releasing_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the hot path and on the general path: the replaced content's temporary is unlinked once the file's
    lock is free again, and none is left."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none") as c:
        seen: list[tuple[bool, str]] = []  # (the lock was free, the temporary's content) per removal
        hot: list[bool] = []
        real_remove, real_hot = fsio.remove_temp, write_mod.hot_write

        def remove(dfd: int, name: str) -> None:
            held = c.locks.try_acquire("a.txt")  # another holder would get it: the writer's lock is released
            if held is not None:
                held.release()
            seen.append((held is not None, (c.tmp_dir / name).read_text()))
            real_remove(dfd, name)

        def hot_write(eng: Any, req: Any) -> Any:
            done = real_hot(eng, req)
            hot.append(done is not None)
            return done

        monkeypatch.setattr(fsio, "remove_temp", remove)
        monkeypatch.setattr(write_mod, "hot_write", hot_write)
        s = c.session("s")
        s.read("a.txt")
        s.edit("a.txt", "one", "two")
        s.lease("a.txt")  # a lease: the general path's
        s.edit("a.txt", "two", "three")
        assert hot == [True, False]
        assert seen == [(True, "one\n"), (True, "two\n")] and os.listdir(c.tmp_dir) == []
    assert (root / "a.txt").read_text() == "three\n"


def test_replace_creating_a_file_renames(tmp_path: Path) -> None:
    _, rp, dfd, tfd = _setup(tmp_path)
    fsio.atomic_replace(dfd, rp, b"first\n", 0o644, False, tmp_dfd=tfd)
    assert Path(rp.abs).read_bytes() == b"first\n" and os.listdir(tmp_path / "tmp") == []


def test_the_engine_without_fsync_swaps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    swaps: list[bool] = []
    real = fsio._exchange
    monkeypatch.setattr(fsio, "_exchange", lambda *a: swaps.append(real(*a)) or swaps[-1])
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none") as c:
        s = c.session("s")
        s.read("a.txt")
        s.edit("a.txt", "one", "two")
        s.undo("a.txt")
    assert swaps == [True, True] and (root / "a.txt").read_text() == "one\n"


_SWAP_THEN_DIE = textwrap.dedent("""
    import os, signal, sys
    from coordinator import fsio
    root, tmp = sys.argv[1], sys.argv[2]
    rp = fsio.resolve(root, "f.txt")
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    tfd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
    name = fsio._temp_name(rp.name)
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=tfd)
    fsio._fill_temp(fd, b"new content\\n" * 1000, 0o644, None, False)
    assert fsio._exchange(tfd, name, dfd, rp.name)
    os.kill(os.getpid(), signal.SIGKILL)  # between the swap and the removal of the old content
""")


def test_a_process_killed_after_the_swap_leaves_a_whole_file(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "f.txt").write_bytes(b"old content\n" * 1000)
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none") as c:
        tmp = c.tmp_dir
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    run = subprocess.run([sys.executable, "-c", _SWAP_THEN_DIE, str(root), str(tmp)], env=env, timeout=60)
    assert run.returncode == -9
    assert (root / "f.txt").read_bytes() == b"new content\n" * 1000  # whole: the new content
    left = os.listdir(tmp)
    assert len(left) == 1 and (tmp / left[0]).read_bytes() == b"old content\n" * 1000
    assert sorted(os.listdir(root)) == [".edit-coordinator", "f.txt"]  # nothing of it in the repository
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none"):
        assert os.listdir(tmp) == []  # the next open removes the dead writer's temporary
