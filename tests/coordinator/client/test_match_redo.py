"""`match`, `redo` and `restore` on the `Client` interface: LocalClient, HttpClient (against a real `serve`
process), AsyncClient, the tools dispatcher and the command line's `edit --match`.

Properties guarded: a client's `match` reaches its sessions' edits (flexible applies what exact refuses
with `no_match`, and the result says which match was used); a bad value is refused when the client is made;
undo steps back and redo steps forward the same through both transports; restore says what it discarded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator import AsyncClient, Coordinator, CoordinatorError, ErrorCode, HttpClient, LocalClient, tools
from coordinator.state.embedded import stop_embedded_redis
from tests.coordinator.client.test_adapters import run_cli
from tests.coordinator.server.test_server import SECRET, ServerProcess

INDENTED = "def f():\n    x = 1\n    return x\n"
FLAT_OLD, FLAT_NEW = "x = 1\nreturn x", "x = 2\nreturn x"  # the indentation dropped, as models do
EDITED = "def f():\n    x = 2\n    return x\n"


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "repo"
    folder.mkdir()
    yield folder
    stop_embedded_redis(folder / ".edit-coordinator")


@pytest.fixture
def coord(root: Path) -> Iterator[Coordinator]:
    with Coordinator(str(root), durability="none") as c:
        yield c


def test_local_client_match_reaches_its_sessions(coord: Coordinator, root: Path) -> None:
    (root / "f.py").write_text(INDENTED)
    exact, flexible = LocalClient(coord), LocalClient(coord, match="flexible")
    exact.read("s", "f.py")
    with pytest.raises(CoordinatorError) as info:
        exact.edit("s", "f.py", FLAT_OLD, FLAT_NEW)
    assert info.value.code is ErrorCode.NO_MATCH
    assert (root / "f.py").read_text() == INDENTED
    res = flexible.session("s").edit("f.py", FLAT_OLD, FLAT_NEW)
    assert (root / "f.py").read_text() == EDITED
    assert res.match == "indentation" and res.match_lines == (2, 3)
    assert "matched lines 2-3 of the file only with the indentation shifted" in res.message
    explicit_exact = LocalClient(coord, match="exact")
    explicit_exact.read("s", "f.py")
    with pytest.raises(CoordinatorError) as info:
        explicit_exact.edit("s", "f.py", "x = 2\nreturn x", "x = 3\nreturn x")
    assert info.value.code is ErrorCode.NO_MATCH
    for bad in ({"match": "fuzzy"}, {"policy": "yolo"}):
        with pytest.raises(CoordinatorError) as info:
            LocalClient(coord, **bad)
        assert info.value.code is ErrorCode.INVALID_ARGUMENT and repr(next(iter(bad.values()))) in info.value.message


def test_local_client_open_passes_match_to_the_coordinator(root: Path) -> None:
    (root / "f.py").write_text(INDENTED)
    with LocalClient.open(str(root), durability="none", match="flexible") as c:
        c.read("s", "f.py")
        assert c.edit("s", "f.py", FLAT_OLD, FLAT_NEW).match == "indentation"
    assert (root / "f.py").read_text() == EDITED


def test_tools_dispatch_on_an_engine_session_keeps_its_match(coord: Coordinator, root: Path) -> None:
    (root / "f.py").write_text(INDENTED)
    session = coord.session("tool-flex", match="flexible")
    assert not tools.dispatch(session, "read_file", {"file_path": "f.py"}).is_error
    res = tools.dispatch(session, "edit_file", {"file_path": "f.py", "old_string": FLAT_OLD, "new_string": FLAT_NEW})
    assert not res.is_error, res.text
    assert res.data is not None and res.data["match"] == "indentation" and res.data["match_lines"] == [2, 3]
    undone = tools.dispatch(session, "undo", {"file_path": "f.py"})
    assert not undone.is_error and (root / "f.py").read_text() == INDENTED
    redone = tools.dispatch(session, "redo", {"file_path": "f.py"})
    assert not redone.is_error and (root / "f.py").read_text() == EDITED
    assert redone.data is not None and redone.data["operation"] == "redo"
    refused = tools.dispatch(session, "redo", {"file_path": "f.py", "version": 1})
    assert refused.is_error and refused.code == "invalid_argument"


def _script(c: Any, root: Path, s: str) -> list[Any]:
    """Undo, redo, restore and a flexible edit through any Client; refusals as (code,)."""
    out: list[Any] = []

    def rec(fn: Any, *a: Any, **kw: Any) -> None:
        try:
            value = fn(*a, **kw)
        except CoordinatorError as exc:
            out.append((exc.code,))
            return
        out.append((value.operation, value.version, value.reverts, value.match, value.match_lines,
                    [d["version"] for d in value.discarded], value.message))  # fmt: skip

    (root / f"{s}.py").write_text("a = 0\n")
    name = f"{s}.py"
    c.read(s, name)
    for i in (1, 2, 3):
        rec(c.edit, s, name, f"a = {i - 1}", f"a = {i}")
    for _ in range(4):  # the fourth: nothing left to undo
        rec(c.undo, s, name)
        out.append((root / name).read_text())
    rec(c.redo, s, name)
    out.append((root / name).read_text())
    rec(c.redo, f"{s}-other", name)  # another session has undone nothing: no_change
    (root / f"{s}-f.py").write_text(INDENTED)
    c.read(s, f"{s}-f.py")
    rec(c.edit, s, f"{s}-f.py", FLAT_OLD, FLAT_NEW)
    rec(c.restore, name, 2, session=f"{s}-ops")
    out.append((root / name).read_text())
    rec(c.restore, name, 1, before_version=2)  # give one of them: invalid_argument
    return out


def test_undo_redo_restore_and_match_the_same_through_both_transports(tmp_path: Path) -> None:
    local_root = tmp_path / "local"
    local_root.mkdir()
    try:
        with LocalClient.open(str(local_root), durability="none", match="flexible") as local:
            expected = _script(local, local_root, "p")
    finally:
        stop_embedded_redis(local_root / ".edit-coordinator")
    served = tmp_path / "served"
    served.mkdir()
    server = ServerProcess(served)
    try:
        with HttpClient(server.url, secret=SECRET, match="flexible") as remote:
            got = _script(remote, served, "p")
        (served / "async.py").write_text(INDENTED)

        async def remote_async() -> str:
            async with AsyncClient.remote(server.url, secret=SECRET, match="flexible") as c:
                await c.read("async-flex", "async.py")
                return (await c.edit("async-flex", "async.py", FLAT_OLD, FLAT_NEW)).match

        assert asyncio.run(remote_async()) == "indentation"  # AsyncClient.remote passes match to HttpClient
        assert (served / "async.py").read_text() == EDITED
    finally:
        server.stop()
        stop_embedded_redis(served / ".edit-coordinator")
    assert got == expected
    assert expected[4:11:2] == ["a = 2\n", "a = 1\n", "a = 0\n", "a = 0\n"]
    assert expected[9] == (ErrorCode.NO_CHANGE,)  # every write undone already
    assert expected[11][:3] == ("redo", 7, 6) and expected[12] == "a = 1\n"
    assert expected[13] == (ErrorCode.NO_CHANGE,)
    assert expected[14][3:5] == ("indentation", (2, 3))
    assert expected[15][0] == "restore" and expected[15][5] == [3, 4, 5, 6, 7]
    assert expected[16] == "a = 2\n" and expected[17] == (ErrorCode.INVALID_ARGUMENT,)


def test_async_client_redo_and_restore(root: Path) -> None:
    (root / "a.py").write_text("a = 0\n")

    async def main() -> list[str]:
        seen = []
        async with AsyncClient.local(str(root), durability="none") as c:
            me = c.session("async-undo")
            await me.read("a.py")
            await me.edit("a.py", "a = 0", "a = 1")
            await me.undo("a.py")
            seen.append((root / "a.py").read_text())
            await me.redo("a.py", idempotency_key="redo-1")
            await me.redo("a.py", idempotency_key="redo-1")  # the same key: the first answer, not a second redo
            seen.append((root / "a.py").read_text())
            res = await c.restore("a.py", 0, session="async-ops")
            seen.append((root / "a.py").read_text())
            seen.append(",".join(str(d["version"]) for d in res.discarded))
        return seen

    assert asyncio.run(main()) == ["a = 0\n", "a = 1\n", "a = 0\n", "1,2,3"]


def test_cli_edit_with_match_flexible(root: Path) -> None:
    (root / "f.py").write_text(INDENTED)
    assert run_cli("read", "f.py", "--session", "cli-flex", cwd=root).returncode == 0
    p = run_cli("edit", "f.py", "--old", FLAT_OLD, "--new", FLAT_NEW, "--session", "cli-flex", cwd=root)
    assert p.returncode == 7 and "[no_match]" in p.stderr
    p = run_cli("edit", "f.py", "--old", FLAT_OLD, "--new", FLAT_NEW, "--session", "cli-flex", "--match", "fuzzy",
                cwd=root)  # fmt: skip
    assert p.returncode == 2 and "invalid choice" in p.stderr
    assert (root / "f.py").read_text() == INDENTED
    p = run_cli("edit", "f.py", "--old", FLAT_OLD, "--new", FLAT_NEW, "--session", "cli-flex", "--match", "flexible",
                "--json", cwd=root)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["match"] == "indentation"
    assert (root / "f.py").read_text() == EDITED
