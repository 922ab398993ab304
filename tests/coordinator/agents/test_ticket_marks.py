"""Write tickets without the lease snapshot's wait (engine/leasing.py, disk/tickets.py): a ticket's grant
returns at once, and is marked beside the path's lock, where every writer of every process looks for it under
that lock; marks end with their tickets, and a mark left behind never blocks past its ticket's end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.agents.adapter import HookAdapter
from coordinator.cli import hookservice
from coordinator.disk.layout import STATE_DIR_NAME, hook_service_dir, tickets_dir
from coordinator.disk.tickets import MAGIC
from coordinator.engine import agentwrites, leasing
from tests import REPO_ROOT
from tests.coordinator.agents.hooking import Agent, payload, run

CLIENT = REPO_ROOT / "coordinator" / "cli" / "hookclient.py"


@pytest.fixture
def hooks(coord: Coordinator) -> HookAdapter:
    return HookAdapter(coord, session_end=lambda root, session: None)


def _marks(root: Path) -> list[Path]:
    return sorted(tickets_dir(root / STATE_DIR_NAME).glob("*.ticket"))


def _pre_edit(root: Path, session: str, call: str, rel: str, old: str, new: str) -> dict[str, object]:
    fields = {"tool_input__file_path": str(root / rel), "tool_input__old_string": old, "tool_input__new_string": new}
    return payload("pre_edit", root, session_id=session, tool_use_id=call, **fields)


# -- no wait ---------------------------------------------------------------------------------------------------
def test_a_tickets_grant_does_not_wait_out_the_lease_snapshot_a_sessions_lease_still_does(
    hooks, coord, root, monkeypatch
):
    """The sleeps the lease gate asks for are counted (none is really slept): a hooked Edit's PreToolUse takes
    its ticket without the `LEASE_SNAPSHOT_S` wait, and marks the path; a session's own `lease` still waits."""
    monkeypatch.setattr(leasing, "LEASE_SNAPSHOT_S", 0.0371)  # a value no other sleep of the code asks for
    slept: list[float] = []
    monkeypatch.setattr(leasing.time, "sleep", slept.append)
    (root / "app.py").write_text("a = 1\n")
    agent = Agent(hooks, root, "agent")
    agent.read("app.py")
    assert run(hooks, _pre_edit(root, "agent", "t1", "app.py", "a = 1", "a = 2")).allow
    assert [x.session for x in coord.lease_store.live()] == ["agent"]
    assert len(_marks(root)) == 1
    assert 0.0371 not in slept
    coord.session("other").lease(["docs/"], ttl_s=60)
    assert slept.count(0.0371) == 1


def test_a_tickets_mark_ends_with_the_ticket(hooks, coord, root):
    (root / "app.py").write_text("a = 1\n")
    agent = Agent(hooks, root, "agent")
    agent.read("app.py")
    assert agent.edit("app.py", "a = 1", "a = 2").allow  # PreToolUse, the write, PostToolUse
    assert _marks(root) == [] and coord.lease_store.live() == []
    assert agent.edit("app.py", "a = 2", "a = 3", fail=True).allow  # a failed call: released, unrecorded
    assert _marks(root) == [] and coord.lease_store.live() == []


def test_a_ticket_that_lapses_for_a_waiting_session_takes_its_mark_along(hooks, coord, root, monkeypatch):
    monkeypatch.setattr(agentwrites, "HOLDER_GRACE_S", 0.0)
    (root / "app.py").write_text("a = 1\nb = 2\n")
    Agent(hooks, root, "alice").read("app.py")
    assert run(hooks, _pre_edit(root, "alice", "t1", "app.py", "a = 1", "a = 10")).allow  # never runs
    (alice_mark,) = _marks(root)
    alice_raw = alice_mark.read_bytes()
    bob = Agent(hooks, root, "bob")
    bob.read("app.py")
    assert bob.edit("app.py", "b = 2", "b = 20").allow
    assert _marks(root) == []  # alice's lapsed, bob's released after his write
    assert b'"alice"' in alice_raw


