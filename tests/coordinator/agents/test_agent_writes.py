"""The agent-write protocol (coordinator/engine/agentwrites.py): write tickets granted through the lease
gate's rule, tickets that end with their call, late writes repaired and told, never lost in silence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.agents.adapter import HookAdapter
from coordinator.agents.core import Decision
from coordinator.engine import agentwrites
from tests import REPO_ROOT
from tests.coordinator.agents.hooking import Agent, payload, run


@pytest.fixture
def hooks(coord: Coordinator) -> HookAdapter:
    return HookAdapter(coord, session_end=lambda root, session: None)


@pytest.fixture
def app(root: Path) -> Path:
    f = root / "app.py"
    f.write_text("a = 1\nb = 2\nc = 3\nd = 4\ne = 5\n")
    return f


def _edit_ids(session: str, call: str, path: Path, old: str, new: str) -> dict[str, object]:
    return {
        "session_id": session,
        "tool_use_id": call,
        "tool_input__file_path": str(path),
        "tool_input__old_string": old,
        "tool_input__new_string": new,
    }


def _history(coord: Coordinator, key: str) -> list[tuple[str, str]]:
    return [(e.session, e.operation) for e in reversed(coord.history(key))]


# -- tickets through the lease gate ---------------------------------------------------------------------------
_LIBRARY_WRITER = textwrap.dedent(
    """
    import sys, time
    from coordinator import Coordinator, CoordinatorError
    root, rounds = sys.argv[1], int(sys.argv[2])
    acked = 0
    with Coordinator(root, durability="none") as coord:
        s = coord.session("library")
        s.read("shared.txt")
        n = 0
        while n < rounds:
            try:
                s.edit("shared.txt", "END\\n", f"library {n}\\nEND\\n")
                n += 1
                print(f"library {n - 1}", flush=True)
            except CoordinatorError as exc:
                if exc.code.value in ("stale", "not_read"):
                    s.read("shared.txt")
            time.sleep(0.01)  # its lease snapshot stays younger than 0.2 s (refreshed as its writes go)
    """
)


def test_a_library_writer_of_another_process_never_writes_through_a_ticket(real_redis_root: Path):
    """A library writer in another process edits the file in a tight loop, so that its lease snapshot is
    always younger than 0.2 s, while a hooked agent takes its write ticket and writes the file itself (a
    whole-file write made from what it was allowed to change). Granted through the lease gate's rule, the
    ticket is seen by the library writer before the agent is allowed on: every acknowledged line of both is
    in the file at the end, and no repair was needed (none written through the ticket)."""
    root = real_redis_root
    shared = root / "shared.txt"
    shared.write_text("END\n")
    with Coordinator(root, durability="none") as coord:
        hooks = HookAdapter(coord, session_end=lambda r, s: None)
        agent = Agent(hooks, root, "agent")
        writer = subprocess.Popen(
            [sys.executable, "-c", _LIBRARY_WRITER, str(root), "60"],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert writer.stdout is not None
            first = writer.stdout.readline()  # the library writer is under way
            assert first.startswith("library")
            landed: list[str] = []
            for i in range(20):
                time.sleep(0.02)
                agent.read("shared.txt")
                call = f"toolu_agent_{i}"
                fields = _edit_ids("agent", call, shared, "END\n", f"agent {i}\nEND\n")
                if not run(hooks, payload("pre_edit", root, **fields)).allow:
                    continue
                seen = shared.read_text()  # the agent's tool reads the file it was allowed to change,
                time.sleep(0.02)  # works on it, and writes it whole
                shared.write_text(seen.replace("END\n", f"agent {i}\nEND\n"))
                run(hooks, payload("post_edit", root, **fields))
                landed.append(f"agent {i}")
            out, _ = writer.communicate(timeout=120)
        finally:
            writer.kill()
        acked = [first.strip(), *out.split("\n")]
        text = shared.read_text().split("\n")
        assert landed and writer.returncode == 0
        lost = [line for line in [*acked, *landed] if line and line not in text]
        assert lost == []
        ops = {op for _, op in _history(coord, "shared.txt")}
        assert ops <= {"edit"}  # no repair, no restore: nothing wrote through a ticket


# -- tickets end with their call -------------------------------------------------------------------------------
def test_a_call_that_ended_without_its_after_hook_does_not_hold_another_session(hooks, coord, root, app, monkeypatch):
    """Alice's Edit was allowed and never ran (a permission prompt refused it: no PostToolUse). Bob's Edit
    is let through once the holder's grace is over, not refused for the ticket; alice's ticket lapsed."""
    monkeypatch.setattr(agentwrites, "HOLDER_GRACE_S", 0.0)
    monkeypatch.setattr(agentwrites, "TICKET_WAIT_S", 0.3)  # a refusal would come after this
    Agent(hooks, root, "alice").read("app.py")
    assert run(hooks, payload("pre_edit", root, **_edit_ids("alice", "t1", app, "a = 1", "a = 10"))).allow
    bob = Agent(hooks, root, "bob")
    bob.read("app.py")
    assert bob.edit("app.py", "b = 2", "b = 20").allow
    assert _history(coord, "app.py") == [("bob", "edit")]
    assert [x.session for x in coord.lease_store.live()] == []


def test_the_sessions_next_event_records_a_write_whose_after_hook_never_came(hooks, coord, root, app):
    alice = Agent(hooks, root, "alice")
    alice.read("app.py")
    assert run(hooks, payload("pre_edit", root, **_edit_ids("alice", "t1", app, "a = 1", "a = 10"))).allow
    app.write_text(app.read_text().replace("a = 1", "a = 10"))  # written; its PostToolUse never came
    assert [x.session for x in coord.lease_store.live()] == ["alice"]
    alice.read("app.py")  # the session's next event
    assert _history(coord, "app.py") == [("alice", "edit")]
    assert coord.lease_store.live() == []


# -- late writes are repaired and told --------------------------------------------------------------------------
def _late_write(hooks: HookAdapter, root: Path, app: Path, monkeypatch, alice_new: str, bob_new: str) -> str:
    """Alice is allowed to change line 1 then stalls (a permission prompt); bob waits out the grace, edits;
    alice's write then lands over bob's version. Returns alice's after-hook answer."""
    monkeypatch.setattr(agentwrites, "HOLDER_GRACE_S", 0.0)
    alice = Agent(hooks, root, "alice")
    alice.read("app.py")
    fields = _edit_ids("alice", "t_late", app, "a = 1", alice_new)
    assert run(hooks, payload("pre_edit", root, **fields)).allow
    seen = app.read_text()  # what alice's tool read before it stalled
    bob = Agent(hooks, root, "bob")
    bob.read("app.py")
    old_b = "b = 2" if "b =" in bob_new else "a = 1"
    assert bob.edit("app.py", old_b, bob_new).allow
    app.write_text(seen.replace("a = 1", alice_new))  # the late write, made on alice's old view
    answer = run(hooks, payload("post_edit", root, **fields))
    assert answer.allow
    return answer.reason


