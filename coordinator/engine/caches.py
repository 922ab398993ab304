"""This process's caches: views its sessions recorded, file texts by hash, refusal counts; and the guard
of every Redis call that forgets the views when Redis is lost."""

from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from coordinator.engine.options import MiB
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.views import ReadState

_T = TypeVar("_T")


class _RefusalCounts:
    """Refusals by code in this process, added to Redis (`StateStore.error_counts`) on the next post-write
    pipeline: counting costs no round trip of its own."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, code: str) -> None:
        with self._lock:
            self._counts[code] = self._counts.get(code, 0) + 1

    def flusher(self, key: str) -> Callable[[Any], None] | None:
        """What queues the flush on a pipeline or a Batch (`queue_flush`), or None when nothing is counted
        (a look without the lock: one counted meanwhile goes with a later flush)."""
        return functools.partial(self.queue_flush, key=key) if self._counts else None

    def queue_flush(self, pipe: Any, key: str) -> None:
        if not self._counts:  # nothing counted (a look without the lock: one added meanwhile goes next time)
            return
        with self._lock:
            counts, self._counts = self._counts, {}
        for code, n in counts.items():
            pipe.execute_command("HINCRBY", key, code, n)  # raw: a pipeline or a lane.py Batch


class _ViewCache:
    """This process's copy of the read states it recorded itself: (session, path) -> ReadState.

    It saves the Redis round trip before the lock on consecutive edits. It is never trusted to allow what
    Redis would refuse on content grounds: the hash it holds is one this session really saw in this
    process, and the decision is still made against the bytes on disk. Bounded; entries expire with the TTL.
    """

    MAX = 100_000

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._d: dict[tuple[str, str], ReadState] = {}
        self._lock = threading.Lock()

    def get(self, session: str, key: str) -> ReadState | None:
        rs = self._d.get((session, key))
        if rs is not None and time.time() - rs.time > self.ttl_s:
            self.drop(session, key)
            return None
        return rs

    def put(self, session: str, key: str, rs: ReadState) -> None:
        d = self._d
        if len(d) >= self.MAX:
            self.clear()
        d[(session, key)] = rs  # one atomic store: `get` reads without the lock, and so may this

    def drop(self, session: str, key: str) -> None:
        with self._lock:
            self._d.pop((session, key), None)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()


class _TextCache:
    """This process's recent file texts by content hash (policy `rebase`): what its sessions read, wrote,
    or saw as their view after a rebased edit. A rebase looks its session's view up here first, then in
    the history's object store (where a coordinator write keeps the pre-image, which is the content read
    by everyone who read the version it replaced). Bounded by total characters, least recently used out.
    """

    def __init__(self, max_chars: int = 64 * MiB) -> None:
        self.max_chars = max_chars
        self._d: OrderedDict[str, str] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, digest: str) -> str | None:
        with self._lock:
            text = self._d.get(digest)
            if text is not None:
                self._d.move_to_end(digest)
            return text

    def put(self, digest: str, text: str) -> None:
        if len(text) > self.max_chars // 4:
            return
        with self._lock:
            if digest in self._d:
                self._d.move_to_end(digest)
                return
            self._d[digest] = text
            self._chars += len(text)
            while self._chars > self.max_chars and self._d:
                _, old = self._d.popitem(last=False)
                self._chars -= len(old)


class StateCalls:
    """Every Redis call of the engine goes through `call`. Invariant: on losing Redis (a
    `state_unavailable` refusal) every cached view is forgotten, since the read state may be gone with the
    server, so sessions read again once it is back."""

    __slots__ = ("_views",)

    def __init__(self, views: _ViewCache) -> None:
        self._views = views

    def __call__(self, fn: Callable[..., _T], *args: Any) -> _T:
        """`fn(*args)`, the Redis call (see the class docstring)."""
        try:
            return fn(*args)
        except CoordinatorError as exc:
            if exc.code == ErrorCode.STATE_UNAVAILABLE:
                self._views.clear()
            raise
