"""`edit-coordinator hook AGENT`: an agent's command hook (Claude Code: `hook claude-code`).

Reads one hook event (JSON) on stdin and answers as the agent's hooks expect (the front end's `render`):
exit 0 to let the call go on, a deny on stdout, or exit 2 with the reason on stderr. On an error of its own
(bad JSON, an unreachable service, a timeout, an exception) only a hook that guards a write fails closed
(PreToolUse / BeforeTool: exit 2 with the reason on stderr, which blocks the call); every other event
answers "go on" (exit 0), and the failure is logged in the state folder (coordinator/agents/failures.py),
where `status` and `init --check` show it. `--fail-open` (written by `init` for those events) says the same
for an event the hook cannot read at all.

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
from coordinator.agents.core import (
    AGENT_PID_HEADER,
    ALLOW,
    STARTER_EVENTS,
    HookAnswer,
    env_header,
    event_of,
    failed,
    fails_closed,
    forwarded,
)

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
    p.add_argument(
        "--fail-open",
        action="store_true",
        help="on an error of the hook's own with an event it cannot read, let the call go on (exit 0); events "
        "it can read decide by themselves (only PreToolUse / BeforeTool fail closed)",
    )


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
    The plain forms `AGENT [--server URL] [--token T] [--root R] [--timeout S] [--fail-open]` (also `--opt=value`) are
    read here without argparse, whose start-up a command run per tool call would pay (BENCHMARKS.md, "Figures
    behind design choices"); anything else (--help, a typo) goes through the full parser for its message."""
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
    found["fail_open"] = False
    words = argv[1:]
    while words:
        name, eq, value = words.pop(0).partition("=")
        if name == "--fail-open" and not eq:
            found["fail_open"] = True
            continue
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
        payload: Any = json.loads(raw)
    except ValueError as exc:
        payload = None
        answer = _failure(args, None, f"the hook event on stdin is not JSON ({exc}).")
    else:
        try:
            answer = _answer(args, raw, payload)
        except HookFailure as exc:
            answer = _failure(args, payload, str(exc))
        except Exception as exc:  # an error of our own: refuse a guarded write, let anything else go on
            answer = _failure(args, payload, f"{type(exc).__name__}: {exc}")
        else:
            if answer.exit_code != 0 and not fails_closed(event_of(payload)):
                answer = _failure(args, payload, f"the hook answered exit {answer.exit_code}: {answer.stderr}")
    if answer.stdout:
        sys.stdout.write(answer.stdout)
        sys.stdout.flush()
    if answer.stderr:
        sys.stderr.write(answer.stderr)
        sys.stderr.flush()
    return answer.exit_code


class HookFailure(Exception):
    """An error of the hook's own (not a decision): see `_failure`."""


def _failure(args: Any, payload: Any, reason: str) -> HookAnswer:
    """The answer to an error of the hook's own, logged in the repository's failure log: a refusal where the
    hook guards a write (core.GUARD_EVENTS; an unreadable event too, unless init wrote `--fail-open` for
    it), else the agent's "go on"."""
    from coordinator.agents import failures, front_end

    event = event_of(payload)
    closed = fails_closed(event) and not (event is None and getattr(args, "fail_open", False))
    try:
        cwd = payload.get("cwd") if isinstance(payload, dict) else None
        root = args.root or _root_of(cwd if isinstance(cwd, str) else None)
        failures.record(root, args.agent, event or "", reason)
    except Exception:  # the log is best effort; the answer below is what matters
        pass
    return failed(reason, closed=closed, go_on=front_end(args.agent).render(None, ALLOW))


def _root_of(cwd: str | None) -> str:
    from coordinator.cli.config import find_root

    return find_root(cwd)