def test_a_late_write_that_commutes_gets_the_overwritten_change_put_back(hooks, coord, root, app, monkeypatch):
    told = _late_write(hooks, root, app, monkeypatch, "a = 10", "b = 20")
    assert app.read_text() == "a = 10\nb = 20\nc = 3\nd = 4\ne = 5\n"
    assert _history(coord, "app.py") == [("bob", "edit"), ("alice", "edit"), ("bob", "repair")]
    assert "bob" in told and "put back" in told and "Read app.py again" in told
    # bob hears of it at his next hook event
    notice = run(hooks, payload("post_read", root, session_id="bob", tool_input__file_path=str(app)))
    assert "overwritten by a late edit of session alice" in notice.reason
    # alice must read again: her view is not the file
    assert Agent(hooks, root, "alice").edit("app.py", "c = 3", "c = 30").code == "not_read"


def test_a_late_write_that_clashes_restores_the_acknowledged_version(hooks, coord, root, app, monkeypatch):
    told = _late_write(hooks, root, app, monkeypatch, "a = 10", "a = 11")
    assert app.read_text().startswith("a = 11\n")  # bob's acknowledged edit stands
    hist = coord.history("app.py")
    assert _history(coord, "app.py") == [("bob", "edit"), ("alice", "edit"), ("bob", "restore")]
    kept = coord.history_store.load(hist[1].after, "app.py").decode()
    assert kept.startswith("a = 10\n")  # alice's write is on record
    assert "restored to session bob's version" in told


@pytest.mark.parametrize("watcher_first", [False, True], ids=["after_hook", "watcher_first"])
def test_a_late_write_after_a_redis_flush_is_repaired_and_both_are_told(real_redis_root: Path, watcher_first: bool):
    """Alice's Edit is allowed (her ticket and the memory of her call in Redis), then Redis loses its state
    (FLUSHALL on the embedded Redis, as a restart empty would); bob reads and edits another line, acknowledged;
    alice's write then lands on her old view. Her write is judged from the call's copy on disk: bob's change
    is put back, the history holds both, alice is told in her PostToolUse answer and bob at his next event,
    whether her after-hook or the tree watcher sees the write first. Before, it was a silent overwrite."""
    root = real_redis_root
    app = root / "app.py"
    app.write_text("a = 1\nb = 2\nc = 3\n")
    with Coordinator(root, durability="none") as coord:
        hooks = HookAdapter(coord, session_end=lambda r, s: None)
        Agent(hooks, root, "alice").read("app.py")
        fields = _edit_ids("alice", "t1", app, "a = 1", "a = 10")
        assert run(hooks, payload("pre_edit", root, **fields)).allow
        seen = app.read_text()  # what alice's tool works on
        coord.redis.flushall()
        bob = coord.session("bob")
        bob.read("app.py")
        bob.edit("app.py", "b = 2", "b = 20")  # acknowledged
        app.write_text(seen.replace("a = 1", "a = 10"))  # alice's late write
        if watcher_first:
            coord.agent_writes.observed("app.py")
        told = run(hooks, payload("post_edit", root, **fields))
        assert app.read_text() == "a = 10\nb = 20\nc = 3\n"
        assert _history(coord, "app.py") == [("bob", "edit"), ("alice", "edit"), ("bob", "repair")]
        assert told.allow and "session bob" in told.reason and "put back" in told.reason
        notice = run(hooks, payload("post_read", root, session_id="bob", tool_input__file_path=str(app)))
        assert "overwritten by a late edit of session alice" in notice.reason
        assert list((coord.state_dir / "calls").glob("*.call")) == []  # the copy on disk ended with the call


