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

from coordinator import Coordinator
from coordinator.disk import fsio, spares
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


def _with_a_spare(tmp_path: Path) -> tuple[fsio.ResolvedPath, int, int, spares.SpareTemps, tuple[str, int]]:
    """`_setup` with the file holding "old\n", a filled pool of spares and one spare taken from it."""
    _, rp, dfd, tfd = _setup(tmp_path)
    Path(rp.abs).write_bytes(b"old\n")
    pool = spares.SpareTemps(tfd)
    pool.refill()
    spare = pool.take()
    assert spare is not None
    return rp, dfd, tfd, pool, spare


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
        real_remove, real_hot = fsio.remove_temp, write_mod.CheckThenWrite._common_write

        def remove(dfd: int, name: str) -> None:  # the unlink of Recorder.tidy
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
        monkeypatch.setattr(write_mod.CheckThenWrite, "_common_write", hot_write)
        s = c.session("s")
        s.read("a.txt")
        s.edit("a.txt", "one", "two")
        s.lease("a.txt")  # a lease: the general path's
        s.edit("a.txt", "two", "three")
        assert hot == [True, False]
        assert seen == [(True, "one\n"), (True, "two\n")]
        assert all(n.startswith(".spare.ec-") for n in os.listdir(c.tmp_dir))  # only the next writes' spares
    assert (root / "a.txt").read_text() == "three\n"


def test_a_spare_is_filled_instead_of_a_new_temporary(tmp_path: Path) -> None:
    rp, dfd, tfd, pool, spare = _with_a_spare(tmp_path)
    ino = os.fstat(spare[1]).st_ino
    old: list[str] = []
    st = fsio.atomic_replace(dfd, rp, b"new\n", 0o644, False, tmp_dfd=tfd, spare=spare, old_names=old)
    assert st.st_ino == ino and Path(rp.abs).read_bytes() == b"new\n" and old == [spare[0]]
    assert sorted(os.listdir(tmp_path / "tmp")) == sorted([spare[0], *(n for n, _ in pool._free)])
    assert (tmp_path / "tmp" / spare[0]).read_bytes() == b"old\n"  # the swap left the old content there
    pool.close()
    os.unlink(tmp_path / "tmp" / spare[0])
    assert os.listdir(tmp_path / "tmp") == []


def test_a_spare_without_its_folder_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    rp, dfd, _, pool, spare = _with_a_spare(tmp_path)
    with pytest.raises(ValueError, match="pass tmp_dfd"):
        fsio.atomic_replace(dfd, rp, b"new\n", 0o644, False, spare=spare)
    assert Path(rp.abs).read_bytes() == b"old\n"
    assert os.fstat(spare[1]).st_size == 0  # untouched, still the caller's to use or close
    os.close(spare[1])
    pool.close()


def test_the_next_write_fills_a_spare_made_after_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none") as c:
        made: list[tuple[bool, set[int]]] = []  # per refill: the lock was free, the spares' inodes after it
        real = spares.SpareTemps.refill

        def refill(self: spares.SpareTemps) -> None:
            held = c.locks.try_acquire("a.txt")
            if held is not None:
                held.release()
            real(self)
            made.append((held is not None, {os.fstat(fd).st_ino for _, fd in self._free}))

        monkeypatch.setattr(spares.SpareTemps, "refill", refill)
        s = c.session("s")
        s.read("a.txt")
        s.edit("a.txt", "one", "two")
        s.edit("a.txt", "two", "three")
        assert made and all(free for free, _ in made)
        assert os.stat(root / "a.txt").st_ino in made[0][1]  # the second write's file is a spare of the first's
    assert (root / "a.txt").read_text() == "three\n"


