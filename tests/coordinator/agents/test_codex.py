"""Codex's front end: the documented payload shapes (tests/data/hooks/codex/) read as tool calls, the
decisions rendered as Codex reads them, and an agent's tool loop through the adapter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator import Coordinator
from coordinator.agents import codex, front_end
from coordinator.agents.adapter import HookAdapter
from coordinator.agents.core import ALLOW, Decision

PAYLOADS = Path(__file__).resolve().parents[2] / "data" / "hooks" / "codex"
SID = json.loads((PAYLOADS / "pre_apply_patch.json").read_text())["session_id"]  # one captured session (SOURCES.md)


def payload(name: str, root: Path, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_text().replace("__ROOT__", str(root)))
    for key, value in changes.items():
        if key.startswith("tool_input__"):
            data["tool_input"][key.removeprefix("tool_input__")] = value
        else:
            data[key] = value
    return data


def test_registered_and_every_example_is_read(tmp_path: Path) -> None:
    assert front_end("codex") is codex
    for path in sorted(PAYLOADS.glob("*.json")):
        if path.stem == "pre_apply_patch_two_files":
            continue
        call = codex.parse(payload(path.stem, tmp_path))
        assert call is not None and call.session == SID, path.stem


@pytest.mark.parametrize(
    ("name", "phase", "kind", "operation", "rel"),
    [
        ("pre_apply_patch", "before", "write", "edit", "src/app.py"),
        ("post_apply_patch", "after", "write", "edit", "src/app.py"),
        ("pre_apply_patch_add", "before", "write", "write", "src/new.py"),
    ],
)
def test_file_calls(tmp_path: Path, name: str, phase: str, kind: str, operation: str, rel: str) -> None:
    call = codex.parse(payload(name, tmp_path))
    assert call is not None
    assert (call.phase, call.kind, call.operation) == (phase, kind, operation)
    assert call.path == str(tmp_path / rel)  # the patch's paths are relative to cwd


def test_shell_before_and_session_ends(tmp_path: Path) -> None:
    call = codex.parse(payload("pre_bash", tmp_path))
    assert call is not None and (call.kind, call.phase, call.command) == ("shell", "before", "git stash")
    for name in ("stop", "session_end"):
        end = codex.parse(payload(name, tmp_path))
        assert end is not None and (end.kind, end.phase) == ("session", "end")
    prompt = codex.parse(payload("user_prompt_submit", tmp_path))  # as 0.169.0 sends it
    assert prompt is not None and (prompt.kind, prompt.session) == ("prompt", SID)
    # after a Bash command: the command and what it printed (what it wrote and read is the protocol's to find)
    after = codex.parse(payload("post_bash_read", tmp_path, tool_input__command="make test", tool_response="ok\n"))
    assert after is not None and (after.kind, after.phase, after.command, after.shown) == (
        "shell",
        "after",
        "make test",
        "ok\n",
    )


def test_a_patch_of_several_files_is_refused_naming_them(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"changes 2 files \(src/app.py, src/other.py\).*one apply_patch call per"):
        codex.parse(payload("pre_apply_patch_two_files", tmp_path))
    moved = "*** Begin Patch\n*** Update File: a.py\n*** Move to: b.py\n@@\n-x\n+y\n*** End Patch\n"
    with pytest.raises(ValueError, match="moves one"):
        codex.parse(payload("pre_apply_patch", tmp_path, tool_input__command=moved))
    with pytest.raises(ValueError, match="names no file"):
        codex.parse(payload("pre_apply_patch", tmp_path, tool_input__command="*** Begin Patch\n*** End Patch\n"))


def test_an_apply_patch_run_through_the_shell_is_a_patch(tmp_path: Path) -> None:
    patch = json.loads((PAYLOADS / "pre_apply_patch.json").read_text())["tool_input"]["command"]
    call = codex.parse(payload("pre_bash", tmp_path, tool_input__command=f"apply_patch <<'EOF'\n{patch}EOF"))
    assert call is not None and (call.kind, call.operation, call.path) == (
        "write",
        "edit",
        str(tmp_path / "src/app.py"),
    )


def test_numbered_output_is_read_without_its_numbers(coord: Coordinator, root: Path) -> None:
    """`nl -ba F` (Codex's usual read) prints each line after its number: the view is the file's own lines."""
    app = root / "src" / "app.py"
    app.parent.mkdir()
    app.write_text("def main():\n    return 1\n")
    hooks = HookAdapter(coord, session_end=lambda root, session: None)
    for name, changes in (
        ("pre_apply_patch", {}),
        (
            "post_bash_read",
            {
                "tool_input__command": "nl -ba src/app.py",
                "tool_response": "     1\tdef main():\n     2\t    return 1\n",
            },
        ),
        ("pre_apply_patch", {}),
    ):
        call = codex.parse(payload(name, root, **changes))
        assert call is not None
        decision = hooks.handle(call)
    assert decision.allow  # unread at first (refused), then read through nl: the patch may go on


def test_render_is_claude_codes_answer(tmp_path: Path) -> None:
    before = codex.parse(payload("pre_apply_patch", tmp_path))
    denied = codex.render(before, Decision.deny("Read it again.", "stale"))
    assert denied.exit_code == 0
    assert json.loads(denied.stdout)["hookSpecificOutput"] == {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "Read it again.",
    }
    unread = codex.render(before, Decision.deny("Read it first.", "not_read"))  # which shell reads count
    reason = json.loads(unread.stdout)["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith("Read it first. Codex has no read tool") and "`cat F`" in reason
    allowed = codex.render(before, ALLOW)
    assert (allowed.exit_code, allowed.stdout, allowed.stderr) == (0, "", "")


@pytest.fixture
def app(root: Path) -> Path:
    (root / "src").mkdir()
    f = root / "src" / "app.py"
    f.write_text("def main():\n    return 1\n")
    return f


def test_a_codex_loop_through_the_adapter(coord: Coordinator, root: Path, app: Path) -> None:
    hooks = HookAdapter(coord, session_end=lambda root, session: None)

    def handle(name: str, **changes: Any) -> Decision:
        call = codex.parse(payload(name, root, **changes))
        assert call is not None
        return hooks.handle(call)

    # unread: refused with the coordinator's message
    denied = handle("pre_apply_patch")
    assert not denied.allow and "Read it first" in denied.reason
    # read through the shell, then patch: allowed, written by the agent, recorded
    assert handle("post_bash_read").allow
    assert handle("pre_apply_patch").allow
    app.write_text("def main():\n    return 2\n")
    assert handle("post_apply_patch").allow
    (entry,) = coord.history("src/app.py")
    assert entry.session == SID and entry.operation == "edit"
    assert coord.lease_store.live() == []
    # a second session's stale view: its patch is refused as stale
    other = {"session_id": "another-codex-session"}
    assert handle("post_bash_read", **other, tool_response="def main():\n    return 2\n").allow
    app.write_text("def main():\n    return 3\n")  # changed outside the coordinator
    stale = handle("pre_apply_patch", **other, tool_use_id="call_other")
    assert not stale.allow and stale.code == "stale"
    # shown text that is not the file records no view
    assert handle("post_bash_read", **other, tool_response="something else\n").allow
    assert handle("pre_apply_patch", **other, tool_use_id="call_other2").code == "not_read"


def test_apply_patch_results_are_read_by_their_exit_code(tmp_path: Path) -> None:
    """Codex 0.169.0 sends apply_patch's result as a string; `Exit code: 1` is a failed patch (it counted as
    success at 0effb2a, so a patch that did not apply was recorded as a write)."""
    done = codex.parse(payload("post_apply_patch", tmp_path))
    assert done is not None and done.phase == "after"
    failed = "Exit code: 1\nWall time: 0.1 seconds\nOutput:\nFailed to find expected lines in src/app.py\n"
    call = codex.parse(payload("post_apply_patch", tmp_path, tool_response=failed))
    assert call is not None and call.phase == "failed"
    shown = "Exit code: 0\nWall time: 0 seconds\nOutput:\ndef main():\n    return 1\n"
    read = codex.parse(payload("post_bash_read", tmp_path, tool_input__command="cat src/app.py", tool_response=shown))
    assert read is not None and read.shown == "def main():\n    return 1\n"
    bad = "Exit code: 1\nWall time: 0 seconds\nOutput:\ncat: src/app.py: No such file\n"
    failed_read = codex.parse(
        payload("post_bash_read", tmp_path, tool_input__command="cat src/app.py", tool_response=bad)
    )
    assert failed_read is not None and failed_read.shown is None  # nothing it printed counts as a read


def test_a_subagent_is_a_session_of_its_own(tmp_path: Path) -> None:
    call = codex.parse(payload("pre_apply_patch", tmp_path, agent_id="agent-7"))
    assert call is not None and call.session == f"{SID}/agent-7"


def test_a_note_reaches_the_model_as_codex_reads_it(tmp_path: Path) -> None:
    """A note (an allow with a reason: a late write repaired, another session's notice) is the
    `hookSpecificOutput.additionalContext` that Codex 0.169's PostToolUse and PreToolUse outputs declare
    (`PostToolUseHookSpecificOutputWire`: `hookEventName` "PostToolUse", `additionalContext`), never dropped."""
    for name, event in (("post_apply_patch", "PostToolUse"), ("pre_apply_patch", "PreToolUse")):
        call = codex.parse(payload(name, tmp_path))
        assert call is not None and call.event == event
        told = codex.render(call, Decision.note("Your patch landed late; their change was put back."))
        assert told.exit_code == 0 and told.stderr == ""
        assert json.loads(told.stdout) == {
            "hookSpecificOutput": {
                "hookEventName": event,
                "additionalContext": "Your patch landed late; their change was put back.",
            }
        }