def test_a_calls_copy_on_disk_counts_as_lost_only_after_redis_lost_its_state(real_redis_root: Path):
    """While a call is being ended (its Redis entry removed, its copy on disk not yet), another process must not
    take it for a call Redis lost: only a copy kept in an earlier generation of Redis's state is."""
    root = real_redis_root
    (root / "app.py").write_text("a = 1\n")
    with Coordinator(root, durability="none") as coord:
        hooks = HookAdapter(coord, session_end=lambda r, s: None)
        Agent(hooks, root, "alice").read("app.py")
        assert run(hooks, payload("pre_edit", root, **_edit_ids("alice", "t1", root / "app.py", "a", "b"))).allow
        protocol = coord.agent_writes
        assert protocol.calls.take("alice", "t1") is not None  # another process ending it, half-way
        assert protocol._lost(session="alice") == []
        coord.redis.flushall()
        assert [x.call for x in protocol._lost(session="alice")] == ["t1"]


def test_session_end_settles_its_open_calls(hooks, coord, root, app):
    Agent(hooks, root, "alice").read("app.py")
    assert run(hooks, payload("pre_edit", root, **_edit_ids("alice", "t1", app, "a = 1", "a = 10"))).allow
    app.write_text(app.read_text().replace("a = 1", "a = 10"))
    assert run(hooks, payload("session_end", root, session_id="alice")).allow
    assert _history(coord, "app.py") == [("alice", "edit")] and coord.lease_store.live() == []


# -- views are what the model saw -------------------------------------------------------------------------------
def test_a_partial_view_stays_partial_after_the_sessions_own_edit(hooks, root, app):
    """Read offset 2 limit 1, then an Edit (whose result does not show the file): a Write of the whole file
    is still refused, since the model never saw the other lines; another Edit goes on."""
    shown = {"tool_input__file_path": str(app), "tool_input__offset": 2, "tool_input__limit": 1}
    window = {"file__filePath": str(app), "file__content": "b = 2\n", "file__startLine": 2}
    read = payload("post_read", root, session_id="s1", **shown, **window, file__numLines=1, file__totalLines=5)
    assert run(hooks, read).allow
    s1 = Agent(hooks, root, "s1")
    assert s1.edit("app.py", "b = 2", "b = 20").allow
    whole = run(hooks, payload("pre_write", root, session_id="s1", tool_input__file_path=str(app)))
    assert not whole.allow and "read only in part" in whole.reason
    assert s1.edit("app.py", "b = 20", "b = 21").allow


def test_a_file_unchanged_read_answer_keeps_the_view(hooks, root, app):
    """Claude Code answers a second Read of an unchanged file with `file_unchanged` and no content: the
    session's view is kept (its next edit goes on), not dropped."""
    s1 = Agent(hooks, root, "s1")
    s1.read("app.py")
    unchanged = payload("post_read", root, session_id="s1", tool_input__file_path=str(app))
    unchanged["tool_response"] = {"type": "file_unchanged", "file": {"filePath": str(app)}}
    assert run(hooks, unchanged).allow
    assert s1.edit("app.py", "a = 1", "a = 2").allow


# -- the shell channel --------------------------------------------------------------------------------------------
def _bash(hooks: HookAdapter, root: Path, session: str, call: str, command: str, stdout: str | None = None):
    """One Bash call through the hooks: PreToolUse, then (if allowed and `run`) the command in `root`, then
    PostToolUse with what it printed (`stdout`: what the hook is told it printed instead)."""
    pre = payload("pre_bash", root, session_id=session, tool_use_id=call, tool_input__command=command)
    before = run(hooks, pre)
    if not before.allow:
        return before, None
    done = subprocess.run(["bash", "-c", command], cwd=root, capture_output=True, text=True, check=False)
    post = pre | {
        "hook_event_name": "PostToolUse",
        "tool_response": {"stdout": done.stdout if stdout is None else stdout, "stderr": ""},
    }
    return before, run(hooks, post)


def test_a_heredoc_overwrite_of_an_unseen_file_is_refused_and_a_seen_one_is_recorded(hooks, coord, root, app):
    before, _ = _bash(hooks, root, "s1", "t1", "cat > app.py <<'EOF'\nz = 0\nEOF")
    assert not before.allow and before.code == "not_read" and app.read_text().startswith("a = 1")
    _bash(hooks, root, "s1", "t2", "cat app.py")  # a shell read: the view from what it printed
    before, _ = _bash(hooks, root, "s1", "t3", "cat > app.py <<'EOF'\nz = 0\nEOF")
    assert before.allow and app.read_text() == "z = 0\n"
    assert _history(coord, "app.py") == [("s1", "shell")]
    assert coord.lease_store.live() == []
    # another session changed it since: a stale heredoc overwrite is refused
    other = coord.session("other")
    other.read("app.py")
    other.edit("app.py", "z = 0", "z = 1")
    before, _ = _bash(hooks, root, "s1", "t4", "cat > app.py <<'EOF'\nz = 2\nEOF")
    assert not before.allow and before.code == "stale" and app.read_text() == "z = 1\n"


