"""The per-repository hook service: `edit-coordinator serve --uds <state>/hook-service/sock`, started by the
first command hook that finds none (like the embedded Redis), so that every later hook pays a connection
on a unix socket instead of opening a coordinator in its own process (~1-2 s of imports and set-up).

Files, in the state folder's `hook-service/` (disk/layout.py): `sock` (the service's socket, mode 0600),
`token` (an admin token for it, mode 0600, minted from the repository's secret by the hook that started
it), `pid`, `log` and `start.lock` (held while one hook starts it: the others wait for it, then use it).
The service stops by itself after `IDLE_EXIT_S` without a hook call, at the SessionEnd of the last session it
serves, or once the repository's folder is gone
(`serve --idle-exit`), or when stopped (`stop(root)`, or `kill $(cat .edit-coordinator/hook-service/pid)`); a
hook that finds its socket dead starts a new one. $EDIT_COORDINATOR_HOOK_SERVICE=0 keeps hooks in their own process.

`find_running` and `ask` are the every-call path: standard library and coordinator.endpoint only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from coordinator.disk.layout import STATE_DIR_NAME, hook_service_dir
from coordinator.endpoint import MAX_UNIX_PATH_BYTES, UNIX_HOST, ServiceEndpoint, request_once, unix_url

SWITCH_ENV = "EDIT_COORDINATOR_HOOK_SERVICE"
TOKEN_TTL_S = 30 * 24 * 3600.0  # the service's token; a refused one is minted again (`start(refresh=True)`)
START_TIMEOUT_S = 60.0
IDLE_EXIT_S = 600.0  # the service stops after 10 min without a hook call, at the SessionEnd of the last session
# it serves (coordinator/server/hooks.py), or once its repository goes


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def find_running(cwd: str) -> Path | None:
    """The hook-service folder of the nearest state folder upwards from `cwd` whose service has a socket
    and a token (the root finder's first rule, for a repository that has a state folder); None: none."""
    here = Path(os.path.realpath(cwd))
    for folder in (here, *here.parents):
        state = folder / STATE_DIR_NAME
        if state.is_dir():
            service = hook_service_dir(state)
            return service if (service / "sock").exists() and (service / "token").exists() else None
    return None


def ask(service: Path, agent: str, raw: bytes, timeout: float) -> dict[str, Any] | None:
    """The service's command-form answer to one event; None when no service answers on the socket."""
    try:
        token = (service / "token").read_text().strip()
    except OSError:
        return None
    from coordinator.cli.hook import session_headers

    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **session_headers()}
    try:
        status, body = request_once(
            _socket_endpoint(service / "sock"), "POST", f"/v1/hooks/{agent}?answer=command", raw, headers, timeout
        )
    except (ConnectionRefusedError, FileNotFoundError):
        return None  # the service is gone: the caller starts another
    if status != 200:
        raise OSError(f"the hook service answered {status}: {body[:300]!r}")
    return dict(json.loads(body))


def _socket_endpoint(sock: Path) -> ServiceEndpoint:
    return ServiceEndpoint(unix_url(str(sock)), "unix", UNIX_HOST, 0, str(sock))


