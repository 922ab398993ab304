"""Gemini CLI's front end: the documented payload shapes (tests/data/hooks/gemini/) read as tool calls,
the decisions rendered as Gemini CLI reads them, and an agent's tool loop through the adapter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator import Coordinator
from coordinator.agents import front_end, gemini
from coordinator.agents.adapter import HookAdapter
from coordinator.agents.core import ALLOW, Decision

PAYLOADS = Path(__file__).resolve().parents[2] / "data" / "hooks" / "gemini"
SID = json.loads((PAYLOADS / "before_replace.json").read_text())["session_id"]  # one captured session (SOURCES.md)


def payload(name: str, root: Path, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_text().replace("__ROOT__", str(root)))
    for key, value in changes.items():
        if key.startswith("tool_input__"):
            data["tool_input"][key.removeprefix("tool_input__")] = value
        else:
            data[key] = value
    return data


def test_registered_and_every_example_is_read(tmp_path: Path) -> None:
    assert front_end("gemini") is gemini
    names = sorted(p.stem for p in PAYLOADS.glob("*.json"))
    assert len(names) >= 9
    for name in names:
        call = gemini.parse(payload(name, tmp_path))
        assert call is not None and call.session == SID, name


@pytest.mark.parametrize(
    ("name", "phase", "kind", "operation"),
    [
        ("before_replace", "before", "write", "edit"),
        ("after_replace", "after", "write", "edit"),
        ("after_replace_error", "failed", "write", "edit"),
        ("before_write_file", "before", "write", "write"),
        ("after_read_file", "after", "read", "read"),
    ],
)
def test_file_calls(tmp_path: Path, name: str, phase: str, kind: str, operation: str) -> None:
    call = gemini.parse(payload(name, tmp_path))
    assert call is not None
    assert (call.phase, call.kind, call.operation, call.path) == (phase, kind, operation, f"{tmp_path}/src/app.py")


def test_before_and_after_of_one_call_pair_up(tmp_path: Path) -> None:
    before, after = gemini.parse(payload("before_replace", tmp_path)), gemini.parse(payload("after_replace", tmp_path))
    failed = gemini.parse(payload("after_replace_error", tmp_path))
    assert before is not None and after is not None and failed is not None
    assert before.tool_use_id == after.tool_use_id != failed.tool_use_id  # other arguments, another call
    given = gemini.parse(payload("before_replace", tmp_path, tool_call_id="c-1"))
    assert given is not None and given.tool_use_id == "c-1"


def test_reads_full_partial_and_by_lines(tmp_path: Path) -> None:
    full = gemini.parse(payload("after_read_file", tmp_path))
    assert full is not None and (full.shown, full.offset, full.limit) == ("def main():\n    return 1\n", None, None)
    part = gemini.parse(payload("after_read_file_partial", tmp_path))
    part_of = "line 2 of 2 (Gemini CLI says 'of 3 total lines')"
    assert part is not None and (part.shown, part.offset) == ("    return 1", 2) and part.limit in (1, None), part_of
    by_lines = gemini.parse(
        payload("after_read_file", tmp_path, tool_input={"file_path": "f", "start_line": 3, "end_line": 7})
    )
    assert by_lines is not None and (by_lines.offset, by_lines.limit) == (3, 5)
    old = gemini.parse(payload("after_read_file", tmp_path, tool_input={"absolute_path": "/r/f"}))
    assert old is not None and old.path == "/r/f"


def test_creating_by_replace_is_a_whole_write_and_shell_and_ends(tmp_path: Path) -> None:
    create = gemini.parse(payload("before_replace", tmp_path, tool_input__old_string=""))
    assert create is not None and create.operation == "write"
    shell = gemini.parse(payload("before_shell", tmp_path))
    assert shell is not None and (shell.kind, shell.command) == ("shell", "git stash")
    for name in ("after_agent", "session_end"):
        end = gemini.parse(payload(name, tmp_path))
        assert end is not None and (end.kind, end.phase) == ("session", "end")
    prompt = gemini.parse(payload("before_agent", tmp_path))  # BeforeAgent as 0.61.0 sends it: a new turn
    assert prompt is not None and (prompt.kind, prompt.session) == ("prompt", SID)
    assert gemini.parse(payload("before_shell", tmp_path, tool_name="google_web_search")) is None


@pytest.mark.parametrize(
    "bad", [[1], {"hook_event_name": "BeforeTool"}, {"session_id": "s"}, {"session_id": "s", "hook_event_name": 3}]
)
def test_payloads_that_are_no_hook_event_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        gemini.parse(bad)


def test_missing_tool_input_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no tool_input"):
        gemini.parse(payload("before_replace", tmp_path, tool_input="x"))
    with pytest.raises(ValueError, match="file_path"):
        gemini.parse(payload("before_replace", tmp_path, tool_input={"content": "x"}))


def test_render(tmp_path: Path) -> None:
    before = gemini.parse(payload("before_replace", tmp_path))
    denied = gemini.render(before, Decision.deny("Read it first.", "not_read"))
    assert (denied.exit_code, json.loads(denied.stdout)) == (0, {"decision": "deny", "reason": "Read it first."})
    allowed = gemini.render(before, ALLOW)
    assert (allowed.exit_code, json.loads(allowed.stdout)) == (0, {})
    for name in ("after_replace", "after_agent", "session_end"):  # AfterAgent's exit 2 would retry the turn
        after = gemini.render(gemini.parse(payload(name, tmp_path)), Decision.deny("x"))
        assert (after.exit_code, json.loads(after.stdout), after.stderr) == (0, {}, ""), name


@pytest.fixture
def app(root: Path) -> Path:
    (root / "src").mkdir()
    f = root / "src" / "app.py"
    f.write_text("def main():\n    return 1\n")
    return f


def test_a_gemini_loop_through_the_adapter(coord: Coordinator, root: Path, app: Path) -> None:
    hooks = HookAdapter(coord, session_end=lambda root, session: None)

    def handle(name: str, **changes: Any) -> Decision:
        call = gemini.parse(payload(name, root, **changes))
        assert call is not None
        return hooks.handle(call)

    assert handle("before_replace").code == "not_read"
    assert handle("after_read_file").allow
    assert handle("before_replace").allow
    app.write_text("def main():\n    return 2\n")
    assert handle("after_replace").allow
    (entry,) = coord.history("src/app.py")
    assert entry.session == SID and entry.operation == "edit"
    # a partial read is enough for an edit, never for a whole write
    other = {"session_id": "gemini-2"}
    partial = {"llmContent": "IMPORTANT: The file content has been truncated.\nStatus: Showing lines 2-2 of 2 total "
               "lines.\n\n--- FILE CONTENT (truncated) ---\n    return 2", "returnDisplay": ""}  # fmt: skip
    assert handle("after_read_file_partial", **other, tool_response=partial).allow
    assert handle("before_write_file", **other).code == "not_read"
    assert handle("before_replace", **other, tool_input__old_string="    return 2").allow
    assert handle("after_replace_error", **other, tool_input__old_string="    return 2").allow  # it failed
    assert len(coord.history("src/app.py")) == 1 and coord.lease_store.live() == []


def test_relative_paths_are_the_working_folders(tmp_path: Path) -> None:
    """Gemini CLI often sends a path relative to its working folder, which need not be the root."""
    sub = tmp_path / "pkg"
    call = gemini.parse(payload("before_replace", tmp_path, cwd=str(sub), tool_input__file_path="mod.py"))
    assert call is not None and call.path == str(sub / "mod.py")
    absolute = gemini.parse(payload("before_replace", tmp_path, tool_input__file_path=str(tmp_path / "a.py")))
    assert absolute is not None and absolute.path == str(tmp_path / "a.py")


def test_a_note_reaches_the_model_after_a_tool(tmp_path: Path) -> None:
    """After a tool a note is `hookSpecificOutput.additionalContext`, which Gemini CLI appends to the tool's
    result for its model; its BeforeTool shows none, so that call is marked and the adapter keeps the note."""
    for name in ("after_replace", "after_replace_error", "after_read_file"):
        call = gemini.parse(payload(name, tmp_path))
        assert call is not None and not call.notes_hidden
        told = gemini.render(call, Decision.note("Their change was put back."))
        assert (told.exit_code, told.stderr) == (0, "")
        assert json.loads(told.stdout)["hookSpecificOutput"]["additionalContext"] == "Their change was put back."
    before = gemini.parse(payload("before_replace", tmp_path))
    assert before is not None and before.notes_hidden
    assert json.loads(gemini.render(before, Decision.note("x")).stdout) == {}


def test_a_late_write_is_told_to_both_gemini_sessions(coord: Coordinator, root: Path, app: Path) -> None:
    """late's replace is allowed, then stalls; early waits out the holder's grace, writes another line and is
    acknowledged; late's write lands on its old view. late's AfterTool answer says its write was repaired;
    early's notice is not lost at its next BeforeTool (which shows no context): that call's AfterTool carries it."""
    hooks = HookAdapter(coord, session_end=lambda root, session: None)
    app.write_text("a = 1\nb = 2\nc = 3\n")
    shown = {"llmContent": app.read_text(), "returnDisplay": ""}

    def answer(name: str, who: str, tid: str, **changes: Any) -> dict[str, Any]:
        call = gemini.parse(payload(name, root, session_id=who, tool_use_id=tid, **changes))
        assert call is not None
        out = gemini.render(call, hooks.handle(call))
        assert out.exit_code == 0
        return dict(json.loads(out.stdout))

    for who in ("late", "early"):
        assert answer("after_read_file", who, f"r-{who}", tool_response=shown) == {}
    assert answer("before_replace", "late", "t-late") == {}
    seen = app.read_text()
    assert answer("before_replace", "early", "t-early") == {}  # after the holder's grace, not refused
    app.write_text(seen.replace("c = 3", "c = 30"))
    assert answer("after_replace", "early", "t-early") == {}
    app.write_text(seen.replace("a = 1", "a = 10"))  # the late write, on late's old view
    told = answer("after_replace", "late", "t-late")
    assert "put back" in told["hookSpecificOutput"]["additionalContext"]
    assert app.read_text() == "a = 10\nb = 2\nc = 30\n"
    ls = {"tool_input__command": "ls"}
    assert answer("before_shell", "early", "s-early", **ls) == {}  # allowed; the notice is kept, not dropped
    done = {"hook_event_name": "AfterTool", "tool_response": {"llmContent": "src", "returnDisplay": "src"}}
    later = answer("before_shell", "early", "s-early", **ls, **done)
    assert "overwritten by a late edit of session late" in later["hookSpecificOutput"]["additionalContext"]
