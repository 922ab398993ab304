"""How big the history is: entries and bytes on disk, measured without reading it all each time.

For the service's metrics, asked at every scrape (server/metrics.py caches the answer for a few seconds
too). Bytes are the sizes of the history's files (indexes, packs, loose objects): a stat each, no read.
Entries are the index's entry lines, counted as complete lines (`count_entry_lines`: no JSON parsed; a
damaged line counts as one). An index only grows between two gc runs (appends under the path's lock; a
taken-back entry truncates it; gc replaces the file), so each index's count is kept with its inode and
size: a grown file has only its new bytes counted, a replaced or shrunk one is counted again. A measure
costs one stat per history file plus a read of the index bytes written since the last one.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from coordinator.history._format import count_entry_lines
from coordinator.history._store import History


@dataclass(frozen=True)
class Footprint:
    """The history's size: versions recorded (all paths) and bytes its files take."""

    entries: int
    bytes: int


class FootprintMeter:
    """Measures one history's `Footprint`, remembering each index's entry count (see the module)."""

    def __init__(self, history: History) -> None:
        self.history = history
        self._counts: dict[str, tuple[int, int, int]] = {}  # index name -> (inode, size, entries)
        self._lock = threading.Lock()

    def measure(self) -> Footprint:
        with self._lock:
            entries, index_bytes = self._count_indexes()
        pack_bytes = _sizes_in(str(self.history.packs))
        loose_bytes = sum(size for _, _, size in self.history.iter_loose())
        return Footprint(entries, index_bytes + pack_bytes + loose_bytes)

    def _count_indexes(self) -> tuple[int, int]:
        seen: dict[str, tuple[int, int, int]] = {}
        entries = total = 0
        for item in _files_in(str(self.history.index)):
            name = item.name[: -len(".jsonl")] if item.name.endswith(".jsonl") else None
            try:
                st = item.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            total += st.st_size
            if name is None:
                continue
            known = self._counts.get(name)
            if known is None or known[0] != st.st_ino or st.st_size < known[1]:
                known = (st.st_ino, 0, 0)  # new, replaced by gc, or an entry taken back: count it all
            if st.st_size > known[1]:
                counted, upto = _count_from(item.path, known[1], st.st_size)
                known = (st.st_ino, upto, known[2] + counted)
            seen[name] = known
            entries += known[2]
        self._counts = seen  # indexes removed since are forgotten
        return entries, total


def _count_from(path: str, start: int, end: int) -> tuple[int, int]:
    """The entry lines of an index's complete lines from byte `start` (0, or where an earlier count
    stopped: a line's end) up to `end`, and the offset after the last of them, where the next count starts
    (a line still being appended is counted once it is whole)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
    except FileNotFoundError:
        return 0, start
    whole = data[: data.rfind(b"\n") + 1]
    return count_entry_lines(whole), start + len(whole)


def _files_in(folder: str) -> list[os.DirEntry[str]]:
    try:
        return [e for e in os.scandir(folder) if e.is_file(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def _sizes_in(folder: str) -> int:
    total = 0
    for item in _files_in(folder):
        try:
            total += item.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            continue
    return total
