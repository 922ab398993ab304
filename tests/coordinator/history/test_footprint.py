"""The history's size for the metrics (history/footprint.py): entries and bytes, with an index parsed again
only once it has changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coordinator import Coordinator
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

    parsed: list[str] = []
    read_index = coord.history_store.read_index

    def counting(name: str):  # type: ignore[no-untyped-def]
        parsed.append(name)
        return read_index(name)

    monkeypatch.setattr(coord.history_store, "read_index", counting)
    assert meter.measure() == first
    assert parsed == []  # nothing changed: no index read again
    s.edit("one.txt", "2", "3")
    assert meter.measure().entries == 4
    assert len(parsed) == 1  # only the index of one.txt

    for name in os.listdir(coord.history_store.index):  # an index removed (gc of a whole path) is forgotten
        if coord.history_store.key_of(name.removesuffix(".jsonl")) == "two.txt":
            os.remove(coord.history_store.index / name)
    assert meter.measure().entries == 3
