"""The `rebase` policy's pure core: carry an edit made against an older version onto the current one.

A session read version B of a file (its *base*); other sessions have since written, so the file is now C.
Under the strict policy any edit by the session is refused as stale. Under `rebase` the edit is applied to
C when, and only when, it cannot interfere with what changed in between:

1. The edit is valid on B: every ``old_string`` is found in B, uniquely (``replace_all`` edits and the
   empty ``old_string`` that creates a file are never rebased). The lines each match spans in B are the
   edit's *region* (a match that starts with the previous line's terminator, ``"\nx = 1\n"``, does not
   claim that line); the lines the edit rewrites (the line diff of B -> B+edit) count too.
2. The line diff B -> C is computed (`diff_texts`: common head and tail found on the texts, then a
   patience diff of the lines in between, `line_diff`). No changed block of it may overlap or *touch* the
   region: a change on the line just above or just below counts, and so does an insertion at either edge.
3. The edit is applied to C with the ordinary Edit semantics (`semantics.apply_edits`: exact, then
   quote-folded match, CRLF kept, unique match) and the result must equal the three-way merge of both
   change sets: C with the edit's own hunks put at the corresponding place. That is "``old_string`` occurs
   exactly once in C, at the place that corresponds to where it was in B", checked on the result itself.

Anything else raises `CoordinatorError(STALE)` whose message names the lines that changed (the engine adds
which sessions changed them, from the history). Nothing here does I/O, so the engine may run it under the
file lock.

The session's *view* after a rebased edit is B with its own edit applied (`RebaseOutcome.view`), not C:
the session has not seen the intervening changes, so its read state must not claim it has. Its next edit
is rebased from that view, where its own earlier edit is no foreign change.

Invariant (property-tested in tests/test_rebase.py): if two sessions make non-overlapping, non-adjacent
edits against the same base, either order of writing gives the same final text, equal to applying both
edits one after the other; edits that overlap or touch are refused.
"""

from __future__ import annotations

import difflib
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import CoordinatorError, ErrorCode
from .semantics import EditOutcome, EditSpec, apply_edit, apply_edits, line_number_at

# A gap between two patience anchors is diffed with difflib only when it is small enough; a larger gap is
# reported as one changed block. That errs towards refusing (a coarser change can only touch more), and
# bounds the cost on big, heavily rewritten files: difflib is quadratic in the worst case.
DIFFLIB_MAX_PRODUCT = 4_000_000
_MAX_RANGES_SHOWN = 8


@dataclass(frozen=True)
class Hunk:
    """Lines ``a[a1:a2]`` of the old text became ``b[b1:b2]`` of the new one (0-based, half-open).

    ``a1 == a2`` is a pure insertion before old line ``a1``; ``b1 == b2`` a pure deletion.
    """

    a1: int
    a2: int
    b1: int
    b2: int


@dataclass(frozen=True)
class LineChange:
    """One block that changed between the version a session read and the current one, 1-based.

    ``base_first..base_last``: the lines it replaced in the version read (empty range for an insertion:
    ``base_last == base_first - 1``); ``first..last``: the lines it occupies now (``last == first - 1``
    for a deletion).
    """

    base_first: int
    base_last: int
    first: int
    last: int

    def describe(self) -> str:
        if self.last < self.first:
            return f"deleted before line {self.first} (was {_span(self.base_first, self.base_last)})"
        return _span(self.first, self.last)


@dataclass(frozen=True)
class RebaseOutcome:
    outcome: EditOutcome  # the edit applied to the current text
    view: str  # the base with only this session's edit applied: its new read state
    changes: tuple[LineChange, ...]  # what others changed between base and current


# ---------------------------------------------------------------------------------------------------------
# Lines and diffs
# ---------------------------------------------------------------------------------------------------------
def split_keepends(text: str) -> list[str]:
    """Lines with their terminators (``\\n`` or ``\\r\\n``); the split of `semantics.split_lines`, so line
    numbers agree. Comparing lines with terminators makes a changed line end a change."""
    if not text:
        return []
    parts = text.split("\n")
    last = parts.pop()
    lines = [p + "\n" for p in parts]
    if last:
        lines.append(last)
    return lines


