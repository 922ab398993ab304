"""Faults while fleets run: kill -9 mid-edit, Redis outages, outside writers, and disk-level faults.

Fleet tests use real worker processes and a real (embedded) Redis server; the disk-fault tests are
single-process and use fakeredis (the fault is in the file system, not in the coordination state).

How the disk faults are made (the tests run as root, and root ignores permission bits):
- a read-only file and a folder without write permission: `chattr +i` (immutable), or the permission bits
  when not running as root;
- a read-only file system: a read-only bind mount (`mount --bind`, then `mount -o remount,bind,ro`);
- a full disk: a 256 KiB tmpfs (`mount -t tmpfs -o size=256k`) filled to the last block, and, everywhere,
  ENOSPC injected into the `os.write` that `coordinator.disk.fsio` uses for the temporary file.
A test whose mechanism is unavailable on the machine is skipped, with the reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.disk import fsio as fsio_mod
from coordinator.disk import spares
from coordinator.disk.locks import LockManager
from tests.worker import test_fleet as fleet_tests
from worker.agent import parse_counters
from worker.fleet import Chaos, check_history, check_recovery, pair_ops, summarize

STATE = ".edit-coordinator"
run_fleet = fleet_tests.run_fleet
# The fixtures of the fleet tests: a root with its embedded Redis, the slow gate, the fork server's end.
redis_root = fleet_tests.redis_root
_fork_server = fleet_tests._fork_server


# --- kill -9 ---------------------------------------------------------------------------------------------
def _kill_run(root: Path, workload: str, files: int, duration: float, every: float) -> None:
    run, report = run_fleet(
        root, workload, workers=4, files=files, duration=duration, chaos=Chaos(kill_every_s=every), recover=False
    )
    kills = [e for e in run.events if e["e"] == "kill"]
    # Workers died inside their calls, some after their write landed and before it was acknowledged. (A
    # count, not a rate: how many kills fit in the duration depends on how loaded the machine is.)
    assert len(kills) >= 10, len(kills)
    assert report.in_flight > 0
    # No torn file, no lost or unexplained change (the oracle), and the kernel released every dead
    # holder's lock at once: each was taken right after the kill (-1.0 would mean 5 s without it).
    assert report.ok, report.details
    probes = [e["lock_wait_s"] for e in kills if e.get("lock_wait_s") is not None]
    assert probes and min(probes) >= 0.0
    # Temporaries of dead writers live in the state folder, never in the repository; opening the root again
    # (recovery) removes them, and no lock is held once the fleet is gone.
    url = run.config.client.redis_url
    check_recovery(report, str(root), run.config.corpus.files, url)
    assert report.stale_temp_files == [] and report.locks_left_held == 0, report.details
    # The history lists only versions that reached the files (entries of killed writers whose replace never
    # happened were taken back), and each file's newest version undoes and redoes.
    check_history(report, str(root), run.config.corpus.files, url)
    assert report.history_entries > 0
    assert (report.history_unreal, report.undo_failed, report.undo_checked) == (0, 0, files), report.details


def test_kill9_workers_mid_edit_many_times(redis_root: Path) -> None:
    # 2.5 s: dozens of kills at this rate (the assertions need 10); hundreds are the slow test's below
    _kill_run(redis_root, "counters", files=2, duration=2.5, every=0.03)


def test_kill9_workers_during_mixed_changes(redis_root: Path) -> None:
    _kill_run(redis_root, "mixed", files=3, duration=3.0, every=0.04)


@pytest.mark.slow
def test_kill9_hundreds_of_times(redis_root: Path) -> None:
    _kill_run(redis_root, "markers", files=4, duration=30.0, every=0.02)


# --- Redis outages ---------------------------------------------------------------------------------------
def _outage_run(root: Path, duration: float) -> None:
    chaos = Chaos(redis_every_s=0.8, redis_down_s=0.6, state_dir=str(root / STATE))
    run, report = run_fleet(root, "counters", workers=4, files=2, duration=duration, think_ms=0.5, chaos=chaos)
    assert report.ok, report.details
    windows = [e for e in run.events if e["e"] == "redis_window"]
    assert len(windows) >= 2 and report.redis_windows == len(windows)
    ops, reads = pair_ops(run.records)
    for w in windows:
        # Every edit and read started while Redis was down was refused with state_unavailable ...
        during = [o for o in ops if w["t_down"] < o.t < w["t_up"]]
        assert all(o.code == ErrorCode.STATE_UNAVAILABLE.value for o in during), {o.code for o in during}
        assert all(r["c"] == "state_unavailable" for r in reads if w["t_down"] < r["t"] < w["t_up"])
        # ... and no file changed in that window (after the grace for calls that passed Redis before).
        assert w["changed"] == []
    assert report.refused_while_down > 0 and report.acked_while_down == 0 and report.written_while_down == []
    # Work resumed after every outage (that ended well before the run did).
    for w in windows:
        if w["t_up"] < run.ended - 0.5:
            assert any(o.code == "ok" and o.t > w["t_up"] for o in ops)


def test_redis_outage_refuses_edits_writes_nothing_and_recovers(redis_root: Path) -> None:
    _outage_run(redis_root, duration=4.0)


@pytest.mark.slow
def test_redis_outages_for_long(redis_root: Path) -> None:
    _outage_run(redis_root, duration=20.0)


# --- outside writers -------------------------------------------------------------------------------------
def test_outside_rewrite_is_stale_but_touch_and_identical_rewrite_are_not(coord: Coordinator, root: Path) -> None:
    path = root / "a.py"
    path.write_text("x = 1\ny = 2\n")
    s = coord.session("agent")
    s.read("a.py")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 7_000_000_000))  # touch: mtime only
    s.edit("a.py", "x = 1", "x = 10")
    tmp = root / ".fmt"
    tmp.write_bytes(path.read_bytes())
    os.replace(tmp, path)  # a formatter that rewrote identical bytes (new inode, new mtime)
    s.edit("a.py", "y = 2", "y = 20")
    path.write_text("x = 10\ny = 20\nz = 3\n")  # a real outside change
    with pytest.raises(CoordinatorError) as exc:
        s.edit("a.py", "x = 10", "x = 100")
    assert exc.value.code == ErrorCode.STALE
    assert path.read_text() == "x = 10\ny = 20\nz = 3\n"  # the outside change was not overwritten


def test_touching_files_during_a_fleet_never_makes_a_session_stale(redis_root: Path) -> None:
    # Each worker owns its file (disjoint), so the only thing that could make a session stale is the toucher.
    run, report = run_fleet(
        redis_root, "counters", workers=3, files=3, disjoint=True, duration=2.0, chaos=Chaos(touch_every_s=0.003)
    )
    assert report.ok, report.details
    s = summarize(run)
    assert s["touches"] > 50
    assert s["refused"].get("stale", 0) == 0 and s["refused"].get("not_read", 0) == 0, s["refused"]


def test_formatter_rewrites_during_a_fleet_make_sessions_stale_and_lose_nothing(redis_root: Path) -> None:
    """An outside tool rewrites files while the fleet runs; it takes the file's lock (cooperating with the
    coordinator, so that its own read-modify-write is safe), but goes through no session. Every session
    that read before a rewrite is refused as stale, reads again, and redoes its increment: nothing is lost,
    and the formatter's changes stay too."""
    stop = threading.Event()
    passes: dict[str, int] = {}  # file -> number of the last pass that rewrote it

    def formatter() -> None:
        locks = LockManager(redis_root / STATE / "locks")
        n = 0
        while not stop.is_set():
            files = sorted((redis_root / "stress").glob("c*.txt")) if (redis_root / "stress").is_dir() else []
            if not files:
                time.sleep(0.005)
                continue
            path = files[n % len(files)]
            rel = path.relative_to(redis_root).as_posix()
            n += 1
            with locks.acquire(rel, timeout=5.0):
                text = path.read_text()
                head, _, rest = text.partition("\n")
                head = head.split(" [formatted", 1)[0] + f" [formatted {n}]"
                tmp = path.with_name(".formatter.tmp")
                tmp.write_text(head + "\n" + rest)
                os.replace(tmp, path)
            passes[rel] = n
            time.sleep(0.01)

    t = threading.Thread(target=formatter, daemon=True)
    t.start()
    try:
        run, report = run_fleet(
            redis_root, "counters", workers=3, files=3, disjoint=True, duration=2.5, check_versions=False
        )
    finally:
        stop.set()
        t.join()
    assert report.ok, report.details  # every acknowledged increment is in the files
    stale = summarize(run)["refused"].get("stale", 0)
    assert 0 < stale <= max(passes.values())  # disjoint files: every stale refusal was caused by a rewrite
    for rel, n in passes.items():
        text = (redis_root / rel).read_text()
        assert parse_counters(text) is not None
        assert f"[formatted {n}]" in text.partition("\n")[0]  # the formatter's last change is kept


