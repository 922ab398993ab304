"""Scripts for the scripted model: each agent's own tool vocabulary, and the policies the tests and
measurements use (a fixed sequence of steps; a read-modify-write loop that increments a shared line).

The vocabularies are the tools the pinned releases declare: Claude Code Read/Edit/Write/Bash (absolute
paths); Codex `exec_command` (`cmd`) and the free-form `apply_patch` (a custom tool: the patch text itself,
paths relative to the working folder); Gemini CLI read_file/replace/write_file/run_shell_command.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from worker.agents.modelserver import Call, Conversation, Policy, Say, Step, Use

_CODEX_EXIT = re.compile(r"(?:Exit code:|Process exited with code) (\d+)")


@dataclass(frozen=True)
class Tools:
    """One agent's tool calls, made for a file of the repository `root`."""

    agent: str
    root: Path

    def _path(self, rel: str) -> str:
        return rel if self.agent == "codex" else str(self.root / rel)

    def read(self, rel: str, offset: int | None = None, limit: int | None = None) -> Use:
        path = self._path(rel)
        if self.agent == "claude-code":
            window = {k: v for k, v in (("offset", offset), ("limit", limit)) if v is not None}
            return Use("Read", {"file_path": path, **window})
        if self.agent == "codex":
            if offset is None:
                return self.shell(f"cat {path}")
            last = offset + (limit or 1) - 1
            return self.shell(f"sed -n '{offset},{last}p' {path}")
        window = {} if offset is None else {"start_line": offset, "end_line": offset + (limit or 1) - 1}
        return Use("read_file", {"file_path": path, **window})

    def edit(self, rel: str, old: str, new: str) -> Use:
        path = self._path(rel)
        if self.agent == "claude-code":
            return Use("Edit", {"file_path": path, "old_string": old, "new_string": new})
        if self.agent == "codex":
            minus = "".join(f"-{line}\n" for line in old.split("\n"))
            plus = "".join(f"+{line}\n" for line in new.split("\n"))
            return Use("apply_patch", f"*** Begin Patch\n*** Update File: {path}\n@@\n{minus}{plus}*** End Patch\n")
        return Use("replace", {"file_path": path, "old_string": old, "new_string": new, "instruction": "edit"})

    def write(self, rel: str, content: str) -> Use:
        """A whole-file write (Codex: a patch that adds the file, replacing what is there)."""
        path = self._path(rel)
        if self.agent == "claude-code":
            return Use("Write", {"file_path": path, "content": content})
        if self.agent == "codex":
            lines = "".join(f"+{line}\n" for line in content.splitlines())
            return Use("apply_patch", f"*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch\n")
        return Use("write_file", {"file_path": path, "content": content})

    def shell(self, command: str) -> Use:
        if self.agent == "claude-code":
            return Use("Bash", {"command": command, "description": "run a command"})
        if self.agent == "codex":
            return Use("exec_command", {"cmd": command, "login": False})
        return Use("run_shell_command", {"command": command, "description": "run a command"})

    def succeeded(self, call: Call) -> bool:
        """Did the tool call do what it was asked (from the result the agent sent back)?"""
        if call.output is None or call.is_error:
            return False
        if self.agent == "codex":
            m = _CODEX_EXIT.search(call.output)
            return m is not None and m.group(1) == "0"
        if self.agent == "gemini":
            return not call.output.startswith(("Error", "error")) and "denied" not in call.output.lower()[:200]
        return True

    def is_write(self, call: Call) -> bool:
        return call.name in ("Edit", "Write", "apply_patch", "replace", "write_file")


def sequence(steps: Sequence[Step | Callable[[Conversation], Step]], final: str = "done") -> Policy:
    """Step k of the conversation is `steps[k]` (a step, or a function of the conversation so far), then
    `final`. Each request is answered from how many calls it carries, so a repeated request repeats."""

    def policy(conv: Conversation) -> Step:
        n = len(conv.calls)
        if n >= len(steps):
            return Say(final)
        step = steps[n]
        return step(conv) if callable(step) else step

    return policy


COUNTER = re.compile(r"total = (\d+)")


def incrementer(tools: Tools, rel: str, rounds: int, max_calls: int, name: str = "total") -> Policy:
    """Read the file, replace `total = N` by `total = N+1` (`name`: another counter's line, `NAME = N`); after a
    refusal or failure read again; stop after `rounds` increments that the agent reported done (or `max_calls`
    calls)."""
    counter = COUNTER if name == "total" else re.compile(rf"\b{re.escape(name)} = (\d+)")

    def policy(conv: Conversation) -> Step:
        done = sum(1 for c in conv.calls if tools.is_write(c) and tools.succeeded(c))
        if done >= rounds or len(conv.calls) >= max_calls:
            return Say(f"done: {done} increments")
        last = conv.last
        if last is None or tools.is_write(last):
            return tools.read(rel)
        found = counter.search(last.output or "")
        if found is None:
            return tools.read(rel)
        n = int(found.group(1))
        return tools.edit(rel, f"{name} = {n}", f"{name} = {n + 1}")

    return policy


def increments_done(tools: Tools, conv: Conversation) -> int:
    return sum(1 for c in conv.calls if tools.is_write(c) and tools.succeeded(c))
