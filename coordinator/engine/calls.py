"""How a caller shapes one engine call: whether it waits for a busy lock. For the HTTP service (and any
caller with an event loop); library users need none of it.

    session = coord.session(id, options=CallOptions(wait_for_lock=False))
    try:
        result = session.edit(path, old, new)        # the lock was free: done inline
    except LockBusy as busy:
        result = await loop.run_in_executor(pool, busy.resume)   # the same call, waiting there

`wait_for_lock=False`: where the file's lock is taken by someone else, the call raises `LockBusy` instead
of waiting. Nothing has been read under the lock or written then, and the pre-lock step (arguments,
path, the session's view, the leases: the Redis round trip, if any) is done and kept: `busy.resume()`,
called once from any thread, continues this same call from the lock on, waiting as usual (up to the
lock timeout), and returns what the call would have returned, or raises its CoordinatorError. The options
travel with the session that makes the call (no state of the thread); the resumed call waits for the
lock whatever thread it runs on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["CallOptions", "LockBusy"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class CallOptions:
    """How a session's engine calls are shaped (`Coordinator.session(..., options=)`, `Session.with_options`)."""

    wait_for_lock: bool = True


DEFAULT_OPTIONS = CallOptions()


class LockBusy(Exception, Generic[_T]):
    """The file's lock is taken and the call was made with `wait_for_lock=False`.

    Nothing was read under the lock or written. `resume()` continues the same call (waiting for the lock,
    from any thread) and returns its result or raises its CoordinatorError; call it at most once. Not a
    CoordinatorError: only a caller that asked for it ever sees it.
    """

    def __init__(self, key: str, resume: Callable[[], _T]) -> None:
        super().__init__(f"the lock of {key!r} is taken")
        self.key = key
        self._resume = resume

    def resume(self) -> _T:
        return self._resume()

    def wrap(self, around: Callable[[Callable[[], _T]], Any]) -> LockBusy[Any]:
        """A LockBusy whose resume runs `around(self.resume)`: for layers that add handling on the way out."""
        return LockBusy(self.key, lambda: around(self._resume))
