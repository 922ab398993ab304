"""Claude Code's front end: the documented payload shapes (tests/data/hooks/claude-code/) read as tool
calls, and decisions rendered as Claude Code reads them."""

from __future__ import annotations

import json

import pytest

from coordinator.agents import FRONT_ENDS, claude_code, front_end
from coordinator.agents.core import ALLOW, Decision, ToolCall, failed_closed
from tests.coordinator.agents.hooking import PAYLOADS, payload

SID = json.loads((PAYLOADS / "pre_edit.json").read_text())["session_id"]  # one captured session (SOURCES.md)


def test_every_example_payload_is_read(tmp_path):
    names = sorted(p.stem for p in PAYLOADS.glob("*.json"))
    assert len(names) >= 10
    for name in names:
        call = claude_code.parse(payload(name, tmp_path))
        assert call is not None and call.session.startswith(SID), name


@pytest.mark.parametrize(
    ("name", "phase", "kind", "operation"),
    [
        ("pre_edit", "before", "write", "edit"),
        ("pre_write", "before", "write", "write"),
        ("post_edit", "after", "write", "edit"),
        ("post_edit_failure", "failed", "write", "edit"),
        ("post_read", "after", "read", "read"),
        ("pre_bash", "before", "shell", "shell"),
    ],
)
def test_tool_events(tmp_path, name, phase, kind, operation):
    data = payload(name, tmp_path)
    call = claude_code.parse(data)
    assert call is not None
    assert (call.phase, call.kind, call.operation, call.tool_use_id) == (phase, kind, operation, data["tool_use_id"])
    if kind == "shell":
        assert call.command == "git stash"
    else:
        assert call.path == data["tool_input"]["file_path"] and call.cwd == str(tmp_path)
        assert call.path.startswith(f"{tmp_path}/src/")


def test_read_window_comes_from_what_was_shown(tmp_path):
    full = claude_code.parse(payload("post_read", tmp_path))
    assert full is not None and full.shown == "def main():\n    return 1\n"
    assert (full.offset, full.limit) == (1, None)
    part = claude_code.parse(payload("post_read_partial", tmp_path))  # line 2 of 2 (totalLines says 3)
    assert part is not None and (part.offset, part.shown) == (2, "    return 4") and part.limit in (1, None)
    head = claude_code.parse(payload("post_read", tmp_path, file__numLines=1, file__totalLines=2))
    assert head is not None and (head.offset, head.limit) == (1, 1)


def test_subagent_and_session_end(tmp_path):
    data = payload("pre_edit_subagent", tmp_path)
    sub = claude_code.parse(data)
    assert sub is not None and sub.session == f"{SID}/{data['agent_id']}" and data["agent_id"]
    for name in ("stop", "session_end"):
        end = claude_code.parse(payload(name, tmp_path))
        assert end is not None and (end.kind, end.phase) == ("session", "end")
    data = payload("subagent_stop", tmp_path)  # the subagent's session ends with its own turn
    end = claude_code.parse(data)
    assert end is not None and (end.kind, end.session) == ("session", f"{SID}/{data['agent_id']}")


def test_a_prompt_starts_a_turn(tmp_path):
    """UserPromptSubmit as 2.1.328 sends it: the event whose answer tells the notes kept at the last turn's end."""
    call = claude_code.parse(payload("user_prompt_submit", tmp_path))
    assert call is not None and (call.kind, call.session) == ("prompt", SID)


def test_events_and_tools_of_no_concern_are_none(tmp_path):
    assert claude_code.parse(payload("pre_edit", tmp_path, tool_name="Glob")) is None
    assert claude_code.parse(payload("pre_edit", tmp_path, hook_event_name="Notification")) is None


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_input": {"file_path": "/x"}},
        {"session_id": "s", "tool_name": "Edit"},
        {"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_input": "x"},
        {"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_input": {}},
    ],
)
def test_malformed_payloads_are_refused(bad):
    with pytest.raises(claude_code.PayloadError):
        claude_code.parse(bad)


def test_render_allow_is_silent_and_deny_is_the_permission_decision(tmp_path):
    call = claude_code.parse(payload("pre_edit", tmp_path))
    assert claude_code.render(call, ALLOW).exit_code == 0 and claude_code.render(call, ALLOW).stdout == ""
    answer = claude_code.render(call, Decision.deny("Read it first.", "not_read"))
    assert answer.exit_code == 0
    out = json.loads(answer.stdout)
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "Read it first.",
        }
    }
    assert json.loads(answer.http_body()) == out


def test_render_after_the_tool_or_at_an_end_goes_on_and_failures_fail_closed(tmp_path):
    """Exit 2 after a tool pushes an error into the turn, and at Stop keeps the agent going: never there."""
    for name in ("post_edit", "stop", "session_end"):
        call = claude_code.parse(payload(name, tmp_path))
        answer = claude_code.render(call, Decision.deny("could not record"))
        assert (answer.exit_code, answer.stdout, answer.stderr) == (0, "", ""), name
    closed = failed_closed("the service at http://x is unreachable")
    assert closed.exit_code == 2 and "unreachable" in closed.stderr


def test_registry_and_round_trip_of_calls(tmp_path):
    assert front_end("claude-code") is claude_code and "claude-code" in FRONT_ENDS
    with pytest.raises(ValueError, match="claude-code"):
        front_end("notepad")
    call = claude_code.parse(payload("post_read", tmp_path))
    assert call is not None and ToolCall.from_dict(call.to_dict()) == call
    assert Decision.from_dict(Decision.deny("x", "stale").to_dict()) == Decision.deny("x", "stale")
