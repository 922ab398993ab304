"""`history`, `undo`, `gc`, `status` and `top`, through the command line, on a real embedded Redis.

The properties guarded: every undo goes through the check-then-write and is recorded (so it is undoable);
a session's work is undone only when nobody's later work can build on it; gc never deletes a stored
content that a kept history entry refers to, even when a writer races with it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator import Coordinator, CoordinatorError, errors
from coordinator.cli import gc as cmd_gc
from coordinator.cli import history as cmd_history
from coordinator.cli import repo as cmd_repo
from coordinator.cli import restore as cmd_restore
from coordinator.cli import status as cmd_status
from coordinator.cli import undo as cmd_undo
from coordinator.history import History, content_hash, retention
from coordinator.history.retention import RetentionPolicy, collect, parse_size


@pytest.fixture
def repo(real_redis_root: Path) -> Iterator[tuple[Path, Coordinator]]:
    c = Coordinator(real_redis_root, durability="none")
    yield real_redis_root, c
    c.close()


def exit_status(code: str) -> int:
    """The command line's exit status for a refusal with this code (coordinator.errors.CODES)."""
    return errors.info(code).exit_status


def main(argv: list[str]) -> int:
    """These commands alone (the wiring into `edit-coordinator` is tested once, at the end)."""
    parser = argparse.ArgumentParser(prog="edit-coordinator")
    sub = parser.add_subparsers()
    for module in (cmd_history, cmd_undo, cmd_restore, cmd_gc, cmd_status):  # cmd_undo: undo and redo
        module.register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def cli(capsys: pytest.CaptureFixture[str], root: Path, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main([*argv[:1], "--root", str(root), *argv[1:]])
    out, err = capsys.readouterr()
    return rc, out, err


def cli_json(capsys: pytest.CaptureFixture[str], root: Path, *argv: str) -> Any:
    rc, out, err = cli(capsys, root, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def history(root: Path, key: str) -> list[tuple[int, str, str]]:
    return [(e.version, e.session, e.operation) for e in reversed(History(root / ".edit-coordinator").entries(key))]


def three_versions(root: Path, c: Coordinator) -> None:
    """f.txt: v1 created by x; v2 edited by x; v3 edited by y."""
    x, y = c.session("agent-x"), c.session("agent-y")
    x.write("f.txt", "a\nb\nc\n")
    x.edit("f.txt", "b\n", "B1\nB2\n")
    y.read("f.txt")
    y.edit("f.txt", "c", "C")


# --- history -----------------------------------------------------------------------------------------------


def test_history_lists_versions_with_lines_changed(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    three_versions(root, c)
    data = cli_json(capsys, root, "history", "f.txt")
    rows = [(r["version"], r["session"], r["operation"], r["added"], r["removed"]) for r in data["entries"]]
    assert rows == [(3, "agent-y", "edit", 1, 1), (2, "agent-x", "edit", 2, 1), (1, "agent-x", "write", 3, 0)]

    rc, out, _ = cli(capsys, root, "history", str(root / "f.txt"))  # absolute path inside the root
    assert rc == 0
    assert "agent-y" in out and "+2 -1" in out and "(created)" in out

    rc, _, err = cli(capsys, root, "history", "../outside.txt")
    assert rc == exit_status("outside_root") and "[outside_root]" in err


def test_history_lists_a_write_made_after_a_torn_index_line(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    """A crash in the middle of an index append leaves a torn last line; the next write must still be
    listed (and so be undoable), not glued to the torn line and lost."""
    root, c = repo
    s = c.session("agent-x")
    s.write("f.txt", "one\n")
    with open(History(root / ".edit-coordinator").index_path("f.txt"), "ab") as f:
        f.write(b'{"version":2,"ti')
    s.read("f.txt")
    s.edit("f.txt", "one", "two")
    data = cli_json(capsys, root, "history", "f.txt")
    assert [(r["version"], r["operation"]) for r in data["entries"]] == [(2, "edit"), (1, "write")]
    assert cli(capsys, root, "undo", "f.txt")[0] == 0
    assert (root / "f.txt").read_text() == "one\n"


def test_history_diff_is_the_unified_diff_against_the_preimage(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    three_versions(root, c)
    data = cli_json(capsys, root, "history", "f.txt", "--diff", "2")
    assert data["diff"].splitlines()[2:] == ["@@ -1,3 +1,4 @@", " a", "-b", "+B1", "+B2", " c"]
    assert data["diff"].startswith("--- a/f.txt (before version 2)\n+++ b/f.txt (version 2: edit by agent-x")

    created = cli_json(capsys, root, "history", "f.txt", "--diff", "1")["diff"]
    assert "@@ -0,0 +1,3 @@" in created

    # Every version's result is kept in the history, so a change made outside later does not hide it.
    newest = (root / "f.txt").read_text()
    (root / "f.txt").write_text("changed behind our back\n")
    diff3 = cli_json(capsys, root, "history", "f.txt", "--diff", "3")["diff"]
    assert diff3 and "changed behind our back" not in diff3
    assert all(line[1:] in newest for line in diff3.splitlines()[3:] if line.startswith("+"))
    rc, _, err = cli(capsys, root, "history", "f.txt", "--diff", "9")
    assert rc == exit_status("invalid_argument") and "[invalid_argument]" in err and "no version 9" in err


def test_history_of_a_session_spans_files(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    three_versions(root, c)
    c.session("agent-x").write("sub/g.txt", "g\n")
    data = cli_json(capsys, root, "history", "--session", "agent-x")
    assert [(w["path"], w["version"], w["operation"]) for w in data["entries"]] == [
        ("f.txt", 1, "write"),
        ("f.txt", 2, "edit"),
        ("sub/g.txt", 1, "write"),
    ]
    assert cli_json(capsys, root, "history", "--session", "nobody")["entries"] == []


# --- undo of one file ----------------------------------------------------------------------------------------


def test_undo_newest_is_recorded_and_itself_undoable(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    three_versions(root, c)
    rc, out, err = cli(capsys, root, "undo", "f.txt")
    assert rc == 0, err
    assert (root / "f.txt").read_text() == "a\nB1\nB2\nc\n"
    assert history(root, "f.txt")[-1] == (4, f"operator:{_user()}", "undo")
    assert "now version 4" in out

    rc, _, err = cli(capsys, root, "undo", "f.txt", "--version", "4", "--as", "operator:other")  # undo the undo
    assert rc == 0, err
    assert (root / "f.txt").read_text() == "a\nB1\nB2\nC\n"
    assert history(root, "f.txt")[-1] == (5, "operator:other", "redo")


def test_undo_reverts_one_change_and_keeps_later_writes_as_the_library_does(
    repo: tuple[Path, Coordinator], capsys: Any
) -> None:
    """One meaning of undo on every way in: `undo PATH --version 2` takes back version 2's change only;
    version 3 (y's, written after it) stays. Repeated undos step back through the writes not undone."""
    root, c = repo
    three_versions(root, c)
    plan = cli_json(capsys, root, "undo", "f.txt", "--version", "2", "--dry-run")
    assert (plan["would_undo_version"], plan["operation"]) == (2, "undo")
    assert plan["keeps"] == [{"version": 3, "session": "agent-y", "operation": "edit"}]
    assert "Nothing was written" in plan["message"] and len(history(root, "f.txt")) == 3
    data = cli_json(capsys, root, "undo", "f.txt", "--version", "2")
    assert (data["undone_version"], data["version"], data["operation"]) == (2, 4, "undo")
    assert (root / "f.txt").read_text() == "a\nb\nC\n"  # y's later "C" kept
    assert "1 later write by others kept" in data["message"]
    rc, out, _ = cli(capsys, root, "undo", "f.txt", "--dry-run")  # v2 is undone: the newest in effect is v3
    assert rc == 0 and "Would revert the edit of version 3 of f.txt by agent-y (recorded as an undo)" in out
    rc, _, err = cli(capsys, root, "undo", "f.txt", "--version", "2")
    assert rc == exit_status("no_change") and "undone already (by version 4)" in err


def test_undo_to_and_before_refer_to_restore_which_puts_the_whole_file_back(
    repo: tuple[Path, Coordinator], capsys: Any
) -> None:
    root, c = repo
    three_versions(root, c)
    rc, _, err = cli(capsys, root, "undo", "f.txt", "--to", "1")
    assert rc == exit_status("invalid_argument") and "edit-coordinator restore f.txt --to 1" in err
    assert len(history(root, "f.txt")) == 3  # nothing written
    rc, out, _ = cli(capsys, root, "restore", "f.txt", "--to", "1", "--dry-run")
    assert rc == 0 and "Would discard the changes of f.txt versions: 2 (edit by agent-x), 3 (edit by agent-y)" in out
    assert cli(capsys, root, "restore", "f.txt", "--to", "1")[0] == 0
    assert (root / "f.txt").read_text() == "a\nb\nc\n"  # as right after version 1
    assert cli(capsys, root, "restore", "f.txt", "--before", "1")[0] == 0
    assert not (root / "f.txt").exists()  # before version 1 the file did not exist
    assert cli(capsys, root, "restore", "f.txt", "--to", "3")[0] == 0  # version 3 is in the history still
    assert (root / "f.txt").read_text() == "a\nB1\nB2\nC\n"

    rc, _, err = cli(capsys, root, "restore", "f.txt", "--to", "9")
    assert rc == exit_status("invalid_argument") and "no version 9" in err
    rc, _, err = cli(capsys, root, "undo", "never.txt")  # no such file, no history: the path is wrong
    assert rc == exit_status("file_not_found") == 3 and "[file_not_found]" in err and "no recorded writes" in err
    (root / "unwritten.txt").write_text("x\n")  # a file no session wrote: nothing to undo
    rc, _, err = cli(capsys, root, "undo", "unwritten.txt")
    assert rc == exit_status("invalid_argument") and "[invalid_argument]" in err and "no recorded writes" in err


def test_undo_over_an_outside_change_is_refused_and_restore_keeps_it_in_history(
    repo: tuple[Path, Coordinator], capsys: Any
) -> None:
    root, c = repo
    three_versions(root, c)
    (root / "f.txt").write_text("edited in an editor\n")
    rc, _, err = cli(capsys, root, "undo", "f.txt")  # version 3's change is no longer there to revert
    assert rc == exit_status("stale") and "[stale]" in err
    assert (root / "f.txt").read_text() == "edited in an editor\n"
    assert cli(capsys, root, "restore", "f.txt", "--before", "3")[0] == 0
    assert (root / "f.txt").read_text() == "a\nB1\nB2\nc\n"
    assert cli(capsys, root, "undo", "f.txt")[0] == 0  # undo the restore: the outside change is back
    assert (root / "f.txt").read_text() == "edited in an editor\n"


def test_undo_keeps_a_write_that_lands_while_it_is_prepared(
    repo: tuple[Path, Coordinator], capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, c = repo
    three_versions(root, c)
    real_read = cmd_undo._operator_read

    def race_then_read(op: Any, key: str) -> str | None:
        z = c.session("agent-z")
        z.read(key)
        z.edit(key, "a\n", "A\n")  # version 4, after the person chose to undo version 3
        return real_read(op, key)

    monkeypatch.setattr(cmd_undo, "_operator_read", race_then_read)
    rc, _, err = cli(capsys, root, "undo", "f.txt")
    assert rc == 0, err
    assert (root / "f.txt").read_text() == "A\nB1\nB2\nc\n"  # version 3 reverted, z's version 4 kept


def test_redo_brings_back_the_undone_change_and_keeps_later_writes(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    three_versions(root, c)
    assert cli(capsys, root, "undo", "f.txt")[0] == 0  # v4: takes back v3's "C"
    z = c.session("agent-z")
    z.read("f.txt")
    z.edit("f.txt", "a\n", "A\n")  # v5, after the undo
    rc, out, err = cli(capsys, root, "redo", "f.txt")
    assert rc == 0, err
    assert (root / "f.txt").read_text() == "A\nB1\nB2\nC\n"  # the undone change is back, z's edit kept
    assert history(root, "f.txt")[-1] == (6, f"operator:{_user()}", "redo")
    assert "version 6" in out

    rc, _, err = cli(capsys, root, "redo", "f.txt")  # its undo is no longer in effect
    assert rc == exit_status("no_change") and "[no_change]" in err
    assert (root / "f.txt").read_text() == "A\nB1\nB2\nC\n"
    assert cli(capsys, root, "undo", "f.txt")[0] == 0  # the redo is itself undoable
    assert (root / "f.txt").read_text() == "A\nB1\nB2\nc\n"


def test_redo_is_of_one_sessions_undo(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    three_versions(root, c)
    rc, _, err = cli(capsys, root, "redo", "f.txt")
    assert rc == exit_status("no_change") and "no undo of f.txt to redo" in err
    assert cli(capsys, root, "undo", "f.txt", "--as", "operator:other")[0] == 0
    rc, _, err = cli(capsys, root, "redo", "f.txt")  # the default operator undid nothing
    assert rc == exit_status("no_change")
    data = cli_json(capsys, root, "redo", "f.txt", "--as", "operator:other")
    assert (data["version"], data["redid_version"], data["session"]) == (5, 4, "operator:other")
    assert (root / "f.txt").read_text() == "a\nB1\nB2\nC\n"


def test_redo_of_an_undo_that_removed_the_file_creates_it_again(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    c.session("agent-x").write("g.txt", "new\n")
    assert cli(capsys, root, "undo", "g.txt")[0] == 0  # the undo of its creation removes it
    assert not (root / "g.txt").exists()
    rc, _, err = cli(capsys, root, "redo", "g.txt")
    assert rc == 0, err
    assert (root / "g.txt").read_text() == "new\n"


# --- undo of a session ---------------------------------------------------------------------------------------


def test_undo_session_restores_every_file_it_touched(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    (root / "keep.txt").write_text("original\n")
    x, y = c.session("agent-x"), c.session("agent-y")
    x.read("keep.txt")
    x.edit("keep.txt", "original", "changed by x")
    x.edit("keep.txt", "changed by x", "changed twice by x")
    x.write("new/created.txt", "made by x\n")
    y.write("other.txt", "y's work\n")

    plan = cli_json(capsys, root, "undo", "--session", "agent-x", "--dry-run")
    assert [(f["path"], f["first_version"]) for f in plan["files"]] == [
        ("keep.txt", 1),
        ("new/created.txt", 1),
    ]
    assert (root / "keep.txt").read_text() == "changed twice by x\n"  # dry run: nothing written

    rc, out, err = cli(capsys, root, "undo", "--session", "agent-x")
    assert rc == 0, err
    assert (root / "keep.txt").read_text() == "original\n"
    assert not (root / "new" / "created.txt").exists()
    assert (root / "other.txt").read_text() == "y's work\n"
    assert history(root, "keep.txt")[-1][2] == "undo"
    # A second run finds nothing left to do.
    rc, out, _ = cli(capsys, root, "undo", "--session", "agent-x")
    assert rc == 0 and "already undone" in out


def test_undo_session_refused_when_later_work_depends_on_it(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    x, y = c.session("agent-x"), c.session("agent-y")
    x.write("a.txt", "x1\n")
    x.write("b.txt", "x2\n")
    y.read("b.txt")
    y.edit("b.txt", "x2", "x2 and y")
    before = {p: (root / p).read_text() for p in ("a.txt", "b.txt")}

    rc, _, err = cli(capsys, root, "undo", "--session", "agent-x")
    assert rc == 1
    assert "Refused" in err and "b.txt" in err and "version 2 (edit by agent-y" in err
    assert "Nothing was written" in err
    assert {p: (root / p).read_text() for p in before} == before  # not even a.txt, which had no blocker
    assert history(root, "a.txt") == [(1, "agent-x", "write")]

    # A change made outside the coordinator is a dependent too.
    z = c.session("agent-z")
    z.write("z.txt", "z\n")
    (root / "z.txt").write_text("z, then an editor\n")
    rc, _, err = cli(capsys, root, "undo", "--session", "agent-z")
    assert rc == 1 and "changed outside the coordinator" in err
    assert (root / "z.txt").read_text() == "z, then an editor\n"


def test_undo_session_loses_nothing_written_while_it_runs(
    repo: tuple[Path, Coordinator], capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write by another session between the plan and the undo stops the undo: it is not discarded."""
    root, c = repo
    c.session("agent-x").write("a.txt", "x\n")
    real_read = cmd_undo._operator_read

    def read_then_race(op: Any, key: str) -> str | None:
        h = real_read(op, key)
        y = c.session("agent-y")
        y.read(key)
        y.edit(key, "x", "x then y")
        return h

    monkeypatch.setattr(cmd_undo, "_operator_read", read_then_race)
    rc, _, err = cli(capsys, root, "undo", "--session", "agent-x")
    assert rc == 1 and "Stopped" in err
    assert (root / "a.txt").read_text() == "x then y\n"


# --- gc ------------------------------------------------------------------------------------------------------


def _objects(root: Path) -> set[str]:
    """Every stored content (packed per path, or a loose object of the earlier format)."""
    store = History(root / ".edit-coordinator")
    return set(retention.object_sizes(store, list(store.scan())))


def _loose(root: Path) -> set[str]:
    return {p.name for p in (root / ".edit-coordinator/history/objects").glob("*/*") if not p.name.startswith(".")}


def _legacy_versions(root: Path, path: str, n: int) -> list[str]:
    """A history written by the earlier format: loose pre-image objects, index lines without locations,
    a bare counter in the lock file. Returns the contents' hashes, oldest first."""
    from coordinator.disk.locks import LockManager

    state = root / ".edit-coordinator"
    store = History(state)
    contents = [f"{path} {i}\n".encode() for i in range(n)]
    digests = [content_hash(c) for c in contents]
    with open(store.index_path(path), "a") as f:
        for v in range(1, n + 1):
            before = contents[v - 2] if v > 1 else None
            if before is not None:
                obj = store.object_path(digests[v - 2])
                obj.parent.mkdir(parents=True, exist_ok=True)
                obj.write_bytes(before)
            line = {"version": v, "time": time.time(), "session": "s", "operation": "write", "path": path,
                    "before": digests[v - 2] if v > 1 else None, "after": digests[v - 1], "size_before": 0,
                    "size_after": 0, "first_line": 1, "last_line": 1}  # fmt: skip
            f.write(json.dumps(line) + "\n")
    with open(LockManager(state / "locks").path_for(path), "wb") as f:
        f.write(n.to_bytes(8, "little"))
    (root / path).write_bytes(contents[-1])
    return digests


def _versions(c: Coordinator, session: str, path: str, n: int, size: int = 10) -> None:
    s = c.session(session)
    for i in range(n):
        s.write(path, f"{path} {i} ".ljust(size, "x") + "\n")


def test_gc_keeps_the_newest_versions_and_what_they_reference(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    _versions(c, "s", "a.txt", 6)
    _versions(c, "s", "b.txt", 2)
    assert len(_objects(root)) == 8  # every version's result: a0..a5, b0, b1

    report = cli_json(capsys, root, "gc", "--keep-versions", "3")
    # Versions 1-3 go; of their pre-images (none, a0, a1), a2 stays: it is version 4's pre-image.
    assert report["entries_dropped"] == 3 and report["objects_removed"] == 2
    store = History(root / ".edit-coordinator")
    kept = store.entries("a.txt")
    assert [e.version for e in kept] == [6, 5, 4]
    for e in kept + store.entries("b.txt"):
        if e.before:
            store.load(e.before)  # every kept entry's pre-image is still there, intact
    # The oldest kept version can still be undone to.
    assert cli(capsys, root, "restore", "a.txt", "--before", "4")[0] == 0
    assert (root / "a.txt").read_text().startswith("a.txt 2 ")
    # A version dropped by gc is refused with an explanation.
    rc, _, err = cli(capsys, root, "restore", "a.txt", "--to", "1")
    assert rc == exit_status("invalid_argument") and "[invalid_argument]" in err and "no version 1" in err
    # The next write still gets the next number.
    c.session("s").read("a.txt")
    assert c.session("s").write("a.txt", "after gc\n").version == 8


def test_gc_total_bytes_drops_oldest_first_and_never_the_newest(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    _versions(c, "s", "old.txt", 3, size=1000)
    newest_old = max(e.time for e in History(root / ".edit-coordinator").entries("old.txt"))
    while time.time() <= newest_old:  # the next writes are later, so "oldest first" has one answer
        time.sleep(0.001)
    _versions(c, "s", "new.txt", 3, size=1000)
    # Stored: old0..old2, new0..new2 (1001 bytes each). A cap of 5100 frees one: old0, once old's versions
    # 1 (which made it) and 2 (whose pre-image it is) are dropped, oldest first.
    dry = cli_json(capsys, root, "gc", "--max-bytes", "5100", "--dry-run")
    assert dry["dry_run"] and dry["objects_removed"] == 1 and len(_objects(root)) == 6

    report = cli_json(capsys, root, "gc", "--max-bytes", "5100")
    assert report["bytes_after"] == 5005 and not report["over_budget"] and report["objects_removed"] == 1
    assert len(_objects(root)) == 5
    store = History(root / ".edit-coordinator")
    assert [e.version for e in store.entries("old.txt")] == [3]  # the oldest entries went first
    assert [e.version for e in store.entries("new.txt")] == [3, 2, 1]

    report = cli_json(capsys, root, "gc", "--max-bytes", "0")
    assert report["over_budget"] and report["notes"]
    assert [e.version for e in store.entries("old.txt")] == [3]  # the newest of each file stays
    assert [e.version for e in store.entries("new.txt")] == [3]
    assert len(_objects(root)) == 4  # each newest version's pre-image and result


def test_gc_puts_back_an_object_a_racing_writer_referenced(
    repo: tuple[Path, Coordinator], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loose objects (the earlier format): a writer that found one just before gc moved it away appends its
    entry under its lock; gc waits for the locks, sees the new reference and keeps the object."""
    root, _ = repo
    state = root / ".edit-coordinator"
    digests = _legacy_versions(root, "a.txt", 3)
    store = History(state)
    doomed = store.entries("a.txt")[-2].before  # v2's pre-image, dropped with --keep-versions 1
    assert doomed == digests[0] and store.has(doomed)
    real_barrier = retention._lock_barrier

    def barrier_with_a_racing_writer(lock_dir: Path, timeout: float) -> None:
        # As a writer that saw the object before it was moved: it appends an entry referring to it.
        assert not store.has(doomed)
        line = {"version": 1, "time": time.time(), "session": "racer", "operation": "edit", "path": "b.txt",
                "before": doomed, "after": None, "size_before": 1, "size_after": 0, "first_line": 1,
                "last_line": 1}  # fmt: skip
        with open(store.index_path("b.txt"), "a") as f:
            f.write(json.dumps(line) + "\n")
        real_barrier(lock_dir, timeout)

    monkeypatch.setattr(retention, "_lock_barrier", barrier_with_a_racing_writer)
    report = collect(state, RetentionPolicy(max_versions_per_file=1))
    assert report.restored_after_race == 1
    assert store.has(doomed) and store.load(doomed)


def test_gc_index_rewrite_waits_for_the_path_lock(repo: tuple[Path, Coordinator]) -> None:
    root, c = repo
    state = root / ".edit-coordinator"
    _versions(c, "s", "a.txt", 3)
    before = _objects(root)
    held = c.locks.acquire("a.txt")  # a writer of a.txt is busy
    try:
        with pytest.raises(retention.CoordinatorError) as info:
            collect(state, RetentionPolicy(max_versions_per_file=1), lock_timeout=0.2)
        assert info.value.code == "lock_timeout"
    finally:
        held.release()
    assert len(History(state).entries("a.txt")) == 3  # not rewritten under a writer's feet
    assert _objects(root) == before


def test_gc_sweep_deletes_nothing_while_a_lock_stays_held(repo: tuple[Path, Coordinator]) -> None:
    """Loose objects (the earlier format): the barrier cannot pass a held lock, so gc puts everything back
    rather than guess."""
    root, c = repo
    state = root / ".edit-coordinator"
    digests = _legacy_versions(root, "a.txt", 3)
    before = _loose(root)
    assert before == set(digests[:2])
    held = c.locks.acquire("busy.txt")  # some other path's writer is in the middle of a write
    try:
        with pytest.raises(retention.CoordinatorError) as info:
            collect(state, RetentionPolicy(max_versions_per_file=1), lock_timeout=0.2)
        assert info.value.code == "lock_timeout"
        assert _loose(root) == before
        assert not any((state / "history" / "trash").rglob("*[0-9a-f]"))
    finally:
        held.release()
    store = History(state)
    assert [e.version for e in store.entries("a.txt")] == [3]  # the index was rewritten
    report = collect(state, RetentionPolicy(max_versions_per_file=1))  # lock free now: the sweep runs
    assert report.objects_removed == 2 and not _loose(root)  # v3's pre-image moved into the pack first
    assert store.load(digests[1], "a.txt") == b"a.txt 1\n"


def test_gc_recovers_the_trash_of_an_interrupted_run(repo: tuple[Path, Coordinator]) -> None:
    root, _ = repo
    state = root / ".edit-coordinator"
    _legacy_versions(root, "a.txt", 3)
    store = History(state)
    digest = store.entries("a.txt")[0].before
    assert digest
    trash = state / "history" / "trash" / "1234-dead"
    trash.mkdir(parents=True)
    os.replace(store.object_path(digest), trash / digest)  # as if a gc died mid-sweep
    report = collect(state, RetentionPolicy())
    assert report.recovered_from_earlier_run == 1
    # Both loose pre-images moved into the pack (their loose copies removed), the recovered one included.
    assert report.objects_removed == 2 and not _loose(root)
    assert store.load(digest) and store.load(digest, "a.txt")


def test_retention_policy_file_and_sizes(tmp_path: Path) -> None:
    assert parse_size("512M") == 512 * 1024**2 and parse_size("1.5GiB") == int(1.5 * 1024**3)
    assert parse_size("1000") == 1000
    with pytest.raises(retention.CoordinatorError):
        parse_size("lots")
    with pytest.raises(retention.CoordinatorError):
        RetentionPolicy(max_versions_per_file=0)
    assert RetentionPolicy.load(tmp_path) == RetentionPolicy()
    RetentionPolicy(7, 1234).save(tmp_path)
    assert RetentionPolicy.load(tmp_path) == RetentionPolicy(7, 1234)
    (tmp_path / "retention.json").write_text('{"max_total_bytes": "1K", "keep": 3}')
    with pytest.raises(retention.CoordinatorError) as info:
        RetentionPolicy.load(tmp_path)
    assert "keep" in info.value.message


def test_gc_uses_the_saved_policy(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    _versions(c, "s", "a.txt", 4)
    assert cli(capsys, root, "gc", "--keep-versions", "2", "--save", "--dry-run")[0] == 0
    assert len(History(root / ".edit-coordinator").entries("a.txt")) == 4
    cli_json(capsys, root, "gc")
    assert len(History(root / ".edit-coordinator").entries("a.txt")) == 2


# --- status and top ------------------------------------------------------------------------------------------


def test_status_shows_sessions_writes_locks_and_redis(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    three_versions(root, c)
    other = c.session("agent-z")
    with pytest.raises(CoordinatorError):
        other.edit("f.txt", "x", "y")  # never read: a not_read refusal, counted at the next write
    c.session("agent-y").read("f.txt")
    c.session("agent-y").write("f.txt", "final\n")
    # agent-x was last seen long ago: idle.
    c.state.register("agent-x", time.time() - 3600)
    held = c.locks.acquire("f.txt")
    try:
        data = cli_json(capsys, root, "status", "--active-window", "60")
    finally:
        held.release()
    assert data["redis"]["ok"] and data["redis"]["ping_ms"] >= 0
    states = {s["session"]: s["state"] for s in data["sessions"]}
    assert states == {"agent-x": "idle", "agent-y": "active"}
    assert (data["active"], data["idle"]) == (1, 1)
    assert [(w["path"], w["version"]) for w in data["recent_writes"]][:3] == [
        ("f.txt", 4),
        ("f.txt", 3),
        ("f.txt", 2),
    ]
    assert [lk["path"] for lk in data["locks_held"]] == ["f.txt"]
    assert data["conflicts"] == {"not_read": 1}
    assert data["history"]["entries"] == 4 and data["history"]["bytes"] > 0

    assert cli_json(capsys, root, "status")["locks_held"] == []  # released
    rc, out, _ = cli(capsys, root, "status")
    assert rc == 0 and "agent-y" in out and "Redis: ok" in out
    assert "not_read" in out and "Refusals by code: none" not in out


def test_status_without_a_running_redis_does_not_start_one(tmp_path: Path, capsys: Any) -> None:
    root = tmp_path / "quiet"
    root.mkdir()
    data = cli_json(capsys, root, "status")
    assert not data["redis"]["ok"] and "not running" in data["redis"]["error"]
    # What Redis holds is not shown as empty: it is said to be unknown, and why.
    stopped = "the embedded Redis server is not running"
    assert data["sessions"] == [] and data["sessions_note"] == stopped
    assert data["leases"] == [] and data["leases_note"] == stopped
    assert data["conflicts"] is None and data["conflicts_note"] == stopped
    assert not (root / ".edit-coordinator").exists()
    # A stopped embedded server is no failure (it stops when no session uses it): said plainly, exit 0.
    rc, out, _ = cli(capsys, root, "status")
    assert rc == 0 and "Redis: the embedded Redis server is not running (it starts on first use" in out, out
    assert f"Sessions: not available ({stopped})." in out and "unavailable" not in out, out
    assert f"Refusals by code: not available ({stopped})." in out, out
    assert "Recent writes: none recorded." in out and "┏" not in out, out  # no empty tables
    rc, out, _ = cli(capsys, root, "status", "--redis-url", "redis://127.0.0.1:1")
    assert rc == 1 and "Leases: Redis is not reachable." in out and "Redis: unavailable" in out
    assert "Refusals by code: not available (Redis is not reachable)." in out, out


def test_top_refreshes_and_stops(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    root, c = repo
    three_versions(root, c)
    rc, out, _ = cli(capsys, root, "top", "--iterations", "2", "--interval", "0.1")
    assert rc == 0 and "Recent writes" in out and "agent-y" in out


def test_status_lists_leases_in_force(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    leases = pytest.importorskip("coordinator.state.leases")
    root, c = repo
    leases.LeaseStore(c.redis, c.namespace).grant("agent-x", ["src/**"], mode="exclusive", ttl_s=60.0)
    data = cli_json(capsys, root, "status")
    assert [(x["session"], x["pattern"], x["mode"]) for x in data["leases"]] == [("agent-x", "src/**", "exclusive")]
    rc, out, _ = cli(capsys, root, "status")
    assert rc == 0 and "src/**" in out


def test_commands_are_wired_into_edit_coordinator(tmp_path: Path, capsys: Any) -> None:
    from coordinator.cli import main as edit_coordinator

    for command in ("history", "undo", "redo", "gc", "status", "top"):
        with pytest.raises(SystemExit) as info:
            edit_coordinator([command, "--help"])
        assert info.value.code == 0
    (tmp_path / "x.txt").write_text("x\n")
    assert edit_coordinator(["history", "--root", str(tmp_path), "x.txt"]) == 0
    assert "No recorded writes of x.txt" in capsys.readouterr().out


def _user() -> str:
    return cmd_repo.operator_id().split(":", 1)[1]


def test_piped_output_is_not_cut_at_80_columns(
    repo: tuple[Path, Coordinator], capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Output to a pipe (capsys is no terminal) keeps every cell whole: no wrap, no "…" at 80 columns."""
    monkeypatch.delenv("COLUMNS", raising=False)
    root, c = repo
    long_id = "agent-" + "with-a-rather-long-descriptive-name-" * 3
    c.session(long_id).write("f.txt", "a\n")
    rc, out, _ = cli(capsys, root, "history", "f.txt")
    assert rc == 0
    row = next(line for line in out.splitlines() if "write" in line)
    assert long_id in row and "…" not in out and len(row) > 80


def test_history_json_uses_the_http_services_key_names(repo: tuple[Path, Coordinator], capsys: Any) -> None:
    """One set of names: `history --json` has the keys of `POST /v1/history`'s answer (its OpenAPI schema),
    each entry every field the service gives; the command's additions are extra keys, never renames."""
    from coordinator.server.models import HistoryResponse

    schema = HistoryResponse.model_json_schema()
    entry_schema = schema["$defs"]["HistoryEntry"]["properties"]
    root, c = repo
    three_versions(root, c)
    data = cli_json(capsys, root, "history", "f.txt")
    assert set(schema["properties"]) <= set(data)
    assert all(set(entry_schema) <= set(row) for row in data["entries"]) and len(data["entries"]) == 3
    assert set(cli_json(capsys, root, "history", "--session", "agent-x")) == {"session", "entries"}
    (root / "unwritten.txt").write_text("u\n")
    assert cli_json(capsys, root, "history", "unwritten.txt") == {"path": "unwritten.txt", "entries": [], "total": 0}