# --- disk faults -----------------------------------------------------------------------------------------
def _coordinator(root: Path) -> Coordinator:
    return Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="fsync")


def _no_temps(root: Path) -> None:
    """No temporary file in the repository or the state folder: a refused write leaves nothing behind. The
    coordinator's spares (empty temporaries made ahead for the next writes, spares.py) are not a write's."""
    left = [p for p in root.rglob("*") if p.is_file() and (".ec-" in p.name or p.name.endswith(".tmp"))]
    assert [p for p in left if not (p.name.startswith(".spare.ec-") and p.stat().st_size == 0)] == []
    assert len(left) <= spares.KEEP


def _chattr_works(probe: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    ok = subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
    return ok


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[str]:
    """Make `path` (file or folder) unwritable: immutable as root, permission bits otherwise."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield "chmod"
        finally:
            path.chmod(mode)
        return
    if not _chattr_works(path):
        pytest.skip("root ignores permission bits, and chattr +i does not work on this file system")
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield "chattr +i"
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_read_only_file_is_refused_and_left_intact(root: Path) -> None:
    path = root / "locked.py"
    path.write_text("value = 1\n")
    with _coordinator(root) as c:
        s = c.session("agent")
        s.read("locked.py")
        with _read_only(path):
            for call in (
                lambda: s.edit("locked.py", "value = 1", "value = 2"),
                lambda: s.write("locked.py", "replaced\n"),
            ):
                with pytest.raises(CoordinatorError) as exc:
                    call()
                assert exc.value.code == ErrorCode.PERMISSION_DENIED, exc.value
                assert "nothing was written" in exc.value.message
                assert path.read_text() == "value = 1\n"
        _no_temps(root)
        s.edit("locked.py", "value = 1", "value = 2")  # writable again: the same session goes on
    assert path.read_text() == "value = 2\n"


def test_folder_without_write_permission_is_refused_and_left_intact(root: Path) -> None:
    folder = root / "pkg"
    folder.mkdir()
    (folder / "mod.py").write_text("a = 1\n")
    with _coordinator(root) as c:
        s = c.session("agent")
        s.read("pkg/mod.py")
        with _read_only(folder):
            with pytest.raises(CoordinatorError) as exc:
                s.edit("pkg/mod.py", "a = 1", "a = 2")
            assert exc.value.code == ErrorCode.PERMISSION_DENIED, exc.value
            with pytest.raises(CoordinatorError) as exc:
                s.write("pkg/new.py", "b = 1\n")
            assert exc.value.code == ErrorCode.PERMISSION_DENIED, exc.value
            assert (folder / "mod.py").read_text() == "a = 1\n"
            assert sorted(p.name for p in folder.iterdir()) == ["mod.py"]
        _no_temps(root)
        s.edit("pkg/mod.py", "a = 1", "a = 2")
    assert (folder / "mod.py").read_text() == "a = 2\n"


def _mount(args: list[str]) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def _umount(target: Path) -> None:
    if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def test_read_only_file_system_is_refused_and_left_intact(root: Path) -> None:
    sub = root / "ro"
    sub.mkdir()
    (sub / "conf.py").write_text("debug = False\n")
    if not _mount(["--bind", str(sub), str(sub)]):
        pytest.skip("bind mounts need root and a mount that works here")
    try:
        if not _mount(["-o", "remount,bind,ro", str(sub)]):
            pytest.skip("cannot remount the bind mount read-only here")
        with _coordinator(root) as c:
            s = c.session("agent")
            s.read("ro/conf.py")
            with pytest.raises(CoordinatorError) as exc:
                s.edit("ro/conf.py", "False", "True")
            assert exc.value.code == ErrorCode.PERMISSION_DENIED, exc.value
            assert "read-only" in exc.value.message
            assert (sub / "conf.py").read_text() == "debug = False\n"
    finally:
        _umount(sub)
    _no_temps(root)


def _fill(folder: Path) -> Path:
    filler = folder / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A repository root on its own 256 KiB tmpfs (state folder included)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if not _mount(["-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)]):
        pytest.skip("mounting a small tmpfs needs root and a mount that works here")
    try:
        yield mnt
    finally:
        _umount(mnt)


def test_full_disk_refuses_the_edit_and_leaves_the_file_intact(small_disk: Path) -> None:
    path = small_disk / "data.txt"
    path.write_text("line\n" * 20)
    with _coordinator(small_disk) as c:
        s = c.session("agent")
        s.read("data.txt")
        s.edit("data.txt", "line\n", "LINE\n", replace_all=True)  # the path has history and a lock now
        before = path.read_bytes()
        filler = _fill(small_disk)
        with pytest.raises(CoordinatorError) as exc:
            s.edit("data.txt", "LINE\n", "x" * 30_000 + "\n", replace_all=True)
        assert exc.value.code == ErrorCode.IO_ERROR and "disk is full" in exc.value.message
        assert path.read_bytes() == before
        _no_temps(small_disk)
        filler.unlink()
        s.edit("data.txt", "LINE\n", "done\n", replace_all=True)  # space again: the same session goes on
    assert path.read_text() == "done\n" * 20


def _first_edit_on_full_disk(root: Path) -> tuple[BaseException | None, bytes, bytes]:
    path = root / "fresh.txt"
    path.write_text("alpha\n")
    with _coordinator(root) as c:
        s = c.session("agent")
        s.read("fresh.txt")
        before = path.read_bytes()
        _fill(root)
        try:
            s.edit("fresh.txt", "alpha", "beta" * 5000)
            error: BaseException | None = None
        except (CoordinatorError, OSError) as exc:
            error = exc
    return error, before, path.read_bytes()


def test_full_disk_first_edit_of_a_path_leaves_the_file_intact(small_disk: Path) -> None:
    error, before, after = _first_edit_on_full_disk(small_disk)
    assert error is not None and after == before


def test_full_disk_first_edit_of_a_path_is_a_coordinator_error(small_disk: Path) -> None:
    error, _, _ = _first_edit_on_full_disk(small_disk)
    assert isinstance(error, CoordinatorError) and error.code == ErrorCode.IO_ERROR, repr(error)


class _EnospcOnWrite:
    """Stands in for the `os` module inside coordinator.disk.fsio: `write` fails with ENOSPC, all else is os."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def write(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_injected_enospc_refuses_the_edit_and_leaves_the_file_intact(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = root / "notes.md"
    path.write_text("# Notes\nfirst\n")
    with _coordinator(root) as c:
        s = c.session("agent")
        s.read("notes.md")
        monkeypatch.setattr(fsio_mod, "os", _EnospcOnWrite())
        with pytest.raises(CoordinatorError) as exc:
            s.edit("notes.md", "first", "second")
        assert exc.value.code == ErrorCode.IO_ERROR and "disk is full" in exc.value.message
        assert path.read_text() == "# Notes\nfirst\n"
        _no_temps(root)
        assert c.history("notes.md") == []  # the refused write left no history entry behind
        monkeypatch.undo()
        s.edit("notes.md", "first", "second")
    assert path.read_text() == "# Notes\nsecond\n"
