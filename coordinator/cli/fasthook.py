"""The command hook's fast client: what the agents' command hooks run, through the script
coordinator/cli/hookclient.py that `edit-coordinator init` writes:

    /abs/python3 -I -S /abs/.../coordinator/cli/hookclient.py AGENT --root ROOT [--timeout S] || exit 2

It runs once per tool call, so it loads next to nothing: no `site` (-S: the .pth files of an environment
alone cost tens of ms), not the package's face (hookclient.py imports this module as a top-level one,
from its cached bytecode), and none of json, re, typing, urllib, socket or os; only `sys`, the
interpreter's built-in `posix` and the `_socket` extension. It forwards the event's bytes from stdin, as
they are, to the repository's hook service (the unix socket `ROOT/.edit-coordinator/hook-service/sock`,
with its token from the file beside it) in one HTTP request written here by hand, and writes the
service's answer through (`POST /v1/hooks/AGENT?answer=plain`, see coordinator/server/hooks.py: the
service parses the event and decides; this client decides nothing).

The slow path is the full command hook (coordinator/cli/hook.py, run in this process): taken when no
service answers on the socket (none yet, or it stopped: the full path starts one, as before), when the
service refuses the token (the full path mints another), when $EDIT_COORDINATOR_SERVER names a service or
$EDIT_COORDINATOR_HOOK_SERVICE=0, and for arguments this client does not read (--help). The request has
not reached the service in any of those cases, so the event is never applied twice.

On an error of its own (an answer it cannot read, a timeout, a service that closes on it) a hook that guards
a write (PreToolUse, BeforeTool: the event's name is found in the bytes without parsing them) fails closed:
exit 2 with the reason on stderr, which the agents show their model and treat as a refusal. Every other
event answers "go on" (exit 0) and appends the failure to the state folder's failure log.
"""

import _socket
import posix
import sys

AGENTS = ("claude-code", "codex", "gemini")  # coordinator.agents.FRONT_ENDS (a test pins them equal)
SERVICE_FOLDER = "/.edit-coordinator/hook-service/"  # disk/layout.py's state folder and hook-service folder
MAX_UNIX_PATH_BYTES = 107  # coordinator.endpoint's
DEFAULT_TIMEOUT_S = 30.0  # coordinator.cli.hook's: below the agents' own hook timeouts
BLOCK_EXIT = 2
GUARD_EVENTS = ("PreToolUse", "BeforeTool")  # coordinator.agents.core.GUARD_EVENTS
GO_ON = {"claude-code": b"", "codex": b"", "gemini": b"{}"}  # each front end's render(None, ALLOW).stdout
FAILURE_LOG = "/.edit-coordinator/hook-failures.log"  # disk/layout.py's hook_failures_file
FORWARDED_ENV = ("EDIT_COORDINATOR_AUTO_COMMIT",)  # coordinator.agents.core.FORWARDED_ENV
AGENT_PID_HEADER = "x-edit-coordinator-agent-pid"  # coordinator.agents.core.AGENT_PID_HEADER
MAX_EVENT_BYTES = 16 * 1024 * 1024  # the hook service's body limit (ServerConfig.max_body_bytes)
_SLOW_ENV = (b"EDIT_COORDINATOR_SERVER", b"EDIT_COORDINATOR_HOOK_SERVICE")
_MAX_ANSWER_BYTES = 64 * 1024 * 1024


class HookFailure(Exception):
    """An error of the client's own: the hook exits 2 with this message."""


class OlderService(HookFailure):
    """The service answered in JSON: a hook service of an earlier version (from before `?answer=plain`),
    still running after an upgrade. It is stopped, so that the next hook starts the new one."""


