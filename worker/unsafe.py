"""The baseline without the coordinator: plain read-modify-write, as a naive Edit tool does it.

`UnsafeClient` has the `Client` interface so that the same agents and the same workload run against it.
Two flavours:

* ``fresh=False`` (plain read-modify-write): Edit applies `old_string` -> `new_string` to the text this
  session last read (or wrote), and writes the result back. Whatever others wrote since that read is lost.
* ``fresh=True`` (a naive Edit tool): Edit reads the file again, replaces, and writes back. The window
  for a lost update shrinks to the time between that read and the write, but does not close.

Either way there is no lock, no read state and no staleness check, and the write is not atomic (truncate,
then write in place): readers can see half-written files. It exists to show that the oracle of
`worker.fleet` catches exactly that; never use it on real files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from coordinator.engine import ReadResult, WriteResult
from coordinator.errors import CoordinatorError, ErrorCode
from worker.agent import content_hash


class UnsafeClient:
    """Read-modify-write with no coordination (the "without the coordinator" side of a benchmark)."""

    def __init__(self, root: str | os.PathLike[str], fresh: bool = False) -> None:
        self.root = os.path.realpath(os.fspath(root))
        self.fresh = fresh
        self._views: dict[tuple[str, str], str] = {}

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path)

    def _load(self, path: str) -> bytes:
        try:
            with open(self._path(path), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise CoordinatorError(ErrorCode.FILE_NOT_FOUND, f"File does not exist: {path}.") from None

    def _store(self, path: str, data: bytes) -> None:
        full = self._path(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:  # truncate, then write: not atomic, on purpose
            f.write(data)

    def read(self, session: str, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        data = self._load(path)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise CoordinatorError(ErrorCode.UNSUPPORTED_ENCODING, f"{path} is not UTF-8.") from None
        self._views[(session, path)] = text
        return plain_read_result(path, text, data)

    def write(self, session: str, path: str, content: str) -> WriteResult:
        created = not os.path.exists(self._path(path))
        data = content.encode("utf-8")
        self._store(path, data)
        self._views[(session, path)] = content
        return WriteResult(path, "write", created, 0, content_hash(data), "written")

    def edit(self, session: str, path: str, old_string: str, new_string: str, replace_all: bool = False) -> WriteResult:
        view = None if self.fresh else self._views.get((session, path))
        text = view if view is not None else self._load(path).decode("utf-8", "replace")
        n = text.count(old_string)
        if n == 0:
            raise CoordinatorError(ErrorCode.NO_MATCH, "old_string was not found in the file.")
        if n > 1 and not replace_all:
            raise CoordinatorError(ErrorCode.AMBIGUOUS, f"old_string occurs {n} times in the file.")
        new = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
        data = new.encode("utf-8")
        self._store(path, data)
        self._views[(session, path)] = new
        return WriteResult(path, "edit", False, 0, content_hash(data), "edited", replacements=n)

    def multi_edit(self, session: str, path: str, edits: Sequence[dict[str, Any]]) -> WriteResult:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "multi_edit is not part of the unsafe baseline.")

    def undo(self, session: str, path: str, version: int | None = None) -> WriteResult:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "The unsafe baseline keeps no history to undo.")

    def close(self) -> None:
        pass


def plain_read_result(path: str, text: str, data: bytes) -> ReadResult:
    """A whole-file ReadResult for the baselines, which number nothing and record nothing."""
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    return ReadResult(
        path=path,
        content=text,
        text=text,
        start_line=1,
        num_lines=lines,
        total_lines=lines,
        unchanged=False,
        hash=content_hash(data),
        encoding="utf-8",
        line_ending="lf",
    )
