"""History: the pre-image of every write, content-addressed on disk, with a per-path index.

Layout under the state folder:
    history/objects/<h[:2]>/<h>       file contents, named by their XXH3-128 hash (immutable once stored)
    history/index/<path hash>.jsonl   one JSON line per write of that path: version, time, session, op, ...

Invariant: the pre-image is stored *before* the file is replaced, so every write is undoable. Storing it
usually costs one hard link: the old file is about to be renamed over, so the store can take its inode
as is (same file system); otherwise the bytes already in memory are written out. The index lives on disk,
not in Redis, so it survives a Redis restart. It is appended under the path's lock, which also makes the
version numbers of one path strictly increasing without any network round trip.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from .errors import CoordinatorError, ErrorCode
from .layout import history_dir


def content_hash(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


@dataclass(frozen=True)
class HistoryEntry:
    """One write of one path. `before` is None when the write created the file; `after` None when it
    removed it (an undo of a creation)."""

    version: int
    time: float
    session: str
    operation: str
    path: str
    before: str | None
    after: str | None
    size_before: int
    size_after: int
    first_line: int
    last_line: int

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))  # flat fields only: cheaper than dataclasses.asdict on the write path


class History:
    def __init__(self, state_dir: Path, fsync: bool = True) -> None:
        self.base = history_dir(state_dir)
        self.objects = self.base / "objects"
        self.index = self.base / "index"
        self.objects.mkdir(parents=True, exist_ok=True)
        self.index.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._objects_str = str(self.objects)
        # index size before the last append, per path (each path is appended under its own lock)
        self._appended_at: dict[str, int] = {}
        self._index_str = str(self.index)

    def object_path(self, digest: str) -> Path:
        return self.objects / digest[:2] / digest

    def _object_str(self, digest: str) -> str:
        return f"{self._objects_str}/{digest[:2]}/{digest}"

    def index_path(self, key: str) -> str:
        return f"{self._index_str}/{xxhash.xxh3_128_hexdigest(key.encode('utf-8', 'surrogateescape'))}.jsonl"

    # -- objects ------------------------------------------------------------------------------------------
    def has(self, digest: str) -> bool:
        return self.object_path(digest).exists()

    def store_preimage(self, dfd: int, name: str, digest: str, data: bytes) -> None:
        """Keep the current file (whose bytes are `data`, hash `digest`) before it is replaced."""
        dest = self._object_str(digest)
        try:
            os.stat(dest)
            return
        except FileNotFoundError:
            pass
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            os.link(name, dest, src_dir_fd=dfd, follow_symlinks=False)
            return
        except FileExistsError:
            return
        except OSError:
            pass  # another file system, or links not allowed: write the bytes we hold
        self.store_bytes(data, digest)

    def store_bytes(self, data: bytes, digest: str | None = None, fsync: bool | None = None) -> str:
        """Keep `data` as an object. fsync=None follows the store's setting; False suits copies whose loss
        is harmless (the content a `rebase` session read: without it the session's edit is just `stale`)."""
        digest = digest or content_hash(data)
        dest = self.object_path(digest)
        if dest.exists():
            return digest
        dest.parent.mkdir(exist_ok=True)
        tmp = dest.with_name(f".{digest}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            if self.fsync if fsync is None else fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, dest)
        return digest

    def load(self, digest: str) -> bytes:
        try:
            data = self.object_path(digest).read_bytes()
        except FileNotFoundError:
            raise CoordinatorError(
                ErrorCode.FILE_NOT_FOUND,
                f"The stored content {digest} is no longer in the history (removed by retention?); "
                "choose another version.",
            ) from None
        if content_hash(data) != digest:
            raise CoordinatorError(
                ErrorCode.IO_ERROR,
                f"The stored content {digest} is damaged (its hash does not match); choose another version.",
            )
        return data

    # -- index --------------------------------------------------------------------------------------------
    def last_version(self, key: str) -> int:
        path = self.index_path(key)
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                end = f.tell()
                if end == 0:
                    return 0
                f.seek(max(0, end - 4096))
                tail = f.read()
        except FileNotFoundError:
            return 0
        for line in reversed(tail.splitlines()):
            try:
                return int(json.loads(line)["version"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line (crash mid-append) is skipped
        return 0

    def append(self, key: str, version: int, **fields: Any) -> HistoryEntry:
        """Append `version` of `key`. Must be called under the path's lock."""
        entry = HistoryEntry(version=version, time=time.time(), path=key, **fields)
        line = (json.dumps(entry.to_dict(), separators=(",", ":")) + "\n").encode()
        fd = os.open(self.index_path(key), os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            size = os.fstat(fd).st_size
            self._appended_at[key] = size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # a torn last line (crash mid-append) must not swallow this entry
            os.write(fd, line)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return entry

    def retract_last(self, key: str) -> None:
        """Take back the entry just appended for `key` (its write failed). Under the path's lock."""
        size = self._appended_at.pop(key, None)
        if size is None:
            return
        try:
            os.truncate(self.index_path(key), size)
        except OSError:
            pass

    def entries(self, key: str) -> list[HistoryEntry]:
        """All versions of `key`, newest first."""
        out: list[HistoryEntry] = []
        try:
            with open(self.index_path(key), "rb") as f:
                for line in f:
                    try:
                        out.append(HistoryEntry(**json.loads(line)))
                    except (ValueError, TypeError):
                        continue
        except FileNotFoundError:
            return []
        out.reverse()
        return out
