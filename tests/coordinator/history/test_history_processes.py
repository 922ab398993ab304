"""The history against other programs and crashes, with real processes and the embedded (real) Redis.

- A program that keeps the file open (a logger in append mode) and writes after an edit, or an outside
  write through another hard link, must not reach the stored pre-image: undo still restores it.
- A writer killed between its history entry and the replace leaves an entry for a version that never
  reached the file: the next lock of the path (a write, a history listing) and gc take it back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from coordinator import Coordinator
from coordinator.history import History
from coordinator.history.retention import RetentionPolicy, collect
from tests import REPO_ROOT

STATE = ".edit-coordinator"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


_APPENDING_LOGGER = textwrap.dedent("""
    import sys
    f = open(sys.argv[1], "a")
    print("open", flush=True)
    sys.stdin.readline()
    f.write("written later by the logger\\n")
    f.flush()
    print("done", flush=True)
""")


def test_a_program_appending_to_the_open_file_cannot_damage_the_preimage(real_redis_root: Path) -> None:
    root = real_redis_root
    (root / "app.log").write_text("original\n")
    logger = subprocess.Popen(
        [sys.executable, "-c", _APPENDING_LOGGER, str(root / "app.log")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert logger.stdout is not None and logger.stdin is not None
    try:
        assert logger.stdout.readline().strip() == "open"  # the logger holds the original inode open
        with Coordinator(root) as coord:
            s = coord.session("agent")
            s.read("app.log")
            s.edit("app.log", "original", "edited")
            logger.stdin.write("go\n")
            logger.stdin.flush()
            assert logger.stdout.readline().strip() == "done"  # it wrote into the inode it holds
            assert (root / "app.log").read_text() == "edited\n"
            s.undo("app.log")  # failed before: io_error "stored content is damaged"
            assert (root / "app.log").read_text() == "original\n"
            assert [e.operation for e in coord.history("app.log")] == ["undo", "edit"]
    finally:
        logger.wait(30)


def test_a_write_through_another_hard_link_cannot_damage_the_preimage(real_redis_root: Path) -> None:
    root = real_redis_root
    (root / "f.txt").write_text("one\n")
    os.link(root / "f.txt", root / "other-link.txt")
    with Coordinator(root) as coord:
        s = coord.session("agent")
        s.read("f.txt")
        s.edit("f.txt", "one", "two")
        with open(root / "other-link.txt", "a") as f:  # the old inode, kept alive by the other link
            f.write("changed through the other link\n")
        s.undo("f.txt")
        assert (root / "f.txt").read_text() == "one\n"


_KILLED_WRITER = textwrap.dedent("""
    import sys
    from coordinator import Coordinator
    with Coordinator(sys.argv[1]) as coord:
        s = coord.session("killed")
        s.read("f.txt")
        s.edit("f.txt", sys.argv[2], sys.argv[3])
    print("not killed", flush=True)
""")


def _killed_edit(root: Path, fault: str, old: str, new: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(root), old, new],
        env=_env(EDIT_COORDINATOR_FAULT=fault),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == -9, (run.returncode, run.stdout, run.stderr)  # killed at the fault point


def test_an_entry_whose_rename_never_happened_is_taken_back(real_redis_root: Path) -> None:
    root = real_redis_root
    with Coordinator(root) as coord:
        s = coord.session("agent")
        s.write("f.txt", "v1\n")
        _killed_edit(root, "after-entry", "v1", "v2")  # entry written, then kill -9 before the rename
        assert (root / "f.txt").read_text() == "v1\n"
        raw = History(root / STATE).entries("f.txt")
        assert [e.version for e in raw] == [2, 1]  # what was on disk after the kill: a version that never was
        listed = subprocess.run(
            [sys.executable, "-m", "coordinator.cli", "history", "--root", str(root), "--json", "f.txt"],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert [v["version"] for v in json.loads(listed.stdout)["entries"]] == [1], listed.stderr  # the command
        assert [e.version for e in coord.history("f.txt")] == [1]  # listing takes the path's lock: reconciled
        s.read("f.txt")
        assert s.edit("f.txt", "v1", "v3").version == 3  # the number is skipped, never reused
        assert [(e.version, e.session) for e in coord.history("f.txt")] == [(3, "agent"), (1, "agent")]
        s.undo("f.txt")
        assert (root / "f.txt").read_text() == "v1\n"


def test_the_next_write_reconciles_and_gc_too(real_redis_root: Path) -> None:
    root = real_redis_root
    with Coordinator(root) as coord:
        s = coord.session("agent")
        s.write("f.txt", "v1\n")
        s.write("g.txt", "g1\n")
        _killed_edit(root, "after-entry", "v1", "v2")
        s.read("f.txt")
        s.edit("f.txt", "v1", "v3")  # the write itself reconciles before it records its own entry
        assert [e.version for e in History(root / STATE).entries("f.txt")] == [3, 1]
        _killed_edit(root, "after-entry", "v3", "v4")
        report = collect(root / STATE, RetentionPolicy())
        assert report.not_applied_taken_back == 1
        assert [e.version for e in History(root / STATE).entries("f.txt")] == [3, 1]
        assert [e.version for e in History(root / STATE).entries("g.txt")] == [1]


def test_an_entry_whose_rename_happened_before_the_kill_is_kept(real_redis_root: Path) -> None:
    root = real_redis_root
    with Coordinator(root) as coord:
        s = coord.session("agent")
        s.write("f.txt", "v1\n")
        _killed_edit(root, "before-commit", "v1", "v2")  # the file was replaced, the mark never written
        assert (root / "f.txt").read_text() == "v2\n"
        assert [e.version for e in coord.history("f.txt")] == [2, 1]
        assert collect(root / STATE, RetentionPolicy()).not_applied_taken_back == 0
        s.read("f.txt")
        s.edit("f.txt", "v2", "v3")
        assert [e.version for e in coord.history("f.txt")] == [3, 2, 1]
        s.restore("f.txt", before_version=2)  # the whole file back: versions 2 and 3 discarded
        assert (root / "f.txt").read_text() == "v1\n"
