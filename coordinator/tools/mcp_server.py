"""`edit-coordinator mcp`: an MCP server over stdio for one agent session.

Each agent gets its own server process (its MCP client starts it). With `--root`, the process routes its
tool calls through a local engine on the shared Redis; with `--server URL --token T` it forwards them to a
remote `edit-coordinator serve` and runs no engine and no Redis of its own. Either way any number of agents
share one view of the repository. The tools (file_tools.py, coordination_tools.py) are adapters over the
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

import json
import logging
import os
import secrets
import socket
from typing import Any

from coordinator.tools.catalog import run_tool
from coordinator.tools.file_tools import (
    ERROR_GUIDE,
    INSTRUCTIONS,
    SessionTools,
    ToolOutcome,
    ToolSpec,
    session_match,
    tool_specs,
)

SERVER_NAME = "edit-coordinator"

__all__ = ["ERROR_GUIDE", "SessionTools", "ToolOutcome", "ToolSpec", "build_server", "serve_stdio", "tool_specs"]

log = logging.getLogger("coordinator.mcp")


def build_server(tools: SessionTools, default_read_lines: int = 2000, hook_tool: bool = False) -> Any:
    """An MCP low-level `Server` exposing `tools` (and, with `hook_tool`, the `hook` tool of Claude Code's
    mcp_tool hooks: tools/hook_tool.py). Each call runs in a worker thread."""
    import anyio.to_thread
    from mcp import types
    from mcp.server import Server

    from coordinator.tools import hook_tool as hooks
    from coordinator.version import __version__

    hook_engine = hooks.engine_of(tools.session) if hook_tool else None
    specs = tool_specs(default_read_lines, session_match(tools.session))
    if hook_engine is not None:
        specs.append(ToolSpec(hooks.NAME, hooks.TITLE, hooks.DESCRIPTION, hooks.SCHEMA, False))
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
        if hook_engine is not None and params.name == hooks.NAME:
            text = await anyio.to_thread.run_sync(hooks.answer, hook_engine, params.arguments)
            return types.CallToolResult(content=[types.TextContent(text=text)], is_error=False)
        # The one dispatcher (coordinator.tools.catalog): the same words as tools.dispatch gives an orchestrator.
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


def serve_stdio(session: Any, default_read_lines: int = 2000, hook_tool: bool = False) -> None:
    """Serve one session's tools (a `BoundSession`, or an engine `Session`) over stdin/stdout until the client
    closes the connection; `hook_tool`: the `hook` tool too (`build_server`)."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(SessionTools(session), default_read_lines, hook_tool)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


def describe_tools_json(default_read_lines: int = 2000) -> str:
    """The tool list as JSON (name, description, inputSchema), for documentation and inspection."""
    return json.dumps(
        [
            {"name": s.name, "description": s.description, "inputSchema": s.schema}
            for s in tool_specs(default_read_lines)
        ],
        indent=2,
    )