def start(root: str, *, refresh: bool = False, timeout: float = START_TIMEOUT_S) -> Path:
    """Start the hook service of `root` unless one answers (under the start lock); its folder. `refresh`:
    mint its token again (the service refused the old one). Raises OSError or CoordinatorError when it
    cannot be started (the caller then decides in its own process)."""
    import fcntl

    from coordinator.disk.layout import ensure_state_dir, state_dir_of

    service = hook_service_dir(ensure_state_dir(state_dir_of(root)))
    service.mkdir(mode=0o700, exist_ok=True)
    sock = service / "sock"
    if len(os.fsencode(sock)) > MAX_UNIX_PATH_BYTES:
        raise OSError(f"the hook service's socket path would be over {MAX_UNIX_PATH_BYTES} bytes: {sock}")
    with open(service / "start.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if refresh or not (service / "token").exists():
            _write_token(root, service)
        if not _healthy(sock):
            proc = _spawn(root, service)
            _wait_healthy(sock, timeout, service, proc)
    return service


def stop(root: str | os.PathLike[str], timeout: float = 10.0) -> bool:
    """Stop the hook service of `root` (SIGTERM, waited for up to `timeout`); True if one was running. The
    pid file is trusted only while that process is the service of this socket (a reused pid is left alone)."""
    import signal

    service = hook_service_dir(Path(root) / STATE_DIR_NAME)
    try:
        pid = int((service / "pid").read_text())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            ours = os.fsencode(str(service / "sock")) in f.read().split(b"\0")
    except (OSError, ValueError):
        return False
    if not ours:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.02)
    return True


def stop_all(root: str | os.PathLike[str]) -> list[str]:
    """Stop everything the repository at `root` started on its own: its hook service first (so that no hook
    is answered by a service whose Redis is gone: the next hook starts both again), then its embedded Redis
    server (its state persists in the state folder). What was stopped, by name."""
    from coordinator.disk.layout import state_dir_of
    from coordinator.state.embedded import stop_embedded_redis

    stopped = ["hook service"] if stop(root) else []
    folder = state_dir_of(root)
    if folder.is_dir() and stop_embedded_redis(folder):
        stopped.append("embedded Redis")
    return stopped


def register(sub: Any) -> None:
    """`edit-coordinator stop [--root R]`."""
    from coordinator.cli import common as cmd_common

    p = sub.add_parser(
        "stop",
        help="stop what the repository started: its hook service and its embedded Redis",
        description="Stop the repository's hook service (started by the agents' first hook) and its embedded "
        "Redis server (its state persists in the state folder). Both start again on demand.",
    )
    cmd_common.add_root(p)
    p.set_defaults(func=cmd_common.guarded(_cmd_stop))


def _cmd_stop(args: Any) -> int:
    from coordinator.cli import common as cmd_common

    stopped = stop_all(cmd_common.real_root(args.root))
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


def _alive(pid: int) -> bool:
    """Running (a zombie, exited but not yet reaped by its parent, is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _write_token(root: str, service: Path) -> None:
    from coordinator.server.auth import load_secret
    from coordinator.tokens import mint_token

    secret, _ = load_secret(root)
    token = mint_token(secret, admin=True, ttl_s=TOKEN_TTL_S)
    tmp = service / f".token-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.replace(tmp, service / "token")


def _healthy(sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        return request_once(_socket_endpoint(sock), "GET", "/v1/health", None, {}, 5.0)[0] == 200
    except OSError:
        return False


def _spawn(root: str, service: Path) -> Any:
    import subprocess
    import sys

    argv = [sys.executable, "-m", "coordinator.cli", "serve", "--root", root, "--uds", str(service / "sock"),
            "--workers", "1", "--idle-exit", str(IDLE_EXIT_S), "--watch"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("EDIT_COORDINATOR_SERVER", "EDIT_COORDINATOR_TOKEN")}
    with open(service / "log", "ab") as log:
        proc = subprocess.Popen(
            argv, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    (service / "pid").write_text(f"{proc.pid}\n")
    return proc


def _wait_healthy(sock: Path, timeout: float, service: Path, proc: Any) -> None:
    """Until the service answers its health check; OSError at once when it exits first (a config it
    refuses, say: the hook then decides in its own process instead of waiting out the agent's timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _healthy(sock):
            return
        if proc.poll() is not None:
            raise OSError(f"the hook service exited at start (status {proc.returncode}): {_log_tail(service)}")
        time.sleep(0.02)
    raise OSError(f"the hook service did not start within {timeout:g} s (see {service / 'log'})")


def _log_tail(service: Path) -> str:
    try:
        lines = (service / "log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "no log"
