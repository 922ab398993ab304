"""Gemini CLI's hooks: its payload -> `ToolCall`, a `Decision` -> what its hook answers.

Payload (stdin of a command hook), per Gemini CLI's hooks reference (geminicli.com/docs/hooks/reference,
docs/hooks/ in github.com/google-gemini/gemini-cli): `session_id`, `cwd`, `hook_event_name`, `timestamp`;
BeforeTool and AfterTool add `tool_name` and `tool_input` (the tool's arguments), AfterTool
`tool_response` (`{"llmContent", "returnDisplay", "error"?}`). The file tools (docs/tools/file-system.md):
`read_file` (`file_path`, in older releases `absolute_path` or `path`; a window as `offset` counted from 0
and `limit`, or in later releases `start_line`/`end_line`),
`write_file` (`file_path`, `content`), `replace` (`file_path`, `old_string`, `new_string`; an empty
`old_string` creates the file), `run_shell_command` (`command`). AfterAgent (the end of a turn) and
SessionEnd end a session. Examples, with where each shape comes from: tests/data/hooks/gemini/.

What is recorded of a read is what the tool's `llmContent` showed the model, after the truncation notice
Gemini CLI puts before a partial file; the adapter keeps it only if those are the file's lines.

Answer: allow is exit 0 with `{}` (stdout must be JSON on exit 0); a note for the model after a tool is
`{"hookSpecificOutput": {"additionalContext": ...}}`. A BeforeTool deny is exit 0 with
`{"decision": "deny", "reason": ...}`, the reason sent to the model as the tool's error; after a tool and at
an end the answer is always "go on" (coordinator.agents.core.GUARD_EVENTS).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

from coordinator.agents import claude_code
from coordinator.agents.core import BLOCK_EXIT, Decision, HookAnswer, Kind, Phase, ToolCall

NAME = "gemini"
PayloadError = claude_code.PayloadError

_PHASES: dict[str, Phase] = {"BeforeTool": "before", "AfterTool": "after"}
_ENDS = {"AfterAgent", "SessionEnd"}
PROMPT_EVENT = "BeforeAgent"  # a new turn: its additionalContext reaches the model with the prompt
_TOOLS: dict[str, tuple[Kind, str]] = {
    "read_file": ("read", "read"),
    "write_file": ("write", "write"),
    "replace": ("write", "edit"),
    "run_shell_command": ("shell", "shell"),
}
_PATH_FIELDS = ("file_path", "absolute_path", "path")
# The notice before a partial file: "... showing lines 1-100 of 500 total lines ..." or "Showing lines A-B".
_SHOWING = re.compile(r"[Ss]howing lines (\d+)-(\d+) of (\d+)")
_CONTENT_MARK = "--- FILE CONTENT (truncated) ---\n"


def parse(payload: dict[str, Any]) -> ToolCall | None:
    """The tool call of one hook event; None for an event or tool the coordinator has nothing to do with.
    Raises PayloadError for a payload that is not a hook event."""
    event, cwd = claude_code.event_of(payload)
    session = claude_code.session_of(payload)
    if event in _ENDS:
        return ToolCall(session, "end", "session", cwd=cwd, event=event)
    if event == PROMPT_EVENT:
        return ToolCall(session, "before", "prompt", cwd=cwd, event=event)
    tool = payload.get("tool_name")
    spec = _TOOLS.get(tool) if isinstance(tool, str) else None
    if event not in _PHASES or spec is None:
        return None
    kind, operation = spec
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict):
        raise PayloadError(f"the {event} payload of {tool} has no tool_input object")
    response = payload.get("tool_response")
    phase = _PHASES[event]
    if phase == "after" and isinstance(response, dict) and response.get("error"):
        phase = "failed"
    base = ToolCall(session, phase, kind, tool=str(tool), operation=operation, cwd=cwd, event=event,
                    tool_use_id=_call_id(payload, tool_input), notes_hidden=phase == "before")  # fmt: skip
    if kind == "shell":
        command = tool_input.get("command")
        return base._replace(command=command if isinstance(command, str) else None)
    path = next((tool_input[f] for f in _PATH_FIELDS if isinstance(tool_input.get(f), str) and tool_input[f]), None)
    if path is None:
        raise PayloadError(f"the {event} payload of {tool} has no tool_input.file_path")
    if not os.path.isabs(path) and cwd:  # Gemini CLI's paths are often relative: to its working folder
        path = os.path.join(cwd, path)
    if tool == "replace" and tool_input.get("old_string") == "":
        base = base._replace(operation="write")  # creates the file: a whole write
    if kind == "read":
        return _read_call(base, path, tool_input, response)
    return base._replace(path=path, **_change(str(tool), tool_input))


def _change(tool: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """A write's change as its tool will make it (`ToolCall.edits`, `ToolCall.content`): replace's
    replacement (every occurrence when `allow_multiple`, or more than one `expected_replacements`), and
    write_file's content, which a BeforeTool answer can replace (`hookSpecificOutput.tool_input`)."""
    if tool == "write_file":
        content = tool_input.get("content")
        return {"content": content} if isinstance(content, str) else {}
    old, new = tool_input.get("old_string"), tool_input.get("new_string")
    if not isinstance(old, str) or not isinstance(new, str) or not old:
        return {}
    expected = tool_input.get("expected_replacements")
    every = tool_input.get("allow_multiple") is True or (isinstance(expected, int) and expected > 1)
    return {"edits": ((old, new, every),)}