def main(argv: list[str]) -> int:
    """The hook's exit status; its answer is written to stdout and stderr."""
    parsed = None
    raw = b""
    try:
        parsed = _arguments(argv)
        if parsed is None:
            return _full_hook(argv, None)
        agent, root, timeout, _open = parsed
        raw = sys.stdin.buffer.read()
        if len(raw) > MAX_EVENT_BYTES:  # the service would stop reading it: say so, not "did not answer"
            raise HookFailure(too_large(len(raw)))
        if _wants_full_path():
            return _full_hook(argv, raw)
        try:
            answer = ask(agent, root, raw, timeout)
        except OlderService as exc:
            _stop_service(root + SERVICE_FOLDER)
            raise HookFailure(
                f"{exc} It was stopped; the next hook starts the current one. Retry this tool call."
            ) from None
        if answer is None or answer[1] == b"unauthorized":
            return _full_hook(argv, raw, refresh=answer is not None)
        exit_code, _code, out, err = answer
        if exit_code != 0 and not guards(event_name(raw)):
            raise HookFailure(f"the hook service answered exit {exit_code}: {err[:300].decode('utf-8', 'replace')}")
    except Exception as exc:  # an error of our own: refuse a guarded write, let anything else go on
        exit_code, out, err = _failure(parsed, raw, _describe(exc))
    _write(1, out)
    _write(2, err)
    return exit_code


def too_large(size: int) -> str:
    """The refusal of an event over the service's limit (the full hook says the same)."""
    return (
        f"the hook event is too large ({size} bytes; the hook service takes {MAX_EVENT_BYTES // (1024 * 1024)} MiB), "
        "so this call cannot be checked. Write a file of that size in smaller parts."
    )


def guards(event: str | None) -> bool:
    """coordinator.agents.core.fails_closed (a test pins them equal): the events whose hook guards a write."""
    return event is None or event in GUARD_EVENTS


def event_name(raw: bytes) -> str | None:
    """The `hook_event_name` of a hook event's JSON, found without a JSON parser: the first such key at any
    depth, its string value without escapes; None when there is none (the event then counts as guarding)."""
    at = raw.find(b'"hook_event_name"')
    if at < 0:
        return None
    rest = raw[at + 17 : at + 200].lstrip(b" \t\r\n")
    if rest[:1] != b":":
        return None
    rest = rest[1:].lstrip(b" \t\r\n")
    end = rest.find(b'"', 1)
    if rest[:1] != b'"' or end < 0 or b"\\" in rest[:end]:
        return None
    return rest[1:end].decode("ascii", "replace")


def _failure(parsed: tuple[str, str, float, bool] | None, raw: bytes, what: str) -> tuple[int, bytes, bytes]:
    """(exit code, stdout, stderr) for an error of the client's own, logged in the repository's failure log
    (coordinator/agents/failures.py's line): exit 2 with the reason where the hook guards a write, else the
    agent's "go on"."""
    agent, root, _, fail_open = parsed if parsed is not None else ("", "", 0.0, False)
    event = event_name(raw)
    if root:
        _log_failure(root, agent, event or "-", what)
    if guards(event) and not (event is None and fail_open):
        return BLOCK_EXIT, b"", f"edit-coordinator hook: {what}\n".encode()
    return 0, GO_ON.get(agent, b""), b""


