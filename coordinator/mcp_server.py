"""`edit-coordinator mcp`: an MCP server over stdio for one agent session.

Each agent gets its own server process (its MCP client starts it). With `--root`, the process routes its
tool calls through a local engine on the shared Redis; with `--server URL --token T` it forwards them to a
remote `edit-coordinator serve` and runs no engine and no Redis of its own. Either way any number of agents
share one view of the repository. The tools (mcp_tools.py, mcp_coordination.py) are adapters over the
`coordinator.Client` interface: they translate arguments and results, and never decide. Refusals come back
as MCP tool errors (`isError: true`) whose text is `[<code>] <message>` and whose structured content is
`{"code": ..., "message": ...}`, with the engine's codes unchanged.

Decisions:
* Session id: `--session`, else `$EDIT_COORDINATOR_SESSION`; else, remote, the session of the token; else a
  fresh `mcp-<host>-<pid>-<random>` (one server process serves one agent conversation, so a fresh id is
  the safe default: it starts with no read state and must read before it edits).
* Engine calls are blocking (file locks, disk, Redis, HTTP): they run in worker threads so that the server
  keeps answering (pings, cancellations) while one waits for a lock.
* Started from a terminal (stdin is a tty), it says on stderr what it is and how to register it. Ctrl-C
  (SIGINT) ends it at once: a write in progress is atomic on disk, and at worst its Redis update is lost
  (the session then reads again).
* `--match flexible` (default exact, Claude Code's Edit): edit_file and multi_edit also find old_string as
  whole lines with trailing whitespace ignored, then with the indentation shifted by a constant; the tool
  result says so and names the lines. Local mode sets the engine's default; with --server it is sent with
  each edit.
* Requires the MCP Python SDK 2.x (`mcp>=2.3`): the low-level `Server` with constructor handlers, so that
  the input schemas are exactly the ones of the tool specs rather than derived from Python signatures.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
import socket
import sys
from typing import Any

from . import cmd_common, redisconn
from .cmd_files import add_match
from .errors import CoordinatorError
from .mcp_tools import ERROR_GUIDE, INSTRUCTIONS, SessionTools, ToolOutcome, ToolSpec, session_match, tool_specs
from .tools import run_tool

SESSION_ENV = cmd_common.SESSION_ENV
REDIS_URL_ENV = redisconn.REDIS_URL_ENV
SERVER_NAME = "edit-coordinator"

__all__ = ["ERROR_GUIDE", "SessionTools", "ToolOutcome", "ToolSpec", "build_server", "serve_stdio", "tool_specs"]

log = logging.getLogger("coordinator.mcp")


def build_server(tools: SessionTools, default_read_lines: int = 2000) -> Any:
    """An MCP low-level `Server` exposing `tools`. Each call runs in a worker thread."""
    import anyio.to_thread
    from mcp import types
    from mcp.server import Server

    from . import __version__

    specs = tool_specs(default_read_lines, session_match(tools.session))
    listed = [
        types.Tool(
            name=spec.name,
            title=spec.title,
            description=spec.description,
            input_schema=spec.schema,
            annotations=types.ToolAnnotations(
                title=spec.title,
                read_only_hint=spec.read_only,
                destructive_hint=not spec.read_only,
                idempotent_hint=spec.read_only,
                open_world_hint=False,
            ),
        )
        for spec in specs
    ]

    async def on_list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        # The one dispatcher (coordinator.tools): the same words as tools.dispatch gives an orchestrator.
        res = await anyio.to_thread.run_sync(run_tool, tools, params.name, params.arguments)
        return types.CallToolResult(
            content=[types.TextContent(text=res.text)], structured_content=res.data, is_error=res.is_error
        )

    schemas = {spec.name: spec.schema for spec in specs}
    return Server(
        SERVER_NAME,
        version=__version__,
        title="edit-coordinator",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=schemas.get,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


def default_session_id() -> str:
    host = "".join(c for c in socket.gethostname() if c.isalnum() or c in ".-")[:40] or "host"
    return f"mcp-{host}-{os.getpid()}-{secrets.token_hex(3)}"


def serve_stdio(session: Any, default_read_lines: int = 2000) -> None:
    """Serve one session's tools (a `BoundSession`, or an engine `Session`) over stdin/stdout until the client
    closes the connection."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(SessionTools(session), default_read_lines)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


# ---------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------
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
    cmd_common.add_server(p)
    p.add_argument("--durability", choices=("fsync", "none"), default="fsync", help="fsync every write, or not")
    p.add_argument("--lock-timeout", type=float, default=10.0, help="seconds to wait for a file's lock")
    add_match(p)
    p.add_argument("--log-level", default="WARNING", help="log level for stderr")
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
    matching = {"match": args.match} if args.match else {}
    client = cmd_common.open_client(args, durability=args.durability, lock_timeout=args.lock_timeout, **matching)
    try:
        if args.server:
            session_id = args.session or str(client.session_status()["session"])
            return client, client.session(session_id), 2000
        session_id = args.session or default_session_id()
        bound = client.session(session_id)  # validates the id before the client connects
        client.coord.state.register(session_id)  # `status` lists it before its first call
        return client, bound, client.coord.default_read_lines
    except BaseException:
        client.close()
        raise


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(), format="edit-coordinator mcp: %(message)s")
    if args.print_tools:
        print(describe_tools_json())
        return 0
    try:
        client, bound, read_lines = _open_session(args)
    except CoordinatorError as exc:
        return cmd_common.fail(exc)
    target = f"session {bound.id}, " + (f"service {args.server}" if args.server else f"root {client.coord.root}")
    log.info("%s", target)
    _greet_terminal(target)
    _quit_on_interrupt()
    try:
        serve_stdio(bound, read_lines)
    finally:
        client.close()
    return 0


def describe_tools_json(default_read_lines: int = 2000) -> str:
    """The tool list as JSON (name, description, inputSchema), for documentation and inspection."""
    return json.dumps(
        [
            {"name": s.name, "description": s.description, "inputSchema": s.schema}
            for s in tool_specs(default_read_lines)
        ],
        indent=2,
    )