def _call_id(payload: dict[str, Any], tool_input: dict[str, Any]) -> str:
    """What pairs a BeforeTool with its AfterTool. Gemini CLI sends no call id in the documented payload;
    the tool and its arguments do the pairing (the same edit twice in a row shares one, harmlessly: the
    second before takes the ticket again after the first after released it)."""
    given = payload.get("tool_call_id") or payload.get("tool_use_id")
    if isinstance(given, str) and given:
        return given
    digest = hashlib.sha256(json.dumps(tool_input, sort_keys=True, default=str).encode()).hexdigest()[:32]
    return f"{payload.get('tool_name')}:{digest}"


def _read_call(base: ToolCall, path: str, tool_input: dict[str, Any], response: object) -> ToolCall:
    offset, limit = _int(tool_input.get("offset")), _int(tool_input.get("limit"))
    start = offset + 1 if offset is not None else None  # offset counts lines from 0
    first, last = _int(tool_input.get("start_line")), _int(tool_input.get("end_line"))
    if first:  # later releases: start_line/end_line, counted from 1
        start, limit = first, (last - first + 1 if last and last >= first else None)
    content = response.get("llmContent") if isinstance(response, dict) else response
    if not isinstance(content, str) or base.phase != "after":
        return base._replace(path=path, offset=start, limit=limit)
    shown, window = _without_notice(content)
    if window is not None:
        start, limit = window
    return base._replace(path=path, shown=shown, offset=start, limit=limit)


def _without_notice(content: str) -> tuple[str, tuple[int, int | None] | None]:
    """The file's text in what read_file returned, and the (first line, count) its notice names."""
    m = _SHOWING.search(content[:1000])
    if m is None:
        return content, None
    first, last, total = (int(g) for g in m.groups())
    if _CONTENT_MARK in content:
        text = content.split(_CONTENT_MARK, 1)[1]
    else:
        text = content.split("\n", 1)[1] if "\n" in content else ""
    return text, (first, None if last >= total else last - first + 1)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def render(call: ToolCall | None, decision: Decision) -> HookAnswer:
    """A BeforeTool deny is the decision on stdout; after a tool or at an end, "go on" (an AfterAgent exit 2
    retries the turn); a deny with no call (the payload unreadable) exit 2 with the reason on stderr. A note
    for the model (an allow with a reason: a late write repaired, another session's notice) after a tool is
    `hookSpecificOutput.additionalContext`, which Gemini CLI appends to the tool's result for the model
    (inside `<hook_context>`); its BeforeTool shows no added context, so the adapter keeps those notes for
    the next event (`ToolCall.notes_hidden`)."""
    if decision.allow and decision.reason and call is not None and call.event in ("AfterTool", PROMPT_EVENT):
        told = {"hookSpecificOutput": {"hookEventName": call.event, "additionalContext": decision.reason}}
        return HookAnswer(0, json.dumps(told), "", told)
    if decision.allow and decision.content is not None and call is not None and call.phase == "before":
        # the write's new content (merged with changes made since the session's read): the whole input, since
        # one of Gemini CLI's two BeforeTool paths builds the tool from the hook's tool_input alone
        rewritten: dict[str, Any] = {"file_path": call.path, "content": decision.content}
        given = {"hookSpecificOutput": {"hookEventName": "BeforeTool", "tool_input": rewritten}}
        return HookAnswer(0, json.dumps(given), "", given)
    if decision.allow or (call is not None and call.phase != "before"):
        return HookAnswer(0, "{}", "", {})
    if call is not None and call.phase == "before":
        body: dict[str, Any] = {"decision": "deny", "reason": decision.reason}
        return HookAnswer(0, json.dumps(body), "", body)
    return HookAnswer(BLOCK_EXIT, "", decision.reason + "\n", {"decision": "deny", "reason": decision.reason})