def _log_failure(root: str, agent: str, event: str, what: str) -> None:
    import time  # built into the interpreter: no file is read

    text = " ".join(what.split())[:500]
    try:
        fd = posix.open(root + FAILURE_LOG, posix.O_WRONLY | posix.O_APPEND | posix.O_CREAT | posix.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        posix.write(fd, f"{int(time.time())} {agent or '-'} {event} {text}\n".encode("utf-8", "replace"))
    except OSError:
        pass
    finally:
        posix.close(fd)


def _arguments(argv: list[str]) -> tuple[str, str, float, bool] | None:
    """(agent, root, timeout, fail open) of `AGENT --root ROOT [--timeout S] [--fail-open]` (also
    `--opt=value`); None otherwise."""
    if not argv or argv[0] not in AGENTS:
        return None
    found = {"--root": "", "--timeout": ""}
    fail_open = False
    words = argv[1:]
    while words:
        name, eq, value = words.pop(0).partition("=")
        if name == "--fail-open" and not eq:
            fail_open = True
            continue
        if name not in found or (not eq and not words):
            return None
        found[name] = value if eq else words.pop(0)
    if not found["--root"].startswith("/"):
        return None
    try:
        timeout = float(found["--timeout"]) if found["--timeout"] else DEFAULT_TIMEOUT_S
    except ValueError:
        return None
    return argv[0], found["--root"].rstrip("/") or "/", timeout, fail_open


def _wants_full_path() -> bool:
    env = posix.environ
    switch = env.get(_SLOW_ENV[1], b"1").strip().lower()
    return bool(env.get(_SLOW_ENV[0])) or switch in (b"0", b"false", b"no", b"off")


def ask(agent: str, root: str, raw: bytes, timeout: float) -> tuple[int, bytes, bytes, bytes] | None:
    """The service's answer to one event: (exit code, refusal code, stdout, stderr); None when the request
    did not reach a service (no token file, no socket, nobody listening on it). HookFailure otherwise."""
    folder = root + SERVICE_FOLDER
    sock_path = folder + "sock"
    if len(sock_path.encode()) > MAX_UNIX_PATH_BYTES:
        return None  # no service can listen there; the full path decides in its own process
    token = _read_token(folder + "token")
    if token is None:
        return None
    head = (
        f"POST /v1/hooks/{agent}?answer=plain HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
        f"{session_headers()}\r\n"
    )
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(sock_path)
        except (FileNotFoundError, ConnectionRefusedError):
            return None  # no service: the full path starts one
        except OSError as exc:
            raise HookFailure(f"the hook service on {sock_path} cannot be reached ({_describe(exc)}).") from None
        try:
            sock.sendall(head.encode("latin-1") + raw)
            data = _receive(sock, timeout)
        except OSError as exc:
            raise HookFailure(f"the hook service on {sock_path} did not answer ({_describe(exc)}).") from None
    finally:
        sock.close()
    return parse_answer(data)


def session_headers() -> str:
    """The session's own settings (FORWARDED_ENV) from the agent's environment, as header lines (each with
    its CRLF): coordinator.agents.core.forwarded / env_header, without their imports; and the agent's pid
    (this process's grandparent: the agent runs the hook through a shell), AGENT_PID_HEADER."""
    agent = parent_of(posix.getppid())
    lines = f"{AGENT_PID_HEADER}: {agent}\r\n" if agent > 1 else ""
    for name in FORWARDED_ENV:
        value = posix.environ.get(name.encode())
        if value and len(value) <= 200:  # an empty value is no setting (core.forwarded)
            text = value.decode("utf-8", "replace")
            if text.isprintable():
                lines += f"x-{name.lower().replace('_', '-')}: {text}\r\n"
    return lines


def _read_token(path: str) -> str | None:
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        return None
    try:
        token = posix.read(fd, 4096).decode("ascii", "replace").strip()
    finally:
        posix.close(fd)
    return token if token and token.isprintable() else None


def _receive(sock: _socket.socket, timeout: float) -> bytes:
    """Everything the service sends until it closes the connection (`Connection: close`), waited for up to
    `timeout` in slices of a second; between them the client ends itself once its agent is gone (`Lineage`),
    rather than living on re-parented, waiting for an answer nobody will read."""
    import time  # built into the interpreter: no file is read

    lineage = Lineage()
    deadline = time.monotonic() + timeout
    parts: list[bytes] = []
    size = 0
    sock.settimeout(min(timeout, 1.0))
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if time.monotonic() >= deadline:
                raise
            if not lineage.intact():
                posix._exit(BLOCK_EXIT)  # the agent is gone: nobody reads this answer
            continue
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        size += len(chunk)
        if size > _MAX_ANSWER_BYTES:
            raise HookFailure("the hook service's answer is too large.")


class Lineage:
    """This process's parent and grandparent as they were at its start: the agent runs a hook through a
    shell (`sh -c 'CLIENT ... || ...'`), so when the agent dies the shell is re-parented, and when the shell
    dies the client is. `intact()`: both links still hold."""

    def __init__(self) -> None:
        self.parent = posix.getppid()
        self.grandparent = parent_of(self.parent)

    def intact(self) -> bool:
        return posix.getppid() == self.parent and parent_of(self.parent) == self.grandparent


def parent_of(pid: int) -> int:
    """The parent of `pid` from /proc (0 when it cannot be read: then it stays 0 and nothing is concluded)."""
    try:
        fd = posix.open(f"/proc/{pid}/stat", posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        return 0
    try:
        stat = posix.read(fd, 4096)
    finally:
        posix.close(fd)
    fields = stat.rpartition(b")")[2].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0


def parse_answer(data: bytes) -> tuple[int, bytes, bytes, bytes]:
    """(exit code, refusal code, stdout, stderr) of a whole HTTP answer carrying an `?answer=plain` body;
    HookFailure for anything else (another status, a cut or malformed answer)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    status_line, _, header_lines = head.partition(b"\r\n")
    while status_line.split(b" ", 2)[1:2] == [b"100"]:  # an interim 100 Continue before the answer
        head, sep, body = body.partition(b"\r\n\r\n")
        status_line, _, header_lines = head.partition(b"\r\n")
    if not sep or not status_line.startswith(b"HTTP/"):
        raise HookFailure("the hook service's answer cannot be read (the connection closed before an answer).")
    status = status_line.split(b" ", 2)[1:2]
    if status != [b"200"]:
        code = status[0].decode("latin-1") if status else "?"
        raise HookFailure(f"the hook service answered {code}: {body[:300]!r}.")
    length = -1
    for line in header_lines.lower().split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip() == b"content-length":
            length = int(value.strip())
        elif name.strip() == b"transfer-encoding" and value.strip() != b"identity":
            raise HookFailure("the hook service's answer is in a transfer encoding this client does not read.")
    if length >= 0 and len(body) != length:
        raise HookFailure("the hook service's answer was cut short.")
    if body[:1] == b"{":
        raise OlderService("the repository's hook service is from an earlier version (it answered in JSON).")
    first, newline, rest = body.partition(b"\n")
    fields = first.split(b" ")
    if not newline or len(fields) != 3 or not fields[0].isdigit() or not fields[2].isdigit():
        raise HookFailure(f"the hook service's answer is not a hook answer: {body[:300]!r}.")
    out_size = int(fields[2])
    if out_size > len(rest):
        raise HookFailure("the hook service's answer was cut short.")
    return int(fields[0]), fields[1], rest[:out_size], rest[out_size:]


def _stop_service(folder: str) -> None:
    """SIGTERM to the hook service of `folder`, if its pid file names a process serving that socket (a
    reused pid is left alone): hookservice.stop's rule, without its imports."""
    try:
        fd = posix.open(folder + "pid", posix.O_RDONLY | posix.O_CLOEXEC)
        try:
            pid = int(posix.read(fd, 64).strip())
        finally:
            posix.close(fd)
        fd = posix.open(f"/proc/{pid}/cmdline", posix.O_RDONLY | posix.O_CLOEXEC)
        try:
            cmdline = b"".join(iter(lambda: posix.read(fd, 65536), b""))
        finally:
            posix.close(fd)
        if (folder + "sock").encode() in cmdline.split(b"\0"):
            posix.kill(pid, 15)
    except (OSError, ValueError):
        pass  # nothing to stop, or not ours


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, HookFailure) else f"{type(exc).__name__}: {exc}"


def _write(fd: int, data: bytes) -> None:
    while data:
        data = data[posix.write(fd, data) :]


def _full_hook(argv: list[str], raw: bytes | None, *, refresh: bool = False) -> int:
    """The full command hook in this process (`edit-coordinator hook ARGV`), on the event already read.
    The package is found beside this file; `site` is run first (it was skipped by -S) for the engine's
    dependencies, in case the hook must decide in its own process."""
    package_parent = posix.fspath(__file__).rsplit("/", 3)[0] if __file__.count("/") >= 3 else "."
    if package_parent not in sys.path:
        sys.path.insert(0, package_parent)
    if sys.flags.no_site:
        import site

        site.main()
        if sys.path[0] != package_parent:  # ours first, before any installed copy of the package
            sys.path.remove(package_parent)
            sys.path.insert(0, package_parent)
    from coordinator.cli import hook

    return hook.main_with(argv, raw, refresh=refresh)


if __name__ == "__main__":  # run by path (a slower start: compiled from source on every run)
    sys.exit(main(sys.argv[1:]))
