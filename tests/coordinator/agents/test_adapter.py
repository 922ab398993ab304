"""The hook adapter on one coordinator (fakeredis): reads recorded from what was shown, writes refused when
unread or stale, the write ticket, history entries of the agent's own writes, failures record nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.agents.adapter import HookAdapter
from coordinator.engine import agentwrites
from coordinator.errors import CoordinatorError, ErrorCode
from tests.coordinator.agents.hooking import Agent, payload, run


@pytest.fixture
def hooks(coord: Coordinator) -> HookAdapter:
    return HookAdapter(coord, session_end=lambda root, session: None)


@pytest.fixture
def app(root: Path) -> Path:
    (root / "src").mkdir()
    f = root / "src" / "app.py"
    f.write_text("def main():\n    return 1\n")
    return f


def _leases(coord: Coordinator) -> list[str]:
    return [x.session for x in coord.lease_store.live()]


def test_read_then_edit_records_a_history_entry_with_the_pre_image(hooks, coord, root, app):
    a = Agent(hooks, root, "s1")
    assert a.read("src/app.py").allow
    assert a.edit("src/app.py", "return 1", "return 2").allow
    assert app.read_text() == "def main():\n    return 2\n"
    (entry,) = coord.history("src/app.py")
    assert entry.session == "s1" and entry.operation == "edit"
    assert coord.history_store.load(entry.before, "src/app.py") == b"def main():\n    return 1\n"
    assert coord.history_store.load(entry.after, "src/app.py") == app.read_bytes()
    assert (entry.first_line, entry.last_line) == (2, 2)
    assert _leases(coord) == []  # the ticket is released after the write
    # the session's view is the new file: its next edit goes through, and the coordinator's undo reverts it
    assert a.edit("src/app.py", "return 2", "return 3").allow
    coord.session("s1").undo("src/app.py")
    assert app.read_text() == "def main():\n    return 2\n"
    assert [e.session for e in coord.history("src/app.py")] == ["s1", "s1", "s1"]


def test_unread_file_is_refused_with_the_coordinators_message_and_no_ticket(hooks, coord, root, app):
    decision = Agent(hooks, root, "s1").edit("src/app.py", "return 1", "return 2")
    assert not decision.allow and decision.code == ErrorCode.NOT_READ.value
    assert "has not been read by this session" in decision.reason and "Read it first" in decision.reason
    assert app.read_text().endswith("return 1\n") and _leases(coord) == []


def test_write_after_another_sessions_write_is_stale_naming_it(hooks, coord, root, app):
    a, b = Agent(hooks, root, "alice"), Agent(hooks, root, "bob")
    a.read("src/app.py")
    b.read("src/app.py")
    assert a.edit("src/app.py", "return 1", "return 2").allow
    decision = b.edit("src/app.py", "return 1", "return 3")
    assert not decision.allow and decision.code == ErrorCode.STALE.value
    assert "Read it again" in decision.reason and "last written by session alice" in decision.reason
    assert app.read_text().endswith("return 2\n") and _leases(coord) == []


def test_stale_after_an_outside_writer_says_so_and_never_names_the_session_itself(hooks, root, app):
    a = Agent(hooks, root, "alice")
    a.read("src/app.py")
    a.edit("src/app.py", "return 1", "return 2")
    app.write_text("def main():\n    return 9\n")  # an editor, a formatter, sed -i
    decision = a.edit("src/app.py", "return 9", "return 3")
    assert not decision.allow and decision.code == ErrorCode.STALE.value
    assert "changed outside the coordinator" in decision.reason
    assert "alice" not in decision.reason


def test_a_read_whose_shown_text_is_not_the_file_records_no_view(hooks, root, app):
    a = Agent(hooks, root, "s1")
    shown = payload("post_read", root, session_id="s1", file__content="def main():\n    return 0\n")
    assert run(hooks, shown).allow
    assert a.edit("src/app.py", "return 1", "return 2").code == ErrorCode.NOT_READ.value


def test_partial_read_allows_an_edit_but_not_a_whole_write(hooks, root, app):
    partial = payload("post_read_partial", root, session_id="s1", file__content="    return 1")  # line 2 of app
    assert run(hooks, partial).allow
    write = run(hooks, payload("pre_write", root, session_id="s1"))
    assert not write.allow and "read only in part" in write.reason
    assert Agent(hooks, root, "s1").edit("src/app.py", "return 1", "return 2").allow


def test_failed_tool_call_releases_the_ticket_and_records_nothing(hooks, coord, root, app):
    a = Agent(hooks, root, "s1")
    a.read("src/app.py")
    assert a.edit("src/app.py", "return 1", "return 2", fail=True).allow
    assert _leases(coord) == [] and coord.history("src/app.py") == []
    assert a.edit("src/app.py", "return 1", "return 2").allow  # the view still holds


def test_ticket_held_by_another_session_refuses_after_the_wait_naming_it(hooks, coord, root, app, monkeypatch):
    monkeypatch.setattr(agentwrites, "TICKET_WAIT_S", 0.05)
    a, b = Agent(hooks, root, "alice"), Agent(hooks, root, "bob")
    a.read("src/app.py")
    b.read("src/app.py")
    ids = {"session_id": "alice", "tool_use_id": "toolu_held"}
    assert run(hooks, payload("pre_edit", root, **ids)).allow  # alice is between her hooks
    decision = b.edit("src/app.py", "return 1", "return 3")
    assert not decision.allow and decision.code == ErrorCode.LEASED.value
    assert "alice" in decision.reason and "waited" in decision.reason
    assert _leases(coord) == ["alice"]
    app.write_text(app.read_text().replace("return 1", "return 2"))
    run(hooks, payload("post_edit", root, **ids))
    assert _leases(coord) == [] and [e.session for e in coord.history("src/app.py")] == ["alice"]


def test_another_sessions_lease_is_honoured(hooks, coord, root, app, monkeypatch):
    monkeypatch.setattr(agentwrites, "TICKET_WAIT_S", 0.05)
    coord.session("owner").lease("src/", ttl_s=60)
    a = Agent(hooks, root, "s1")
    a.read("src/app.py")
    decision = a.edit("src/app.py", "return 1", "return 2")
    assert not decision.allow and decision.code == ErrorCode.LEASED.value and "owner" in decision.reason


def test_a_subagent_is_a_session_of_its_own(hooks, root, app):
    Agent(hooks, root, "main").read("src/app.py")
    sub = Agent(hooks, root, "main", agent_id="a4f1c2")
    assert sub.edit("src/app.py", "return 1", "return 2").code == ErrorCode.NOT_READ.value
    sub.read("src/app.py")
    assert sub.edit("src/app.py", "return 1", "return 2").allow


def test_writing_a_new_file_needs_no_read_and_is_recorded_as_a_creation(hooks, coord, root):
    ids = {"session_id": "s1", "tool_use_id": "toolu_new"}
    target = root / "new" / "mod.py"
    fields = {"tool_input__file_path": str(target), "tool_input__content": "x = 1\n"}
    assert run(hooks, payload("pre_write", root, **ids, **fields)).allow
    target.parent.mkdir()
    target.write_text("x = 1\n")
    run(hooks, payload("pre_write", root, **ids, **fields) | {"hook_event_name": "PostToolUse"})
    (entry,) = coord.history("new/mod.py")
    assert entry.before is None and entry.session == "s1" and entry.operation == "write"


def test_absolute_paths_outside_the_root_go_unguarded_and_symlinks_out_are_refused(hooks, root, tmp_path):
    """A file outside the repository is not the repository's: the agent's own tools handle it, unguarded
    and unrecorded (docs/agents/claude-code.md). A path inside the root that leads out is still refused."""
    outside = tmp_path / "elsewhere.py"
    outside.write_text("x = 1\n")
    for name in ("pre_edit", "pre_write"):
        decision = run(hooks, payload(name, root, session_id="s1", tool_input__file_path=str(outside)))
        assert decision.allow, decision
    assert run(hooks, payload("post_read", root, session_id="s1", tool_input__file_path=str(outside))).allow
    (root / "out").symlink_to(tmp_path)
    through = str(root / "out" / "elsewhere.py")
    decision = run(hooks, payload("pre_edit", root, session_id="s1", tool_input__file_path=through))
    assert not decision.allow and decision.code == ErrorCode.OUTSIDE_ROOT.value
    # no advice an agent's absolute-path tools cannot follow ("give a path relative to its root")
    assert "through a symlink" in decision.reason and "relative" not in decision.reason, decision.reason
    state = root / ".edit-coordinator" / "x.py"
    assert not run(hooks, payload("pre_write", root, session_id="s1", tool_input__file_path=str(state))).allow


def test_session_end_calls_the_auto_commit_and_never_blocks(coord, root):
    ended: list[tuple[str, str]] = []

    def end(r: str, session: str) -> str | None:
        ended.append((r, session))
        raise RuntimeError("git is broken")

    hooks = HookAdapter(coord, session_end=end)
    event = payload("session_end", root)
    assert run(hooks, event).allow
    assert ended == [(coord.root, event["session_id"])]
    from coordinator.agents import failures

    count, (logged,) = failures.recent(root)  # what status and the dashboard show
    assert count == 1 and logged.event == "auto-commit" and "git is broken" in logged.what, logged
    assert event["session_id"] in logged.what


def test_the_coordinators_own_writers_honour_a_held_ticket(hooks, coord, root, app):
    """The ticket is a lease like any other: a session writing through the coordinator's own tools is
    refused while a hooked agent is between its hooks, and goes through once the ticket is released."""
    Agent(hooks, root, "alice").read("src/app.py")
    ids = {"session_id": "alice", "tool_use_id": "toolu_between"}
    assert run(hooks, payload("pre_edit", root, **ids)).allow
    coord.lease_gate.invalidate()  # another process's lease snapshot, taken after the grant
    bob = coord.session("bob")
    bob.read("src/app.py")
    with pytest.raises(CoordinatorError) as refused:
        bob.edit("src/app.py", "return 1", "return 5")
    assert refused.value.code is ErrorCode.LEASED and "alice" in refused.value.message
    app.write_text(app.read_text().replace("return 1", "return 2"))
    run(hooks, payload("post_edit", root, **ids))
    coord.lease_gate.invalidate()
    bob.read("src/app.py")
    bob.edit("src/app.py", "return 2", "return 5")
    assert [e.session for e in coord.history("src/app.py")] == ["bob", "alice"]


def test_claude_codes_own_line_counts_give_whole_views(hooks, root):
    """Claude Code 2.1.328 counts the empty piece after a final newline as a line: a read of lines 1-2 of
    "one\ntwo\n" is numLines 2 of totalLines 3, and it showed the whole file. A whole Write may follow."""
    f = root / "two.txt"
    f.write_text("one\ntwo\n")
    shown = {"file__filePath": str(f), "tool_input__file_path": str(f)}
    for session, window in (("whole", {"file__content": "one\ntwo\n", "file__numLines": 3}),
                            ("all-lines", {"file__content": "one\ntwo", "file__numLines": 2})):  # fmt: skip
        ids = {"session_id": session, "tool_use_id": f"read-{session}"}
        assert run(hooks, payload("post_read", root, **ids, **shown, **window, file__totalLines=3)).allow
        write = {"tool_input__file_path": str(f), "tool_input__content": "three\n"}
        assert run(hooks, payload("pre_write", root, session_id=session, tool_use_id=f"w-{session}", **write)).allow
        run(hooks, payload("pre_write", root, session_id=session, tool_use_id=f"w-{session}", **write)
            | {"hook_event_name": "PostToolUseFailure"})  # fmt: skip
    part = {"file__content": "one", "file__numLines": 1, "file__totalLines": 3, "tool_input__limit": 1}
    assert run(hooks, payload("post_read", root, session_id="part", tool_use_id="r", **shown, **part)).allow
    write = {"tool_input__file_path": str(f), "tool_input__content": "three\n"}
    refused = run(hooks, payload("pre_write", root, session_id="part", tool_use_id="w", **write))
    assert not refused.allow and "part" in refused.reason


@pytest.mark.parametrize(
    "field, bad",
    [
        ("session_id", "s" * 100_000),
        ("session_id", "s1\n"),  # a trailing newline: re's `$` matches before it
        ("session_id", "s1\nCoordinator-Session: victim"),
        ("session_id", "s1\x00"),
        ("tool_use_id", "toolu_1\n"),
        ("tool_use_id", "toolu\x001"),
        ("tool_use_id", "t" * 100_000),
    ],
    ids=["100KB", "trailing-newline", "newline", "NUL", "call-trailing-newline", "call-NUL", "call-100KB"],
)
def test_a_hook_events_ids_are_checked_by_the_session_ids_rule(hooks, coord, root, app, field, bad):
    """Every way in takes session ids of one rule (arguments.is_session_id); a hook event's ids too, before
    anything of the event is recorded: a read that is taken would let the session write."""
    data = payload("post_read", root, **{field: bad}, tool_input__file_path=str(app), file__filePath=str(app))
    data["tool_response"]["file"].update(content=app.read_text(), numLines=3, totalLines=3)
    with pytest.raises(CoordinatorError) as exc:
        run(hooks, data)
    assert exc.value.code is ErrorCode.INVALID_ARGUMENT
    good = {"session_id": "s1", "tool_use_id": "toolu_ok"}
    good.update({field: bad})
    edit = payload("pre_edit", root, **good, tool_input__file_path=str(app))
    with pytest.raises(CoordinatorError):
        run(hooks, edit)
    assert coord.history("src/app.py") == [] and _leases(coord) == []
