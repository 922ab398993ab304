"""Codex's hooks: its payload -> `ToolCall`, a `Decision` -> what its hook answers.

Payload (stdin of a command hook), per Codex's hooks reference (developers.openai.com/codex/hooks) and its
generated schemas (github.com/openai/codex, codex-rs/hooks/schema/generated): `session_id` (inside a
subagent also `agent_id`: the subagent is a session of its own, `session_id/agent_id`, as with Claude Code),
`cwd`, `hook_event_name`, `tool_name` (`Bash` for shell commands and exec_command, `apply_patch` for file
edits, MCP names), `tool_use_id`, `tool_input` (`{"command": ...}` for both Bash and apply_patch: the shell
command, or the patch text) and, after, `tool_response`: for Bash the command's output as a string, for
apply_patch a string `Exit code: N\nWall time: ...\nOutput:\n...` (Codex 0.169.0), whose exit code decides
whether the patch applied.
Examples, with where each shape comes from: tests/data/hooks/codex/.

What maps to what:
- apply_patch (or a Bash command that is an `apply_patch` invocation): the patch names its files
  (`*** Update File:`, `*** Add File:`, `*** Delete File:`, relative to `cwd`). A patch of one file is a
  write of it (an edit for Update, a whole write for Add and Delete). A patch of several files, or one
  that moves a file, is refused before it runs: one ToolCall guards one path, so the agent is asked to
  send one patch per file (the coordinator fails closed on what it cannot guard).
- Bash before: the shell guard and the protocol's look at the files it will write; Bash after: what it
  wrote recorded, and what it printed, when it printed lines of one file (Codex has no read tool: `cat F`,
  `nl -ba F`, `sed -n 'A,Bp' F`, `nl -ba F | sed -n 'A,Bp'`, `head`/`tail -n N F`: text.shellfiles'
  `printed_lines`, every agent's shell alike), is a read of those lines, recorded only if they are what the
  file holds.
- Stop and SessionEnd end a session.

Answer: Codex reads the same PreToolUse deny as Claude Code (`hookSpecificOutput.permissionDecision`), and
exit 2 with the reason on stderr elsewhere; allow is exit 0 with no output.
"""

from __future__ import annotations

import os
import re
from typing import Any

from coordinator.agents import claude_code
from coordinator.agents.core import Decision, HookAnswer, Phase, ToolCall

NAME = "codex"
PayloadError = claude_code.PayloadError

_PHASES: dict[str, Phase] = {"PreToolUse": "before", "PostToolUse": "after"}
_ENDS = {"Stop", "SessionEnd"}
_FILE_LINE = re.compile(r"^\*\*\* (Update|Add|Delete) File: (.+?)\s*$", re.MULTILINE)
_MOVE_LINE = re.compile(r"^\*\*\* Move to: ", re.MULTILINE)
_OPERATIONS = {"Update": "edit", "Add": "write", "Delete": "write"}
_EXIT_LINE = re.compile(r"(?:Exit code:|Process exited with code) (-?\d+)\b")
# What a shell read is, said in a refusal of a write to a file the session has not read (or read only in part).
READS_THAT_COUNT = (
    "Codex has no read tool: a read counts when the command prints one file and nothing else: `cat F`, "
    "`nl -ba F`, `sed -n 'A,Bp' F`, `nl -ba F | sed -n 'A,Bp'`, `head -n N F`, `tail -n N F` (a login "
    "shell's warnings printed with it spoil it: run it again)."
)


def parse(payload: dict[str, Any]) -> ToolCall | None:
    """The tool call of one hook event; None for an event or tool the coordinator has nothing to do with.
    Raises PayloadError for a payload that is not a hook event, and for a patch it cannot guard."""
    event, cwd = claude_code.event_of(payload)
    session = claude_code.session_of(payload)
    if event in _ENDS:
        return ToolCall(session, "end", "session", cwd=cwd, event=event)
    if event == claude_code.PROMPT_EVENT:
        return ToolCall(session, "before", "prompt", cwd=cwd, event=event)
    tool = payload.get("tool_name")
    if event not in _PHASES or tool not in ("Bash", "apply_patch"):
        return None
    tool_input = payload.get("tool_input")
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    if not isinstance(command, str):
        raise PayloadError(f"the {event} payload of {tool} has no tool_input.command")
    base = ToolCall(
        session, _PHASES[event], "other", tool_use_id=str(payload.get("tool_use_id") or ""), tool=str(tool),
        cwd=cwd, event=event,
    )  # fmt: skip
    if tool == "apply_patch" or "*** Begin Patch" in command:
        # A patch run by a shell command line (`apply_patch <<'EOF' ... EOF`) keeps the line: the git guard
        # judges the rest of it (`... EOF\ngit add -A`).
        carried = base._replace(command=command) if tool == "Bash" else base
        return _patch_call(carried, command, payload.get("tool_response"))
    shell = base._replace(kind="shell", operation="shell", command=command)
    return shell if base.phase == "before" else shell._replace(shown=_output(payload.get("tool_response")))


