"""Guarding agents' own file tools through their hooks: the interface (`core`: ToolCall, Decision,
HookAnswer), the adapter that applies a call to a coordinator (`adapter`), and a front end per agent
(`claude_code`, ...), registered below by the name `edit-coordinator hook NAME` takes.

A front end is a module with `parse(payload: dict) -> ToolCall | None` and
`render(call: ToolCall | None, decision: Decision) -> HookAnswer`. This package's import stays light: the
command hook loads it (and one front end) on every tool call.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# agent name -> the module of its front end
FRONT_ENDS: dict[str, str] = {
    "claude-code": "coordinator.agents.claude_code",
    "codex": "coordinator.agents.codex",
    "gemini": "coordinator.agents.gemini",
}


def front_end(name: str) -> ModuleType:
    """The front end module of agent `name`; ValueError naming the known ones for any other."""
    module = FRONT_ENDS.get(name)
    if module is None:
        known = ", ".join(sorted(FRONT_ENDS))
        raise ValueError(f"unknown agent {name!r}; hooks exist for: {known}")
    return importlib.import_module(module)
