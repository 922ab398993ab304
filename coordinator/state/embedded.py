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

The state folder must be on a local filesystem: the server refuses to start on a network filesystem
(netfs.py, whose names are re-exported here). The server process's plumbing (binary, raw-socket PING and
SHUTDOWN, identifying and stopping a process) is redisproc.py; this module decides where the socket is and
when a server is started, replaced or stopped.

Decisions:

* The socket folder is chosen from this process's ``$XDG_RUNTIME_DIR``. Processes started from different
  environments may disagree on it, so the socket recorded in ``redis/socket`` is also tried before a new
  server is started: one state dir keeps one server. A recorded socket is trusted only if its folder name
  carries this state dir's hash (a copied state dir never reaches the original's server).
* A server whose pid file names a live redis-server for this state dir's socket, but which does not answer
  PING, is terminated before a new one starts (for instance, its socket file was removed by a /tmp
  cleaner). A process is identified by its title, which carries the socket path; a process that cannot be
  identified is never signalled (redisproc.is_our_server).
* Stopping takes the same lock as starting, so a stop never removes the socket of a server just started.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import filelock
import redis
import xxhash

from coordinator.disk.fsio import pid_alive as _pid_alive
from coordinator.disk.layout import ensure_state_dir, redis_dir
from coordinator.disk.netfs import (
    ALLOW_NETWORK_FS_ENV,
    NETWORK_FS_TYPES,
    NETWORK_FUSE,
    check_local_filesystem,
    filesystem_type,
    is_network_filesystem,
)
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.process import (
    POLL_INTERVAL,
    PROBE_TIMEOUT,
    atomic_write_text,
    client_count,
    is_our_server,
    log_tail,
    ping,
    read_pidfile,
    redis_server_binary,
    server_pid,
    server_version,
    shutdown_nosave,
    terminate,
    unix_client,
    unix_url,
    unlink_socket,
    wait_gone,
)

__all__ = [
    "ALLOW_NETWORK_FS_ENV",
    "NETWORK_FS_TYPES",
    "NETWORK_FUSE",
    "check_local_filesystem",
    "embedded_status",
    "ensure_embedded_redis",
    "ensure_state_dir",
    "filesystem_type",
    "is_network_filesystem",
    "redis_server_binary",
    "runtime_dir_for",
    "socket_path_for",
    "stop_embedded_redis",
    "stop_embedded_redis_if_unused",
]

SOCKET_NAME = "redis.sock"
# sun_path is 108 bytes on Linux, including the terminating NUL.
_SUN_PATH_MAX = 107
_FALLBACK_RUNTIME_BASE = "/tmp"


# --- locating things -------------------------------------------------------------------------------------


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


def _live_socket(state_dir: Path) -> Path | None:
    for sock in _candidate_sockets(state_dir):
        if ping(sock):
            return sock
    return None


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
        return unix_url(live)

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
        if ping(sock):
            return unix_url(sock)

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
            f"redis-server failed to start (exit {proc.returncode}): {output}\nLog tail:\n{log_tail(logfile)}",
            binary=binary,
            log=str(logfile),
        )

    while not ping(sock, timeout=0.5):
        pid = read_pidfile(pidfile)
        if pid is not None and not _pid_alive(pid):
            raise CoordinatorError(
                ErrorCode.STATE_UNAVAILABLE,
                f"The embedded redis-server (pid {pid}) exited during start.\nLog tail:\n{log_tail(logfile)}",
                log=str(logfile),
            )
        if time.monotonic() >= deadline:
            # Fail closed and leave no orphan behind: a server that missed its deadline is stopped.
            if pid is not None and is_our_server(pid, [sock]):
                terminate(pid, timeout=1.0)
            raise CoordinatorError(
                ErrorCode.STATE_UNAVAILABLE,
                f"The embedded redis-server did not answer on {sock} within {timeout:.1f} s.\n"
                f"Log tail:\n{log_tail(logfile)}",
                socket=str(sock),
                log=str(logfile),
            )
        time.sleep(POLL_INTERVAL)

    atomic_write_text(redis_dir / "socket", f"{sock}\n")
    return unix_url(sock)


def _clear_old_server(sockets: list[Path], pidfile: Path, deadline: float) -> None:
    """A server that is alive but does not answer (its socket removed, or wedged) holds nothing worth
    keeping: it is replaced, never left running beside the new one. Then the socket folder is made ready."""
    old_pid = read_pidfile(pidfile)
    if old_pid is not None and is_our_server(old_pid, sockets):
        terminate(old_pid, timeout=min(2.0, max(deadline - time.monotonic(), 0.1)))
    with contextlib.suppress(FileNotFoundError):
        pidfile.unlink()
    for stale in sockets:
        unlink_socket(stale)
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
    if server_version(binary) >= (6, 2):
        # The title carries the socket path: how a process is recognised as this dir's server.
        args += ["--proc-title-template", "{title} {unixsocket}"]
    return args


def embedded_status(state_dir: Path) -> dict[str, Any] | None:
    """``{"url", "pid", "socket", "version", "used_memory"}`` of ``state_dir``'s server; None if none runs."""
    sock = _live_socket(state_dir)
    if sock is None:
        return None
    client = unix_client(sock, PROBE_TIMEOUT)
    try:
        info = client.info()
    except redis.RedisError:
        return None
    finally:
        client.close()
    return {
        "url": unix_url(sock),
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


def stop_embedded_redis_if_unused(state_dir: Path, timeout: float = 5.0) -> bool:
    """Stop ``state_dir``'s server only if no other client is connected to it (the repository's hook service,
    once it has closed its own connections and stopped for good). A process that connects later starts it
    again, as any first connection does. True iff it was stopped."""
    redis_dir = _redis_dir(state_dir)
    if not redis_dir.is_dir():
        return False
    try:
        with _start_lock(redis_dir, timeout):
            live = _live_socket(state_dir)
            if live is None or client_count(live) != 1:  # 1: the probe itself
                return False
            return _stop_locked(state_dir, redis_dir, time.monotonic() + timeout)
    except filelock.Timeout:
        return False  # another process is starting or stopping it: leave it to that one


def _stop_locked(state_dir: Path, redis_dir: Path, deadline: float) -> bool:
    sockets = _candidate_sockets(state_dir)
    pidfile = redis_dir / "redis.pid"
    pid: int | None = None
    shut_down = False
    live = _live_socket(state_dir)
    if live is not None:
        pid = server_pid(live)
        shut_down = pid is not None and shutdown_nosave(live)
    if pid is None:
        candidate = read_pidfile(pidfile)
        if candidate is not None and is_our_server(candidate, sockets):
            pid = candidate

    if pid is not None:
        gone = shut_down and wait_gone(pid, deadline)
        if not gone and is_our_server(pid, sockets):
            gone = terminate(pid, timeout=max(deadline - time.monotonic(), 0.1))
        if not gone and _pid_alive(pid):
            raise CoordinatorError(
                ErrorCode.STATE_UNAVAILABLE,
                f"The embedded redis-server (pid {pid}) did not stop; stop it by hand (kill {pid}).",
                pid=pid,
            )

    for sock in sockets:
        unlink_socket(sock)
        # Leave no empty folders behind in /tmp; a non-empty one is not ours to judge.
        with contextlib.suppress(OSError):
            sock.parent.rmdir()
    pid_on_file = read_pidfile(pidfile)
    if pid_on_file is not None and not _pid_alive(pid_on_file):
        with contextlib.suppress(FileNotFoundError):
            pidfile.unlink()
    with contextlib.suppress(FileNotFoundError):
        (redis_dir / "socket").unlink()
    return pid is not None
