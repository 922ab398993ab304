"""`FileClient`: the part of `coordinator.Client` the worker fleet's agents and oracle call (which the unsafe
baseline implements too)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from coordinator.engine import ReadResult, WriteResult


class FileClient(Protocol):
    """The file operations and `close`: what a fleet worker needs of its client. Every `Client` is one
    (in-process, HTTP), and so is `worker.unsafe.UnsafeClient`, the baseline with no coordination."""

    def read(self, session: str, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult: ...

    def write(self, session: str, path: str, content: str) -> WriteResult: ...

    def edit(
        self, session: str, path: str, old_string: str, new_string: str, replace_all: bool = False
    ) -> WriteResult: ...

    def multi_edit(self, session: str, path: str, edits: Sequence[dict[str, Any]]) -> WriteResult: ...

    def undo(self, session: str, path: str, version: int | None = None) -> WriteResult: ...

    def close(self) -> None: ...


__all__ = ["FileClient"]
