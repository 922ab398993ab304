"""How a caller shapes one engine call: waiting for a busy lock, and commands that ride the post-write
round trip. For the HTTP service (and any caller with an event loop); library users need none of it.

    session = coord.session(id, options=CallOptions(wait_for_lock=False, post_write=hook))
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

`post_write`: a `PostWriteHook` whose `queue(pipe, result)` adds Redis commands to the engine's post-write
pipeline (the one round trip that records the write), given the result as the caller will see it except
for its notice (which comes from that same round trip); `done(replies)` then gets the replies of exactly
those commands (exceptions for commands that failed), or None when the round trip failed (the write
stands; the result carries a warning). The hook is used for writes that landed, never for refusals.
A hook must not raise; if it does, the write still stands and its result carries a warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from coordinator.engine.results import WriteResult

__all__ = ["CallOptions", "LockBusy", "PostWriteHook"]

_T = TypeVar("_T")


class PostWriteHook(Protocol):
    """Extra commands on the engine's post-write round trip (see the module docstring)."""

    def queue(self, pipe: Any, result: WriteResult) -> None: ...

    def done(self, replies: list[Any] | None) -> None: ...


@dataclass(frozen=True)
class CallOptions:
    """How a session's engine calls are shaped (`Coordinator.session(..., options=)`, `Session.with_options`)."""

    wait_for_lock: bool = True
    post_write: PostWriteHook | None = None


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
