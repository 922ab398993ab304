"""`commit` as an operation on every way in: the library's clients, HTTP (a real `serve`) and MCP."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from coordinator import Coordinator
from coordinator.client import HttpClient, LocalClient
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.git.commit import SESSION_TRAILER
from coordinator.state.embedded import stop_embedded_redis
from tests.coordinator.git.conftest import edit, git, tree_bytes


def _committed_paths(repo: Path) -> list[str]:
    return git(repo, "show", "--name-only", "--format=", "HEAD").split()


def test_a_local_session_commits_only_its_own_writes(repo: Path, gcoord: Coordinator) -> None:
    edit(gcoord, "s1", "a.py", "a2\n", "A2 by s1\n")
    edit(gcoord, "s2", "b.py", "b1\n", "B1 by s2\n")
    client = LocalClient(gcoord)
    result = client.session("s2").commit("s2's change")
    assert result.paths == ("b.py",) and result.commit == git(repo, "rev-parse", "HEAD").strip()
    assert _committed_paths(repo) == ["b.py"]
    assert git(repo, "diff", "HEAD", "--name-only").split() == ["a.py"]  # s1's stays uncommitted
    with pytest.raises(CoordinatorError) as exc:
        client.commit("s2", "again")
    assert exc.value.code is ErrorCode.NO_CHANGE
    with pytest.raises(CoordinatorError) as bad:
        client.commit("not a session id!", "x")
    assert bad.value.code is ErrorCode.INVALID_ARGUMENT


def test_commit_over_http_and_mcp_with_session_tokens(repo: Path, tmp_path: Path) -> None:
    """A real `serve` on the repository: s1 commits over HTTP, s2 through its MCP server's `commit` tool;
    each commit holds its own session's file only and names it in the trailer; the tree is untouched."""
    from tests.coordinator.server.test_server import ServerProcess, token
    from tests.coordinator.tools.test_mcp_server import _ok, agent

    server = ServerProcess(repo)
    try:
        with HttpClient(server.url, token=token("s1")) as s1, HttpClient(server.url, token=token("s2")) as s2:
            for client, session, path, old in ((s1, "s1", "a.py", "a3\n"), (s2, "s2", "b.py", "b4\n")):
                client.read(session, path)
                client.edit(session, path, old, f"{old.strip()} by {session}\n")
            before = tree_bytes(repo)
            first = s1.commit("s1", "s1 over http")
            assert first.paths == ("a.py",) and first.branch.endswith("main")
            assert _committed_paths(repo) == ["a.py"]
            assert f"{SESSION_TRAILER}: s1" in git(repo, "log", "-1", "--format=%B")
            with pytest.raises(CoordinatorError) as empty:
                s1.commit("s1", "")
            assert empty.value.code is ErrorCode.INVALID_ARGUMENT

        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()

        async def main() -> None:
            async with agent(elsewhere, None, tmp_path / "mcp.log", remote=(server.url, token("s2"))) as b:
                done = await b.call_tool("commit", {"message": "s2 over mcp"})
                assert "b.py" in _ok(done)
                assert isinstance(done.structured_content, dict) and done.structured_content["paths"] == ["b.py"]

        anyio.run(main)
        assert _committed_paths(repo) == ["b.py"]
        assert f"{SESSION_TRAILER}: s2" in git(repo, "log", "-1", "--format=%B")
        assert git(repo, "log", "--format=%s").split("\n")[:2] == ["s2 over mcp", "s1 over http"]
        assert tree_bytes(repo) == before and git(repo, "status", "--porcelain") == ""
    finally:
        server.stop()
        stop_embedded_redis(repo / ".edit-coordinator")