def test_a_sed_that_matched_nothing_is_said_and_one_that_did_is_recorded_and_undoable(hooks, coord, root, app):
    _, after = _bash(hooks, root, "s1", "t1", "sed -i 's/^q = 9$/q = 10/' app.py")
    assert after is not None and "left app.py unchanged" in after.reason
    _, after = _bash(hooks, root, "s1", "t2", "sed -i 's/^c = 3$/c = 30/' app.py")
    assert after is not None and after.reason == ""
    (entry,) = coord.history("app.py")
    assert (entry.session, entry.operation) == ("s1", "shell")
    s = coord.session("s1")
    s.read("app.py")
    s.undo("app.py")
    assert "c = 3\n" in app.read_text()


_STALE_SCRIPT = "python3 - <<'EOF'\nopen('app.py', 'w').write('a = 1\\nb = 20\\n')\nEOF"


def test_a_python_script_writing_a_file_seen_in_an_overwritten_version_is_refused(hooks, coord, root, app):
    """A `python3 -` script's writes are invisible to the parser; the files its string literals name are
    taken as files it may write. A session whose view of one is behind another session's write is refused
    before the script runs (its script could put the old content back, and a rewrite with the same bytes
    could not be told apart afterwards); after a new read it goes through, recorded as its shell write."""
    _bash(hooks, root, "s1", "t1", "cat app.py")
    other = coord.session("other")
    other.read("app.py")
    other.edit("app.py", "e = 5", "e = 50")
    before, _ = _bash(hooks, root, "s1", "t2", _STALE_SCRIPT)
    assert not before.allow and before.code == "stale" and "e = 50" in app.read_text()
    _bash(hooks, root, "s1", "t3", "cat app.py")
    before, after = _bash(hooks, root, "s1", "t4", _STALE_SCRIPT)
    assert before.allow and after is not None and after.reason == "" and app.read_text() == "a = 1\nb = 20\n"
    assert _history(coord, "app.py") == [("other", "edit"), ("s1", "shell")]
    assert coord.lease_store.live() == []


def test_a_python_script_reading_a_file_never_read_goes_on_and_is_not_said_unchanged(hooks, coord, root, app):
    """A script that only reads a file the session never read is let through (its file gets a ticket and
    its pre-image kept, as a `sed -i`'s), and its file left unchanged is not reported as a failed write."""
    before, after = _bash(hooks, root, "s1", "t1", "python3 -c \"print(open('app.py').read().count('='))\"")
    assert before.allow and after is not None and after.reason == ""
    assert coord.history("app.py") == [] and coord.lease_store.live() == []


def test_a_lapsed_shell_call_whose_file_holds_another_sessions_same_bytes_is_told(hooks, root, app, monkeypatch):
    """s1's script is allowed, then does not run for longer than the holder's grace; s2 takes the path and
    writes `total = 1`; s1's script then writes the same `total = 1` on its old view. The bytes show no
    change of s1's own, so its increment would count as done in silence: its after-hook says to look again."""
    monkeypatch.setattr(agentwrites, "HOLDER_GRACE_S", 0.0)
    app.write_text("total = 0\n")
    script = "python3 - <<'EOF'\nopen('app.py', 'w').write('total = 1\\n')\nEOF"
    for who in ("s1", "s2"):
        _bash(hooks, root, who, f"r-{who}", "cat app.py")

    def hook(who: str, call: str, event: str) -> object:
        data = payload("pre_bash", root, session_id=who, tool_use_id=call, tool_input__command=script)
        if event != "PreToolUse":
            data |= {"hook_event_name": event, "tool_response": {"stdout": "", "stderr": ""}}
        return run(hooks, data)

    assert hook("s1", "t1", "PreToolUse").allow
    assert hook("s2", "t2", "PreToolUse").allow  # s1's call is taken to be over: its ticket lapses
    app.write_text("total = 1\n")
    assert hook("s2", "t2", "PostToolUse").reason == ""
    app.write_text("total = 1\n")  # s1's late script: the same bytes
    told = hook("s1", "t1", "PostToolUse")
    assert told.allow and "ticket had ended" in told.reason and "session s2" in told.reason
    before, _ = _bash(hooks, root, "s1", "t3", "cat > app.py <<'EOF'\ntotal = 2\nEOF")
    assert not before.allow and before.code == "not_read"  # its view was dropped: it must read again


