"""The per-repository hook service: `edit-coordinator serve --uds <state>/hook-service/sock`, started by the
first command hook that finds none (like the embedded Redis), so that every later hook pays a connection
on a unix socket instead of opening a coordinator in its own process (~1-2 s of imports and set-up).

Files, in the state folder's `hook-service/` (disk/layout.py): `sock` (the service's socket, mode 0600; in a
private folder of the temp folder where that path would be too long for a socket: `socket_of`),
`token` (an admin token for it, mode 0600, minted from the repository's secret by the hook that started
it), `pid`, `log` and `start.lock` (held while one hook starts it: the others wait for it, then use it).
The service stops by itself after `IDLE_EXIT_S` without a hook call, at the SessionEnd of the last session it
serves, or once the repository's folder is gone
(`serve --idle-exit`), or when stopped (`stop(root)`, or `kill $(cat .edit-coordinator/hook-service/pid)`); a
hook that finds its socket dead starts a new one. $EDIT_COORDINATOR_HOOK_SERVICE=0 keeps hooks in their own process.

Claude Code's hooks reach the service without a process of their own (its `http` hook type): `init
claude-code` writes `http.json` here (a loopback port and a key, mode 0600; `http_endpoint`), and the service
also listens on 127.0.0.1 at that port, where it answers the hook route alone, to requests that carry the key
(coordinator.agents.core.HOOK_KEY_HEADER). An http hook cannot start a service, so Claude Code's SessionStart
and UserPromptSubmit stay command hooks: they start it, and name the agent's process, whose life keeps the
service up (server/hooks.py).

`find_running` and `ask` are the every-call path: standard library and coordinator.endpoint only.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.disk.layout import STATE_DIR_NAME, hook_service_dir
from coordinator.endpoint import MAX_UNIX_PATH_BYTES, UNIX_HOST, ServiceEndpoint, request_once, unix_url

SWITCH_ENV = "EDIT_COORDINATOR_HOOK_SERVICE"
TOKEN_TTL_S = 30 * 24 * 3600.0  # the service's token; a refused one is minted again (`start(refresh=True)`)
START_TIMEOUT_S = 60.0
IDLE_EXIT_S = 600.0  # the service stops after 10 min without a hook call, at the SessionEnd of the last session
# it serves (coordinator/server/hooks.py), or once its repository goes


_NOT_INHERITED = ("EDIT_COORDINATOR_SERVER", "EDIT_COORDINATOR_TOKEN", "EDIT_COORDINATOR_POLICY")
HTTP_FILE = "http.json"  # the loopback port and key of Claude Code's http hooks (`http_endpoint`)
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class HookHttp:
    """Where Claude Code's http hooks reach the repository's hook service: 127.0.0.1:`port`, with `key`."""

    port: int
    key: str

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"


def http_endpoint(root: str | os.PathLike[str], *, create: bool = False) -> HookHttp | None:
    """The repository's http hook endpoint (`http.json` in its hook-service folder); None when there is none
    and `create` is false. With `create`, one is made (a free loopback port, a new key) when there is none,
    or when its port is taken by a program other than this repository's hook service."""
    from coordinator.disk.layout import ensure_state_dir, state_dir_of

    service = hook_service_dir(state_dir_of(root))
    found = read_http_file(service / HTTP_FILE)
    if not create or (found is not None and (_port_free(found.port) or _serving(service))):
        return found
    service = hook_service_dir(ensure_state_dir(state_dir_of(root)))
    service.mkdir(mode=0o700, exist_ok=True)
    import secrets

    made = HookHttp(_free_port(), found.key if found is not None else secrets.token_urlsafe(32))
    _write_private(service / HTTP_FILE, json.dumps({"port": made.port, "key": made.key}))
    return made


def read_http_file(path: Path) -> HookHttp | None:
    """The port and key of an `http.json`; None when it is missing or not one."""
    try:
        data = json.loads(path.read_text())
        port, key = data["port"], data["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(port, int) or not 0 < port < 65536 or not isinstance(key, str) or len(key) < 16:
        return None
    return HookHttp(port, key)


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _serving(service: Path) -> bool:
    """Whether this repository's hook service runs (so that a port it holds is taken by it, not another)."""
    return _service_pid(service) is not None


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
            return service if socket_of(service).exists() and (service / "token").exists() else None
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
            _socket_endpoint(socket_of(service)), "POST", f"/v1/hooks/{agent}?answer=command", raw, headers, timeout
        )
    except (ConnectionRefusedError, FileNotFoundError):
        return None  # the service is gone: the caller starts another
    if status != 200:
        raise OSError(f"the hook service answered {status}: {body[:300]!r}")
    return dict(json.loads(body))


