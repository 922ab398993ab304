"""The types of the check-then-write, public: the file as found under the lock (`CurrentFile`), what a
transform decided (`WritePlan`) and the edits of an edit or multi_edit as one value (`Edits`). A call of
`Coordinator.check_then_write` is a `CheckedWrite` (steps.py) whose change is a transform
`CurrentFile -> WritePlan`: an `Edits`, which the engine also carries over under policy "rebase", or any
other function (the engine's write, undo and restore are such transforms).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.disk import fsio
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.views import ReadState
from coordinator.text import rebase, semantics
from coordinator.text.codecs import Decoded, Encoding, clean_splice, decode_noting_clean, encode_text

__all__ = ["CurrentFile", "Edits", "WritePlan"]


@dataclass(slots=True)
class CurrentFile:
    """The file as found under its lock, just before the transform runs.

    exists: False for a missing file (then `data` is empty and `st`, `digest` are None).
    data: its bytes; st: their stat; digest: their content hash (XXH3-128, hex), the one views are
    compared with. `decoded()` gives the text and encoding (CoordinatorError for binary or unsupported
    content, which the engine reports as the refusal). `_clean`: the content is clean
    (`codecs.decode_noting_clean`), known once it is decoded, or given with `_decoded` by an engine that
    knew the content already.
    """

    exists: bool
    data: bytes = b""
    st: os.stat_result | None = None
    digest: str | None = None
    _decoded: Decoded | None = None
    _clean: bool = False

    def decoded(self) -> Decoded:
        if self._decoded is None:
            self._decoded, self._clean = decode_noting_clean(self.data)
        return self._decoded


@dataclass(slots=True)
class WritePlan:
    """What a transform decided, computed under the lock from the bytes on disk.

    new_data: the file's new bytes; None removes the file (an undo of a creation).
    new_text: the new content as text, when it is text (for the snippet and the changed lines).
    replacements: how many replacements an edit made (reported).
    first_offset, inserted_len: where in `new_text` the change starts and how long the new part is
        (character offsets), for the snippet and the history's line range.
    rebased, view_data: set by the engine when policy "rebase" carried an edit over (the session's new
        view then is `view_data`, not the file); a transform leaves them unset.
    match, match_lines: how an edit's old_string was found (`semantics.EditOutcome`), reported.
    nearby: others' changes next to a carried-over change (an undo), lines of the new file, reported.
    _spliced: set only by the engine's own one-edit transform, which vouches that `new_text` is the current
        text with `new_text[first_offset:first_offset + inserted_len]` put in place of one piece of it, and
        `new_data` its UTF-8 (what `clean_digest` relies on); a transform of a caller leaves it unset.
    """

    new_data: bytes | None
    new_text: str | None = None
    replacements: int = 0
    first_offset: int = 0
    inserted_len: int = 0
    rebased: rebase.RebaseOutcome | None = None
    view_data: bytes | None = None
    match: str = "exact"
    match_lines: tuple[int, int] | None = None
    nearby: tuple[tuple[int, int], ...] = ()
    _spliced: bool = False

    @classmethod
    def of_edit(cls, out: semantics.EditOutcome, encoding: Encoding, **carried: Any) -> WritePlan:
        """The plan of an applied edit (`out`), its text encoded as the file was; `carried`: the rebase's
        fields (`rebased`, `view_data`) when the edit was carried over."""
        return cls(
            new_data=encode_text(out.text, encoding),
            new_text=out.text,
            replacements=out.replacements,
            first_offset=out.first_offset,
            inserted_len=out.inserted_len,
            match=out.match,
            match_lines=out.match_lines,
            **carried,
        )


@dataclass(slots=True)
class Edits:
    """The edits of an edit or multi_edit, described once: calling it is the transform (the edits applied in
    order, all or none, to the file as found under the lock), and under policy "rebase" the engine carries
    these same edits over onto a file changed since the session's view (rebasing.py).

    specs: the edits (`semantics.EditSpec`); an empty `old_string` in the first creates the file, or fills
    an empty one. match: "exact" or "flexible" (semantics.apply_edit). Not frozen, like the engine's other
    per-call values (a frozen instance costs more to make); nothing assigns to it after it is made."""

    specs: Sequence[semantics.EditSpec]
    match: str = "exact"

    def __call__(self, cur: CurrentFile) -> WritePlan:
        specs, match = self.specs, self.match
        if not cur.exists:
            if specs[0].old_string != "":
                raise _Missing
            text, encoding = "", Encoding.UTF8
        else:
            d = cur.decoded()
            text, encoding = d.text, d.encoding
            if len(specs) == 1:  # one edit: the common one decided directly, the same plan
                one = specs[0]
                direct = semantics.replace_once(text, one.old_string, one.new_string)
                if direct is not None:
                    new_text = direct[0]
                    data = encode_text(new_text, encoding)  # clean content is UTF-8: its text's UTF-8
                    return WritePlan(data, new_text, 1, direct[1], len(one.new_string), _spliced=cur._clean)
        if len(specs) > 1:
            out = semantics.apply_edits(text, specs, match)
        else:
            one = specs[0]
            out = semantics.apply_edit(text, one.old_string, one.new_string, one.replace_all, match)
        return WritePlan.of_edit(out, encoding)


def clean_digest(cur: CurrentFile, plan: WritePlan, new_digest: str | None) -> str | None:
    """`new_digest` when the content `plan` wrote is clean (`codecs.clean_splice`: one splice, vouched for
    by the transform, into clean content `cur`), else None. Pure: the engine keeps what it returns as the
    content it may decode without sniffing (see `CheckThenWrite._common_read`)."""
    if not (plan._spliced and cur._clean) or new_digest is None or plan.new_data is None or plan.new_text is None:
        return None
    a = plan.first_offset
    return new_digest if clean_splice(plan.new_data, plan.new_text[a : a + plan.inserted_len]) else None


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


def _view_refusal(recorded: ReadState | None, cur: CurrentFile, rp: fsio.ResolvedPath) -> CoordinatorError | None:
    """The staleness rule, its one owner: content decides. Judged under the lock, against the bytes on
    disk: S's view is current iff its recorded hash is the hash of the file now. Returns the refusal
    (`not_read`, `stale`), or None when the view is current.

    Precedence: a file that this session has not read, and that Read could never return (binary, or in an
    unsupported encoding), is refused for its content (`binary_file`, `unsupported_encoding`), not as
    `not_read`: "Read it first" would send the model into a loop.
    """
    if recorded is None:
        try:
            cur.decoded()
        except CoordinatorError as content_refusal:
            return content_refusal
        return CoordinatorError(
            ErrorCode.NOT_READ,
            f"{rp.shown} has not been read by this session yet (or its read state has expired). "
            "Read it first, then make your change.",
            path=rp.key,
        )
    if recorded.hash != cur.digest:
        return CoordinatorError(
            ErrorCode.STALE,
            f"{rp.shown} has been modified since you last read it (by another session or an outside "
            "program). Read it again before editing, then redo your change on the current content.",
            path=rp.key,
        )
    return None


def _check_view(recorded: ReadState | None, cur: CurrentFile, rp: fsio.ResolvedPath) -> None:
    """Raise `_view_refusal`'s refusal, if there is one."""
    refusal = _view_refusal(recorded, cur, rp)
    if refusal is not None:
        raise refusal


def _changed_lines(plan: WritePlan) -> tuple[int, int]:
    if plan.new_text is None:
        return 1, 1
    first = semantics.line_number_at(plan.new_text, plan.first_offset)
    inserted = plan.new_text[plan.first_offset : plan.first_offset + plan.inserted_len]
    return first, first + max(inserted.count("\n") - (1 if inserted.endswith("\n") else 0), 0)
