"""`edit-coordinator hook AGENT`: an agent's command hook (Claude Code: `hook claude-code`).

Reads one hook event (JSON) on stdin and answers as the agent's hooks expect (the front end's `render`):
exit 0 to let the call go on, a deny on stdout, or exit 2 with the reason on stderr. Fails closed: any error
of its own (bad JSON, an unreachable service, a timeout, an exception) exits 2 with the reason on stderr,
which blocks the call.

Where it decides: with `--server URL` (or $EDIT_COORDINATOR_SERVER; http://, https:// or unix:///path.sock)
and `--token T` ($EDIT_COORDINATOR_TOKEN) the running service does (`POST /v1/hooks/AGENT`, over the
standard library's http.client); otherwise the repository's own hook service on a unix socket in its state
folder, started by the first hook that finds none (coordinator/cli/hookservice.py), for the root found from
the event's `cwd` (or --root); a coordinator in this process when that service cannot be had.

It runs once per tool call, so its path is kept free of heavy imports: `main` in coordinator.cli sends
`hook` here before building the full command line, and talking to a service loads neither the engine nor
Redis nor httpx.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from coordinator.agents import FRONT_ENDS
from coordinator.agents.core import HookAnswer, failed_closed

if TYPE_CHECKING:
    import argparse

SERVER_ENV = "EDIT_COORDINATOR_SERVER"
TOKEN_ENV = "EDIT_COORDINATOR_TOKEN"
DEFAULT_TIMEOUT_S = 30.0  # below Claude Code's own command-hook timeout (60 s): we answer, not the agent


def _parser() -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog="edit-coordinator hook",
        description="An agent's command hook: reads the hook event on stdin, allows or denies the tool call.",
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent", choices=sorted(FRONT_ENDS), help="whose hook event this is")
    p.add_argument("--server", default=None, help=f"a running `edit-coordinator serve` (default: ${SERVER_ENV})")
    p.add_argument("--token", default=None, help=f"its admin token (default: ${TOKEN_ENV})")
    p.add_argument("--root", default=None, help="the repository (default: found from the event's cwd)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds to wait for the service")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "hook",
        help="an agent's command hook (Claude Code: hook claude-code): the event on stdin, the answer out",
        description=_parser().description,
    )
    add_arguments(p)
    p.set_defaults(func=lambda args: run(args, sys.stdin.buffer.read()))


_OPTIONS = {"--server": "server", "--token": "token", "--root": "root", "--timeout": "timeout"}


def main(argv: list[str]) -> int:
    """The fast entry (coordinator.cli.main sends `hook ...` here without building the full command line).
    The plain forms `AGENT [--server URL] [--token T] [--root R] [--timeout S]` (also `--opt=value`) are
    read here without argparse, which costs a command run per tool call ~10 ms; anything else (--help, a
    typo) goes through the full parser for its message."""
    args: Any = _quick_args(argv)
    if args is None:
        args = _parser().parse_args(argv)
    return run(args, sys.stdin.buffer.read())


def main_with(argv: list[str], raw: bytes | None, *, refresh: bool = False) -> int:
    """The hook on an event already read (`raw`; None: read stdin), for the fast client's slow path
    (coordinator/cli/fasthook.py). `refresh`: the hook service refused its token, so mint it again."""
    args: Any = _quick_args(argv)
    if args is None:
        args = _parser().parse_args(argv)
    args.refresh = refresh
    return run(args, sys.stdin.buffer.read() if raw is None else raw)


def _quick_args(argv: list[str]) -> SimpleNamespace | None:
    if not argv or argv[0] not in FRONT_ENDS:
        return None
    found: dict[str, object] = {"agent": argv[0], "server": None, "token": None, "root": None}
    found["timeout"] = DEFAULT_TIMEOUT_S
    words = argv[1:]
    while words:
        name, eq, value = words.pop(0).partition("=")
        if name not in _OPTIONS or (not eq and not words):
            return None
        found[_OPTIONS[name]] = value if eq else words.pop(0)
    try:
        found["timeout"] = float(str(found["timeout"]))
    except ValueError:
        return None
    return SimpleNamespace(**found)


def run(args: Any, raw: bytes) -> int:
    try:
        answer = _answer(args, raw)
    except Exception as exc:  # fail closed on anything of our own
        answer = failed_closed(f"{type(exc).__name__}: {exc}")
    if answer.stdout:
        sys.stdout.write(answer.stdout)
        sys.stdout.flush()
    if answer.stderr:
        sys.stderr.write(answer.stderr)
        sys.stderr.flush()
    return answer.exit_code


def _answer(args: Any, raw: bytes) -> HookAnswer:
    from coordinator.agents import front_end

    module = front_end(args.agent)
    try:
        payload = json.loads(raw)
    except ValueError as exc:
        return failed_closed(f"the hook event on stdin is not JSON ({exc}).")
    try:
        call = module.parse(payload)
    except ValueError as exc:
        return failed_closed(f"the hook event cannot be read: {exc}.")
    if call is None:
        return HookAnswer(0)
    server = args.server or os.environ.get(SERVER_ENV)
    if server:
        token = args.token or os.environ.get(TOKEN_ENV)
        if not token:
            return failed_closed(f"--server is given but no token (--token or ${TOKEN_ENV}).")
        return _remote(server, token, args.agent, raw, args.timeout)
    return _embedded(args, call, raw, module)


def _embedded(args: Any, call: Any, raw: bytes, module: Any) -> HookAnswer:
    """No service named: the repository's hook service on its unix socket (hookservice.py), started when
    none answers; in this process when it cannot be (or $EDIT_COORDINATOR_HOOK_SERVICE=0)."""
    from coordinator.cli import hookservice

    if not hookservice.enabled():
        return _local(args.root, call, module)
    service = None if args.root else hookservice.find_running(call.cwd or os.getcwd())
    answered = hookservice.ask(service, args.agent, raw, args.timeout) if service is not None else None
    if answered is not None and answered.get("code") != "unauthorized":
        return _command_answer(answered)
    from coordinator.cli.config import find_root

    root = args.root or find_root(call.cwd or None)
    try:
        service = hookservice.start(root, refresh=getattr(args, "refresh", False) or answered is not None)
        answered = hookservice.ask(service, args.agent, raw, args.timeout)
    except Exception:  # no service to be had: decide here, as before there was one
        answered = None
    return _command_answer(answered) if answered is not None else _local(root, call, module)


def _command_answer(data: dict[str, Any]) -> HookAnswer:
    return HookAnswer(int(data["exit_code"]), str(data.get("stdout", "")), str(data.get("stderr", "")))


def _remote(server: str, token: str, agent: str, raw: bytes, timeout: float) -> HookAnswer:
    """The service's answer (`?answer=command`), one request on a bare socket (coordinator.endpoint's
    `request_once`: no http.client, no httpx on this path): http://, https:// or unix:///path.sock."""
    from coordinator.endpoint import parse_service_url, request_once

    endpoint = parse_service_url(server)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        status, body = request_once(endpoint, "POST", f"/v1/hooks/{agent}?answer=command", raw, headers, timeout)
    except OSError as exc:
        return failed_closed(f"the coordinator service at {endpoint.describe()} cannot be reached ({exc}).")
    if status != 200:
        return failed_closed(f"the coordinator service at {server} answered {status}: {body[:300]!r}.")
    return _command_answer(json.loads(body))


def _local(root_arg: str | None, call: Any, module: Any) -> HookAnswer:
    """The decision of a coordinator in this process, on the root of the event's cwd."""
    from coordinator.agents.adapter import HookAdapter
    from coordinator.cli.config import find_root
    from coordinator.engine import Coordinator
    from coordinator.errors import CoordinatorError

    try:
        root = root_arg or find_root(call.cwd or None)
        with Coordinator(root) as coord:
            decision = HookAdapter(coord).handle(call)
    except CoordinatorError as exc:
        return failed_closed(f"the coordinator could not check this call: [{exc.code.value}] {exc.message}")
    result: HookAnswer = module.render(call, decision)
    return result
