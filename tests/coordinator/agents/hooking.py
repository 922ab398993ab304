"""Helpers of the hook tests: example payloads (tests/data/hooks/claude-code/) on a given root, and the
steps of an agent's own tool loop through the adapter."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from coordinator.agents import claude_code
from coordinator.agents.adapter import HookAdapter
from coordinator.agents.core import Decision

PAYLOADS = Path(__file__).resolve().parents[2] / "data" / "hooks" / "claude-code"


def payload(name: str, root: Path | str, **changes: Any) -> dict[str, Any]:
    """The example payload `name` (without .json) with the root in place of __ROOT__; `changes` set
    top-level fields, and `tool_input__X` / `file__X` set fields of tool_input / tool_response.file."""
    text = (PAYLOADS / f"{name}.json").read_text().replace("__ROOT__", str(root))
    data: dict[str, Any] = json.loads(text)
    for key, value in changes.items():
        if key.startswith("tool_input__"):
            data["tool_input"][key.removeprefix("tool_input__")] = value
        elif key.startswith("file__"):
            data["tool_response"]["file"][key.removeprefix("file__")] = value
        else:
            data[key] = value
    return copy.deepcopy(data)


def run(adapter: HookAdapter, data: dict[str, Any]) -> Decision:
    call = claude_code.parse(data)
    assert call is not None
    return adapter.handle(call)


class Agent:
    """One Claude Code session's tool loop on `root`, its hooks through `adapter`: Read shows the file and
    PostToolUse records it; Edit is PreToolUse, the agent's own read-modify-write, PostToolUse."""

    def __init__(self, adapter: HookAdapter, root: Path, session: str, agent_id: str | None = None) -> None:
        self.adapter, self.root, self.session, self.agent_id = adapter, root, session, agent_id
        self.calls = 0

    def _ids(self) -> dict[str, Any]:
        self.calls += 1
        ids: dict[str, Any] = {"session_id": self.session, "tool_use_id": f"toolu_{self.session}_{self.calls}"}
        if self.agent_id:
            ids["agent_id"] = self.agent_id
        return ids

    def read(self, rel: str) -> Decision:
        path = self.root / rel
        text = path.read_text()
        lines = text.split("\n")  # as Claude Code counts them: "a\n" is 2 (the empty piece after the newline)
        return run(
            self.adapter,
            payload(
                "post_read",
                self.root,
                **self._ids(),
                tool_input__file_path=str(path),
                file__filePath=str(path),
                file__content=text,
                file__numLines=len(lines),
                file__totalLines=len(lines),
            ),
        )

    def edit(self, rel: str, old: str, new: str, *, fail: bool = False) -> Decision:
        path = self.root / rel
        ids = self._ids()
        fields = {"tool_input__file_path": str(path), "tool_input__old_string": old, "tool_input__new_string": new}
        before = run(self.adapter, payload("pre_edit", self.root, **ids, **fields))
        if not before.allow:
            return before
        if fail:
            run(self.adapter, payload("post_edit_failure", self.root, **ids, **fields))
            return before
        path.write_text(path.read_text().replace(old, new, 1))
        run(self.adapter, payload("post_edit", self.root, **ids, **fields))
        return before
