"""Undo, redo and flexible matching through the MCP server: real `edit-coordinator mcp` processes driven
by the MCP SDK's own client over stdio, on one repository and its embedded (real) Redis.

Properties guarded: three edits then three undos give the original file back, and redo steps forward
once; an agent's undo never discards another agent's later write (the issue's u1/u2 scenario, one MCP
server per agent); `--match flexible` applies an edit that exact matching refuses with `no_match`, and the
tool result says which match was used, locally and when forwarding to a remote service; restore is not
an agent tool.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from coordinator.history import History
from coordinator.state.embedded import stop_embedded_redis
from coordinator.tools.mcp_server import tool_specs
from tests.coordinator.tools.test_mcp_server import _err, _ok, agent

INDENTED = "def f():\n    x = 1\n    return x\n"
FLAT_EDIT = {"old_string": "x = 1\nreturn x", "new_string": "x = 2\nreturn x"}  # indentation dropped


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "repo"
    root.mkdir()
    yield root
    stop_embedded_redis(root / ".edit-coordinator")


def test_three_edits_three_undos_give_the_original_then_redo_steps_forward(repo: Path, tmp_path: Path) -> None:
    (repo / "a.py").write_text("a = 0\n")
    contents: list[str] = []

    async def main() -> None:
        async with agent(repo, "undoer", tmp_path / "mcp.log") as a:
            _ok(await a.call_tool("read_file", {"file_path": "a.py"}))
            for i in (1, 2, 3):
                _ok(await a.call_tool("edit_file", {"file_path": "a.py", "old_string": f"a = {i - 1}",
                                                    "new_string": f"a = {i}"}))  # fmt: skip
            for _ in range(3):
                undone = await a.call_tool("undo", {"file_path": "a.py"})
                assert "Reverted your edit of version" in _ok(undone)
                contents.append((repo / "a.py").read_text())
            redone = await a.call_tool("redo", {"file_path": "a.py"})
            assert "Reverted your undo of version 6" in _ok(redone)
            assert isinstance(redone.structured_content, dict)
            assert redone.structured_content["operation"] == "redo" and redone.structured_content["reverts"] == 6
            contents.append((repo / "a.py").read_text())

    anyio.run(main)
    assert contents == ["a = 2\n", "a = 1\n", "a = 0\n", "a = 1\n"]
    ops = [e.operation for e in reversed(History(repo / ".edit-coordinator").entries("a.py"))]
    assert ops == ["edit", "edit", "edit", "undo", "undo", "undo", "redo"]


def test_an_agents_undo_keeps_the_other_agents_later_write(repo: Path, tmp_path: Path) -> None:
    """u1 edits a = 0 -> a = 9; u2 (its own MCP server) edits b = 0 -> b = 7; u1 reads and undoes. u2's b = 7
    stays (or the undo is refused stale, nothing written); the file is never back to a = 0 / b = 0."""
    (repo / "b.py").write_text("a = 0\nb = 0\n")
    outcome: list[str] = []

    async def main() -> None:
        log = tmp_path / "mcp.log"
        async with agent(repo, "u1", log) as u1, agent(repo, "u2", log) as u2:
            _ok(await u1.call_tool("read_file", {"file_path": "b.py"}))
            _ok(await u1.call_tool("edit_file", {"file_path": "b.py", "old_string": "a = 0", "new_string": "a = 9"}))
            _ok(await u2.call_tool("read_file", {"file_path": "b.py"}))
            _ok(await u2.call_tool("edit_file", {"file_path": "b.py", "old_string": "b = 0", "new_string": "b = 7"}))
            _ok(await u1.call_tool("read_file", {"file_path": "b.py"}))
            undone = await u1.call_tool("undo", {"file_path": "b.py"})
            if undone.is_error:
                code, _ = _err(undone)
                outcome.append(code)
            else:
                outcome.append(_ok(undone))

    anyio.run(main)
    text = (repo / "b.py").read_text()
    assert text != "a = 0\nb = 0\n"
    if outcome == ["stale"]:
        assert text == "a = 9\nb = 7\n"
    else:
        assert text == "a = 0\nb = 7\n"
        assert "Reverted your edit of version 1" in outcome[0] and "1 later write by others kept" in outcome[0]


def test_match_flexible_flag_applies_what_exact_refuses(repo: Path, tmp_path: Path) -> None:
    (repo / "f.py").write_text(INDENTED)

    async def main() -> None:
        log = tmp_path / "mcp.log"
        async with agent(repo, "exact", log) as exact, agent(repo, "flex", log, flags=("--match", "flexible")) as flex:
            _ok(await exact.call_tool("read_file", {"file_path": "f.py"}))
            code, message = _err(await exact.call_tool("edit_file", {"file_path": "f.py", **FLAT_EDIT}))
            assert code == "no_match" and "indentation" in message
            assert (repo / "f.py").read_text() == INDENTED
            _ok(await flex.call_tool("read_file", {"file_path": "f.py"}))
            result = await flex.call_tool("edit_file", {"file_path": "f.py", **FLAT_EDIT})
            text = _ok(result)
            assert "old_string matched lines 2-3 of the file only with the indentation shifted" in text
            assert isinstance(result.structured_content, dict)
            assert result.structured_content["match"] == "indentation"
            assert result.structured_content["match_lines"] == [2, 3]

    anyio.run(main)
    assert (repo / "f.py").read_text() == "def f():\n    x = 2\n    return x\n"


def test_match_flexible_is_sent_to_a_remote_service(tmp_path: Path) -> None:
    """`mcp --server URL --token T --match flexible`: the MCP process runs no engine; the service applies the
    flexible match because the flag travels with each edit."""
    from tests.coordinator.server.test_server import ServerProcess, token

    root = tmp_path / "served"
    root.mkdir()
    (root / "f.py").write_text(INDENTED)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    server = ServerProcess(root)

    async def main() -> None:
        remote = (server.url, token("remote-flex"))
        async with agent(elsewhere, None, tmp_path / "mcp.log", remote=remote, flags=("--match", "flexible")) as a:
            _ok(await a.call_tool("read_file", {"file_path": "f.py"}))
            result = await a.call_tool("edit_file", {"file_path": "f.py", **FLAT_EDIT})
            assert "indentation shifted" in _ok(result)
            assert isinstance(result.structured_content, dict) and result.structured_content["match"] == "indentation"

    try:
        anyio.run(main)
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")
    assert (root / "f.py").read_text() == "def f():\n    x = 2\n    return x\n"
    assert list(elsewhere.iterdir()) == []


def test_restore_is_not_an_agent_tool() -> None:
    names = [s.name for s in tool_specs()]
    assert "redo" in names and "undo" in names and "restore" not in names
    redo = next(s for s in tool_specs() if s.name == "redo")
    assert redo.schema["required"] == ["file_path"] and not redo.read_only
