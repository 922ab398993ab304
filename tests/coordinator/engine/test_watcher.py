"""The tree watcher (engine/watcher.py): every change to the tree, whatever made it, is recorded as a version
with its author; what git would not track stays out; an agent's call accounts for the changes it made."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.agents.adapter import HookAdapter
from coordinator.engine.watcher import TreeWatcher
from tests.coordinator.agents.hooking import Agent, payload, run


@pytest.fixture
def watched(real_redis_root: Path) -> Iterator[tuple[Coordinator, TreeWatcher]]:
    root = real_redis_root
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("build/\n.edit-coordinator/\n")
    (root / "app.py").write_text("a = 1\n")
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start"], check=True
    )
    with Coordinator(root, durability="none") as coord:
        watcher = TreeWatcher(coord.root, coord.agent_writes.observed)
        watcher.start()
        try:
            yield coord, watcher
        finally:
            watcher.stop()


def _wait_for(check, what: str) -> None:
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, f"never seen: {what}"
        time.sleep(0.02)


def _ops(coord: Coordinator, key: str) -> list[tuple[str, str]]:
    return [(e.session, e.operation) for e in reversed(coord.history(key))]


def test_a_change_by_another_program_is_a_version_by_outside_and_undoable(watched):
    coord, _ = watched
    root = Path(coord.root)
    subprocess.run([sys.executable, "-c", "open('app.py', 'a').write('b = 2\\n')"], cwd=root, check=True)
    _wait_for(lambda: coord.history("app.py"), "the outside write")
    (entry,) = coord.history("app.py")
    assert (entry.session, entry.operation) == ("outside", "outside")
    assert coord.history_store.load(entry.before, "app.py") == b"a = 1\n"  # the committed content
    # it is undoable like any version
    s = coord.session("reviewer")
    s.read("app.py")
    s.undo("app.py", version=entry.version)
    assert (root / "app.py").read_text() == "a = 1\n"


def test_ignored_paths_and_the_state_folder_stay_out(watched):
    coord, _ = watched
    root = Path(coord.root)
    (root / "build").mkdir()
    (root / "build" / "out.txt").write_text("x\n")
    (root / "new.py").write_text("n = 1\n")  # a new file: tracked (not ignored)
    _wait_for(lambda: coord.history("new.py"), "the new file")
    assert coord.history("build/out.txt") == []
    assert _ops(coord, "new.py") == [("outside", "outside")]


def test_an_agents_atomic_write_temporary_is_no_file_of_the_tree(watched):
    """Claude Code writes NAME.tmp.PID.HEX, then renames it over NAME: the temporary stays out (under load
    the watcher looked at it before the rename and recorded a created file), the rename is NAME's change."""
    coord, watcher = watched
    root = Path(coord.root)
    assert watcher._key(str(root / "app.py.tmp.15331.4322a3324f36")) is None
    assert watcher._key(str(root / "notes.tmp")) == "notes.tmp" and watcher._key(str(root / "a.tmp.1.x")) == "a.tmp.1.x"
    temporary = root / "app.py.tmp.15331.4322a3324f36"
    temporary.write_text("a = 2\n")
    time.sleep(0.3)  # longer than the watcher's delay: it has looked at the temporary, alone
    os.replace(temporary, root / "app.py")
    _wait_for(lambda: coord.history("app.py"), "the rename")
    assert _ops(coord, "app.py") == [("outside", "outside")]
    assert coord.history(temporary.name) == []


def test_the_coordinators_own_writes_are_not_recorded_twice(watched):
    coord, _ = watched
    s = coord.session("lib")
    s.read("app.py")
    s.edit("app.py", "a = 1", "a = 2")
    s.edit("app.py", "a = 2", "a = 3")
    (Path(coord.root) / "marker.py").write_text("m\n")  # seen after the edits' events
    _wait_for(lambda: coord.history("marker.py"), "the marker")
    assert _ops(coord, "app.py") == [("lib", "edit"), ("lib", "edit")]


def test_an_agent_write_is_attributed_to_its_call_even_without_its_after_hook(watched):
    coord, _ = watched
    root = Path(coord.root)
    hooks = HookAdapter(coord, session_end=lambda r, s: None)
    Agent(hooks, root, "alice").read("app.py")
    fields = {"session_id": "alice", "tool_use_id": "t1", "tool_input__file_path": str(root / "app.py")}
    assert run(hooks, payload("pre_edit", root, **fields)).allow
    (root / "app.py").write_text("a = 10\n")  # the agent's own write; its PostToolUse never comes
    _wait_for(lambda: coord.history("app.py"), "the agent's write")
    assert _ops(coord, "app.py") == [("alice", "edit")]
    # once her call has ended, a change by another program is no longer hers
    run(hooks, payload("post_edit", root, **fields))
    (root / "app.py").write_text("a = 11\n")
    _wait_for(lambda: len(coord.history("app.py")) == 2, "the later outside write")
    assert _ops(coord, "app.py") == [("alice", "edit"), ("outside", "outside")]


