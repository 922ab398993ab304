"""The hook interface every agent's front end speaks: what one native tool call is (`ToolCall`), what the
coordinator answers (`Decision`), and what goes back to the agent (`HookAnswer`).

A front end is a module with `parse(payload: dict) -> ToolCall | None` (None: an event the coordinator has
nothing to do with) and `render(call: ToolCall | None, decision: Decision) -> HookAnswer`. The adapter that
decides (`coordinator.agents.adapter`) and the ways in (the `hook` command, the HTTP route) sit on either
side of it. This module imports nothing heavy: the command hook loads it on every tool call (so the three
types are NamedTuples: `dataclasses` alone would load `inspect`, about a tenth of a hook's start).
"""

from __future__ import annotations

import json
from typing import Any, Literal, NamedTuple

Phase = Literal["before", "after", "failed", "end"]
Kind = Literal["read", "write", "shell", "session", "prompt", "other"]


class ToolCall(NamedTuple):
    """One native tool call (or a session's end), as a front end reads it from its hook payload.

    session: the coordinator session (a subagent's is `session_id/agent_id`).
    phase: "before" the tool runs, "after" it succeeded, "failed" (it failed or was interrupted), "end"
        (the session stopped or ended: kind "session").
    kind: "read", "write" (Edit, MultiEdit, Write), "shell" (a command), "session", "prompt" (a new turn
        begins: Claude Code's and Codex's UserPromptSubmit, Gemini CLI's BeforeAgent, whose answers add
        context for the model: the notes kept at the end of the last turn are told there), "other".
    operation: what a write was ("edit", "multi_edit", "write"), recorded in the history.
    path: the file (absolute, as the agents send it, or relative to the root); command: a shell command (on a
    write, the command line that ran its patch: the git guard judges the rest of the line).
    shown: for a read's "after", the text the agent was shown (None: not told); offset/limit: a partial
        read's window (None: from the start / no limit).
    cwd: the agent's working folder (where the root is found when no service is named).
    notes_hidden: the agent shows its model no added context in its answer to this event (Gemini CLI's
        BeforeTool): a note for the model is kept for the session's next event instead of being dropped.
    edits: a write's change as the agent's tool will make it, (old_string, new_string, replace_all) each (an
        Edit; a patch's hunks); () when not known. Under policy "rebase" an edit on an older view is judged
        from them (coordinator/engine/agentwrites.py).
    content: a whole write's content, given only where the agent's answer to this event can replace the
        tool's input (Claude Code's `updatedInput`, Gemini CLI's `tool_input`): a merged write is handed back
        in `Decision.content`.
    mode: the agent's permission mode, as its event says (Claude Code's `permission_mode`).
    """

    session: str
    phase: Phase
    kind: Kind
    tool_use_id: str = ""
    tool: str = ""
    operation: str = ""
    path: str | None = None
    command: str | None = None
    shown: str | None = None
    offset: int | None = None
    limit: int | None = None
    cwd: str | None = None
    event: str = ""
    settings: tuple[tuple[str, str], ...] = ()
    notes_hidden: bool = False
    edits: tuple[tuple[str, str, bool], ...] = ()
    content: str | None = None
    mode: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self._asdict().items() if v is not None and v != "" and v != () and v is not False}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        known = {k: data[k] for k in cls._fields if k in data}
        if "settings" in known:
            known["settings"] = tuple((str(k), str(v)) for k, v in known["settings"])
        if "edits" in known:
            known["edits"] = tuple((str(a), str(b), bool(c)) for a, b, c in known["edits"])
        return cls(**known)


# Per-session settings: variables of the agent's own environment that the hook client forwards with every
# event (an HTTP header each, `env_header`), so that the process that decides (the repository's hook
# service, started by whichever session came first, or a shared `serve`) uses the session's value, never
# its own environment's. ToolCall.settings holds what came with the event.
FORWARDED_ENV = ("EDIT_COORDINATOR_AUTO_COMMIT",)
# The agent's process (the hook's grandparent: the agent runs a hook through `sh -c`), named by the command
# hooks to the hook service, which stays up while it lives (Claude Code's http hooks cannot start it).
AGENT_PID_HEADER = "x-edit-coordinator-agent-pid"
# The header of Claude Code's http hooks that carries the key of the repository's hook service (its loopback
# port answers only requests that carry it: cli/hookservice.py's http.json, server/hooks.py).
HOOK_KEY_HEADER = "x-edit-coordinator-hook-key"
# The events whose command hook starts the repository's hook service though the coordinator has nothing to
# decide (Claude Code's, where its other hooks are http hooks, which cannot start it).
STARTER_EVENTS = frozenset({"SessionStart", "UserPromptSubmit"})
_MAX_SETTING = 200


