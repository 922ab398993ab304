"""The MCP server, driven by the MCP SDK's own client over stdio: real server processes, real embedded Redis.

Two `edit-coordinator mcp` processes play two agents editing one file. The property guarded: an agent whose
view is out of date is refused with `stale` (nothing written), reads again, and then succeeds, and at the
end the file holds every acknowledged change.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from coordinator.state.embedded import stop_embedded_redis
from coordinator.tools.mcp_server import SessionTools, tool_specs
from tests import REPO_ROOT

PACKAGE_ROOT = str(REPO_ROOT)
FILE_TOOLS = ["read_file", "write_file", "edit_file", "multi_edit"]
COORDINATION_TOOLS = ["lease", "renew", "release", "leases", "history", "undo", "redo", "commit"]

ORIGINAL = """\
def greet(name):
    return "hello " + name


def farewell(name):
    return "bye " + name
"""


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "app.py").write_text(ORIGINAL)
    yield root
    stop_embedded_redis(root / ".edit-coordinator")


def _env(extra_env: dict[str, str] | None = None) -> dict[str, str]:
    env = {"PYTHONPATH": os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)}
    if os.environ.get("XDG_RUNTIME_DIR"):
        env["XDG_RUNTIME_DIR"] = os.environ["XDG_RUNTIME_DIR"]
    env.update(extra_env or {})
    return env


def _params(
    root: Path,
    session: str | None,
    extra_env: dict[str, str] | None = None,
    remote: tuple[str, str] | None = None,
    flags: tuple[str, ...] = (),
) -> StdioServerParameters:
    """`edit-coordinator mcp` on a local root, or (remote = (url, token)) forwarding to a service; `flags`
    are added to its command line."""
    args = ["-m", "coordinator.cli", "mcp", *flags]
    if remote is None:
        args += ["--root", str(root), "--durability", "none"]
    else:
        # No root of its own: an empty folder, which must stay empty (no engine, no Redis, no state).
        args += ["--server", remote[0], "--token", remote[1]]
    if session is not None:
        args += ["--session", session]
    return StdioServerParameters(command=sys.executable, args=args, env=_env(extra_env), cwd=str(root))


@asynccontextmanager
async def agent(
    root: Path,
    session: str | None,
    errlog: Path,
    extra_env: dict[str, str] | None = None,
    remote: tuple[str, str] | None = None,
    flags: tuple[str, ...] = (),
) -> AsyncIterator[ClientSession]:
    with open(errlog, "a") as err:
        async with (
            stdio_client(_params(root, session, extra_env, remote, flags), errlog=err) as (read, write),
            ClientSession(read, write, read_timeout_seconds=30) as client,
        ):
            await client.initialize()
            yield client


def _text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def _ok(result: types.CallToolResult) -> str:
    text = _text(result)
    assert not result.is_error, text
    return text


def _err(result: types.CallToolResult) -> tuple[str, str]:
    text = _text(result)
    assert result.is_error, text
    sc = result.structured_content
    assert isinstance(sc, dict)
    assert text == f"[{sc['code']}] {sc['message']}"
    return sc["code"], sc["message"]


def test_two_agents_one_file_stale_then_reread_succeeds(repo: Path, tmp_path: Path) -> None:
    errlog = tmp_path / "servers.log"
    path = str(repo / "app.py")  # absolute, as Claude Code sends it

    async def main() -> None:
        async with agent(repo, "agent-a", errlog) as a, agent(repo, "agent-b", errlog) as b:
            listed = await a.list_tools()
            by_name = {t.name: t for t in listed.tools}
            assert list(by_name) == [*FILE_TOOLS, *COORDINATION_TOOLS]
            assert set(by_name["edit_file"].input_schema["properties"]) == {
                "file_path",
                "old_string",
                "new_string",
                "replace_all",
            }
            assert by_name["read_file"].input_schema["required"] == ["file_path"]
            assert "stale" in (by_name["edit_file"].description or "")

            # Must read first.
            code, message = _err(
                await a.call_tool("edit_file", {"file_path": path, "old_string": "hello", "new_string": "hi"})
            )
            assert code == "not_read" and "Read it first" in message

            read_a = _ok(await a.call_tool("read_file", {"file_path": path}))
            assert '     2\t    return "hello " + name' in read_a
            read_b = _ok(await b.call_tool("read_file", {"file_path": "app.py"}))
            assert read_b == read_a

            # A edits first: success, with a numbered snippet.
            done = _ok(
                await a.call_tool("edit_file", {"file_path": path, "old_string": '"hello "', "new_string": '"hi "'})
            )
            assert "1 replacement" in done and '     2\t    return "hi " + name' in done

            # B's view is now out of date: refused, nothing written.
            before = (repo / "app.py").read_text()
            code, message = _err(
                await b.call_tool("edit_file", {"file_path": path, "old_string": '"bye "', "new_string": '"see you "'})
            )
            assert code == "stale"
            assert "agent-a" in message and "Read it again" in message
            assert (repo / "app.py").read_text() == before

            # B reads again (sees A's change) and redoes its edit: success.
            again = _ok(await b.call_tool("read_file", {"file_path": path}))
            assert '"hi "' in again
            _ok(await b.call_tool("edit_file", {"file_path": path, "old_string": '"bye "', "new_string": '"see you "'}))

            # A is stale in turn; its multi_edit fails whole, then succeeds after a read.
            edits = [
                {"old_string": "def greet(name):", "new_string": "def greet(name: str) -> str:"},
                {"old_string": "def farewell(name):", "new_string": "def farewell(name: str) -> str:"},
            ]
            code, _ = _err(await a.call_tool("multi_edit", {"file_path": path, "edits": edits}))
            assert code == "stale"
            _ok(await a.call_tool("read_file", {"file_path": path}))
            result = await a.call_tool("multi_edit", {"file_path": path, "edits": edits})
            _ok(result)
            assert isinstance(result.structured_content, dict)
            assert result.structured_content["version"] == 3
            assert result.structured_content["replacements"] == 2

            # Reading an unchanged file twice: the second answer is the short one.
            after_write = _ok(await a.call_tool("read_file", {"file_path": path}))
            repeat = _ok(await a.call_tool("read_file", {"file_path": path}))
            assert "\t" in after_write and "unchanged" not in after_write  # first read since its write
            assert "unchanged since your last read" in repeat

            # Writes: a new file needs no read; overwriting one needs a current view.
            _ok(await b.call_tool("write_file", {"file_path": "pkg/new.py", "content": "X = 1\n"}))
            code, _ = _err(await a.call_tool("write_file", {"file_path": "pkg/new.py", "content": "X = 2\n"}))
            assert code == "not_read"

            # Errors keep the engine's codes.
            code, message = _err(await a.call_tool("read_file", {"file_path": "ap.py"}))
            assert code == "file_not_found" and "app.py" in message
            code, _ = _err(await a.call_tool("read_file", {"file_path": "/etc/passwd"}))
            assert code == "outside_root"
            code, _ = _err(await a.call_tool("read_file", {"file_path": path, "offset": "x"}))
            assert code == "invalid_argument"
            code, _ = _err(await a.call_tool("edit_file", {"file_path": path, "old_string": "a"}))
            assert code == "invalid_argument"
            code, _ = _err(
                await a.call_tool("edit_file", {"file_path": path, "old_string": "name", "new_string": "who"})
            )
            assert code == "ambiguous"

    anyio.run(main)

    assert (repo / "app.py").read_text() == (
        "def greet(name: str) -> str:\n"
        '    return "hi " + name\n'
        "\n\n"
        "def farewell(name: str) -> str:\n"
        '    return "see you " + name\n'
    )
    assert (repo / "pkg" / "new.py").read_text() == "X = 1\n"
    from coordinator.history import History

    entries = History(repo / ".edit-coordinator").entries("app.py")
    assert [(e.version, e.session, e.operation) for e in reversed(entries)] == [
        (1, "agent-a", "edit"),
        (2, "agent-b", "edit"),
        (3, "agent-a", "multi_edit"),
    ]


def test_session_from_environment_and_same_id_shares_state(repo: Path, tmp_path: Path) -> None:
    """The id comes from $EDIT_COORDINATOR_SESSION; a second process with the same id is the same session
    (a restarted server keeps the agent's read state), yet still shows the file in full the first time."""
    errlog = tmp_path / "servers.log"
    env = {"EDIT_COORDINATOR_SESSION": "agent-env"}

    async def main() -> None:
        async with agent(repo, None, errlog, env) as first:
            _ok(await first.call_tool("read_file", {"file_path": "app.py"}))
        async with agent(repo, None, errlog, env) as second:
            text = _ok(await second.call_tool("read_file", {"file_path": "app.py"}))
            assert "     1\tdef greet(name):" in text  # full text: this process has shown nothing yet
            _ok(
                await second.call_tool(
                    "edit_file", {"file_path": "app.py", "old_string": "greet", "new_string": "welcome"}
                )
            )

    anyio.run(main)
    from coordinator.history import History

    entries = History(repo / ".edit-coordinator").entries("app.py")
    assert [e.session for e in entries] == ["agent-env"]


def test_tool_descriptions_cover_every_error_code() -> None:
    """Every code the engine can return is explained to the model in the edit tool's description."""
    from coordinator.errors import ErrorCode

    specs = {s.name: s for s in tool_specs()}
    # check_failed comes only from `commit --check`, which no tool offers (a check runs a shell command on the
    # service's host): the commit tool takes no check, so the code cannot reach a model through a tool.
    assert "check" not in specs["commit"].schema["properties"]
    missing = [
        c.value
        for c in ErrorCode
        if c is not ErrorCode.CHECK_FAILED and f"\n- {c.value}: " not in specs["edit_file"].description
    ]
    assert missing == []
    assert "- no_match:" not in specs["read_file"].description  # each tool lists the codes it can return
    assert "replace_all" in specs["multi_edit"].description
    assert specs["multi_edit"].schema["properties"]["edits"]["items"]["required"] == ["old_string", "new_string"]


def test_unknown_tool_and_extra_arguments_are_invalid_argument(coord: Any) -> None:
    from coordinator.errors import CoordinatorError

    tools = SessionTools(coord.session("s"))
    with pytest.raises(CoordinatorError) as info:
        tools.call("delete_file", {})
    assert info.value.code == "invalid_argument" and "read_file" in info.value.message
    with pytest.raises(CoordinatorError) as info:
        tools.call("read_file", {"file_path": "x", "path": "y"})
    assert info.value.code == "invalid_argument" and "path" in info.value.message


def test_session_tools_in_process(coord: Any, root: Path) -> None:
    """The adapter's own decisions, without a transport: the short "unchanged" answer only for a view this
    process has shown; paging hints; lenient numbers and JSON-text edits."""
    (root / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    first = SessionTools(coord.session("s"))
    page = first.call("read_file", {"file_path": "long.txt", "limit": 3.0}).text
    assert page.startswith("     1\tline 1\n") and "read on with offset=4" in page
    assert "unchanged since your last read" in first.call("read_file", {"file_path": "long.txt", "limit": 3}).text

    # Same session id, new process (a new conversation): the lines, not the short answer.
    second = SessionTools(coord.session("s"))
    again = second.call("read_file", {"file_path": "long.txt", "limit": 3}).text
    assert again.startswith("     1\tline 1\n") and "read on with offset=4" in again
    assert again == page  # one rendering of read lines: the engine's, also when it answered "unchanged"
    assert "unchanged" in second.call("read_file", {"file_path": "long.txt", "limit": 3}).text

    out = second.call(
        "multi_edit",
        {"file_path": "long.txt", "edits": '[{"old_string": "line 2\\n", "new_string": "line two\\n"}]'},
    )
    assert "1 replacement" in out.text and "line two" in out.text and out.data and out.data["version"] == 1
    assert (root / "long.txt").read_text().startswith("line 1\nline two\nline 3\n")


def test_unchanged_answer_rendered_for_a_new_process_as_the_engine_renders_a_first_read(coord: Any, root: Path) -> None:
    (root / "empty.txt").write_text("")
    (root / "three.txt").write_text("a\nb\nc\n")
    cases = [("empty.txt", {}), ("three.txt", {"offset": 9}), ("three.txt", {"limit": 2}), ("three.txt", {})]
    for name, window in cases:
        args = {"file_path": name, **window}
        first = SessionTools(coord.session(f"r-{name}-{len(window)}")).call("read_file", args).text
        again = SessionTools(coord.session(f"r-{name}-{len(window)}")).call("read_file", args).text
        assert again == first and "unchanged" not in first, (name, window)


async def _lease_history_undo(a: ClientSession, b: ClientSession, path: str, b_name: str) -> None:
    """Agent a leases the file, b is refused with `leased` and sees who holds it; a edits, lists the history,
    undoes its edit, releases; then b's edit goes through."""
    listed = await a.list_tools()
    assert [t.name for t in listed.tools] == [*FILE_TOOLS, *COORDINATION_TOOLS]
    _ok(await a.call_tool("read_file", {"file_path": path}))
    _ok(await b.call_tool("read_file", {"file_path": path}))
    granted = await a.call_tool("lease", {"paths": [path], "ttl_s": 60})
    assert "Granted" in _ok(granted)
    assert isinstance(granted.structured_content, dict)
    lease_id = granted.structured_content["leases"][0]["id"]
    code, message = _err(await b.call_tool("edit_file", {"file_path": path, "old_string": "bye", "new_string": "ciao"}))
    assert code == "leased" and "agent-a" in message
    assert lease_id in _ok(await b.call_tool("leases", {}))
    assert "Renewed" in _ok(await a.call_tool("renew", {"lease_id": lease_id, "ttl_s": 120}))
    _ok(await a.call_tool("edit_file", {"file_path": path, "old_string": "hello", "new_string": "hi"}))
    history = _ok(await a.call_tool("history", {"file_path": path}))
    assert history.startswith("v1 ") and "agent-a" in history and "edit" in history
    undone = await a.call_tool("undo", {"file_path": path})
    _ok(undone)
    assert isinstance(undone.structured_content, dict) and undone.structured_content["operation"] == "undo"
    assert "Released 1 lease" in _ok(await a.call_tool("release", {}))
    assert "No lease" in _ok(await b.call_tool("leases", {}))
    # A release reaches other processes' lease snapshots within LEASE_SNAPSHOT_S: wait for that, not a time.
    # The undo made the file what b read, so b's view is current again and its edit goes through.
    edit = {"file_path": path, "old_string": "bye", "new_string": "ciao"}
    deadline = time.monotonic() + 10
    result = await b.call_tool("edit_file", edit)
    while result.is_error and _text(result).startswith("[leased]") and time.monotonic() < deadline:
        result = await b.call_tool("edit_file", edit)
    assert "1 replacement" in _ok(result)
    code, _ = _err(await a.call_tool("lease", {"paths": ["../outside"]}))
    assert code == "invalid_argument"


def test_lease_history_undo_tools_locally(repo: Path, tmp_path: Path) -> None:
    async def main() -> None:
        errlog = tmp_path / "servers.log"
        async with agent(repo, "agent-a", errlog) as a, agent(repo, "agent-b", errlog) as b:
            await _lease_history_undo(a, b, "app.py", "agent-b")

    anyio.run(main)
    assert (repo / "app.py").read_text() == ORIGINAL.replace("bye", "ciao")


@pytest.mark.slow  # about 6 s: .ci/run's step 1b runs it (the default run stays under 10 minutes)
def test_lease_history_undo_tools_through_a_remote_service(tmp_path: Path) -> None:
    """`mcp --server URL --token T`: the same tools, forwarded to a real `serve` process; the MCP processes
    run in an empty folder and leave it empty (no engine, no Redis, no state folder of their own)."""
    from tests.coordinator.server.test_server import ServerProcess, token

    root = tmp_path / "served"
    root.mkdir()
    (root / "app.py").write_text(ORIGINAL)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    server = ServerProcess(root)
    try:

        async def main() -> None:
            errlog = tmp_path / "servers.log"
            # Each agent acts through its own session token (history included).
            remote_a = (server.url, token("agent-a"))
            remote_b = (server.url, token("agent-b"))
            async with (
                agent(elsewhere, "agent-a", errlog, remote=remote_a) as a,
                agent(elsewhere, None, errlog, remote=remote_b) as b,
            ):
                await _lease_history_undo(a, b, "app.py", "agent-b")
                # b's session token sees the whole file's history, a's writes included (docs/http.md)
                seen_by_b = _ok(await b.call_tool("history", {"file_path": "app.py"}))
                assert seen_by_b.startswith("v3 ") and "agent-a  undo" in seen_by_b and "agent-a  edit" in seen_by_b
                code, _ = _err(await b.call_tool("history", {"file_path": "../outside.py"}))
                assert code == "outside_root"

        anyio.run(main)
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")
    assert (root / "app.py").read_text() == ORIGINAL.replace("bye", "ciao")
    assert list(elsewhere.iterdir()) == []
    from coordinator.history import History

    sessions = [e.session for e in reversed(History(root / ".edit-coordinator").entries("app.py"))]
    assert sessions == ["agent-a", "agent-a", "agent-b"]


def test_on_a_terminal_it_says_what_it_is_and_ctrl_c_ends_it(repo: Path) -> None:
    """stdin a pty (as when a person types the command): one line on stderr, and SIGINT ends the process."""
    import pty
    import signal
    import subprocess

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator.cli", "mcp", "--root", str(repo)],
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **_env()},
        )
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline().decode()
            assert "Model Context Protocol on stdin/stdout" in line and "claude mcp add" in line
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 130
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        os.close(master)
        os.close(slave)


def test_a_flexible_server_tells_the_model_its_matching_rule(repo: Path, tmp_path: Path) -> None:
    """`mcp --match flexible`: the edit tools' descriptions say how old_string is matched when it does not
    match exactly (and the default server's say it must); the schemas are the same, and so are the model
    API definitions made for the same rule."""
    from coordinator import tools

    errlog = tmp_path / "servers.log"

    async def main() -> None:
        async with (
            agent(repo, "agent-x", errlog) as exact,
            agent(repo, "agent-f", errlog, flags=("--match", "flexible")) as flexible,
        ):
            strict = {t.name: t for t in (await exact.list_tools()).tools}
            loose = {t.name: t for t in (await flexible.list_tools()).tools}
            for name in ("edit_file", "multi_edit"):
                assert "old_string must match the file's text exactly" in (strict[name].description or "")
                assert "indentation shifted by a constant" not in (strict[name].description or "")
                assert "indentation shifted by a constant" in (loose[name].description or "")
                assert loose[name].input_schema == strict[name].input_schema
            mine = {d["name"]: d for d in tools.definitions("mcp", match="flexible")}
            assert mine["edit_file"]["description"] == loose["edit_file"].description

    anyio.run(main)
