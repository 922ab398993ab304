"""Claude Code's hooks: its payload -> `ToolCall`, a `Decision` -> what its hook answers.

Payload (stdin of a `command` hook, the POST body of an `http` hook), per Claude Code's hooks reference:
every event has `session_id`, `hook_event_name`, `cwd` (and `agent_id` inside a subagent); the tool events
PreToolUse, PostToolUse and PostToolUseFailure add `tool_name`, `tool_input` (absolute `file_path`;
`old_string`/`new_string`, `edits`, `content`; Read's `offset`/`limit`; Bash's `command`) and `tool_use_id`;
PostToolUse adds `tool_response` (for Read: `{"type": "text", "file": {"content", "startLine", "numLines",
"totalLines", ...}}`), PostToolUseFailure `error` (and `is_interrupt`). Stop and SessionEnd end a session.
Examples, with where each shape comes from: tests/data/hooks/claude-code/.

Answer: allow is exit 0 and nothing else (Claude Code's own permission flow goes on: a hook can add
refusals, never remove the agent's own). A PreToolUse deny is exit 0 with
`{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
"permissionDecisionReason": reason}}` on stdout (the same JSON is an `http` hook's body), which Claude shows
its model. An error of the hook's own exits 2 (`core.failed_closed`).
"""

from __future__ import annotations

import json
from typing import Any

from coordinator.agents.core import BLOCK_EXIT, Decision, HookAnswer, Kind, Phase, ToolCall

NAME = "claude-code"

_PHASES: dict[str, Phase] = {"PreToolUse": "before", "PostToolUse": "after", "PostToolUseFailure": "failed"}
_ENDS = {"Stop", "SubagentStop", "SessionEnd"}
# Events whose answer may carry `hookSpecificOutput.additionalContext` for the model (2.1.328's cli checks it
# for PreToolUse and PostToolUse): a note of the coordinator's (a repaired late write) goes there.
_CONTEXT_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit"})
PROMPT_EVENT = "UserPromptSubmit"  # a new turn: the notes kept at the last one's end are told (Codex's too)
# tool name -> (kind, operation, the tool_input field naming the file)
_TOOLS: dict[str, tuple[Kind, str, str]] = {
    "Read": ("read", "read", "file_path"),
    "Edit": ("write", "edit", "file_path"),
    "MultiEdit": ("write", "multi_edit", "file_path"),
    "Write": ("write", "write", "file_path"),
    "NotebookEdit": ("write", "notebook_edit", "notebook_path"),
    "Bash": ("shell", "shell", ""),
}


# The fields of a hook event an mcp_tool hook hands to the `hook` MCP tool (coordinator/tools/hook_tool.py):
# the tool's input name -> the field's path in the event, as the hook's `${path}` substitution names it.
MCP_TOOL_FIELDS: dict[str, str] = {
    **{name: name for name in ("hook_event_name", "session_id", "agent_id", "tool_name", "tool_use_id", "cwd")},
    **{name: f"tool_input.{name}" for name in ("file_path", "notebook_path", "command", "offset", "limit")},
    **{name: f"tool_response.file.{name}" for name in ("content", "startLine", "numLines", "totalLines")},
}


class PayloadError(ValueError):
    """The payload is not a Claude Code hook event the coordinator can read (the hook fails closed)."""


def session_of(payload: dict[str, Any]) -> str:
    """The coordinator session of an event: `session_id`, or `session_id/agent_id` inside a subagent."""
    sid = payload.get("session_id")
    if not isinstance(sid, str) or not sid:
        raise PayloadError("the hook payload has no session_id")
    agent = payload.get("agent_id")
    return f"{sid}/{agent}" if isinstance(agent, str) and agent else sid


def event_of(payload: dict[str, Any]) -> tuple[str, str | None]:
    """(hook_event_name, cwd) of a hook payload, the fields every agent's events share; PayloadError for a
    payload that is not a hook event. Used by every front end."""
    if not isinstance(payload, dict):
        raise PayloadError("the hook payload is not a JSON object")
    event = payload.get("hook_event_name")
    if not isinstance(event, str):
        raise PayloadError("the hook payload has no hook_event_name")
    return event, payload.get("cwd") if isinstance(payload.get("cwd"), str) else None