# -- marks seen by writers ---------------------------------------------------------------------------------------
def test_a_writer_with_a_snapshot_from_before_the_grant_is_refused_by_the_mark(hooks, coord, root, monkeypatch):
    """The engine's writer decided on a lease snapshot taken before the ticket's grant (kept fresh here for
    as long as the test needs): the mark under the path's lock sends it to Redis, which refuses it."""
    monkeypatch.setattr(leasing, "LEASE_SNAPSHOT_S", 3600.0)
    (root / "app.py").write_text("a = 1\nb = 2\n")
    lib = coord.session("library")
    lib.read("app.py")
    lib.edit("app.py", "b = 2", "b = 3")  # its snapshot of the leases: none
    assert coord.lease_gate.fresh() == []
    Agent(hooks, root, "agent").read("app.py")
    assert run(hooks, _pre_edit(root, "agent", "t1", "app.py", "a = 1", "a = 2")).allow
    coord.lease_gate._snapshot = (time.monotonic(), float("inf"), [])  # the snapshot from before the grant
    with pytest.raises(CoordinatorError) as refused:
        lib.edit("app.py", "b = 3", "b = 4")
    assert refused.value.code == ErrorCode.LEASED and "agent" in refused.value.message
    assert (root / "app.py").read_text() == "a = 1\nb = 3\n"


def test_a_mark_whose_lease_redis_does_not_hold_is_removed_by_the_writer(hooks, coord, root):
    """A mark left behind (its lease released in Redis, or Redis lost it) far from its end: the writer that
    finds it asks Redis once, writes, and removes it; an unreadable mark is judged the same way."""
    (root / "app.py").write_text("a = 1\n")
    s = coord.session("s")
    s.read("app.py")
    folder = tickets_dir(root / STATE_DIR_NAME)
    name = coord.lease_gate._marks.path_for("app.py").name
    for content in (
        MAGIC + json.dumps({"i": "0123456789abcdef", "s": "gone", "e": time.time() + 3600}).encode(),
        b"edit-coordinator write tick",  # a grant killed while it wrote its mark
    ):
        (folder / name).write_bytes(content)
        before = (root / "app.py").read_text()
        s.edit("app.py", before.strip(), before.strip() + "0")
        assert not (folder / name).exists()


def test_a_mark_of_a_live_ticket_refuses_even_an_unreadable_one(hooks, coord, root):
    """An unreadable mark over a live ticket (its content damaged): Redis still holds the ticket, so the
    writer is refused `leased` and nothing is written."""
    (root / "app.py").write_text("a = 1\n")
    Agent(hooks, root, "agent").read("app.py")
    assert run(hooks, _pre_edit(root, "agent", "t1", "app.py", "a = 1", "a = 2")).allow
    (mark,) = _marks(root)
    mark.write_bytes(b"garbage")
    lib = coord.session("library")
    lib.read("app.py")
    coord.lease_gate._snapshot = (time.monotonic(), float("inf"), [])  # a snapshot from before the grant
    with pytest.raises(CoordinatorError) as refused:
        lib.edit("app.py", "a = 1", "a = 5")
    assert refused.value.code == ErrorCode.LEASED
    assert (root / "app.py").read_text() == "a = 1\n" and mark.exists()


# -- other processes --------------------------------------------------------------------------------------------
_STALE_WRITER = textwrap.dedent(
    """
    import sys, time
    from coordinator import Coordinator, CoordinatorError
    root = sys.argv[1]
    with Coordinator(root, durability="none") as coord:
        s = coord.session("library")
        s.read("shared.txt")
        s.edit("shared.txt", "x = 0", "x = 1")  # fetches the leases: none yet
        _, ends, leases = coord.lease_gate._snapshot
        print("ready", flush=True)
        for line in sys.stdin:
            how, old, new = line.split()
            if how == "before-grant":  # the snapshot taken before the grant, as if taken a moment ago
                coord.lease_gate._snapshot = (time.monotonic(), ends, leases)
            try:
                s.edit("shared.txt", f"x = {old}", f"x = {new}")
                print("written", flush=True)
            except CoordinatorError as exc:
                print(exc.code.value, flush=True)
    """
)


