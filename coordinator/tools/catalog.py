"""The coordinator's tools for model APIs: their definitions in each API's shape, and one dispatcher.

An orchestration platform that holds many model conversations gives each one the tool list and routes its
tool calls here::

    from coordinator import tools
    defs = tools.definitions(flavor="anthropic")          # or "openai", "mcp"
    res = tools.dispatch(session, "edit_file", {"file_path": "src/app.py", "old_string": a, "new_string": b})
    res.text, res.is_error                                # exactly what the model should see
    res = await tools.adispatch(async_session, name, arguments)

The definitions are made from the same specs as the MCP server's tools (`coordinator.tools.file_tools`), and the
dispatcher runs the same handlers, so a model sees the same schemas, rules and words whether it is
connected over MCP, through this module, or over HTTP through an `HttpClient` session.

Decisions:
* `arguments` may be the JSON object or the JSON text a model API hands over (OpenAI sends a string);
  text that is not a JSON object is an `invalid_argument` result, not an exception.
* Nothing raises: every refusal (and any unexpected failure, as `io_error`) is a `ToolResult` with
  `is_error=True` and the text `[code] message`, which says what to do next.
* The "unchanged since your last read" short answer is given only for a view this dispatcher has already
  returned in full to the same session of the same client (see `coordinator.tools.file_tools.SessionTools`).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import threading
import traceback
import weakref
from dataclasses import dataclass
from typing import Any, Literal

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.tools.file_tools import SessionTools, ToolSpec, error_payload, tool_specs

Flavor = Literal["anthropic", "openai", "mcp"]
FLAVORS: tuple[str, ...] = ("anthropic", "openai", "mcp")

log = logging.getLogger("coordinator.tools")

__all__ = ["FLAVORS", "ToolResult", "adispatch", "definitions", "dispatch", "run_tool"]


@dataclass(frozen=True)
class ToolResult:
    """What the model should see: `text`, and whether it is an error. `code` names the refusal (None on
    success); `data` is the small structured summary the MCP server also returns."""

    text: str
    is_error: bool
    code: str | None = None
    data: dict[str, Any] | None = None


def definitions(
    flavor: Flavor = "anthropic", default_read_lines: int = 2000, match: str = "exact"
) -> list[dict[str, Any]]:
    """The tool list in the shape of one API: Anthropic's Messages API (`name`, `description`,
    `input_schema`), OpenAI's function calling (`{"type": "function", "function": {...parameters}}`) or
    MCP's `tools/list` entries (`name`, `title`, `description`, `inputSchema`, `annotations`). Every flavour
    carries the same input schemas, copied, so a caller may change its copy freely. `match="flexible"`: for
    sessions that match flexibly, whose edit tools' rules say so."""
    if flavor not in FLAVORS:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"Unknown flavor {flavor!r}; use one of {', '.join(FLAVORS)}."
        )
    if match not in ("exact", "flexible"):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"Unknown match {match!r}; use exact or flexible.")
    shape = {"anthropic": _anthropic, "openai": _openai, "mcp": _mcp}[flavor]
    return [shape(spec) for spec in tool_specs(default_read_lines, match)]


def _anthropic(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": copy.deepcopy(spec.schema)}


def _openai(spec: ToolSpec) -> dict[str, Any]:
    function = {"name": spec.name, "description": spec.description, "parameters": copy.deepcopy(spec.schema)}
    return {"type": "function", "function": function}


def _mcp(spec: ToolSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        "inputSchema": copy.deepcopy(spec.schema),
        "annotations": {
            "title": spec.title,
            "readOnlyHint": spec.read_only,
            "destructiveHint": not spec.read_only,
            "idempotentHint": spec.read_only,
            "openWorldHint": False,
        },
    }


def run_tool(tools: SessionTools, name: str, arguments: dict[str, Any] | str | None) -> ToolResult:
    """One tool call on one session's tools, as the model should see it (the MCP server's path too)."""
    try:
        args = _arguments(arguments)
        out = tools.call(name, args)
    except Exception as exc:  # every failure becomes text for the model; nothing escapes to the loop
        if not isinstance(exc, CoordinatorError):
            log.error("tool %s failed:\n%s", name, traceback.format_exc())
        return _error_result(exc)
    return ToolResult(out.text, False, None, out.data)


def _error_result(exc: BaseException) -> ToolResult:
    code, message = error_payload(exc)
    return ToolResult(f"[{code}] {message}", True, code, {"code": code, "message": message})


def dispatch(target: Any, name: str, arguments: dict[str, Any] | str | None) -> ToolResult:
    """Run the tool call `name(arguments)` as the session `target` (a `coordinator.Session`, or a session of
    a `Client`: `client.session(id)`), blocking. See the module docstring."""
    try:
        session_tools = _tools_for(target)
    except CoordinatorError as exc:
        return _error_result(exc)
    return run_tool(session_tools, name, arguments)


async def adispatch(target: Any, name: str, arguments: dict[str, Any] | str | None) -> ToolResult:
    """`dispatch` for a coroutine: the call runs on a worker thread (an `AsyncSession`'s own pool, else the
    loop's default executor), so a lock wait never stalls the event loop."""
    from coordinator.client.aio import AsyncSession

    if isinstance(target, AsyncSession):
        blocking = target.blocking()
        return await asyncio.wrap_future(target.client.submit(dispatch, blocking, name, arguments))
    return await asyncio.get_running_loop().run_in_executor(None, dispatch, target, name, arguments)


def _arguments(arguments: dict[str, Any] | str | None) -> dict[str, Any] | None:
    if not isinstance(arguments, str):
        return arguments
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"The tool arguments are not valid JSON ({exc}). Send them as one JSON object.",
        ) from None
    if not isinstance(parsed, dict):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "The tool arguments must be one JSON object.")
    return parsed


# One SessionTools per (client or coordinator, session id), so that what a session has been shown persists
# across calls while its owner lives.
_registry: weakref.WeakKeyDictionary[Any, dict[str, SessionTools]] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def _tools_for(target: Any) -> SessionTools:
    owner = getattr(target, "coord", None) or getattr(target, "client", None)
    session_id = getattr(target, "id", None)
    if owner is None or not isinstance(session_id, str) or not hasattr(target, "read"):
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "dispatch needs a session: coordinator.session(id), or client.session(id) of a Client.",
        )
    with _registry_lock:
        per_owner = _registry.setdefault(owner, {})
        tools = per_owner.get(session_id)
        if tools is None:
            tools = per_owner[session_id] = SessionTools(target)
        return tools