def test_a_write_no_target_names_is_the_running_shell_calls(hooks, coord, root, app):
    """A script file's writes have no target the parser sees: the tree watcher's change seen while exactly
    one session's shell call runs is that session's (operation shell); once the call is over, or
    while calls of two sessions run, such a change is outside's."""
    coord.agent_writes.observed("app.py")  # an untracked file seen the first time: its baseline
    pre = payload("pre_bash", root, session_id="s1", tool_use_id="t1", tool_input__command="python3 tool.py")
    assert run(hooks, pre).allow
    app.write_text(app.read_text().replace("a = 1", "a = 10"))  # the script's write
    coord.agent_writes.observed("app.py")
    assert run(hooks, pre | {"hook_event_name": "PostToolUse", "tool_response": {"stdout": "", "stderr": ""}}).allow
    app.write_text(app.read_text().replace("b = 2", "b = 20"))  # no call running: another program
    coord.agent_writes.observed("app.py")
    for who in ("s1", "s2"):
        data = payload("pre_bash", root, session_id=who, tool_use_id=f"r-{who}", tool_input__command="make")
        assert run(hooks, data).allow
    app.write_text(app.read_text().replace("c = 3", "c = 30"))  # whose? two calls run
    coord.agent_writes.observed("app.py")
    assert _history(coord, "app.py") == [("s1", "shell"), ("outside", "outside"), ("outside", "outside")]


# -- refusals and repairs counted ---------------------------------------------------------------------------------
def test_hooked_refusals_and_repairs_are_counted_where_status_and_the_dashboard_read(
    hooks, coord, root, app, monkeypatch
):
    from coordinator.state.refusals import FileRefusals

    assert not Agent(hooks, root, "s1").edit("app.py", "a = 1", "a = 2").allow  # not read
    before, _ = _bash(hooks, root, "s2", "t1", "cat > app.py <<'EOF'\nz\nEOF")  # not read, through the shell
    assert not before.allow
    _late_write(hooks, root, app, monkeypatch, "a = 10", "b = 20")
    counts = coord.state.error_counts()
    assert counts["not_read"] == 2 and counts[agentwrites.REPAIRED] == 1
    by_file = FileRefusals(coord.state.r, coord.namespace).snapshot()["by_file"]
    assert {(x["path"], x["code"]) for x in by_file} >= {("app.py", "not_read"), ("app.py", agentwrites.REPAIRED)}


def test_a_heredoc_overwrite_that_waited_for_another_sessions_ticket_is_judged_again(hooks, coord, root, app):
    """A and B have both read the file; A's heredoc overwrite holds the ticket; B's, judged current before it
    waits, must be judged again once it has the ticket: A's write came in between, so B is refused."""
    import threading

    for who in ("a", "b"):
        _bash(hooks, root, who, f"read_{who}", "cat app.py")
    write_a = payload(
        "pre_bash", root, session_id="a", tool_use_id="wa", tool_input__command="cat > app.py <<'EOF'\nA\nEOF"
    )
    assert run(hooks, write_a).allow  # A holds the ticket
    answers = []
    write_b = payload(
        "pre_bash", root, session_id="b", tool_use_id="wb", tool_input__command="cat > app.py <<'EOF'\nB\nEOF"
    )
    waiting = threading.Thread(target=lambda: answers.append(run(hooks, write_b)))
    waiting.start()
    app.write_text("A\n")  # A's command runs
    run(hooks, write_a | {"hook_event_name": "PostToolUse", "tool_response": {"stdout": "", "stderr": ""}})
    waiting.join(30)
    (b,) = answers
    assert not b.allow and b.code == "stale" and app.read_text() == "A\n"


def test_a_partial_shell_read_records_a_partial_view(hooks, coord, root, app):
    """`sed -n '2,3p' app.py` shows lines 2-3: an Edit may follow, a whole-file here-document may not."""
    _bash(hooks, root, "s1", "t1", "sed -n '2,3p' app.py")
    before, _ = _bash(hooks, root, "s1", "t2", "cat > app.py <<'EOF'\nz\nEOF")
    assert not before.allow and "read only in part" in before.reason
    assert Agent(hooks, root, "s1").edit("app.py", "b = 2", "b = 20").allow


def test_tail_records_the_last_lines_as_a_partial_view(hooks, coord, root, app):
    """`tail -n 2 app.py` shows lines 4-5 (wherever the file ends): an Edit may follow (as after a Read of
    some lines), a whole-file here-document may not; what it printed must be the file's last lines."""
    _bash(hooks, root, "s2", "t0", "tail -n 2 app.py", stdout="d = 4\nX\n")
    before, _ = _bash(hooks, root, "s1", "t1", "tail -n 2 app.py")
    before, _ = _bash(hooks, root, "s1", "t2", "cat > app.py <<'EOF'\nz\nEOF")
    assert not before.allow and "read only in part" in before.reason
    assert Agent(hooks, root, "s1").edit("app.py", "e = 5", "e = 50").allow
    assert not Agent(hooks, root, "s2").edit("app.py", "e = 5", "e = 50").allow  # s2 was shown something else


def test_a_numbered_print_is_a_read_of_the_files_own_lines(hooks, coord, root, app):
    """`cat -n app.py` (and `nl -ba`) print each line after its number: what the model saw is the file."""
    _bash(hooks, root, "s1", "t1", "cat -n app.py")
    before, _ = _bash(hooks, root, "s1", "t2", "cat > app.py <<'EOF'\nz = 0\nEOF")
    assert before.allow
    assert app.read_text() == "z = 0\n"
    assert _history(coord, "app.py") == [("s1", "shell")]