def test_a_writer_of_another_process_with_a_snapshot_from_before_the_grant_never_writes_over_a_ticket(
    real_redis_root: Path,
):
    """A library writer in another process decides on a lease snapshot taken before the ticket's grant and
    still young (the case the grant's wait used to cover). While the agent holds its ticket, the writer is
    refused `leased`; the agent's write lands; after the PostToolUse the writer's old view is refused `stale`:
    nothing was written over the agent's write."""
    root = real_redis_root
    shared = root / "shared.txt"
    shared.write_text("x = 0\n")
    with Coordinator(root, durability="none") as coord:
        hooks = HookAdapter(coord, session_end=lambda r, s: None)
        writer = subprocess.Popen(
            [sys.executable, "-c", _STALE_WRITER, str(root)],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdin is not None and writer.stdout is not None

        def ask(how: str, old: int, new: int) -> str:
            assert writer.stdin is not None and writer.stdout is not None
            writer.stdin.write(f"{how} {old} {new}\n")
            writer.stdin.flush()
            return writer.stdout.readline().strip()

        try:
            assert writer.stdout.readline().strip() == "ready"
            agent = Agent(hooks, root, "agent")
            agent.read("shared.txt")
            fields = {"tool_input__file_path": str(shared), "tool_input__old_string": "x = 1",
                      "tool_input__new_string": "x = 2"}  # fmt: skip
            pre = payload("pre_edit", root, session_id="agent", tool_use_id="t1", **fields)
            assert run(hooks, pre).allow
            for _ in range(3):  # the ticket's mark, seen under the lock, and Redis asked
                assert ask("before-grant", 1, 7) == "leased"
            assert ask("now", 1, 7) == "leased"  # (its snapshot has the ticket since)
            assert shared.read_text() == "x = 1\n"
            shared.write_text("x = 2\n")  # the agent's own write
            run(hooks, pre | {"hook_event_name": "PostToolUse", "tool_response": {"filePath": str(shared)}})
            assert ask("before-grant", 1, 7) == "stale"  # no mark now: the disk refuses the old view
            writer.stdin.close()
            writer.wait(60)
        finally:
            writer.kill()
        assert shared.read_text() == "x = 2\n"
        assert [(e.session, e.operation) for e in reversed(coord.history("shared.txt"))] == [
            ("library", "edit"),
            ("agent", "edit"),
        ]
        assert _marks(root) == []


def _fast(root: Path, data: dict[str, object]) -> subprocess.CompletedProcess[bytes]:
    """The hook command `init` writes for Claude Code, to the repository's hook service."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    argv = [sys.executable, "-I", "-S", str(CLIENT), "claude-code", "--root", str(root)]
    return subprocess.run(argv, input=json.dumps(data).encode(), env=env, capture_output=True, timeout=120)


@pytest.mark.skipif(sys.platform != "linux", reason="unix sockets and Linux process tools")
def test_a_hook_service_killed_while_a_ticket_is_marked_blocks_nothing_after_the_tickets_end(
    real_redis_root: Path, monkeypatch
):
    """The hook service grants a ticket (its mark written) and is killed with SIGKILL before the agent's
    PostToolUse: until the ticket's end, another writer is refused `leased`; after it, the writer writes and
    the mark left behind is gone."""
    root = real_redis_root
    (root / ".git").mkdir()
    app = root / "app.py"
    app.write_text("a = 1\n")
    monkeypatch.setenv(agentwrites.TICKET_TTL_ENV, "3")  # the service's tickets live 3 s
    try:
        hookservice.start(str(root))
        shown = {"file__content": "a = 1\n", "file__filePath": str(app), "file__numLines": 2, "file__totalLines": 2}
        read = payload("post_read", root, session_id="agent", tool_use_id="r1", tool_input__file_path=str(app), **shown)
        assert _fast(root, read).returncode == 0
        allowed = _fast(root, _pre_edit(root, "agent", "t1", "app.py", "a = 1", "a = 2"))
        assert allowed.returncode == 0 and allowed.stdout.strip() in (b"", b"{}"), allowed.stdout
        (mark,) = _marks(root)
        ends = json.loads(mark.read_bytes()[len(MAGIC) :])["e"]
        pid = int((hook_service_dir(root / STATE_DIR_NAME) / "pid").read_text())
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid)
        with Coordinator(root, durability="none") as coord:
            lib = coord.session("library")
            lib.read("app.py")
            if time.time() < ends - 1.0:  # (a slow machine may be past it already)
                with pytest.raises(CoordinatorError) as refused:
                    lib.edit("app.py", "a = 1", "a = 5")
                assert refused.value.code == ErrorCode.LEASED
            time.sleep(max(0.0, ends - time.time()) + 0.05)  # the ticket's end
            lib.edit("app.py", "a = 1", "a = 5")
        assert app.read_text() == "a = 5\n" and _marks(root) == []
    finally:
        hookservice.stop(root)


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:  # our own child (a zombie until reaped) when this process started it
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"process {pid} did not end")