def _patch_call(base: ToolCall, patch: str, response: object) -> ToolCall:
    files = _FILE_LINE.findall(patch)
    if not files:
        raise PayloadError("the apply_patch input names no file (no '*** Update File:' line)")
    if len(files) > 1 or _MOVE_LINE.search(patch):
        names = ", ".join(path for _, path in files)
        raise PayloadError(
            f"this patch changes {len(files)} files ({names}){' and moves one' if _MOVE_LINE.search(patch) else ''}; "
            "the coordinator guards one file per patch. Send one apply_patch call per file (no '*** Move to:')"
        )
    action, path = files[0]
    phase = "failed" if base.phase == "after" and _failed(response) else base.phase
    edits = _patch_edits(patch) if action == "Update" and phase == "before" else ()
    return base._replace(
        phase=phase, kind="write", operation=_OPERATIONS[action], path=_absolute(path, base.cwd), edits=edits
    )


def _patch_edits(patch: str) -> tuple[tuple[str, str, bool], ...]:
    """An Update patch's hunks as the replacements apply_patch makes (`ToolCall.edits`): each hunk's old lines
    (context and `-`) -> its new lines (context and `+`), whole lines. () for a hunk whose place apply_patch
    finds otherwise than by its old lines alone (an `@@ context` header, `*** End of File`, no old line):
    such a patch made on an older view keeps its refusal."""
    body = patch.split("\n*** Update File:", 1)[1].split("\n", 1)[1] if "\n*** Update File:" in patch else ""
    hunks: list[tuple[list[str], list[str]]] = []
    for line in body.split("\n"):
        if line.startswith("*** End Patch"):
            break
        if line.startswith("@@"):
            if line.strip() != "@@":
                return ()
            hunks.append(([], []))
        elif line[:1] in (" ", "-", "+") and hunks:
            old, new = hunks[-1]
            if line[0] != "+":
                old.append(line[1:])
            if line[0] != "-":
                new.append(line[1:])
        elif line:  # `*** End of File`, or a line outside any hunk
            return ()
    if not hunks or any(not old for old, _ in hunks):
        return ()
    return tuple(("".join(x + "\n" for x in old), "".join(x + "\n" for x in new), False) for old, new in hunks)


def _absolute(path: str, cwd: str | None) -> str:
    return path if os.path.isabs(path) or cwd is None else os.path.join(cwd, path)


def _failed(response: object) -> bool:
    """A tool response that says it failed; an unknown shape counts as done (the adapter then records only
    a change it finds on disk). A string result says its exit code on its first line (`Exit code: N`, or
    `Process exited with code N`)."""
    if isinstance(response, str):
        m = _EXIT_LINE.match(response)
        return m is not None and m.group(1) != "0"
    if isinstance(response, dict):
        if response.get("success") is False:
            return True
        code = response.get("exit_code", response.get("exitCode"))
        return isinstance(code, int) and code != 0
    return False


def _output(response: object) -> str | None:
    if isinstance(response, str):
        if _EXIT_LINE.match(response):  # a result with a head: what the command printed follows `Output:`
            _head, sep, printed = response.partition("\nOutput:\n")
            return printed if sep and not _failed(response) else None
        return response
    if isinstance(response, dict) and not _failed(response):
        for key in ("stdout", "output", "aggregated_output", "formatted_output"):
            if isinstance(response.get(key), str):
                return str(response[key])
    return None


def render(call: ToolCall | None, decision: Decision) -> HookAnswer:
    """Codex reads Claude Code's answers: the PreToolUse permission decision, exit 2 with stderr. A refusal
    of a write to a file not read says which shell reads count (`READS_THAT_COUNT`)."""
    if not decision.allow and decision.code == "not_read":
        decision = decision._replace(reason=f"{decision.reason} {READS_THAT_COUNT}")
    return claude_code.render(call, decision)