def _heredoc_pair(hooks: HookAdapter, root: Path) -> tuple[dict[str, object], dict[str, object]]:
    """A and B have read the file; A's `cat > app.py <<EOF` is allowed (A holds the ticket); B's payload."""
    for who in ("a", "b"):
        _bash(hooks, root, who, f"read_{who}", "cat app.py")
    write = {
        who: payload(
            "pre_bash",
            root,
            session_id=who,
            tool_use_id=f"w{who}",
            tool_input__command=f"cat > app.py <<'EOF'\n{who}\nEOF",
        )
        for who in ("a", "b")
    }
    assert run(hooks, write["a"]).allow
    return write["a"], write["b"]


def test_a_shell_command_still_writing_keeps_its_ticket(hooks, coord, root, app, monkeypatch):
    """A's heredoc has truncated the file and not yet written it. B, waiting for the ticket, must not take
    the truncation for A's finished write (recording it and ending A's ticket while A still writes)."""
    monkeypatch.setattr(agentwrites, "TICKET_WAIT_S", 0.3)
    write_a, write_b = _heredoc_pair(hooks, root)
    app.write_text("")  # the truncation; the content is not written yet
    _bash(hooks, root, "b", "read_b2", "cat app.py")  # B sees the empty file: its overwrite is judged current
    b = run(hooks, write_b)
    assert not b.allow and b.code == "leased"  # A still holds it: B waited, then was refused
    app.write_text("a\n")  # A's command is done writing
    run(hooks, write_a | {"hook_event_name": "PostToolUse", "tool_response": {"stdout": "", "stderr": ""}})
    assert _history(coord, "app.py") == [("a", "shell")]
    assert app.read_text() == "a\n" and coord.lease_store.live() == []


def test_the_watcher_leaves_a_shell_commands_later_writes_to_its_call(hooks, coord, root, app, monkeypatch):
    """The watcher records the file written in part as A's write while A's command goes on writing: the
    content written meanwhile is A's too (seen again later), never recorded as "outside"'s by that same look."""
    write_a, _ = _heredoc_pair(hooks, root)
    app.write_text("a")  # written in part
    recorded = coord.agent_writes._record

    def and_then_written(entry: object, **kw: bool) -> object:
        found = recorded(entry, **kw)
        app.write_text("a\n")  # A's cat writes while the watcher is recording the truncation
        return found

    monkeypatch.setattr(coord.agent_writes, "_record", and_then_written)
    coord.agent_writes.observed("app.py")
    monkeypatch.setattr(coord.agent_writes, "_record", recorded)
    coord.agent_writes.observed("app.py")  # the watcher's next event
    run(hooks, write_a | {"hook_event_name": "PostToolUse", "tool_response": {"stdout": "", "stderr": ""}})
    assert {session for session, _ in _history(coord, "app.py")} == {"a"}
    assert coord.history("app.py")[0].session == "a" and app.read_text() == "a\n"


def test_the_watcher_between_the_two_steps_of_an_agents_write_records_it_once(hooks, coord, root, app):
    """Node's writeFile (Gemini CLI's, Claude Code's tools) truncates, then writes: a watcher that looks in
    between must not record the empty file as the Edit's one write (the content would then count as another
    program's change, "outside")."""
    Agent(hooks, root, "alice").read("app.py")
    edit = payload("pre_edit", root, **_edit_ids("alice", "t1", app, "a = 1", "a = 10"))
    assert run(hooks, edit).allow
    new = app.read_text().replace("a = 1", "a = 10")
    app.write_text("")  # the first step
    coord.agent_writes.observed("app.py")
    app.write_text(new)  # the second
    coord.agent_writes.observed("app.py")
    run(hooks, edit | {"hook_event_name": "PostToolUse", "tool_response": {"filePath": str(app)}})
    assert _history(coord, "app.py") == [("alice", "edit")]
    assert coord.history("app.py")[0].size_after == len(new.encode())


def test_a_truncation_after_the_watchers_look_is_not_recorded_as_the_edit(hooks, coord, root, app, monkeypatch):
    """The watcher looks at the file, then records under the path's lock: Node's writeFile can truncate the
    file in between (seen with the real Gemini CLI under load: the Edit recorded as emptying the file, its
    content then as "outside"). Whether the file is empty is judged under the lock, where it is recorded."""
    Agent(hooks, root, "alice").read("app.py")
    edit = payload("pre_edit", root, **_edit_ids("alice", "t1", app, "a = 1", "a = 10"))
    assert run(hooks, edit).allow
    new = app.read_text().replace("a = 1", "a = 10")
    monkeypatch.setattr(coord.agent_writes, "_emptied", lambda key: False)  # looked before the truncation
    app.write_text("")
    coord.agent_writes.observed("app.py")
    assert coord.history("app.py") == [] or coord.history("app.py")[0].size_after != 0
    app.write_text(new)
    coord.agent_writes.observed("app.py")
    run(hooks, edit | {"hook_event_name": "PostToolUse", "tool_response": {"filePath": str(app)}})
    assert _history(coord, "app.py") == [("alice", "edit")]
    assert coord.history("app.py")[0].size_after == len(new.encode())


