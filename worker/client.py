"""One client interface, several transports (in the spirit of httpx's transports).

A worker never needs to know whether its calls run in-process or over HTTP: both return the engine's
result types and raise `CoordinatorError` with the same codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from coordinator import Coordinator
from coordinator.engine import ReadResult, WriteResult


@runtime_checkable
class Client(Protocol):
    """What an agent session can do. `session` is the session id; the same id is the same session."""

    def read(self, session: str, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult: ...

    def write(self, session: str, path: str, content: str) -> WriteResult: ...

    def edit(
        self, session: str, path: str, old_string: str, new_string: str, replace_all: bool = False
    ) -> WriteResult: ...

    def multi_edit(self, session: str, path: str, edits: Sequence[dict[str, Any]]) -> WriteResult: ...

    def undo(self, session: str, path: str, version: int | None = None) -> WriteResult: ...

    def close(self) -> None: ...


class InProcessClient:
    """Calls the engine directly in this process."""

    def __init__(self, coord: Coordinator, owns: bool = False) -> None:
        self.coord = coord
        self._owns = owns

    @classmethod
    def open(cls, root: str, redis_url: str | None = None, **options: Any) -> InProcessClient:
        return cls(Coordinator(root, redis_url, **options), owns=True)

    def read(self, session: str, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        return self.coord.session(session).read(path, offset=offset, limit=limit)

    def write(self, session: str, path: str, content: str) -> WriteResult:
        return self.coord.session(session).write(path, content)

    def edit(self, session: str, path: str, old_string: str, new_string: str, replace_all: bool = False) -> WriteResult:
        return self.coord.session(session).edit(path, old_string, new_string, replace_all=replace_all)

    def multi_edit(self, session: str, path: str, edits: Sequence[dict[str, Any]]) -> WriteResult:
        return self.coord.session(session).multi_edit(path, edits)

    def undo(self, session: str, path: str, version: int | None = None) -> WriteResult:
        return self.coord.session(session).undo(path, version=version)

    def close(self) -> None:
        if self._owns:
            self.coord.close()

    def __enter__(self) -> InProcessClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
