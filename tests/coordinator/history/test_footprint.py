"""The history's size for the metrics (history/footprint.py): entries and bytes, with an index parsed again
only once it has changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.history import footprint
from coordinator.history._format import count_entry_lines
from coordinator.history.footprint import FootprintMeter


def _bytes_on_disk(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_entries_and_bytes_follow_the_writes(coord: Coordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    meter = FootprintMeter(coord.history_store)
    assert meter.measure().entries == 0
    s = coord.session("a")
    s.write("one.txt", "1\n")
    s.edit("one.txt", "1", "2")
    s.write("two.txt", "x" * 5000)
    first = meter.measure()
    assert first.entries == 3
    assert first.bytes == _bytes_on_disk(coord.history_store.base)
    assert first.bytes > 5000

    reads: list[tuple[int, int]] = []
    count_from = footprint._count_from

    def recording(path: str, start: int, end: int) -> tuple[int, int]:
        reads.append((start, end))
        return count_from(path, start, end)

    monkeypatch.setattr(footprint, "_count_from", recording)
    assert meter.measure() == first
    assert reads == []  # nothing changed: no index read again
    s.edit("one.txt", "2", "3")
    assert meter.measure().entries == 4
    [(start, end)] = reads  # only the index of one.txt, from where its last count stopped
    assert 0 < start < end

    for name in os.listdir(coord.history_store.index):  # an index removed (gc of a whole path) is forgotten
        if coord.history_store.key_of(name.removesuffix(".jsonl")) == "two.txt":
            os.remove(coord.history_store.index / name)
    assert meter.measure().entries == 3


def test_entry_lines_are_counted_without_parsing() -> None:
    header = b'{"format": 2, "pack": 3}\n'
    assert count_entry_lines(b"") == 0
    assert count_entry_lines(b'{"v":1}\n{"v":2}\n') == 2
    assert count_entry_lines(header + b'{"v":1}\n\n{"v":2}\n') == 2  # the header and a blank line are not entries
    assert count_entry_lines(b'\n{"v":1}\n') == 1


def test_a_line_being_appended_is_counted_once_whole(coord: Coordinator) -> None:
    s = coord.session("a")
    s.write("t.txt", "1\n")
    meter = FootprintMeter(coord.history_store)
    assert meter.measure().entries == 1
    [index] = coord.history_store.index.iterdir()
    line = index.read_bytes().splitlines(keepends=True)[-1]
    with open(index, "ab") as f:  # half of a line, as a crash or a concurrent append would leave it
        f.write(line[:10])
    assert meter.measure().entries == 1
    with open(index, "ab") as f:
        f.write(line[10:])
    assert meter.measure().entries == 2
    index.write_bytes(line)  # replaced (as gc does) by a shorter file
    assert meter.measure().entries == 1