def test_a_waiter_between_the_two_steps_of_an_agents_write_leaves_the_ticket_to_it(hooks, coord, root, app):
    """Bob waits for alice's ticket while her tool writes in two steps (truncate, then write): looking in
    between, he must not take her call as over, record the empty file as her Edit and release her ticket
    (seen with the real Gemini CLI in a race: the Edit recorded as emptying the file, its content as
    "outside"'s, and the ticket free while her tool was still writing)."""
    Agent(hooks, root, "alice").read("app.py")
    edit = payload("pre_edit", root, **_edit_ids("alice", "t1", app, "a = 1", "a = 10"))
    assert run(hooks, edit).allow
    new = app.read_text().replace("a = 1", "a = 10")
    app.write_text("")  # the first step
    assert not coord.agent_writes._unblock("app.py", "bob")
    assert coord.history("app.py") == []
    app.write_text(new)  # the second
    coord.agent_writes.observed("app.py")
    run(hooks, edit | {"hook_event_name": "PostToolUse", "tool_response": {"filePath": str(app)}})
    assert _history(coord, "app.py") == [("alice", "edit")]
    assert coord.history("app.py")[0].size_after == len(new.encode())


def test_the_watcher_between_the_two_steps_of_a_late_write_records_it_once(hooks, coord, root, app, monkeypatch):
    """The same for a call whose ticket lapsed (its script started after the holder's grace): the truncated
    file is not recorded as its late write, the content is, as the session's (seen in the real Claude Code
    race: an empty version of the session's, then its content as "outside")."""
    monkeypatch.setattr(agentwrites, "HOLDER_GRACE_S", 0.0)
    _bash(hooks, root, "s1", "r1", "cat app.py")
    script = "python3 - <<'EOF'\nopen('app.py', 'w').write('z = 0\\n')\nEOF"
    pre = payload("pre_bash", root, session_id="s1", tool_use_id="t1", tool_input__command=script)
    assert run(hooks, pre).allow
    assert run(hooks, payload("pre_bash", root, session_id="s2", tool_use_id="t2", tool_input__command="ls")).allow
    agentwrites.AgentWrites._unblock(coord.agent_writes, "app.py", "s2")  # s2 waited: s1's ticket lapses
    app.write_text("")  # s1's script, late: the first step
    coord.agent_writes.observed("app.py")
    app.write_text("z = 0\n")  # the second
    coord.agent_writes.observed("app.py")
    assert _history(coord, "app.py") == [("s1", "shell")]
    assert coord.history("app.py")[0].size_after == len(b"z = 0\n")


def test_the_watcher_looking_while_an_after_hook_records_leaves_the_write_to_the_call(
    hooks, coord, root, app, monkeypatch
):
    """The PostToolUse of alice's Edit and the tree watcher's look at the same change run at once (the hook
    service's two threads). The watcher must find alice's call, not take the change for outside's: then
    alice's next Edit was refused stale ("changed outside the coordinator"), seen in the real Claude Code."""
    alice = Agent(hooks, root, "alice")
    alice.read("app.py")
    edit = payload("pre_edit", root, **_edit_ids("alice", "t1", app, "a = 1", "a = 10"))
    assert run(hooks, edit).allow
    app.write_text(app.read_text().replace("a = 1", "a = 10"))  # Claude Code's write
    recorded = coord.agent_writes._record
    looked: list[bool] = []

    def watcher_first(entry: object, **kw: bool) -> object:
        if not looked:  # the after-hook's record: the watcher's thread gets the path's lock first
            looked.append(True)
            coord.agent_writes.observed("app.py")
        return recorded(entry, **kw)

    monkeypatch.setattr(coord.agent_writes, "_record", watcher_first)
    run(hooks, edit | {"hook_event_name": "PostToolUse", "tool_response": {"filePath": str(app)}})
    monkeypatch.setattr(coord.agent_writes, "_record", recorded)
    assert _history(coord, "app.py") == [("alice", "edit")]
    assert alice.edit("app.py", "b = 2", "b = 20").allow  # her view is what she wrote


_TURN = {
    "claude-code": ("Stop", "UserPromptSubmit"),
    "codex": ("Stop", "UserPromptSubmit"),
    "gemini": ("AfterAgent", "BeforeAgent"),
}


@pytest.mark.parametrize("agent", list(_TURN))
def test_a_note_due_at_a_turns_end_reaches_the_model_with_the_next_prompt(hooks, coord, root, agent):
    """No agent shows added context at the end of a turn (Stop, AfterAgent): a note due there (a notice left
    for the session, a late write settled then) is kept, and told with the session's next prompt as the
    prompt event's additionalContext, which Claude Code, Codex and Gemini CLI add for the model."""
    from coordinator.agents import front_end

    module = front_end(agent)
    end, prompt = _TURN[agent]
    coord.agent_port().calls.tell("alice", "Your change to app.py was overwritten by session bob.")

    def event(name: str) -> tuple[Decision, object]:
        call = module.parse({"hook_event_name": name, "session_id": "alice", "cwd": str(root), "prompt": "go on"})
        assert call is not None
        decision = hooks.handle(call)
        return decision, module.render(call, decision)

    ended, answer = event(end)
    assert ended.allow and not ended.reason and "overwritten" not in json.dumps(answer.body or {})
    _told, answer = event(prompt)
    assert answer.exit_code == 0
    assert answer.body["hookSpecificOutput"] == {
        "hookEventName": prompt,
        "additionalContext": "Your change to app.py was overwritten by session bob.",
    }
    again, _ = event(prompt)
    assert not again.reason  # told once


