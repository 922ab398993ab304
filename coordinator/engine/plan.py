"""The types of the check-then-write: the file as found under the lock, what a transform decided."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .. import fsio, rebase, semantics
from ..errors import CoordinatorError, ErrorCode
from ..state import ReadState
from ..textio import Decoded, decode_bytes


class _CachedViewRefused(Exception):
    """The cached view of the session does not match the file: look again in Redis before refusing.

    `refusal` is the answer the cached view led to; if Redis holds the same view, it stands (the retry
    would decide the same from the same view), and the second pass under the lock is saved.
    """

    def __init__(self, key: str, cached: ReadState, refusal: CoordinatorError | None = None) -> None:
        super().__init__(key)
        self.key = key
        self.cached = cached
        self.refusal = refusal


class _Missing(Exception):
    """The file is missing and the operation cannot create it; turned into file_not_found (with its
    "Did you mean" hint) after the lock is released."""


@dataclass
class _Current:
    """The file as found under the lock."""

    exists: bool
    data: bytes = b""
    st: os.stat_result | None = None
    digest: str | None = None
    _decoded: Decoded | None = None

    def decoded(self) -> Decoded:
        if self._decoded is None:
            self._decoded = decode_bytes(self.data)
        return self._decoded


@dataclass
class _Plan:
    """What a transform decided, computed under the lock from the bytes on disk."""

    new_data: bytes | None  # None: remove the file
    new_text: str | None = None
    replacements: int = 0
    first_offset: int = 0
    inserted_len: int = 0
    rebased: rebase.RebaseOutcome | None = None  # set when the edit was carried over (policy rebase)
    view_data: bytes | None = None  # then: the session's new view (what it saw plus its own edit)


def _check_view(recorded: ReadState | None, cur: _Current, rp: fsio.ResolvedPath) -> None:
    """The staleness rule: content decides. Enforced under the lock, against the bytes on disk.

    Precedence: a file that this session has not read, and that Read could never return (binary, or in an
    unsupported encoding), is refused for its content (`binary_file`, `unsupported_encoding`), not as
    `not_read`: "Read it first" would send the model into a loop.
    """
    if recorded is None:
        cur.decoded()  # raises the content's own refusal, if it has one
        raise CoordinatorError(
            ErrorCode.NOT_READ,
            f"{rp.shown} has not been read by this session yet (or its read state has expired). "
            "Read it first, then make your change.",
            path=rp.key,
        )
    if recorded.hash != cur.digest:
        raise CoordinatorError(
            ErrorCode.STALE,
            f"{rp.shown} has been modified since you last read it (by another session or an outside "
            "program). Read it again before editing, then redo your change on the current content.",
            path=rp.key,
        )


def _changed_lines(plan: _Plan) -> tuple[int, int]:
    if plan.new_text is None:
        return 1, 1
    first = semantics.line_number_at(plan.new_text, plan.first_offset)
    inserted = plan.new_text[plan.first_offset : plan.first_offset + plan.inserted_len]
    return first, first + max(inserted.count("\n") - (1 if inserted.endswith("\n") else 0), 0)