def parse(payload: dict[str, Any]) -> ToolCall | None:
    """The tool call of one hook event; None for an event or tool the coordinator has nothing to do with.
    Raises PayloadError for a payload that is not a hook event (not an object, no session_id, ...)."""
    event, cwd = event_of(payload)
    if event in _ENDS:
        phase: Phase = "end"
        return ToolCall(session_of(payload), phase, "session", cwd=cwd, event=event)
    if event == PROMPT_EVENT:
        return ToolCall(session_of(payload), "before", "prompt", cwd=cwd, event=event)
    if event not in _PHASES:
        return None
    session = session_of(payload)
    tool = payload.get("tool_name")
    if not isinstance(tool, str):
        raise PayloadError(f"the {event} payload has no tool_name")
    spec = _TOOLS.get(tool)
    if spec is None:
        return None
    kind, operation, path_field = spec
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict):
        raise PayloadError(f"the {event} payload of {tool} has no tool_input object")
    base = ToolCall(
        session,
        _PHASES[event],
        kind,
        tool_use_id=str(payload.get("tool_use_id") or ""),
        tool=str(tool),
        operation=operation,
        cwd=cwd,
        event=event,
    )
    if kind == "shell":
        command = tool_input.get("command")
        response = payload.get("tool_response")
        stdout = response.get("stdout") if isinstance(response, dict) else None  # what a `cat f` showed the model
        shown = (
            stdout
            if isinstance(stdout, str) and not (isinstance(response, dict) and response.get("interrupted"))
            else None
        )
        return base._replace(command=command if isinstance(command, str) else None, shown=shown)
    path = tool_input.get(path_field)
    if not isinstance(path, str) or not path:
        raise PayloadError(f"the {event} payload of {tool} has no tool_input.{path_field}")
    if kind == "read":
        return _read_call(base, path, tool_input, payload.get("tool_response"))
    mode = payload.get("permission_mode")
    return base._replace(path=path, mode=mode if isinstance(mode, str) else "", **_change(tool, tool_input))


def _change(tool: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """A write's change as its tool will make it (`ToolCall.edits`, `ToolCall.content`): Edit's and
    MultiEdit's replacements, Write's content (which a PreToolUse answer can replace: `updatedInput`)."""
    if tool == "Write":
        content = tool_input.get("content")
        return {"content": content} if isinstance(content, str) else {}
    raw = tool_input.get("edits") if tool == "MultiEdit" else [tool_input]
    edits = []
    for e in raw if isinstance(raw, list) else []:
        old, new = (e.get("old_string"), e.get("new_string")) if isinstance(e, dict) else (None, None)
        if not isinstance(old, str) or not isinstance(new, str) or not old:
            return {}
        edits.append((old, new, e.get("replace_all") is True))
    return {"edits": tuple(edits)}


def _read_call(base: ToolCall, path: str, tool_input: dict[str, Any], response: object) -> ToolCall:
    """A Read: the text shown and its window come from `tool_response.file` (after), else the input's."""
    offset, limit = _int(tool_input.get("offset")), _int(tool_input.get("limit"))
    shown: str | None = None
    if isinstance(response, dict) and response.get("type", "text") == "text":
        file = response.get("file")
        if isinstance(file, dict) and isinstance(file.get("content"), str):
            shown = file["content"]
            offset = _int(file.get("startLine")) or offset
            num, total = _int(file.get("numLines")), _int(file.get("totalLines"))
            start = offset or 1
            limit = num if num is not None and total is not None and start - 1 + num < total else None
    return base._replace(path=path, shown=shown, offset=offset, limit=limit)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def render(call: ToolCall | None, decision: Decision) -> HookAnswer:
    """The hook's answer. A deny of a PreToolUse call is the permission decision. After a tool or at an end
    there is nothing left to refuse, and exit 2 there would keep the agent going (Stop) or push an error
    into its turn: the answer is "go on" (what could not be recorded is logged by the way in). A deny with
    no call (the payload unreadable) is exit 2 with the reason on stderr."""
    if decision.allow and decision.content is not None and call is not None and call.phase == "before":
        return _rewritten(call, decision)
    if decision.allow and decision.reason and call is not None and call.event in _CONTEXT_EVENTS:
        told = {"hookSpecificOutput": {"hookEventName": call.event, "additionalContext": decision.reason}}
        return HookAnswer(0, json.dumps(told), "", told)
    if decision.allow or (call is not None and call.phase != "before"):
        return HookAnswer(0, "", "", {})
    if call is not None and call.phase == "before":
        body: dict[str, Any] = {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": decision.reason,
            }
        }
        return HookAnswer(0, json.dumps(body), "", body)
    blocked: dict[str, Any] = {"decision": "block", "reason": decision.reason}
    return HookAnswer(BLOCK_EXIT, "", decision.reason + "\n", blocked)


# Permission modes in which Claude Code's own flow lets a Write go on without asking: there a rewritten
# input is allowed as it is; in any other mode the person is asked, and shown the rewritten input.
_WRITES_ALLOWED = frozenset({"bypassPermissions", "acceptEdits"})


def _rewritten(call: ToolCall, decision: Decision) -> HookAnswer:
    """A Write allowed with other content (merged with changes made since its session's read): the
    PreToolUse's `updatedInput`, with permissionDecision `allow` where the agent's own permission flow would
    let the Write go on anyway, else `ask`, so that a hook never removes the agent's own refusals."""
    out: dict[str, Any] = {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow" if call.mode in _WRITES_ALLOWED else "ask",
        "permissionDecisionReason": decision.reason or "merged with changes made since the file was read",
        "updatedInput": {"file_path": call.path, "content": decision.content},
    }
    if decision.reason:
        out["additionalContext"] = decision.reason
    body = {"hookSpecificOutput": out}
    return HookAnswer(0, json.dumps(body), "", body)