def test_a_forked_child_leaves_its_parents_spares_alone(tmp_path: Path) -> None:
    tfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    pool = spares.SpareTemps(tfd)
    pool.refill()
    names = sorted(os.listdir(tmp_path))
    assert len(names) == spares.KEEP
    pid = os.fork()
    if pid == 0:  # the child: none of the parent's to take, none of them removed by its close
        code = 0 if pool.take() is None else 1
        pool.close()
        os._exit(code if sorted(os.listdir(tmp_path)) == names else 2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sorted(os.listdir(tmp_path)) == names
    taken = pool.take()
    assert taken is not None and taken[0] in names
    os.write(taken[1], b"x")  # still open in the parent
    os.close(taken[1])
    pool.close()
    assert os.listdir(tmp_path) == [taken[0]]


_WRITE_THEN_DIE = textwrap.dedent("""
    import os, signal, sys
    from coordinator import Coordinator
    with Coordinator(sys.argv[1], durability="none") as c:
        s = c.session("s")
        s.read("f.txt")
        s.edit("f.txt", "a", "b")  # leaves the next writes' spares
        assert any(n.startswith(".spare.ec-") for n in os.listdir(c.tmp_dir))
        os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_process_killed_with_spares_leaves_them_to_the_next_open(real_redis_root: Path) -> None:
    root = real_redis_root
    (root / "f.txt").write_text("a\n")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    run = subprocess.run([sys.executable, "-c", _WRITE_THEN_DIE, str(root)], env=env, timeout=60)
    assert run.returncode == -9 and (root / "f.txt").read_text() == "b\n"
    tmp = root / ".edit-coordinator" / "tmp"
    assert os.listdir(tmp)
    with Coordinator(root, durability="none") as c:
        assert os.listdir(c.tmp_dir) == []  # the dead writer's spares are gone


def test_spares_are_named_apart_from_other_temporaries_and_read_as_this_process_s(tmp_path: Path) -> None:
    """A spare is ``.spare.ec-PID-sN.tmp``: `clean_stale_temps` reads PID from it (a live writer's spares
    stay, a dead one's go), and `fsio.temp_name` never gives that name, even for a file called "spare"."""
    import re

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tfd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
    try:
        pool = spares.SpareTemps(tfd)
        pool.refill()
        names = sorted(n for n, _ in pool._free)
        assert len(names) == spares.KEEP and len(set(names)) == spares.KEEP
        assert all(re.fullmatch(rf"\.spare\.ec-{os.getpid()}-s\d+\.tmp", n) for n in names)
        assert fsio.temp_name("spare") not in names and re.fullmatch(
            r"\.spare\.ec-\d+-\d+\.tmp", fsio.temp_name("spare")
        )
        assert fsio.clean_stale_temps(tmp) == 0 and sorted(os.listdir(tmp)) == names  # this process's: kept
        pool.close()
        assert os.listdir(tmp) == []
    finally:
        os.close(tfd)


def test_a_failure_tidying_the_temporaries_does_not_fail_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.txt").write_text("one\n")

    def broken(self: spares.SpareTemps) -> None:
        raise RuntimeError("a bug in the spares")

    with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none") as c:
        monkeypatch.setattr(spares.SpareTemps, "refill", broken)
        s = c.session("s")
        s.read("a.txt")
        res = s.edit("a.txt", "one", "two")  # the write landed: it is reported as done (invariant 3)
        assert res.version == 1 and not res.warnings
        assert os.listdir(c.tmp_dir) == []  # the replaced content's temporary went before the spares failed
    assert (root / "a.txt").read_text() == "two\n"


def _resolved(root: Path, name: str) -> tuple[int, fsio.ResolvedPath]:
    rp = fsio.resolve(str(root), name)
    return fsio.open_parent(rp, str(root)), rp


@pytest.mark.parametrize("size", [0, 1, 70_000, 200_000])
def test_read_at_returns_the_whole_file_in_one_read_when_its_size_is_as_stated(tmp_path: Path, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    (tmp_path / "f.bin").write_bytes(data)
    dfd, rp = _resolved(tmp_path, "f.bin")
    try:
        got = fsio.read_at(dfd, rp, 10**6)
    finally:
        os.close(dfd)
    assert got is not None and got[0] == data and got[1].st_size == size


def test_read_at_reads_on_past_a_short_read_and_refuses_a_file_grown_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that returns fewer bytes than the file's stat (a short read) is continued to the end; a file
    that grows past the limit while it is read is refused as too_large."""
    (tmp_path / "f.txt").write_bytes(b"abcdef")
    dfd, rp = _resolved(tmp_path, "f.txt")
    real_read = os.read
    monkeypatch.setattr(fsio.os, "read", lambda fd, n: real_read(fd, 2))  # two bytes at a time
    try:
        got = fsio.read_at(dfd, rp, 100)
        assert got is not None and got[0] == b"abcdef"
        more = iter([b"abcdefgh", b"ij", b""])  # the file grew by four bytes while it was read
        monkeypatch.setattr(fsio.os, "read", lambda fd, n: next(more))
        with pytest.raises(fsio.CoordinatorError) as refused:
            fsio.read_at(dfd, rp, 8)
        assert refused.value.code.value == "too_large"
    finally:
        os.close(dfd)


@pytest.mark.parametrize("fsync", [False, True])
def test_short_writes_still_fill_the_temporary_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    """os.write may write less than asked (a signal, a full pipe of a FUSE file system): the rest follows."""
    _, rp, dfd, tfd = _setup(tmp_path)
    Path(rp.abs).write_bytes(b"old\n")
    real_write, calls = os.write, []

    def short(fd: int, data: Any) -> int:
        calls.append(len(data))
        return real_write(fd, bytes(data[:7]))

    monkeypatch.setattr(fsio.os, "write", short)
    content = b"".join(b"line %d\n" % i for i in range(40))
    fsio.atomic_replace(dfd, rp, content, 0o644, fsync, tmp_dfd=tfd)
    monkeypatch.undo()
    assert Path(rp.abs).read_bytes() == content
    assert len(calls) == -(-len(content) // 7)  # every piece written once, none twice


def test_the_kept_pid_is_the_childs_own_after_a_fork() -> None:
    """Temporaries are named with the kept pid (`fsio.this_pid`): a forked child must name its own."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            ok = fsio.this_pid() == os.getpid() and f".ec-{os.getpid()}-" in fsio.temp_name("f")
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 1) == b"1"
    finally:
        os.close(r)
        os.waitpid(child, 0)
    assert fsio.this_pid() == os.getpid()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root")
def test_a_spare_is_given_the_file_s_owner_only_when_it_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root, the new file keeps the old one's owner: a spare already created with that owner (the usual
    case, a root process replacing its own files) is not given it again; any other owner is given."""
    rp, dfd, tfd, pool, spare = _with_a_spare(tmp_path)
    assert pool.owner == (os.geteuid(), os.getegid()) == fsio.created_owner(tfd)
    calls: list[tuple[int, int, int]] = []
    real = os.fchown
    monkeypatch.setattr(os, "fchown", lambda fd, uid, gid: calls.append((fd, uid, gid)) or real(fd, uid, gid))
    fsio.atomic_replace(
        dfd, rp, b"new\n", 0o644, False, tmp_dfd=tfd, owner=pool.owner, spare=spare, spare_owner=pool.owner
    )
    assert calls == [] and Path(rp.abs).read_bytes() == b"new\n"
    os.chown(rp.abs, 4321, 4322)
    pool.refill()
    again = pool.take()
    assert again is not None
    fsio.atomic_replace(
        dfd, rp, b"newer\n", 0o644, False, tmp_dfd=tfd, owner=(4321, 4322), spare=again, spare_owner=pool.owner
    )
    st = os.stat(rp.abs)
    assert [c[1:] for c in calls] == [(4321, 4322)] and (st.st_uid, st.st_gid) == (4321, 4322)


def test_a_file_made_in_a_set_group_id_folder_is_counted_as_of_its_group(tmp_path: Path) -> None:
    folder = tmp_path / "g"
    folder.mkdir()
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert fsio.created_owner(fd) == (os.geteuid(), os.getegid())
        os.chmod(folder, 0o2775)
        gid = os.stat(folder).st_gid
        assert fsio.created_owner(fd) == (os.geteuid(), gid)
        made = os.open(folder / "x", os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(made)
        assert os.stat(folder / "x").st_gid == gid
    finally:
        os.close(fd)