def socket_of(service: Path) -> Path:
    """The hook service's unix socket: `sock` in its folder, or, where that path is over the kernel's limit
    (a deep repository), one named by a hash of the folder in a private folder of the user's in /tmp (the
    fast client then takes the full path, which finds it here)."""
    sock = service / "sock"
    if len(os.fsencode(sock)) <= MAX_UNIX_PATH_BYTES:
        return sock
    import hashlib

    digest = hashlib.sha256(os.fsencode(service)).hexdigest()[:32]
    # /tmp itself, not $TMPDIR: every agent's hooks must find the same socket, whatever their environment
    return Path("/tmp") / f"edit-coordinator-{os.getuid()}" / f"{digest}.sock"


def _own_private_folder(folder: Path) -> None:
    """Make `folder` (mode 0700) or check that it is the user's own, private and no symlink: in a shared temp
    folder another user could have made it first, to listen in the service's place."""
    import stat

    folder.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(f"{folder} is not a private folder of this user's: the hook service's socket cannot go there")


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
    sock = socket_of(service)
    if sock.parent != service:
        _own_private_folder(sock.parent)
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
    pid = _service_pid(service)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.02)
    return True


def _service_pid(service: Path) -> int | None:
    """The pid of the hook service of `service`'s socket, from its pid file, while that process serves that
    socket (a reused pid is not ours); None otherwise."""
    try:
        pid = int((service / "pid").read_text())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            ours = os.fsencode(str(socket_of(service))) in f.read().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if ours and _alive(pid) else None


def stop_unused_redis(root: str) -> bool:
    """The hook service's last step once it has stopped for good: its embedded Redis stopped too, if no other
    client is connected. Under the start lock, so that no hook is starting a new service (and its Redis
    connection) at that moment; a hook that comes later starts both. True iff it was stopped."""
    import fcntl

    from coordinator.disk.layout import state_dir_of
    from coordinator.state.embedded import stop_embedded_redis_if_unused

    folder = state_dir_of(root)
    service = hook_service_dir(folder)
    if not service.is_dir():
        return stop_embedded_redis_if_unused(folder) if folder.is_dir() else False
    with open(service / "start.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        return stop_embedded_redis_if_unused(folder)


def stop_all(root: str | os.PathLike[str]) -> list[str]:
    """Stop everything the repository at `root` started on its own: its hook service first (so that no hook
    is answered by a service whose Redis is gone: the next hook starts both again), then its embedded Redis
    server (its state persists in the state folder). What was stopped, by name."""
    from coordinator.disk.layout import state_dir_of
    from coordinator.state.embedded import embedded_status, stop_embedded_redis

    folder = state_dir_of(root)
    redis_ran = folder.is_dir() and embedded_status(folder) is not None
    stopped = ["hook service"] if stop(root) else []  # which stops the Redis it used, if no one else uses it
    if folder.is_dir() and (stop_embedded_redis(folder) or (redis_ran and embedded_status(folder) is None)):
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
    _write_private(service / "token", mint_token(secret, admin=True, ttl_s=TOKEN_TTL_S) + "\n")


def _write_private(path: Path, text: str) -> None:
    """`text` into `path` whole (a temporary renamed over it), readable by this user alone (mode 0600)."""
    tmp = path.with_name(f".{path.name}-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


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

    argv = [sys.executable, "-m", "coordinator.cli", "serve", "--root", root, "--uds", str(socket_of(service)),
            "--workers", "1", "--idle-exit", str(IDLE_EXIT_S), "--watch"]  # fmt: skip
    if (service / HTTP_FILE).exists():
        argv += ["--hook-http", str(service / HTTP_FILE)]
    # The service decides for every session of the repository: no one session's server, token or policy
    # (its policy is the project config's, which `serve --root` reads; a changed config restarts it).
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
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
