"""scripts/mcp_hook_latency.py: the `hook` tool's input is the event's fields as an mcp_tool hook substitutes
them, and a short run drives a real MCP server through its guarded edits and the no-op calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.agents import claude_code
from coordinator.tools.hook_tool import event_of
from tests.scripts import load_tool

mcp_hook_latency = load_tool("mcp_hook_latency")


def test_the_input_is_the_event_the_hook_substitutes() -> None:
    raw = json.dumps(mcp_hook_latency.NOOP_EVENT).encode()
    fields = mcp_hook_latency.substituted(raw)
    assert fields["tool_name"] == "Glob" and fields["file_path"] == ""
    assert claude_code.parse(event_of(fields)) is None  # nothing for the coordinator to do: the no-op


@pytest.mark.slow  # an MCP server process on the embedded Redis: ~10 s
def test_a_short_run_guards_its_edits(tmp_path: Path) -> None:
    figures = tmp_path / "mcp.json"
    assert mcp_hook_latency.main(["--cycles", "2", "--rounds", "1", "--json", str(figures)]) == 0
    data = json.loads(figures.read_text())
    assert data["mcp-hook"]["events"] == 6 and data["mcp-noop"]["events"] == 6
