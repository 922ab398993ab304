"""The `hook` tool of `edit-coordinator mcp --hook-tool`, for Claude Code's mcp_tool hooks: the event's
fields as the hook substitutes them (strings) become the documented hook event, and the answer is the http
hook's body, decided by the same adapter as the command and HTTP hooks."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from coordinator.agents import claude_code
from coordinator.agents.adapter import HookAdapter
from coordinator.agents.settings import mcp_tool_input
from coordinator.state.embedded import stop_embedded_redis
from coordinator.tools import hook_tool
from tests import REPO_ROOT
from tests.coordinator.agents.hooking import payload
from tests.coordinator.tools.test_mcp_server import FILE_TOOLS, ORIGINAL, _ok, agent


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "app.py").write_text(ORIGINAL)
    yield root
    stop_embedded_redis(root / ".edit-coordinator")


def substituted(event: dict[str, Any]) -> dict[str, Any]:
    """What Claude Code hands the tool for `event` under the input `init` writes: each `${path}` replaced by
    that field of the event as text, "" where the event has no such field."""

    def look(path: str) -> str:
        value: Any = event
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return "" if value is None else str(value)

    return {k: look(v[2:-1]) for k, v in mcp_tool_input().items()}


# What the substituted fields do not carry: a write's change and the permission mode, which only policy
# "rebase" reads (to carry an Edit made on an older view, or merge a Write); without them the mcp_tool way
# keeps such a write's stale refusal (docs/agents/claude-code.md), never lets more through.
_REBASE_ONLY = {"edits": (), "content": None, "mode": ""}


def test_substituted_fields_make_the_documented_events_again(root: Path) -> None:
    """Every example payload (tests/data/hooks/claude-code/) read back from its substituted fields is the
    same tool call for the front end, but for what only policy "rebase" reads."""
    for name in ("pre_edit", "pre_write", "pre_bash", "post_read", "post_read_partial", "post_edit",
                 "post_edit_failure", "pre_edit_subagent", "stop", "session_end"):  # fmt: skip
        event = payload(name, root)
        direct = claude_code.parse(event)
        via_tool = claude_code.parse(hook_tool.event_of(substituted(event)))
        assert via_tool == (None if direct is None else direct._replace(**_REBASE_ONLY)), name
    whole = payload("pre_edit", root)
    assert hook_tool.event_of({"event": json.dumps(whole)}) == whole == hook_tool.event_of({"event": whole})


def test_the_answer_is_the_adapters_decision_as_the_http_body(coord: Any, root: Path) -> None:
    f = root / "app.py"
    f.write_text("x = 1\n")
    ids = {"session_id": "mcp-hook-1", "tool_input__file_path": str(f)}
    unread = payload("pre_edit", root, **ids, tool_use_id="t1")
    answer = json.loads(hook_tool.answer(coord, substituted(unread)))
    expected = claude_code.render(claude_code.parse(unread), HookAdapter(coord).handle(claude_code.parse(unread)))
    assert answer == expected.body and answer["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "has not been read" in answer["hookSpecificOutput"]["permissionDecisionReason"]
    read = payload("post_read", root, **ids, tool_use_id="t2", file__content="x = 1\n", file__numLines=1,
                   file__totalLines=1, file__filePath=str(f))  # fmt: skip
    assert hook_tool.answer(coord, substituted(read)) == "{}"
    assert hook_tool.answer(coord, substituted(payload("pre_edit", root, **ids, tool_use_id="t3"))) == "{}"
    f.write_text("x = 2\n")
    assert hook_tool.answer(coord, substituted(payload("post_edit", root, **ids, tool_use_id="t3"))) == "{}"
    (entry,) = coord.history("app.py")
    assert entry.session == "mcp-hook-1"


def test_input_it_cannot_read_is_a_deny_not_a_tool_error(coord: Any) -> None:
    for arguments in ({"nonsense": "x"}, {"event": "[1]"}, {"event": "{not json"}, {}):
        answer = json.loads(hook_tool.answer(coord, arguments))
        assert answer["decision"] == "block" and "could not be read" in answer["reason"], arguments


def test_an_end_it_cannot_read_goes_on_and_is_logged(coord: Any) -> None:
    """A block at Stop keeps Claude Code going: an error of the hook's own there is "go on", logged."""
    from coordinator.agents import failures

    for event in ("Stop", "SubagentStop", "PostToolUse"):
        assert json.loads(hook_tool.answer(coord, {"hook_event_name": event})) == {}, event
    count, logged = failures.recent(coord.root, 5)
    assert count == 3 and all("could not be read" in f.what for f in logged)


