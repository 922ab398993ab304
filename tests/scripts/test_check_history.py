"""scripts/check_history.py, the after-the-fault-run check: it finds an entry that never reached the file,
and undoes the newest version of each file."""

from __future__ import annotations

from pathlib import Path

from coordinator.history import HistoryEntry
from coordinator.history._format import content_hash
from tests.scripts import load_tool

check_history = load_tool("check_history")


def _entry(version: int, before: str | None, after: str | None) -> HistoryEntry:
    return HistoryEntry(version, 0.0, "s", "edit", "f.txt", before, after, 0, 0, 1, 1)


def test_chain_breaks_finds_a_version_that_never_reached_the_file() -> None:
    a, b, c, ghost = (content_hash(x) for x in (b"a", b"b", b"c", b"ghost"))
    real = [_entry(3, b, c), _entry(2, a, b), _entry(1, None, a)]  # newest first
    assert check_history.chain_breaks(real, c) == []
    # Version 3 was recorded, its rename never happened; version 4 found the file as version 2 left it.
    phantom = [_entry(4, b, c), _entry(3, b, ghost), _entry(2, a, b), _entry(1, None, a)]
    assert check_history.chain_breaks(phantom, c) == [3]
    # The newest entry never reached the file.
    assert check_history.chain_breaks([_entry(2, a, ghost), _entry(1, None, a)], a) == [2]


def test_the_check_passes_after_real_writes_and_undoes_each_newest_version(real_redis_root: Path) -> None:
    from coordinator import Coordinator

    root = real_redis_root
    with Coordinator(root, durability="none") as c:
        s = c.session("w")
        s.write("a.txt", "one\n")
        s.edit("a.txt", "one", "two")
        s.write("sub/b.txt", "b\n")
    assert check_history.main([str(root)]) == 0
    assert (root / "a.txt").read_text() == "one\n"  # the newest version (the edit) was undone
    assert not (root / "sub" / "b.txt").exists()  # its only version created it
