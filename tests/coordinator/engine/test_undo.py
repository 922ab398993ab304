"""Undo reverts one write's change and keeps others' work; redo steps forward; restore (for people) puts a
whole file back and says what it discards. Through the public API (in-process), over HTTP and MCP in
test_undo_adapters.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.text.undoing import in_effect, redo_target, undo_target
from tests.refusals import refused


@pytest.mark.topology
def test_undo_of_u1_keeps_u2s_later_write(root: Path, coord: Coordinator) -> None:
    """The scenario of the issue: u1 edits a, u2 edits b (the next line), u1 reads and undoes."""
    (root / "b.py").write_text("a = 0\nb = 0\n")
    u1, u2 = coord.session("u1"), coord.session("u2")
    u1.read("b.py")
    u1.edit("b.py", "a = 0", "a = 9")
    u2.read("b.py")
    u2.edit("b.py", "b = 0", "b = 7")
    u1.read("b.py")
    r = u1.undo("b.py")
    assert (root / "b.py").read_text() == "a = 0\nb = 7\n"
    assert r.reverts == 1 and r.operation == "undo" and r.version == 3
    assert "Reverted your edit of version 1" in r.message and "1 later write by others kept" in r.message
    assert r.nearby_changes == ((2, 2),) and "Others changed lines 2 next to it" in r.message
    h = coord.history("b.py")[0]
    assert (h.version, h.operation, h.reverts) == (3, "undo", 1)


def test_undo_over_an_overlapping_later_write_is_stale_naming_lines_and_sessions(
    root: Path, coord: Coordinator
) -> None:
    (root / "b.py").write_text("a = 0\nb = 0\n")
    u1, u2 = coord.session("u1"), coord.session("u2")
    u1.read("b.py")
    u1.edit("b.py", "a = 0", "a = 9")
    u2.read("b.py")
    u2.edit("b.py", "a = 9", "a = 5")  # rewrites u1's line
    u1.read("b.py")
    before = (root / "b.py").read_bytes()
    err = refused(ErrorCode.STALE, u1.undo, "b.py")
    assert err.details["reason"] == "overlap" and err.details["clashing"] == [[1, 1]]
    assert "the undo of version 1 changes lines that another write also changed since then" in err.message
    assert "Written since by: u2 (version 2, 1)" in err.message and "Nothing was written" in err.message
    assert (root / "b.py").read_bytes() == before and len(coord.history("b.py")) == 2


def test_three_edits_then_three_undos_give_the_original_and_redo_steps_forward(root: Path, coord: Coordinator) -> None:
    (root / "a.py").write_text("a = 0\n")
    s = coord.session("s")
    s.read("a.py")
    for n in (1, 2, 3):
        s.edit("a.py", f"a = {n - 1}", f"a = {n}")
    seen = []
    for _ in range(3):
        s.undo("a.py")
        seen.append((root / "a.py").read_text())
    assert seen == ["a = 2\n", "a = 1\n", "a = 0\n"]
    err = refused(ErrorCode.NO_CHANGE, s.undo, "a.py")
    assert "undone already; nothing left to undo" in err.message
    s.redo("a.py")
    assert (root / "a.py").read_text() == "a = 1\n"
    assert coord.history("a.py")[0].operation == "redo"
    s.redo("a.py")
    assert (root / "a.py").read_text() == "a = 2\n"
    s.undo("a.py")  # undoes the redo
    assert (root / "a.py").read_text() == "a = 1\n"
    s.edit("a.py", "a = 1", "a = 7")  # a new change ends the redo chain
    err = refused(ErrorCode.NO_CHANGE, s.redo, "a.py")
    assert "no undo of a.py to redo" in err.message


def test_undo_redo_and_restore_show_the_changed_line_not_the_whole_file(root: Path, coord: Coordinator) -> None:
    """A one-line change in a long file: the undo, the redo and the restore that swap the content back
    report (snippet, start line, history's line range) that line, as the edit did."""
    (root / "long.py").write_text("".join(f"line {i}\n" for i in range(1, 1015)))
    s = coord.session("s")
    s.read("long.py")
    edit = s.edit("long.py", "line 500\n", "line five hundred\n")
    results = [s.undo("long.py"), s.redo("long.py"), coord.restore("long.py", to_version=0)]
    for r in [edit, *results]:
        assert r.start_line == 500 and len(r.snippet) < 400, (r.operation, len(r.snippet))
        assert "line 499" in r.snippet and "line 510" not in r.snippet
    assert [(h.operation, h.first_line, h.last_line) for h in coord.history("long.py")] == [
        ("restore", 500, 500),
        ("redo", 500, 500),
        ("undo", 500, 500),
        ("edit", 500, 500),
    ]


def test_undo_of_the_undo_by_version_is_a_redo(root: Path, coord: Coordinator) -> None:
    (root / "a.py").write_text("x\n")
    s = coord.session("s")
    s.read("a.py")
    s.edit("a.py", "x", "y")
    u = s.undo("a.py")
    r = s.undo("a.py", version=u.version)
    assert r.operation == "redo" and (root / "a.py").read_text() == "y\n"
    err = refused(ErrorCode.NO_CHANGE, s.undo, "a.py", version=u.version)
    assert f"Version {u.version} of a.py is undone already (by version {r.version})" in err.message


def test_undo_by_version_reverts_that_change_only(root: Path, coord: Coordinator) -> None:
    (root / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    a, b = coord.session("a"), coord.session("b")
    a.read("f.txt")
    v1 = a.edit("f.txt", "line 2\n", "two\n")
    v2 = a.edit("f.txt", "line 8\n", "eight\n")
    b.read("f.txt")
    b.edit("f.txt", "line 5\n", "five\n")
    r = b.undo("f.txt", version=v1.version)  # a's first edit, by b: allowed in-process
    text = (root / "f.txt").read_text()
    assert "line 2\n" in text and "eight\n" in text and "five\n" in text
    assert "Reverted a's edit of version 1" in r.message
    refused(ErrorCode.INVALID_ARGUMENT, b.undo, "f.txt", version=99)
    assert v2.version == 2


def test_undo_of_a_creation_removes_the_file_unless_others_wrote_since(root: Path, coord: Coordinator) -> None:
    s, t = coord.session("s"), coord.session("t")
    s.write("made.txt", "x\n")
    r = s.undo("made.txt")
    assert not (root / "made.txt").exists() and "removed" in r.message
    s.redo("made.txt")
    assert (root / "made.txt").read_text() == "x\n"
    t.read("made.txt")
    t.edit("made.txt", "x\n", "x\ny\n")  # appends after s's line: the deletion of "x" still commutes
    s.read("made.txt")
    assert s.undo("made.txt").reverts == 3  # the redo (version 3) carries the creation now
    assert (root / "made.txt").read_text() == "y\n"


def test_undo_of_a_binary_write_needs_the_file_as_it_left_it(root: Path, coord: Coordinator) -> None:
    s = coord.session("s")
    (root / "t.txt").write_text("one\n")
    s.read("t.txt")
    s.write("t.txt", "two\n")
    (root / "t.txt").write_bytes(b"\x00\x01binary")
    s_err = refused(ErrorCode.STALE, s.undo, "t.txt")  # the view check first: the file changed
    assert "modified since you last read it" in s_err.message


@pytest.mark.topology
def test_undo_needs_a_current_view(root: Path, coord: Coordinator) -> None:
    (root / "a.py").write_text("a\nb\n")
    u1, u2 = coord.session("u1"), coord.session("u2")
    u1.read("a.py")
    u1.edit("a.py", "a\n", "A\n")
    u2.read("a.py")
    u2.edit("a.py", "b\n", "B\n")
    refused(ErrorCode.STALE, u1.undo, "a.py")  # u1 has not seen u2's write
    refused(ErrorCode.NOT_READ, coord.session("u3").undo, "a.py", version=1)
    refused(ErrorCode.INVALID_ARGUMENT, coord.session("u3").undo, "a.py")  # no write of its own


def test_restore_puts_the_whole_file_back_and_says_what_it_discards(root: Path, coord: Coordinator) -> None:
    (root / "b.py").write_text("a = 0\nb = 0\n")
    u1, u2 = coord.session("u1"), coord.session("u2")
    u1.read("b.py")
    u1.edit("b.py", "a = 0", "a = 9")
    u2.read("b.py")
    u2.edit("b.py", "b = 0", "b = 7")
    r = coord.restore("b.py", before_version=1)
    assert (root / "b.py").read_text() == "a = 0\nb = 0\n"
    assert r.operation == "restore" and r.version == 3
    assert "Discarded the changes of versions 1 (edit by u1), 2 (edit by u2)" in r.message
    r = coord.restore("b.py", to_version=1)
    assert (root / "b.py").read_text() == "a = 9\nb = 0\n"
    assert "back to its content right after version 1" in r.message
    assert "versions 2 (edit by u2), 3 (restore by operator)" in r.message
    refused(ErrorCode.NO_CHANGE, coord.restore, "b.py", to_version=1)
    refused(ErrorCode.INVALID_ARGUMENT, coord.restore, "b.py")
    refused(ErrorCode.INVALID_ARGUMENT, coord.restore, "b.py", to_version=9)
    refused(ErrorCode.INVALID_ARGUMENT, coord.restore, "b.py", before_version=9)
    coord.restore("b.py", to_version=0)
    assert (root / "b.py").read_text() == "a = 0\nb = 0\n"


def test_restore_of_a_created_file_to_version_0_removes_it(root: Path, coord: Coordinator) -> None:
    coord.session("s").write("n.txt", "new\n")
    r = coord.restore("n.txt", to_version=0)
    assert not (root / "n.txt").exists() and "removed (it did not exist then)" in r.message
    refused(ErrorCode.NO_CHANGE, coord.restore, "n.txt", to_version=0)


class _E:
    def __init__(self, version: int, session: str, operation: str, reverts: int | None = None) -> None:
        self.version, self.session, self.operation, self.reverts = version, session, operation, reverts
        self.before = self.after = None


def test_targets_step_through_the_history() -> None:
    h = [_E(1, "s", "edit"), _E(2, "t", "edit"), _E(3, "s", "edit")]
    assert undo_target(h, "s", "p").version == 3
    h.append(_E(4, "s", "undo", reverts=3))
    assert in_effect(h) == {1: True, 2: True, 3: False, 4: True}
    assert undo_target(h, "s", "p").version == 1  # t's write is not s's to undo
    assert redo_target(h, "s", "p").version == 4
    h.append(_E(5, "s", "redo", reverts=4))
    assert undo_target(h, "s", "p").version == 5  # the redo carries the change now
    with pytest.raises(CoordinatorError) as info:
        redo_target(h, "s", "p")
    assert info.value.code is ErrorCode.NO_CHANGE
    with pytest.raises(CoordinatorError) as info:
        undo_target(h, "u", "p")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT and "no recorded write of p" in info.value.message


def test_restore_command_lists_and_discards_later_versions(real_redis_root: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from coordinator.cli import main

    root = real_redis_root
    (root / "b.py").write_text("a = 0\nb = 0\n")
    with Coordinator(root, durability="none") as coord:
        u1, u2 = coord.session("u1"), coord.session("u2")
        u1.read("b.py")
        u1.edit("b.py", "a = 0", "a = 9")
        u2.read("b.py")
        u2.edit("b.py", "b = 0", "b = 7")
    capsys.readouterr()
    assert main(["restore", "b.py", "--to", "1", "--dry-run", "--root", str(root)]) == 0
    assert "Would discard the changes of b.py versions: 2 (edit by u2)." in capsys.readouterr().out
    assert (root / "b.py").read_text() == "a = 9\nb = 7\n"
    assert main(["restore", "b.py", "--to", "1", "--root", str(root), "--as", "operator:t"]) == 0
    out = capsys.readouterr().out
    assert "restored: back to its content right after version 1 (now version 3)" in out
    assert "Discarded the changes of version 2 (edit by u2)" in out
    assert (root / "b.py").read_text() == "a = 9\nb = 0\n"
    assert main(["restore", "b.py", "--before", "9", "--root", str(root)]) != 0  # the exit status of its code
    assert "[invalid_argument]" in capsys.readouterr().err