def env_header(name: str) -> str:
    """The header a forwarded variable travels in: EDIT_COORDINATOR_AUTO_COMMIT -> x-edit-coordinator-auto-commit."""
    return "x-" + name.lower().replace("_", "-")


def forwarded(environ: Any) -> tuple[tuple[str, str], ...]:
    """The forwarded variables set in `environ` (a mapping), as ToolCall.settings; a value that could not
    travel in a header (control characters, over 200 characters) is left out, and so is an empty one: Claude
    Code's http hooks send a variable the agent does not have as an empty header, which must leave the
    decision to the project config (an empty value used to count as "off")."""
    out = []
    for name in FORWARDED_ENV:
        value = environ.get(name)
        if isinstance(value, str) and value and len(value) <= _MAX_SETTING and value.isprintable():
            out.append((name, value))
    return tuple(out)


def settings_from_headers(headers: Any) -> tuple[tuple[str, str], ...]:
    """ToolCall.settings from a request's headers (a mapping of lower-case names), the inverse of `env_header`."""
    return forwarded({name: headers.get(env_header(name)) for name in FORWARDED_ENV})


class Decision(NamedTuple):
    """Allow, or deny with the reason the agent's model is shown. `code`: the refusal's ErrorCode value
    (for logs and tests; the agent sees only the reason). An allow with a reason is a note for the model
    (a repair of its late write, a notice that another session's write was repaired): the front end passes
    it on as added context where the agent takes one. `content`: allowed with this content instead of the
    agent's own (a whole write merged with changes made since its view): the front end rewrites the tool's
    input (only given for a call whose `ToolCall.content` was given)."""

    allow: bool
    reason: str = ""
    code: str = ""
    content: str | None = None

    @classmethod
    def deny(cls, reason: str, code: str = "") -> Decision:
        return cls(False, reason, code)

    @classmethod
    def note(cls, text: str) -> Decision:
        """Allow, telling the model `text` (nothing when it is empty)."""
        return cls(True, text, "")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"allow": self.allow, "reason": self.reason, "code": self.code}
        if self.content is not None:
            out["content"] = self.content
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        content = data.get("content")
        return cls(
            bool(data.get("allow")),
            str(data.get("reason", "")),
            str(data.get("code", "")),
            content if isinstance(content, str) else None,
        )


ALLOW = Decision(True)


class HookAnswer(NamedTuple):
    """What a command hook process gives back: its exit code, stdout and stderr. `body` is the JSON an
    `http` hook answers with (always with a 2xx status: a refusal is a deny inside the body); None: `{}`."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    body: dict[str, Any] | None = None

    def http_body(self) -> bytes:
        return json.dumps(self.body or {}).encode()


# Exit code of a command hook that blocks the call; Claude Code, Codex and Gemini CLI all read 2 so.
BLOCK_EXIT = 2


# The events whose hook guards a write (Claude Code's and Codex's PreToolUse, Gemini CLI's BeforeTool): an
# error of the hook's own refuses the call. Every other event (after a tool, the end of a turn, the end of a
# session) answers "go on" on an error of its own: there a refusal cannot protect anything, and at the end
# of a turn exit 2 means "keep going", which kept agents looping on a broken install.
GUARD_EVENTS = frozenset({"PreToolUse", "BeforeTool"})


def fails_closed(event: str | None) -> bool:
    """Whether a hook of `event` refuses the call on an error of its own. An event that cannot be told
    (the payload unreadable) fails closed unless the command line says otherwise (`--fail-open`)."""
    return event is None or event in GUARD_EVENTS


def event_of(payload: object) -> str | None:
    """The `hook_event_name` of a parsed payload, None when there is none."""
    event = payload.get("hook_event_name") if isinstance(payload, dict) else None
    return event if isinstance(event, str) else None


def failed_closed(reason: str) -> HookAnswer:
    """The answer of a hook that could not decide (bad input, no service, an error of its own): block,
    with the reason on stderr, which the agents show the model on exit 2."""
    return HookAnswer(BLOCK_EXIT, "", f"edit-coordinator hook: {reason}\n", {})


def failed(reason: str, *, closed: bool, go_on: HookAnswer) -> HookAnswer:
    """The answer to an error of the hook's own: `failed_closed` where the hook guards a write, else the
    agent's "go on" (`go_on`: its front end's allow answer)."""
    return failed_closed(reason) if closed else go_on
