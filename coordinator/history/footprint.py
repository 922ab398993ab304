"""How big the history is: entries and bytes on disk, measured without reading it all each time.

For the service's metrics, asked at every scrape (server/metrics.py caches the answer for a few seconds
too). Bytes are the sizes of the history's files (indexes, packs, loose objects): a stat each, no read.
Entries are the index lines: an index is append-only between two gc runs, so each index file's count is
kept with the (size, mtime) it was made at and an index is parsed again only when that changed. The cost
of a measure is one stat per history file plus the parse of the indexes written since the last measure.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

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
        self._counts: dict[str, tuple[int, int, int]] = {}  # index name -> (size, mtime_ns, entries)
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
            if known is None or known[:2] != (st.st_size, st.st_mtime_ns):
                known = (st.st_size, st.st_mtime_ns, len(self.history.read_index(name).lines))
            seen[name] = known
            entries += known[2]
        self._counts = seen  # indexes removed since are forgotten
        return entries, total


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