def test_a_lapsed_sed_is_not_credited_with_the_next_holders_write(hooks, coord, root, app, monkeypatch):
    """s1's `sed -i` is allowed, then does not run within the holder's grace; s2 takes the path (s1's ticket
    lapses) and writes. s1's sed then matches nothing. Its after-hook, before s2's write is recorded, must
    not credit s2's change to s1 (s1's model would count an increment that never landed, told nothing, as
    seen in the real Claude Code sed race): s1 is told to look again, and the change is s2's."""
    monkeypatch.setattr(agentwrites, "HOLDER_GRACE_S", 0.0)
    app.write_text("total = 0\n")
    for who in ("s1", "s2"):
        _bash(hooks, root, who, f"r-{who}", "cat app.py")

    def hook(who: str, call: str, event: str, command: str) -> Decision:
        data = payload("pre_bash", root, session_id=who, tool_use_id=call, tool_input__command=command)
        if event != "PreToolUse":
            data |= {"hook_event_name": event, "tool_response": {"stdout": "", "stderr": ""}}
        return run(hooks, data)

    sed1 = "sed -i 's/^total = 0$/total = 1/' app.py"
    assert hook("s1", "t1", "PreToolUse", sed1).allow
    heredoc = "cat > app.py <<'EOF'\ntotal = 1\nEOF"
    assert hook("s2", "t2", "PreToolUse", heredoc).allow  # s1's call is taken to be over: its ticket lapses
    app.write_text("total = 1\n")  # s2's write, not yet recorded (no watcher here)
    told = hook("s1", "t1", "PostToolUse", sed1)  # s1's sed, late: matched nothing
    assert told.allow and "ticket had ended" in told.reason and "session s2" in told.reason
    assert coord.history("app.py") == []
    hook("s2", "t2", "PostToolUse", heredoc)
    assert _history(coord, "app.py") == [("s2", "shell")]


def test_a_scripts_unnamed_stale_write_is_repaired_and_told(hooks, coord, root, app):
    """s1 reads app.py, s2 then edits it; s1 runs a script file whose write the command line does not name
    (the parser sees no target), built from what s1 read. The watcher sees a change no ticket accounts for,
    made while s1's command runs: it is s1's, judged from s1's view as a late write is. s2's change commutes
    with s1's: it is put back, and s1 is told at its next event (it was lost in silence before)."""
    alice = Agent(hooks, root, "s1")
    alice.read("app.py")
    bob = Agent(hooks, root, "s2")
    bob.read("app.py")
    assert bob.edit("app.py", "b = 2", "b = 20").allow
    (root / "tool.py").write_text(
        "import sys\nopen(sys.argv[1], 'w').write('a = 1\\nb = 2\\nc = 3\\nd = 40\\ne = 5\\n')\n"
    )
    command = "python3 tool.py app.py"
    pre = payload("pre_bash", root, session_id="s1", tool_use_id="t1", tool_input__command=command)
    assert run(hooks, pre).allow
    subprocess.run(["bash", "-c", command], cwd=root, check=True)
    coord.agent_writes.observed("app.py")
    assert app.read_text() == "a = 1\nb = 20\nc = 3\nd = 40\ne = 5\n"
    writers = [session for session, _ in _history(coord, "app.py")]
    assert writers[:2] == ["s2", "s1"] and writers[-1] == "s2"  # s2's edit, s1's script, s2's change put back
    told = run(hooks, pre | {"hook_event_name": "PostToolUse", "tool_response": {"stdout": "", "stderr": ""}})
    assert "did not name" in told.reason and "session s2" in told.reason and "put back" in told.reason


def test_an_empty_file_is_a_write_half_way_for_a_waiter_whatever_its_time(hooks, coord, root, app):
    """A waiter looks at s1's script target while it is empty (truncated, not yet written) and its
    modification time is old (seen in the real Claude Code race: 0.7 s before the truncation, so the
    quiet-time rule took the command as done and recorded the empty file as its write): still writing."""
    _bash(hooks, root, "s1", "r1", "cat app.py")
    script = "python3 - <<'EOF'\nopen('app.py', 'w').write('z = 0\\n')\nEOF"
    pre = payload("pre_bash", root, session_id="s1", tool_use_id="t1", tool_input__command=script)
    assert run(hooks, pre).allow
    app.write_text("")
    old = time.time() - 5
    os.utime(app, (old, old))
    assert not coord.agent_writes._unblock("app.py", "s2")  # settled before: the empty file its write
    assert coord.history("app.py") == []
    app.write_text("z = 0\n")
    run(hooks, pre | {"hook_event_name": "PostToolUse", "tool_response": {"stdout": "", "stderr": ""}})
    assert _history(coord, "app.py") == [("s1", "shell")]