def test_through_a_real_mcp_server_process(repo: Path, tmp_path: Path) -> None:
    f = repo / "app.py"
    ids = {"session_id": "claude-1", "tool_input__file_path": str(f)}
    shown = f.read_text()

    async def main() -> None:
        async with agent(repo, "mcp-x", tmp_path / "log", flags=("--hook-tool",)) as server:
            names = [t.name for t in (await server.list_tools()).tools]
            assert names[: len(FILE_TOOLS)] == FILE_TOOLS and names[-1] == "hook"

            async def hook(event: dict[str, Any]) -> Any:
                return json.loads(_ok(await server.call_tool("hook", substituted(event))))

            denied = await hook(payload("pre_edit", repo, **ids, tool_use_id="t1"))
            assert "has not been read" in denied["hookSpecificOutput"]["permissionDecisionReason"]
            lines = len(shown.splitlines())
            read = payload("post_read", repo, **ids, tool_use_id="t2", file__content=shown, file__numLines=lines,
                           file__totalLines=lines, file__filePath=str(f))  # fmt: skip
            assert await hook(read) == {}
            assert await hook(payload("pre_edit", repo, **ids, tool_use_id="t3")) == {}
            f.write_text(shown.replace("hello", "hi"))
            assert await hook(payload("post_edit", repo, **ids, tool_use_id="t3")) == {}
            other = await hook(payload("pre_edit", repo, session_id="claude-2", tool_use_id="t4",
                                       tool_input__file_path=str(f)))  # fmt: skip
            assert "has not been read" in other["hookSpecificOutput"]["permissionDecisionReason"]
        async with agent(repo, "mcp-y", tmp_path / "log") as plain:  # without the flag: not listed
            assert "hook" not in [t.name for t in (await plain.list_tools()).tools]

    anyio.run(main)


def test_the_hook_tool_needs_the_servers_own_engine(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "mcp", "--hook-tool", "--server", "http://127.0.0.1:9", "--token",
         "t"], capture_output=True, text=True, timeout=60, cwd=tmp_path, env={"PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert done.returncode == 2 and "[invalid_argument]" in done.stderr and "--root" in done.stderr


def test_without_a_tool_use_id_a_sessions_write_is_paired_by_the_session(coord: Any, root: Path) -> None:
    """Where the hook could not substitute `${tool_use_id}` (left as it was), a session's before- and
    after-hooks still meet, as long as its writes do not overlap."""
    f = root / "b.py"
    f.write_text("y = 1\n")
    ids = {"session_id": "mcp-hook-2", "tool_input__file_path": str(f)}
    read = payload("post_read", root, **ids, file__content="y = 1\n", file__numLines=1, file__totalLines=1,
                   file__filePath=str(f))  # fmt: skip
    assert hook_tool.answer(coord, substituted(read)) == "{}"
    for name in ("pre_edit", "post_edit"):
        if name == "post_edit":
            f.write_text("y = 2\n")
        fields = {**substituted(payload(name, root, **ids)), "tool_use_id": "${tool_use_id}"}
        assert hook_tool.answer(coord, fields) == "{}"
    (entry,) = coord.history("b.py")
    assert entry.session == "mcp-hook-2"