def _answer(args: Any, raw: bytes, payload: Any) -> HookAnswer:
    from coordinator.agents import front_end

    module = front_end(args.agent)
    try:
        call = module.parse(payload)
    except ValueError as exc:
        raise HookFailure(f"the hook event cannot be read: {exc}.") from None
    starter = event_of(payload) in STARTER_EVENTS and not (args.server or os.environ.get(SERVER_ENV))
    started = _start_service(args, payload, raw) if starter else None
    if started is not None:
        return started
    if call is None:
        return HookAnswer(0, module.render(None, ALLOW).stdout)
    from coordinator.cli.fasthook import MAX_EVENT_BYTES, too_large

    if len(raw) > MAX_EVENT_BYTES:  # the service would stop reading it: say so, not "did not answer"
        raise HookFailure(too_large(len(raw)) + ".")
    server = args.server or os.environ.get(SERVER_ENV)
    if server:
        token = args.token or os.environ.get(TOKEN_ENV)
        if not token:
            raise HookFailure(f"--server is given but no token (--token or ${TOKEN_ENV}).")
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


def _start_service(args: Any, payload: dict[str, Any], raw: bytes) -> HookAnswer | None:
    """A STARTER_EVENTS hook: the repository's hook service started if none runs (the http hooks that follow
    cannot start it), then told of the event, which names the agent's process (`session_headers`)."""
    from coordinator.cli import hookservice
    from coordinator.cli.config import find_root

    if not hookservice.enabled():
        return None
    cwd = payload.get("cwd")
    service = hookservice.start(args.root or find_root(cwd if isinstance(cwd, str) else None))
    answered = hookservice.ask(service, args.agent, raw, args.timeout)
    return _command_answer(answered) if answered is not None else None


def _command_answer(data: dict[str, Any]) -> HookAnswer:
    return HookAnswer(int(data["exit_code"]), str(data.get("stdout", "")), str(data.get("stderr", "")))


def _remote(server: str, token: str, agent: str, raw: bytes, timeout: float) -> HookAnswer:
    """The service's answer (`?answer=command`), one request on a bare socket (coordinator.endpoint's
    `request_once`: no http.client, no httpx on this path): http://, https:// or unix:///path.sock."""
    from coordinator.endpoint import parse_service_url, request_once

    endpoint = parse_service_url(server)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **session_headers()}
    try:
        status, body = request_once(endpoint, "POST", f"/v1/hooks/{agent}?answer=command", raw, headers, timeout)
    except OSError as exc:
        raise HookFailure(f"the coordinator service at {endpoint.describe()} cannot be reached ({exc}).") from None
    if status != 200:
        raise HookFailure(f"the coordinator service at {server} answered {status}: {body[:300]!r}.")
    return _command_answer(json.loads(body))


def session_headers() -> dict[str, str]:
    """The session's own settings from this (the agent's) environment, as the headers the service reads
    (coordinator.agents.core.FORWARDED_ENV), and the agent's pid (AGENT_PID_HEADER: this process's
    grandparent, the agent running its hooks through a shell)."""
    headers = {env_header(name): value for name, value in forwarded(os.environ)}
    from coordinator.cli.fasthook import parent_of

    agent = parent_of(os.getppid())
    if agent > 1:
        headers[AGENT_PID_HEADER] = str(agent)
    return headers


def _local(root_arg: str | None, call: Any, module: Any) -> HookAnswer:
    """The decision of a coordinator in this process, on the root of the event's cwd."""
    from coordinator.agents.adapter import HookAdapter
    from coordinator.cli.config import engine_options, find_root
    from coordinator.engine import Coordinator
    from coordinator.errors import CoordinatorError

    try:
        root = root_arg or find_root(call.cwd or None)
        # the hook service's Redis and policy (HookAdapter.policy is its coordinator's); in the agent's own
        # process tree, its environment is the session's
        with Coordinator(root, **engine_options(root)) as coord:
            decision = HookAdapter(coord).handle(call._replace(settings=forwarded(os.environ)))
    except CoordinatorError as exc:
        raise HookFailure(f"the coordinator could not check this call: [{exc.code.value}] {exc.message}") from None
    result: HookAnswer = module.render(call, decision)
    return result
