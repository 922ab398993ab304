"""Undo and redo as edits: which write to revert, and the reverted content. Pure: no I/O.

An undo never restores a whole file over other sessions' work. It reverts one write's *change*: the inverse
of that write (its result -> its pre-image) is carried onto the file as it is now with the merge rule of
`rebase.carry_change`, so later writes by others survive; when one of them overlaps the reverted lines, the
undo is refused (`stale`), nothing written.

Which write (`undo_target`, `redo_target`), from the path's history:

* Every entry is *in effect* until an entry that reverts it (``reverts == its version``) is recorded.
* ``undo()``: this session's newest write that is in effect and is not itself an undo (an edit, write,
  multi_edit, restore or redo). Repeated calls step back through the session's writes.
* ``redo()``: this session's newest undo still in effect, unless the session has written anything else
  since (a new change ends the redo chain, as in an editor). Reverting an undo re-applies its change.
* ``undo(version=N)``: version N, whoever wrote it, if still in effect; an undo of an undo is a redo.

Putting a whole file back as it was at some version is another, explicit operation (`restore`), which
discards the later versions and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.text.codecs import Encoding, decode_bytes, encode_text
from coordinator.text.rebase import CarryOutcome, carry_change

UNDO, REDO = "undo", "redo"


class _Entry(Protocol):
    """What is read of a history entry (read-only, so a frozen `HistoryEntry` is one)."""

    @property
    def version(self) -> int: ...

    @property
    def session(self) -> str: ...

    @property
    def operation(self) -> str: ...

    @property
    def before(self) -> str | None: ...

    @property
    def after(self) -> str | None: ...

    @property
    def reverts(self) -> int | None: ...


_E = TypeVar("_E", bound=_Entry)


def in_effect(entries: Sequence[_Entry]) -> dict[int, bool]:
    """Version -> whether that write is still in effect (not reverted by a later entry). Any order."""
    effect = {e.version: True for e in entries}
    for e in sorted(entries, key=lambda x: x.version):
        target = getattr(e, "reverts", None)
        if target is not None and target in effect:
            effect[target] = False
    return effect


def undo_target(entries: Sequence[_E], session: str, path: str) -> _E:
    """The write ``undo(path)`` reverts: this session's newest write in effect that is not an undo."""
    effect = in_effect(entries)
    for e in sorted(entries, key=lambda x: -x.version):
        if e.session == session and e.operation != UNDO and effect[e.version]:
            return e
    mine = [e for e in entries if e.session == session]
    raise CoordinatorError(
        ErrorCode.NO_CHANGE if mine else ErrorCode.INVALID_ARGUMENT,
        (
            f"Every write of {path} by this session has been undone already; nothing left to undo (redo "
            "steps forward again)."
            if mine
            else f"This session has no recorded write of {path} to undo. Pass a version from its history instead."
        ),
    )


def redo_target(entries: Sequence[_E], session: str, path: str) -> _E:
    """The undo ``redo(path)`` reverts: this session's newest undo in effect, with no other write by the
    session after it."""
    effect = in_effect(entries)
    for e in sorted(entries, key=lambda x: -x.version):
        if e.session != session:
            continue
        if e.operation == UNDO and effect[e.version]:
            return e
        if e.operation != UNDO and e.operation != REDO:
            break  # a new change since the undos: nothing to redo
    raise CoordinatorError(
        ErrorCode.NO_CHANGE,
        f"This session has no undo of {path} to redo (a redo follows an undo, before any new change).",
    )


def version_target(entries: Sequence[_E], version: int, path: str) -> _E:
    """Version ``version``, if it is in the history and still in effect."""
    target = next((e for e in entries if e.version == version), None)
    if target is None:
        known = ", ".join(str(e.version) for e in sorted(entries, key=lambda x: -x.version)[:10]) or "none"
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"{path} has no version {version} (newest versions: {known})."
        )
    if not in_effect(entries)[version]:
        by = next(e.version for e in entries if getattr(e, "reverts", None) == version)
        raise CoordinatorError(
            ErrorCode.NO_CHANGE,
            f"Version {version} of {path} is undone already (by version {by}); undo version {by} to bring it back.",
        )
    return target


def operation_for(target: _Entry) -> str:
    """An undo of an undo is recorded as a redo."""
    return REDO if target.operation == UNDO else UNDO


def revert(
    before: bytes | None,
    after: bytes | None,
    current: bytes | None,
    current_digest: str | None,
    after_digest: str | None,
    name: str,
    what: str,
) -> tuple[bytes | None, CarryOutcome | None]:
    """The file's new content once the change ``before -> after`` is reverted on ``current`` (None: no file).

    Returns (new bytes or None to remove the file, the carry-over when one was needed). When the file still
    holds exactly ``after``, the result is ``before`` byte for byte (any content, binary too). Otherwise the
    inverse change is carried over (text files only), or STALE is raised; NO_CHANGE when the change is not
    in the file any more.
    """
    if current_digest == after_digest:  # the file is as that write left it (or absent, as it left it)
        if before == current:
            raise CoordinatorError(ErrorCode.NO_CHANGE, f"{name} already has the content it had before that write.")
        return before, None
    if current is None:
        raise _refused(name, what, "the file has been removed since.")
    if after is None:
        raise _refused(name, what, "that write removed the file, and it has been created again since.")
    try:
        cur = decode_bytes(current)
        after_text = decode_bytes(after).text
        before_text = "" if before is None else decode_bytes(before).text
    except CoordinatorError:
        raise _refused(name, what, "the file changed since, and it is not text that can be merged.") from None
    carried = carry_change(after_text, before_text, cur.text, name=name, what=what)
    if carried.text == cur.text:
        raise CoordinatorError(
            ErrorCode.NO_CHANGE, f"{name}: the change of that write is no longer in the file; nothing to revert."
        )
    return encode_text(carried.text, Encoding(cur.encoding)), carried


def _refused(name: str, what: str, why: str) -> CoordinatorError:
    return CoordinatorError(
        ErrorCode.STALE,
        f"{name}: {what} cannot be carried out: {why} Nothing was written. Read the file and make the change "
        "you need by hand.",
        reason="not_revertible",
    )


REPAIR, RESTORE = "repair", "restore"


def put_back(base: bytes, theirs: bytes, mine: bytes) -> tuple[bytes, str]:
    """A late write `mine`, made on the view `base`, landed over `theirs` (an acknowledged version its writer
    had not seen): the file's content that loses neither (invariant 7 (c)). Returns (content, how).

    The change ``base -> theirs`` is carried onto `mine` by the merge rule (`rebase.carry_change`): when the
    two commute, the result holds both (`REPAIR`; it is `mine` itself when the change is already there).
    Otherwise, or when a content is not text, `theirs` is put back whole (`RESTORE`): the acknowledged
    version wins, and the late write stays on record in the history."""
    try:
        cur = decode_bytes(mine)
        base_text = decode_bytes(base).text if base else ""
        carried = carry_change(base_text, decode_bytes(theirs).text, cur.text, what="the overwritten change")
    except CoordinatorError:
        return theirs, RESTORE
    return encode_text(carried.text, Encoding(cur.encoding)), REPAIR
