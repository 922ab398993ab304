"""What the commands for people (`history`, `undo`, `restore`, `gc`, `status`, `top`) share: a root's history
looked at without starting anything, contents by hash, the operator session id, and the time formats.

Nothing here starts the embedded Redis server or creates the state folder: a command that only inspects
opens a `Repo` and asks the history (coordinator/history, the one owner of its format) for what it needs.
"""

from __future__ import annotations

import getpass
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator.disk.layout import history_dir, state_dir_of
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.history import History, HistoryEntry, content_hash
from coordinator.history.retention import read_on_disk, settle


@dataclass(frozen=True)
class Repo:
    """A repository root (resolved) and its state folder, which may not exist."""

    root: str
    state_dir: Path

    @property
    def has_state(self) -> bool:
        return history_dir(self.state_dir).is_dir()

    def history(self) -> History:
        return History(self.state_dir, fsync=True)

    def entries(self, key: str, *, settled: bool = False) -> list[HistoryEntry]:
        """The recorded versions of `key`, newest first ([] without a history). settled=True first
        reconciles a pending newest entry with the file, so that only versions that reached it are listed."""
        if not self.has_state:
            return []
        entries = self.history().entries(key)
        if settled and entries and settle(self.state_dir, key, self.root):
            entries = self.history().entries(key)
        return entries


def open_repo(root: str) -> Repo:
    """The repository at `root` (invalid_argument if it is not a folder)."""
    real = cmd_common.real_root(root)
    return Repo(real, state_dir_of(real))


def find_version(entries: list[HistoryEntry], key: str, version: int) -> HistoryEntry:
    """The entry of `version` among `entries` (newest first), or invalid_argument naming the newest ones."""
    entry = next((e for e in entries if e.version == version), None)
    if entry is None:
        known = ", ".join(str(e.version) for e in entries[:10]) or "none"
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"{key} has no version {version} (newest versions: {known})."
        )
    return entry


def operator_id() -> str:
    """The session id a person acts as by default: ``operator:<user>``."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    user = re.sub(r"[^A-Za-z0-9._-]", "_", user)[:60] or "unknown"
    return f"operator:{user}"


def read_current(repo: Repo, key: str) -> tuple[str | None, bytes | None]:
    """The file's hash and bytes as they are on disk now, read without locks or Redis; (None, None) if it is
    missing or cannot be read."""
    try:
        data = read_on_disk(repo.root, key)
    except CoordinatorError:
        return None, None
    return (None, None) if data is None else (content_hash(data), data)


class ContentLookup:
    """The bytes of a file content by its hash: from the history store, or the file itself when its
    current content has that hash. None when neither has it (changed outside, or removed by gc)."""

    def __init__(self, repo: Repo, history: History) -> None:
        self.repo = repo
        self.history = history
        self._current: dict[str, tuple[str | None, bytes | None]] = {}

    def current(self, key: str) -> tuple[str | None, bytes | None]:
        """(hash, bytes) of the file now; (None, None) if it is missing or not a regular file."""
        if key not in self._current:
            self._current[key] = read_current(self.repo, key)
        return self._current[key]

    def get(self, key: str, digest: str | None) -> bytes | None:
        if digest is None:
            return b""
        try:
            return self.history.load(digest, key)
        except CoordinatorError:
            pass
        h, data = self.current(key)
        return data if h == digest else None


# --- time and the console --------------------------------------------------------------------------------


def rich_console() -> Any:
    return cmd_common.console(highlight=False)


def when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def duration(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d"


def ago(seconds: float) -> str:
    return f"{duration(seconds)} ago"
