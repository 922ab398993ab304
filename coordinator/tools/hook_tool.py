"""The `hook` MCP tool: Claude Code's `mcp_tool` hook type answered inside the per-session MCP server.

Claude Code (2.1.118 and later, by its changelog and the guides that quote it; the official hooks reference
page was not at hand to confirm it) has a hook handler `{"type": "mcp_tool", "server": NAME, "tool":
TOOL, "input": {...}}` that calls TOOL on the connected MCP server NAME instead of starting a process, with
`"${path}"` in the input's string values replaced by that field of the hook event (`${session_id}`,
`${tool_input.file_path}`), and reads the tool's text output like a command hook's stdout (a
`hookSpecificOutput` decision, or `{"decision": "block", "reason": ...}`). This tool takes the event's
fields in that form, as strings, builds the hook event from them and answers the same decision as the
command and HTTP hooks, through the same front end (agents/claude_code.py) and adapter (agents/adapter.py):
the adapter decides, this module only translates.

What it answers: the http hook's JSON body as text (`{}` allows). A failure of the coordinator's own (Redis
down, a field it cannot read) is a deny too, never an MCP tool error: Claude Code treats a hook's errors as
non-blocking, which would let the call through.

Not confirmed from a primary reference, so kept loose here: which substitutions exist (a field absent from
the event, such as `agent_id` outside a subagent, may come as "" or as the `${...}` text itself: both mean
absent), whether numbers come as strings (both are taken), and whether a whole object can be substituted
(`event` takes the whole event, as an object or as JSON text, where it can).

The tool is listed only by `edit-coordinator mcp --hook-tool` (a model has no use for it), and needs the
local engine (`--root`): with `--server` the hooks go to the service's HTTP route instead (`init --http`).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from coordinator.errors import CoordinatorError, ErrorCode

if TYPE_CHECKING:
    from coordinator.engine import Coordinator

NAME = "hook"
TITLE = "Claude Code hook"
DESCRIPTION = (
    "For Claude Code's mcp_tool hooks (PreToolUse, PostToolUse, PostToolUseFailure, Stop, SessionEnd), not for "
    "the model: checks one native Read/Edit/Write/Bash call against the coordinator and answers the hook's "
    "decision as JSON text ({} allows). Pass the hook event's fields (Claude Code substitutes them: "
    '"${session_id}", "${tool_input.file_path}", ...), or the whole event as `event`.'
)
_NUMBERS = frozenset({"offset", "limit", "startLine", "numLines", "totalLines"})


def _schema() -> dict[str, Any]:
    from coordinator.agents.claude_code import MCP_TOOL_FIELDS

    text, number = {"type": "string"}, {"type": ["integer", "string"]}
    fields = {name: number if name in _NUMBERS else text for name in MCP_TOOL_FIELDS}
    whole = {"type": ["object", "string"], "description": "the whole hook event (an object or its JSON text)"}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"event": whole, **fields},
        "additionalProperties": False,
    }


SCHEMA: dict[str, Any] = _schema()


def event_of(arguments: dict[str, Any]) -> dict[str, Any]:
    """The Claude Code hook event the tool's arguments describe (the fields of claude_code.MCP_TOOL_FIELDS,
    or the whole `event`). Fields that were not substituted ("" or a `${...}` left as it was) are left out;
    numbers given as text are numbers. ValueError for arguments that are not such an event."""
    from coordinator.agents.claude_code import MCP_TOOL_FIELDS

    whole = arguments.get("event")
    if whole is not None:
        found = json.loads(whole) if isinstance(whole, str) else whole
        if not isinstance(found, dict):
            raise ValueError("`event` is not a JSON object")
        return found
    given = {k: v for k, v in arguments.items() if _present(v)}
    unknown = sorted(set(given) - set(MCP_TOOL_FIELDS))
    if unknown:
        raise ValueError(f"unknown fields {', '.join(unknown)}")
    event: dict[str, Any] = {}
    for name, value in given.items():
        *parents, last = MCP_TOOL_FIELDS[name].split(".")
        place: dict[str, Any] = event
        for part in parents:
            place = place.setdefault(part, {})
        place[last] = _number(value) if name in _NUMBERS else value
    event.setdefault("tool_input", {})
    response = event.get("tool_response")
    if isinstance(response, dict):  # a Read's response: its text, with the file it is of
        response["type"] = "text"
        response["file"].setdefault("filePath", event["tool_input"].get("file_path", ""))
    return event


def _present(value: Any) -> bool:
    return value is not None and value != "" and not (isinstance(value, str) and value.startswith("${"))


def _number(value: Any) -> Any:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value


def answer(coord: Any, arguments: dict[str, Any] | None) -> str:
    """The hook's answer, as the text Claude Code reads: the decision of the adapter on `coord` (a local
    engine) for the event in `arguments`; a deny on anything that keeps it from deciding."""
    from coordinator.agents import claude_code, failures
    from coordinator.agents.adapter import HookAdapter
    from coordinator.agents.core import ALLOW, Decision, fails_closed, forwarded

    call = None
    try:
        call = claude_code.parse(event_of(arguments or {}))
        if call is not None:  # the MCP server is the agent's child: its environment is the session's
            call = call._replace(settings=forwarded(os.environ))
        decision = ALLOW if call is None else HookAdapter(coord).handle(call)
    except CoordinatorError as exc:
        decision = Decision.deny(_refused(f"[{exc.code.value}] {exc.message}"), exc.code.value)
    except ValueError as exc:  # a field it cannot read, an event that is not one
        decision = Decision.deny(_refused(f"the hook's input could not be read ({exc})."), "invalid_argument")
    event = (arguments or {}).get("hook_event_name")
    if not decision.allow and not fails_closed(event if isinstance(event, str) else None):
        failures.record(coord.root, "claude-code", str(event), decision.reason)  # a Stop's block keeps it going
        decision = ALLOW
    body = claude_code.render(call, decision).body or {}
    return json.dumps(body)


def _refused(message: str) -> str:
    return f"The edit coordinator could not check this call, so it is refused: {message}"


def engine_of(session: Any) -> Coordinator:
    """The local engine behind an MCP server's session (a BoundSession of a LocalClient); `invalid_argument`
    for a remote one, whose hooks go to the service's HTTP route."""
    from coordinator.client import BoundSession, LocalClient

    client = session.client if isinstance(session, BoundSession) else None
    if not isinstance(client, LocalClient):
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "The hook tool needs the MCP server's own engine (`edit-coordinator mcp --root R --hook-tool`); with "
            "--server, send the hooks to the service (`edit-coordinator init claude-code --http URL`).",
        )
    return client.coord
