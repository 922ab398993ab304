"""The `naive-lock` baseline: what a typical engineer writes first to make an Edit tool "safe".

A redis-py `Lock` per file, with its defaults (no lease timeout, blocking, a 0.1 s sleep between tries),
around a plain read-modify-write, plus the check every single-agent tool makes: the file's mtime must be
the one this session saw when it last read (or wrote) the file, else the edit is refused as `stale`.

It has the `worker.client.Client` interface, so the same simulated agents and the same oracle run against
it. What it does not have, on purpose (each is a thing the coordinator does differently):

* the staleness decision rests on the mtime alone (a rewrite within one timestamp tick goes unseen);
* the write truncates the file and writes it in place (readers outside the lock can see a torn file);
* waiting for the lock polls every 0.1 s (redis-py's default), so a hot file's hand-off is slow;
* the read state lives in this process only (a session is one process here, as in the fleet).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import redis

from coordinator.engine import ReadResult, WriteResult
from coordinator.errors import CoordinatorError, ErrorCode
from worker.agent import content_hash
from worker.unsafe import plain_read_result

LOCK_PREFIX = "naive-lock:"


class NaiveLockClient:
    """Read-modify-write under a redis-py `Lock` (defaults) with an mtime check."""

    def __init__(self, root: str | os.PathLike[str], redis_url: str) -> None:
        self.root = os.path.realpath(os.fspath(root))
        self.r = redis.Redis.from_url(redis_url)
        self._mtimes: dict[tuple[str, str], int] = {}

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path)

    def _lock(self, path: str) -> Any:
        return self.r.lock(LOCK_PREFIX + path)  # redis-py defaults: blocking, sleep=0.1, no timeout

    # -- the Client interface -----------------------------------------------------------------------------
    def read(self, session: str, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        try:
            with open(self._full(path), "rb") as f:
                data = f.read()
                st = os.fstat(f.fileno())
        except FileNotFoundError:
            raise CoordinatorError(ErrorCode.FILE_NOT_FOUND, f"File does not exist: {path}.") from None
        text = data.decode("utf-8", "replace")
        self._mtimes[(session, path)] = st.st_mtime_ns
        return plain_read_result(path, text, data)

    def write(self, session: str, path: str, content: str) -> WriteResult:
        return self._change(session, path, "write", lambda _text: (content, 0), may_create=True)

    def edit(self, session: str, path: str, old_string: str, new_string: str, replace_all: bool = False) -> WriteResult:
        def apply(text: str) -> tuple[str, int]:
            n = text.count(old_string)
            if n == 0:
                raise CoordinatorError(ErrorCode.NO_MATCH, "old_string was not found in the file.")
            if n > 1 and not replace_all:
                raise CoordinatorError(ErrorCode.AMBIGUOUS, f"old_string occurs {n} times in the file.")
            return text.replace(old_string, new_string, -1 if replace_all else 1), n

        return self._change(session, path, "edit", apply, may_create=False)

    def multi_edit(self, session: str, path: str, edits: Sequence[dict[str, Any]]) -> WriteResult:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "multi_edit is not part of the naive-lock baseline.")

    def undo(self, session: str, path: str, version: int | None = None) -> WriteResult:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "The naive-lock baseline keeps no history to undo.")

    def close(self) -> None:
        self.r.close()

    # -- the read-modify-write ----------------------------------------------------------------------------
    def _change(self, session: str, path: str, operation: str, apply: Any, may_create: bool) -> WriteResult:
        full = self._full(path)
        t0 = time.perf_counter()
        lock = self._lock(path)
        lock.acquire()
        t1 = time.perf_counter()
        try:
            try:
                st = os.stat(full)
            except FileNotFoundError:
                st = None
            if st is None and not may_create:
                raise CoordinatorError(ErrorCode.FILE_NOT_FOUND, f"File does not exist: {path}.")
            created = st is None
            if st is not None:
                seen = self._mtimes.get((session, path))
                if seen is None:
                    raise CoordinatorError(ErrorCode.NOT_READ, "Read the file before editing it.")
                if st.st_mtime_ns != seen:
                    raise CoordinatorError(ErrorCode.STALE, "The file was modified since it was read.")
            old = b""
            if st is not None:
                with open(full, "rb") as f:
                    old = f.read()
            new_text, replacements = apply(old.decode("utf-8", "replace"))
            data = new_text.encode("utf-8")
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:  # truncate, then write in place: what a plain write does
                f.write(data)
            self._mtimes[(session, path)] = os.stat(full).st_mtime_ns
        finally:
            t2 = time.perf_counter()
            lock.release()
        return WriteResult(
            path=path,
            operation=operation,
            created=created,
            version=0,
            hash=content_hash(data),
            message="",
            replacements=replacements,
            timings={"lock_wait_s": t1 - t0, "lock_hold_s": t2 - t1},
        )