def line_diff(a: Sequence[str], b: Sequence[str]) -> list[Hunk]:
    """The changed blocks between two line lists, in order, as non-adjacent-to-each-other hunks.

    Patience diff: trim the common head and tail, anchor on lines that occur exactly once on each side
    (longest increasing run of them), recurse into the gaps; a gap with no anchors goes to difflib if
    small (`DIFFLIB_MAX_PRODUCT`), else is one block. Cost: O(n log n) for the usual case of a few local
    changes in a big file. Every hunk is exact (outside the hunks the two sides are equal line for line);
    a coarse hunk only makes the rebase refuse more.
    """
    hunks: list[Hunk] = []
    stack = [(0, len(a), 0, len(b))]
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        while alo < ahi and blo < bhi and a[alo] == b[blo]:
            alo += 1
            blo += 1
        while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:
            ahi -= 1
            bhi -= 1
        if alo == ahi and blo == bhi:
            continue
        if alo == ahi or blo == bhi:
            hunks.append(Hunk(alo, ahi, blo, bhi))
            continue
        anchors = _unique_anchors(a, alo, ahi, b, blo, bhi)
        if anchors:
            # Gaps between consecutive anchors (and the two ends), pushed so that they pop in order.
            gaps = []
            pa, pb = alo, blo
            for ia, ib in anchors:
                gaps.append((pa, ia, pb, ib))
                pa, pb = ia + 1, ib + 1
            gaps.append((pa, ahi, pb, bhi))
            stack.extend(reversed(gaps))
        elif (ahi - alo) * (bhi - blo) <= DIFFLIB_MAX_PRODUCT:
            sm = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            for tag, i1, i2, j1, j2 in sm.get_opcodes():
                if tag != "equal":
                    hunks.append(Hunk(alo + i1, alo + i2, blo + j1, blo + j2))
        else:
            hunks.append(Hunk(alo, ahi, blo, bhi))
    hunks.sort(key=lambda h: (h.a1, h.b1))
    return _coalesce(hunks)


def _unique_anchors(
    a: Sequence[str], alo: int, ahi: int, b: Sequence[str], blo: int, bhi: int
) -> list[tuple[int, int]]:
    """Pairs (i, j) of lines unique in a[alo:ahi] and in b[blo:bhi] and equal, longest run increasing in
    both i and j (patience sorting)."""
    count_a: dict[str, int] = {}
    for i in range(alo, ahi):
        line = a[i]
        count_a[line] = -1 if line in count_a else i
    count_b: dict[str, int] = {}
    for j in range(blo, bhi):
        line = b[j]
        if line in count_a and count_a[line] >= 0:
            count_b[line] = -1 if line in count_b else j
    pairs = [(count_a[line], j) for line, j in count_b.items() if j >= 0]
    if not pairs:
        return []
    pairs.sort()
    # Longest increasing subsequence of the j's.
    tails: list[int] = []  # j of the last pair of the best run of each length
    tail_idx: list[int] = []
    prev: list[int] = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        pos = bisect_left(tails, j)
        if pos == len(tails):
            tails.append(j)
            tail_idx.append(k)
        else:
            tails[pos] = j
            tail_idx[pos] = k
        prev[k] = tail_idx[pos - 1] if pos > 0 else -1
    out: list[tuple[int, int]] = []
    k = tail_idx[-1]
    while k >= 0:
        out.append(pairs[k])
        k = prev[k]
    out.reverse()
    return out


def _coalesce(hunks: list[Hunk]) -> list[Hunk]:
    """Merge hunks that abut (no equal line between them) into one."""
    out: list[Hunk] = []
    for h in hunks:
        if out and out[-1].a2 == h.a1 and out[-1].b2 == h.b1:
            last = out.pop()
            h = Hunk(last.a1, h.a2, last.b1, h.b2)
        out.append(h)
    return out


@dataclass(frozen=True)
class _Span:
    """A hunk with where it lies in the two texts, in characters (for merging by slicing)."""

    hunk: Hunk
    a_start: int
    a_len: int
    b_start: int
    b_len: int


