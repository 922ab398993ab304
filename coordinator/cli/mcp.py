"""`edit-coordinator mcp`: an MCP server over stdio for one agent session (the server itself is
coordinator.tools.mcp_server; this module reads the command line and opens the session)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator.errors import CoordinatorError
from coordinator.tools.mcp_server import default_session_id, describe_tools_json, serve_stdio

log = logging.getLogger("coordinator.mcp")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "mcp",
        help="an MCP server over stdio for one agent session (file tools, leases, history, undo)",
        description=(
            "Serve the coordinator's tools to one agent over the Model Context Protocol (stdin/stdout). Start "
            "one process per agent, from its MCP client: with --root on the host that holds the files (all "
            "of them share the read state in Redis), or with --server URL --token T to forward to a remote "
            "`edit-coordinator serve` (no local engine, no Redis). Register it, for example, with "
            "`claude mcp add edit-coordinator -- edit-coordinator mcp --root /path/to/repo`."
        ),
        formatter_class=cmd_common.DefaultsFormatter,
    )
    cmd_common.add_root(p)
    cmd_common.add_session(p, "session id (else, remote, the token's session; else a fresh id for this process)")
    cmd_common.add_redis(p)
    from coordinator.client import operations as ops

    cmd_common.add_server(p, cmd_common.tokens_of(ops.Read))
    cmd_common.add_durability(p)
    p.add_argument("--lock-timeout", type=float, default=10.0, help="seconds to wait for a file's lock")
    cmd_common.add_policy_match(p)
    p.add_argument("--log-level", default="WARNING", help="log level for stderr")
    p.add_argument(
        "--hook-tool",
        action="store_true",
        help="also serve the `hook` tool, for Claude Code's mcp_tool hooks (`init claude-code --hook-type mcp_tool`); "
        "needs --root",
    )
    p.add_argument(
        "--print-tools", action="store_true", help="print the tools (names, descriptions, schemas) as JSON and exit"
    )
    p.set_defaults(func=run)


def _greet_terminal(target: str) -> None:
    if sys.stdin.isatty():
        print(
            f"edit-coordinator mcp: speaks the Model Context Protocol on stdin/stdout ({target}); start it from "
            "an MCP client, e.g. `claude mcp add edit-coordinator -- edit-coordinator mcp --root /path/to/repo`. "
            "Ctrl-C quits.",
            file=sys.stderr,
            flush=True,
        )


def _quit_on_interrupt() -> None:
    """Ctrl-C ends the process at once: the stdio reader thread blocks in read(), so an orderly unwinding
    would wait for the next line of input."""

    def quit_now(*_: Any) -> None:
        sys.stderr.flush()
        os._exit(130)

    signal.signal(signal.SIGINT, quit_now)


def _open_session(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """(client, bound session, default read lines) for --server or --root."""
    matching = {key: getattr(args, key) for key in ("policy", "match") if getattr(args, key)}
    client = cmd_common.open_client(args, durability=args.durability, lock_timeout=args.lock_timeout, **matching)
    try:
        if args.server:
            session_id = args.session or str(client.session_status()["session"])
            return client, client.session(session_id), 2000
        session_id = args.session or default_session_id()
        bound = client.session(session_id)  # validates the id before the client connects
        client.announce(session_id)  # `status` lists it before its first call
        return client, bound, client.default_read_lines
    except BaseException:
        client.close()
        raise


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(), format="edit-coordinator mcp: %(message)s")
    if args.print_tools:
        print(describe_tools_json())
        return 0
    try:
        if args.hook_tool and args.server:
            from coordinator.tools.hook_tool import engine_of

            engine_of(None)  # the refusal: the hook tool decides on this process's own engine
        client, bound, read_lines = _open_session(args)
    except CoordinatorError as exc:
        return cmd_common.fail(exc)
    target = f"session {bound.id}, " + (f"service {args.server}" if args.server else f"root {client.coord.root}")
    log.info("%s", target)
    _greet_terminal(target)
    _quit_on_interrupt()
    try:
        serve_stdio(bound, read_lines, hook_tool=args.hook_tool)
    finally:
        client.close()
    return 0