def test_the_hook_service_watches_its_repository(real_redis_root: Path):
    """The per-repository hook service (started by the first hook) runs the watcher: a change made by
    another program appears in the history without any hook or coordinator call."""
    from coordinator.cli import hookservice

    root = real_redis_root
    hookservice.start(str(root))
    try:
        (root / "notes.txt").write_text("one\n")  # created, then changed, by another program
        with Coordinator(root, durability="none") as coord:
            _wait_for(lambda: coord.history("notes.txt"), "the creation")
            (root / "notes.txt").write_text("one\ntwo\n")
            _wait_for(lambda: len(coord.history("notes.txt")) == 2, "the change")
            change, creation = coord.history("notes.txt")
            assert creation.before is None and change.session == "outside"
            assert coord.history_store.load(change.after, "notes.txt") == b"one\ntwo\n"
    finally:
        hookservice.stop(str(root))


def test_another_programs_change_between_an_agents_hooks_is_not_credited_to_the_agent(watched):
    """The agent's Edit is seen and recorded as its write; another program then changes the file before the
    agent's PostToolUse: that change is a version by outside, and undoing the agent's edit keeps it."""
    coord, _ = watched
    root = Path(coord.root)
    app = root / "app.py"
    app.write_text("a = 1\nb = 2\n")
    _wait_for(lambda: coord.history("app.py"), "the outside baseline")
    hooks = HookAdapter(coord, session_end=lambda r, s: None)
    Agent(hooks, root, "alice").read("app.py")
    fields = {"session_id": "alice", "tool_use_id": "t1", "tool_input__file_path": str(app)}
    assert run(hooks, payload("pre_edit", root, **fields)).allow
    app.write_text("a = 10\nb = 2\n")  # the agent's own write
    _wait_for(lambda: len(coord.history("app.py")) == 2, "the agent's write")
    app.write_text("a = 10\nb = 20\n")  # a formatter, an editor: before the agent's PostToolUse
    _wait_for(lambda: len(coord.history("app.py")) == 3, "the other program's write")
    run(hooks, payload("post_edit", root, **fields))
    assert _ops(coord, "app.py")[1:] == [("alice", "edit"), ("outside", "outside")]
    s = coord.session("alice")
    s.read("app.py")
    s.undo("app.py")
    assert app.read_text() == "a = 1\nb = 20\n"


def test_git_is_asked_once_per_path_until_a_gitignore_changes(watched, monkeypatch):
    """A `git check-ignore` process per change cost a hooked Edit ~10 ms per hook event: the answer is kept
    per path, and asked again once a .gitignore changes (a new file it ignores then stays out)."""
    coord, watcher = watched
    root = Path(coord.root)
    asked: list[list[str]] = []
    real = watcher._ask_git
    monkeypatch.setattr(watcher, "_ask_git", lambda keys: asked.append(list(keys)) or real(keys))
    for n in range(3):
        (root / "app.py").write_text(f"a = {n + 2}\n")
        _wait_for(lambda n=n: len(coord.history("app.py")) == n + 1, f"change {n}")
    assert [keys for keys in asked if "app.py" in keys] == [["app.py"]]
    (root / "gen.py").write_text("g = 1\n")
    _wait_for(lambda: coord.history("gen.py"), "the new file")
    (root / ".gitignore").write_text("build/\n.edit-coordinator/\ngen.py\n")
    _wait_for(lambda: any(".gitignore" in keys for keys in asked), "the .gitignore change")
    (root / "gen.py").write_text("g = 2\n")
    (root / "app.py").write_text("a = 9\n")
    _wait_for(lambda: len(coord.history("app.py")) == 4, "the change after it")
    assert len([keys for keys in asked if "app.py" in keys]) == 2  # asked again after the .gitignore change
    assert len(coord.history("gen.py")) == 1  # now ignored: its change stays out


def test_names_git_reads_as_pathspec_magic_are_judged_as_files(watched):
    """`git check-ignore` reads its paths as pathspecs: a file named `:(top)build` was taken for the ignored
    folder `build` and its writes left out, and a `:!x.py` in a batch made git fail for all of it."""
    coord, watcher = watched
    root = Path(coord.root)
    (root / "build").mkdir()
    assert watcher._ask_git([":(top)build", ":!x.py", "build/out.o", "app.py"]) == {"build/out.o"}
    (root / ":(top)build").write_text("kept = 1\n")
    _wait_for(lambda: coord.history(":(top)build"), "the write of ':(top)build'")
    assert _ops(coord, ":(top)build") == [("outside", "outside")]
