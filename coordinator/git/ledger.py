"""Which writes are committed: the per-session marks of this package, over the history's entries.

The mark of a session is, per path, the newest version of that session already in a commit made by `commit`
(or recognised in one made outside the coordinator). Stored as one JSON file per session under the state
folder's git/ folder, replaced atomically; only `commit` writes it, after the branch ref moved.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from coordinator.disk.layout import history_dir, state_dir_of
from coordinator.hashing import file_stem
from coordinator.history import History, HistoryEntry

LEDGER_DIR = "git"


@dataclass(frozen=True)
class PathWrites:
    """One path's recorded writes (oldest first) and the versions each session already committed."""

    key: str
    entries: list[HistoryEntry]


def _marks_file(state_dir: Path, session_id: str) -> Path:
    return state_dir / LEDGER_DIR / f"{file_stem(session_id)}.json"


def read_marks(state_dir: Path, session_id: str) -> dict[str, int]:
    try:
        data = json.loads(_marks_file(state_dir, session_id).read_text())
    except (OSError, ValueError):
        return {}
    marks = data.get("paths", {}) if isinstance(data, dict) else {}
    return {k: v for k, v in marks.items() if isinstance(k, str) and isinstance(v, int)}


def write_marks(state_dir: Path, session_id: str, marks: dict[str, int]) -> None:
    target = _marks_file(state_dir, session_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".marks-")
    with os.fdopen(fd, "w") as f:
        json.dump({"session": session_id, "paths": marks}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


class Ledger:
    """The history of a root read for git: all paths' writes, and each session's committed marks."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.state_dir = state_dir_of(self.root)
        self._marks: dict[str, dict[str, int]] = {}
        self.history: History | None = (
            History(self.state_dir, fsync=True) if history_dir(self.state_dir).is_dir() else None
        )

    def marks(self, session_id: str) -> dict[str, int]:
        if session_id not in self._marks:
            self._marks[session_id] = read_marks(self.state_dir, session_id)
        return self._marks[session_id]

    def all_paths(self) -> list[PathWrites]:
        if self.history is None:
            return []
        found = []
        for index in self.history.scan():
            entries = sorted(index.entries, key=lambda e: e.version)
            if entries:
                found.append(PathWrites(entries[0].path, entries))
        return found

    def path_writes(self, key: str) -> PathWrites:
        if self.history is None:
            return PathWrites(key, [])
        return PathWrites(key, sorted(self.history.entries(key), key=lambda e: e.version))

    def uncommitted(self, writes: PathWrites) -> list[HistoryEntry]:
        """The entries of `writes` not yet committed by their session."""
        return [e for e in writes.entries if e.version > self.marks(e.session).get(writes.key, 0)]

    def load(self, key: str, digest: str | None) -> bytes | None:
        if digest is None or self.history is None:
            return None
        return self.history.load(digest, key)