def _common_prefix_len(a: str, b: str) -> int:
    """Length of the common prefix, by bisection on slice comparisons (memcmp speed, not a char loop)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _common_suffix_len(a: str, b: str, limit: int) -> int:
    """Length of the common suffix, at most `limit`."""
    la, lb = len(a), len(b)
    if a[la - limit :] == b[lb - limit :]:
        return limit
    lo, hi = 0, limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[la - mid : la - lo] == b[lb - mid : lb - lo]:
            lo = mid
        else:
            hi = mid
    return lo


def diff_texts(a: str, b: str) -> list[_Span]:
    """`line_diff` of two texts, with the character positions of each hunk.

    The common head and tail are found on the texts themselves (bisection of slice comparisons) and
    snapped to whole lines; only the lines in between are split and diffed. A few local changes in a big
    file cost O(n) memcmp plus the lines between the first and the last change.
    """
    k = _common_prefix_len(a, b)
    if k == len(a) == len(b):
        return []
    head = a.rfind("\n", 0, k) + 1  # start of the line holding the first difference (same in b)
    t = _common_suffix_len(a, b, min(len(a), len(b)) - k)
    nl = a.find("\n", len(a) - t) if t else -1  # a line end inside the common tail
    tail = len(a) - (nl + 1) if nl >= 0 else 0  # whole lines at the end, the same in both
    a_mid = split_keepends(a[head : len(a) - tail])
    b_mid = split_keepends(b[head : len(b) - tail])
    head_lines = a.count("\n", 0, head)
    a_off = _offsets(a_mid, head)
    b_off = _offsets(b_mid, head)
    return [
        _Span(
            Hunk(h.a1 + head_lines, h.a2 + head_lines, h.b1 + head_lines, h.b2 + head_lines),
            a_off[h.a1],
            a_off[h.a2] - a_off[h.a1],
            b_off[h.b1],
            b_off[h.b2] - b_off[h.b1],
        )
        for h in line_diff(a_mid, b_mid)
    ]


def _offsets(lines: Sequence[str], start: int) -> list[int]:
    out = [start]
    for line in lines:
        start += len(line)
        out.append(start)
    return out


def _touches(region: tuple[int, int], h: Hunk) -> bool:
    """Does foreign hunk `h` overlap or touch the closed line interval `region` (0-based, in the base)?

    A hunk replacing base lines [a1, a2) touches lines a1-1 .. a2 (itself and the line on each side); an
    insertion at a1 (a1 == a2) touches lines a1-1 and a1. So the closed intervals [r1, r2] and
    [a1-1, a2] must not meet. A region may be empty (r2 == r1 - 1: the session's own insertion before line
    r1); then a foreign change meets it if it touches either neighbour or inserts at the same place.
    """
    r1, r2 = region
    return r1 <= h.a2 and h.a1 - 1 <= r2


# ---------------------------------------------------------------------------------------------------------
# The rebase
# ---------------------------------------------------------------------------------------------------------
def rebase_edits(base: str, current: str, specs: Sequence[EditSpec], name: str = "The file") -> RebaseOutcome:
    """Apply `specs` (made against `base`) to `current`, or raise STALE. See the module docstring.

    Both texts are the decoded file contents (line ends as in the file). Raises CoordinatorError: STALE
    when the edit cannot be carried over (``details``: ``changes`` as ``[[first, last], ...]`` of the
    current file, ``reason``), or the edit's own error (NO_MATCH, AMBIGUOUS, ...) when it fails on the
    current text for a reason that has nothing to do with the intervening changes, which cannot happen
    after the checks above and is reported as STALE too, to stay on the safe side.
    """
    if not specs:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "No edits to rebase.")
    foreign_spans = diff_texts(base, current)
    foreign = [x.hunk for x in foreign_spans]
    changes = tuple(_line_change(h) for h in foreign)
    if any(s.replace_all for s in specs) or any(s.old_string == "" for s in specs):
        what = "replace_all" if any(s.replace_all for s in specs) else "an empty old_string"
        raise _stale(name, changes, f"an edit with {what} is never carried over onto a changed file.", "not_rebasable")

    # 1. The edit against what the session read: its regions (match lines) and its own hunks.
    try:
        view_outcome = apply_edits(base, specs) if len(specs) > 1 else _apply_one(base, specs[0])
    except CoordinatorError as exc:
        raise _stale(
            name,
            changes,
            f"the edit does not apply to the version you read either ({exc.message}).",
            "invalid_on_base",
        ) from None
    view = view_outcome.text
    regions = [_match_region(base, view_outcome)] if len(specs) == 1 else _match_regions(base, specs)
    own = diff_texts(base, view)
    regions.extend((x.hunk.a1, x.hunk.a2 - 1) for x in own)

    # 2. No foreign change may overlap or touch any region.
    clashing = [c for h, c in zip(foreign, changes, strict=True) if any(_touches(r, h) for r in regions)]
    if clashing:
        raise _stale(
            name,
            changes,
            "the lines you are editing, or the lines right next to them, were changed by another write since "
            f"your read ({_join(clashing)} of the current file).",
            "overlap",
            summary=len(clashing) < len(changes),
            clashing=[[c.first, c.last] for c in clashing],
        )

    # 3. The edit applied to the current text must be the merge of both change sets.
    merged = _merge(current, foreign_spans, view, own)
    try:
        outcome = apply_edits(current, specs) if len(specs) > 1 else _apply_one(current, specs[0])
    except CoordinatorError as exc:
        raise _stale(
            name,
            changes,
            f"old_string no longer matches uniquely in the current file ({exc.message}).",
            "no_unique_match",
        ) from None
    if outcome.text != merged:
        raise _stale(
            name,
            changes,
            "old_string now matches at a place that does not correspond to where it was in the version you read.",
            "moved_match",
        )
    return RebaseOutcome(outcome=outcome, view=view, changes=changes)


def rebase_edit(base: str, current: str, spec: EditSpec, name: str = "The file") -> RebaseOutcome:
    """`rebase_edits` for a single edit."""
    return rebase_edits(base, current, [spec], name)


def describe_changes(changes: Sequence[LineChange]) -> str:
    """ "lines 4-6, 40 and 2 more" style summary (current file's numbering)."""
    return _join(changes)


def _apply_one(text: str, spec: EditSpec) -> EditOutcome:
    return apply_edit(text, spec.old_string, spec.new_string, spec.replace_all)


def _match_regions(base: str, specs: Sequence[EditSpec]) -> list[tuple[int, int]]:
    """0-based closed line intervals of the base that each edit's old_string spans (matched on the base
    alone; an edit whose old_string only exists after an earlier edit of the same call has none, and its
    lines are covered by the own-hunk regions instead)."""
    regions: list[tuple[int, int]] = []
    for spec in specs:
        try:
            regions.append(_match_region(base, _apply_one(base, spec)))
        except CoordinatorError:
            continue
    return regions


def _match_region(base: str, out: EditOutcome) -> tuple[int, int]:
    """0-based closed interval of base lines spanned by the text a single-replacement edit `out` of `base`
    matched.

    A match that begins with a line's terminator (``"\nx = 1\n"``, a common way to anchor on whole lines)
    does not count that line: none of its text is matched, and if the edit changes the terminator, the
    edit's own diff hunk covers the line anyway. A match of nothing but a terminator is then an empty
    region (first == last + 1): the gap between two lines.
    """
    start = out.first_offset
    removed = len(base) - len(out.text) + out.inserted_len
    skip = 2 if base.startswith("\r\n", start) else 1 if base.startswith("\n", start) else 0
    first = line_number_at(base, start + skip) - 1 if skip else line_number_at(base, start) - 1
    last = line_number_at(base, max(start, start + removed - 1)) - 1
    return first, max(last, first - 1)


def _merge(current: str, foreign: Sequence[_Span], view: str, own: Sequence[_Span]) -> str:
    """The current text with the session's own hunks put at the corresponding place. The own hunks lie in
    runs of lines that base -> current left equal (no foreign hunk touches them), so each maps by the
    character shift of the foreign hunks before it."""
    out: list[str] = []
    cursor = 0
    shift = 0
    i = 0
    for x in own:
        while i < len(foreign) and foreign[i].hunk.a2 <= x.hunk.a1:
            shift += foreign[i].b_len - foreign[i].a_len
            i += 1
        start = x.a_start + shift
        out.append(current[cursor:start])
        out.append(view[x.b_start : x.b_start + x.b_len])
        cursor = start + x.a_len
    out.append(current[cursor:])
    return "".join(out)


def _line_change(h: Hunk) -> LineChange:
    return LineChange(base_first=h.a1 + 1, base_last=h.a2, first=h.b1 + 1, last=h.b2)


def _span(first: int, last: int) -> str:
    if last < first:
        return f"nothing (at line {first})"
    return f"line {first}" if first == last else f"lines {first}-{last}"


def _join(changes: Sequence[LineChange]) -> str:
    if not changes:
        return "no lines"
    parts = [c.describe() for c in changes[:_MAX_RANGES_SHOWN]]
    if len(changes) > _MAX_RANGES_SHOWN:
        parts.append(f"and {len(changes) - _MAX_RANGES_SHOWN} more blocks")
    return ", ".join(parts)


def _stale(
    name: str, changes: Sequence[LineChange], reason: str, kind: str, summary: bool = True, **extra: object
) -> CoordinatorError:
    told = ""
    if summary:
        told = (
            f" Since your read, other writes changed {_join(changes)} (current numbering)."
            if changes
            else " Since your read, the file was changed by another write."
        )
    return CoordinatorError(
        ErrorCode.STALE,
        f"{name} has been modified since you last read it, and your edit could not be carried over onto the "
        f"current version: {reason}{told} Read the file again (at least around those lines), then redo your "
        "change on the current content.",
        changes=[[c.first, c.last] for c in changes],
        reason=kind,
        **extra,
    )
