"""The coordinator's tools for model APIs: their definitions in each API's shape, and one dispatcher.

An orchestration platform that holds many model conversations gives each one the tool list and routes its
tool calls here::

    from coordinator import tools
    defs = tools.definitions(flavor="anthropic")          # or "openai", "openai-responses", "mcp"
    res = tools.dispatch(session, "edit_file", {"file_path": "src/app.py", "old_string": a, "new_string": b})
    res.text, res.is_error                                # exactly what the model should see
    res = await tools.adispatch(async_session, name, arguments)

The definitions are made from the same specs as the MCP server's tools (`coordinator.tools.file_tools`), and the
dispatcher runs the same handlers, so a model sees the same schemas, rules and words whether it is
connected over MCP, through this module, or over HTTP through an `HttpClient` session.

Decisions:
* `arguments` may be the JSON object or the JSON text a model API hands over (OpenAI sends a string);
  text that is not a JSON object is an `invalid_argument` result, not an exception.
* The OpenAI flavours keep each tool's description within `OPENAI_DESCRIPTION_LIMIT` characters (some
  OpenAI-compatible endpoints refuse longer ones): the description keeps its lines from the top while they
  fit, and the rest moves, word for word, to the end of the first parameter's description, which the
  description points to. Nothing is dropped; the Anthropic and MCP shapes carry the description whole.
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

Flavor = Literal["anthropic", "openai", "openai-responses", "mcp"]
FLAVORS: tuple[str, ...] = ("anthropic", "openai", "openai-responses", "mcp")
OPENAI_DESCRIPTION_LIMIT = 1024  # characters of a function's description that OpenAI's APIs accept

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
    `input_schema`), OpenAI's Chat Completions function calling (`{"type": "function", "function":
    {name, description, parameters}}`), OpenAI's Responses API (`{"type": "function", name, description,
    parameters}`) or MCP's `tools/list` entries (`name`, `title`, `description`, `inputSchema`,
    `annotations`). Every flavour carries the same input schemas, copied, so a caller may change its copy
    freely (the OpenAI flavours' first parameter descriptions also hold what did not fit in 1,024 characters:
    `fit_description`). `match="flexible"`: for
    sessions that match flexibly, whose edit tools' rules say so."""
    if flavor not in FLAVORS:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"Unknown flavor {flavor!r}; use one of {', '.join(FLAVORS)}."
        )
    if match not in ("exact", "flexible"):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"Unknown match {match!r}; use exact or flexible.")
    shape = {"anthropic": _anthropic, "openai": _openai, "openai-responses": _openai_responses, "mcp": _mcp}[flavor]
    return [shape(spec) for spec in tool_specs(default_read_lines, match)]


def _anthropic(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": copy.deepcopy(spec.schema)}


def _openai(spec: ToolSpec) -> dict[str, Any]:
    description, parameters = fit_description(spec.description, spec.schema)
    return {"type": "function", "function": {"name": spec.name, "description": description, "parameters": parameters}}


def _openai_responses(spec: ToolSpec) -> dict[str, Any]:
    description, parameters = fit_description(spec.description, spec.schema)
    return {"type": "function", "name": spec.name, "description": description, "parameters": parameters}


def fit_description(
    description: str, schema: dict[str, Any], limit: int = OPENAI_DESCRIPTION_LIMIT
) -> tuple[str, dict[str, Any]]:
    """(description within `limit` characters, a copy of `schema`): the description's lines from the top
    while they fit with a pointer, the rest appended to the first parameter's description. A description
    that fits, or a tool without parameters, is left as it is."""
    schema = copy.deepcopy(schema)
    properties = schema.get("properties") or {}
    if len(description) <= limit or not properties:
        return description, schema
    target = next(iter(properties))
    pointer = f"\n\n(Continued in the description of the {target} parameter.)"
    lines = description.splitlines(keepends=True)
    head = ""
    for line in lines:
        if len(head) + len(line) + len(pointer) > limit:
            break
        head += line
    if not head:  # a first line longer than the limit: cut it at a word
        head = description[: limit - len(pointer)].rsplit(" ", 1)[0]
    rest = description[len(head) :].strip("\n")
    param = properties[target]
    param["description"] = (param.get("description", "") + "\n\nRules of this tool, continued:\n" + rest).strip()
    return head.rstrip() + pointer, schema


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
    from coordinator.client import BoundSession
    from coordinator.engine import Session

    owner: Any = target.coord if isinstance(target, Session) else None
    if isinstance(target, BoundSession):
        owner = target.client
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
