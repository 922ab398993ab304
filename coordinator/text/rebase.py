"""The merge rule by commutation: carry a change made against an older version onto the current one.

Used by the `rebase` policy (an edit made on an older view) and by undo (the inverse of an earlier write,
carried onto the file as it is now). A session read version B of a file (its *base*); other writes have
since made it C. The session's change turns B into V (its *view* after the change). The change is applied
to C when, and only when, it and the changes B -> C *commute*: applying them in either order gives the same
text. On whole-line hunks (the line diffs B -> V and B -> C) that is:

* A replaced or deleted block of lines commutes with another one when they share no line. Blocks that
  merely touch (a change on the line just above or below) commute: each side's lines are the same in
  either order.
* An insertion commutes with a block unless it falls strictly inside it.
* The changed lines decide, not the context (git's rule): the lines an edit's ``old_string`` matched but
  leaves as they were may have been changed by others meanwhile. Two insertions at the same point land
  too, in an order that is recorded (`RebaseOutcome.placed_after` / ``placed_before``): where the edit's
  ``old_string`` still matches, the place it gives; else the order that keeps more of the lines next to
  the edit's own (the line above, the line below) next to them, and on a tie the order of the writes (the
  edit's lines after the others'). A line diff cannot always tell where an insertion was made (a block
  that starts or ends with a line equal to its neighbour could be told one line up or down): the
  neighbours decide where the diff cannot.
* A change another write already made, the same lines replaced by the same text at the same place, is not
  made twice: when every hunk of the edit is already there, the result says so (``already``) and the
  text is the current one. (The engine refuses it instead when the session itself made that change
  through another call since its view: it may have meant to make it twice, as a counter's increment.)
* ``replace_all`` edits and the empty ``old_string`` that creates a file are never carried over.
* ``carry_change`` (undo) keeps the stricter rule: its whole change must commute, and two insertions at
  one point are refused.

For an edit, a last check makes the rule safe against repeated lines: when the edit still applies to C
with the ordinary Edit semantics (`semantics.apply_edits`: exact, then quote-folded match, CRLF kept,
unique match), the result must be one of the merges (C with the edit's own hunks put at the corresponding
place); when it no longer applies because others changed some of its context lines, the lines of it that
nobody changed, with what lies between them now, must occur exactly once in C. Never is an edit landed at a
place other than where its text matched in the version the session read. Anything else raises
`CoordinatorError(STALE)` whose message names the lines that changed (the engine adds which sessions changed
them, from the history). Nothing here does I/O, so the engine may run it under the file lock. Property-tested
against real ``git merge-file`` in tests/coordinator/text/test_rebase_git.py; the rule and its measure on
CooperBench are in docs/merge.md.

The session's *view* after a rebased edit is B with its own edit applied (`RebaseOutcome.view`), not C:
the session has not seen the intervening changes, so its read state must not claim it has. A result names
the changes near the edit (`RebaseOutcome.nearby`), which the model should look at before relying on them.

Invariant (property-tested in tests/coordinator/text/test_rebase.py): two edits made against the same base
that commute give the same final text in either order of writing, equal to applying both one after the
other; pairs whose changed lines overlap are refused whichever is written second.
"""

from __future__ import annotations

import difflib
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.text.semantics import EditOutcome, EditSpec, apply_edit, apply_edits, line_number_at

# A gap between two patience anchors is diffed with difflib only when it is small enough; a larger gap is
# reported as one changed block. That errs towards refusing (a coarser change can only touch more), and
# bounds the cost on big, heavily rewritten files: difflib is quadratic in the worst case.
DIFFLIB_MAX_PRODUCT = 4_000_000
_MAX_RANGES_SHOWN = 8
# A foreign change this close to the edit (in lines) is named in the result, for the model to look at.
NEARBY_LINES = 3


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
    nearby: tuple[LineChange, ...] = ()  # those within NEARBY_LINES lines of the edit, numbered as in the result
    # the edit's change was already in the file (made by another write): nothing to write, `outcome.text`
    # is the current text and `outcome.replacements` is 0
    already: bool = False
    # foreign insertions at the very point where the edit inserts: the edit's lines were put after them
    # (the order of the writes), numbered as in the current file
    placed_after: tuple[LineChange, ...] = ()
    # ... or before them, where the edit's old_string still matched and put them there (anchored above)
    placed_before: tuple[LineChange, ...] = ()


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
    # Hunks of different gaps are separated by an anchor (an equal line), and difflib never emits two
    # non-equal opcodes in a row: no two hunks abut, so none needs merging.
    hunks.sort(key=lambda h: (h.a1, h.b1))
    return hunks


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


@dataclass(frozen=True)
class _Claim:
    """Base lines ``[first, end)`` (0-based, half-open) that a change depends on: a block it rewrites, or
    the lines its ``old_string`` matched. ``first == end`` is a point: an insertion before line ``first``
    (or a match of nothing but a line end, the gap before line ``first``)."""

    first: int
    end: int


def _commutes(claim: _Claim, h: Hunk, ordered: bool = False) -> bool:
    """Do the session's claim and the foreign hunk `h` (replacing base lines ``[h.a1, h.a2)``) commute?

    Two blocks commute when they share no line; an insertion commutes with a block unless it lies strictly
    inside it; two insertions commute unless they are at the same point. `ordered`: two insertions at
    the same point are taken as commuting too, the session's lines going after the foreign ones (the
    order of the writes), which `_merge` does by itself.
    """
    if claim.first == claim.end:
        if h.a1 == h.a2:
            return ordered or h.a1 != claim.first
        return not h.a1 < claim.first < h.a2
    if h.a1 == h.a2:
        return not claim.first < h.a1 < claim.end
    return h.a2 <= claim.first or claim.end <= h.a1


def _check_commutes(
    name: str,
    changes: Sequence[LineChange],
    foreign: Sequence[Hunk],
    claims: Sequence[_Claim],
    what: str,
    carrying: bool = False,
    ordered: bool = False,
) -> None:
    """Raise STALE (reason ``overlap``, or ``same_place`` when every clash is two insertions at one point)
    unless every foreign hunk commutes with every claim (`ordered`: see `_commutes`)."""
    clashing: list[LineChange] = []
    all_points = True
    for h, c in zip(foreign, changes, strict=True):
        bad = [k for k in claims if not _commutes(k, h, ordered)]
        if bad:
            clashing.append(c)
            all_points = all_points and h.a1 == h.a2 and all(k.first == k.end for k in bad)
    if not clashing:
        return
    since = "since then" if carrying else "since your read"
    if all_points:
        reason = (
            f"{what} inserts lines at the very place where another write inserted lines {since} "
            f"({describe_changes(clashing)} of the current file); which should come first cannot be decided for you."
        )
    else:
        reason = (
            f"{what} changes lines that another write also changed {since} "
            f"({describe_changes(clashing)} of the current file)."
        )
    raise _stale(
        name,
        changes,
        reason,
        "same_place" if all_points else "overlap",
        summary=len(clashing) < len(changes),
        carrying=carrying,
        clashing=[[c.first, c.last] for c in clashing],
    )


def _nearby(
    claims: Sequence[_Claim], foreign: Sequence[Hunk], changes: Sequence[LineChange], own: Sequence[_Span]
) -> tuple[LineChange, ...]:
    """The foreign changes within `NEARBY_LINES` lines of a claim (the ones a model should look at), with
    ``first``/``last`` numbered as in the merged result (shifted by the session's own hunks before them)."""
    out: list[LineChange] = []
    for h, c in zip(foreign, changes, strict=True):
        if any(h.a1 < k.end + NEARBY_LINES and k.first - NEARBY_LINES < h.a2 for k in claims):
            shift = sum((x.hunk.b2 - x.hunk.b1) - (x.hunk.a2 - x.hunk.a1) for x in own if x.hunk.a2 <= h.a1)
            out.append(LineChange(c.base_first, c.base_last, c.first + shift, c.last + shift))
    return tuple(out)


# ---------------------------------------------------------------------------------------------------------
# The rebase of an edit, and the carrying over of a whole change (undo)
# ---------------------------------------------------------------------------------------------------------
def rebase_edits(
    base: str, current: str, specs: Sequence[EditSpec], name: str = "The file", match: str = "exact"
) -> RebaseOutcome:
    """Apply `specs` (made against `base`) to `current`, or raise STALE. See the module docstring.

    Both texts are the decoded file contents (line ends as in the file). Raises CoordinatorError: STALE
    when the edit cannot be carried over (``details``: ``changes`` as ``[[first, last], ...]`` of the
    current file, ``reason``: ``not_rebasable``, ``invalid_on_base``, ``overlap``, ``no_unique_match``
    or ``moved_match``). An edit that fails on the current text for any other reason is reported as
    STALE too, to stay on the safe side. An edit whose every change is already in the file is answered
    with ``already=True`` and the current text unchanged.
    """
    if not specs:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "No edits to rebase.")
    foreign_spans = diff_texts(base, current)
    foreign = [x.hunk for x in foreign_spans]
    changes = tuple(_line_change(h) for h in foreign)
    if any(s.replace_all for s in specs) or any(s.old_string == "" for s in specs):
        what = "replace_all" if any(s.replace_all for s in specs) else "an empty old_string"
        raise _stale(name, changes, f"an edit with {what} is never carried over onto a changed file.", "not_rebasable")

    # 1. The edit against what the session read: the lines it matched and its own hunks.
    try:
        view_outcome = apply_edits(base, specs, match) if len(specs) > 1 else _apply_one(base, specs[0], match)
    except CoordinatorError as exc:
        raise _stale(
            name,
            changes,
            f"the edit does not apply to the version you read either ({exc.message}).",
            "invalid_on_base",
        ) from None
    view = view_outcome.text
    own = diff_texts(base, view)
    regions = [_match_region(base, view_outcome)] if len(specs) == 1 else _match_regions(base, specs, match)

    # 2. Own hunks another write already made, the same change at the same place, are not made twice.
    fresh = [x for x in own if not _already_made(x, view, foreign_spans, current)]
    if not fresh:
        made = EditOutcome(current, 0, 0, 0, view_outcome.match, view_outcome.match_lines)
        return RebaseOutcome(made, view, changes, already=True)

    # 3. Every foreign change must commute with the edit's changed lines (not its context: git's rule).
    _check_commutes(name, changes, foreign, [_Claim(x.hunk.a1, x.hunk.a2) for x in fresh], "your edit", ordered=True)

    # 4. The merge, put where the edit matched in the version read, checked against the current text.
    # Where the edit inserts at the very point another write inserted, see `_orders`.
    points = {x.hunk.a1 for x in fresh if x.hunk.a1 == x.hunk.a2}
    same_point = [(h, c) for h, c in zip(foreign, changes, strict=True) if h.a1 == h.a2 and h.a1 in points]
    merges = (
        _orders(current, foreign_spans, view, fresh) if same_point else [_merge(current, foreign_spans, view, fresh)]
    )
    outcome = _landing(current, merges, specs, match, regions, own, foreign_spans, name, changes)
    claims = [*regions, *(_Claim(x.hunk.a1, x.hunk.a2) for x in own)]
    before = outcome.text == _merge(current, foreign_spans, view, fresh, before_points=True) if same_point else False
    placed = tuple(_renumbered(h, c, fresh, before) for h, c in same_point)
    return RebaseOutcome(
        outcome=outcome,
        view=view,
        changes=changes,
        nearby=_nearby(claims, foreign, changes, fresh),
        placed_after=() if before else placed,
        placed_before=placed if before else (),
    )


def _orders(current: str, foreign: Sequence[_Span], view: str, own: Sequence[_Span]) -> list[str]:
    """The two merges of an edit that inserts at the very point where another write inserted, the one to
    make when the edit's old_string no longer decides first: the one where more of the lines next to the
    edit's inserted lines in the version read (the line before them, the line after) are still next to
    them; on a tie, the edit's lines after the other write's (the order of the writes). A line diff cannot
    always tell where an insertion was made (a block that starts or ends with a line equal to its
    neighbour could have been put one line up or down): the neighbours decide where the diff cannot."""
    after_starts: list[int] = []
    before_starts: list[int] = []
    after = _merge(current, foreign, view, own, starts=after_starts)
    before = _merge(current, foreign, view, own, before_points=True, starts=before_starts)
    if _neighbours_kept(before, before_starts, view, own) > _neighbours_kept(after, after_starts, view, own):
        return [before, after]
    return [after, before]


def _neighbours_kept(merged: str, starts: Sequence[int], view: str, own: Sequence[_Span]) -> int:
    """How many own insertions keep, in `merged`, the line before and the line after them in `view`."""
    kept = 0
    for x, at in zip(own, starts, strict=True):
        if x.hunk.a1 != x.hunk.a2:
            continue
        end = at + x.b_len
        kept += _line_before(merged, at) == _line_before(view, x.b_start)
        kept += _line_after(merged, end) == _line_after(view, x.b_start + x.b_len)
    return kept


def _line_before(text: str, at: int) -> str:
    return text[text.rfind("\n", 0, max(at - 1, 0)) + 1 : at]


def _line_after(text: str, at: int) -> str:
    end = text.find("\n", at)
    return text[at : end + 1 if end >= 0 else len(text)]


def _renumbered(h: Hunk, c: LineChange, own: Sequence[_Span], own_first: bool) -> LineChange:
    """Foreign change `c` (hunk `h`) numbered as in the merged result: moved by the lines of the own hunks
    before it (those at its very point too when `own_first`)."""
    shift = sum(
        (x.hunk.b2 - x.hunk.b1) - (x.hunk.a2 - x.hunk.a1)
        for x in own
        if x.hunk.a2 < h.a1 or (x.hunk.a2 == h.a1 and (own_first or x.hunk.a1 < x.hunk.a2))
    )
    return LineChange(c.base_first, c.base_last, c.first + shift, c.last + shift)


def _already_made(x: _Span, view: str, foreign: Sequence[_Span], current: str) -> bool:
    """Is own hunk `x` also a foreign hunk: the same base lines replaced by the same text?"""
    for f in foreign:
        if f.hunk.a1 == x.hunk.a1 and f.hunk.a2 == x.hunk.a2:
            return current[f.b_start : f.b_start + f.b_len] == view[x.b_start : x.b_start + x.b_len]
    return False


def _landing(
    current: str,
    merges: Sequence[str],
    specs: Sequence[EditSpec],
    match: str,
    regions: Sequence[_Claim],
    own: Sequence[_Span],
    foreign: Sequence[_Span],
    name: str,
    changes: Sequence[LineChange],
) -> EditOutcome:
    """The edit's outcome on the current text, when it is one of the `merges` (the first is the default);
    else STALE.

    The edit still applies to the current text: it must give a merge (``moved_match`` otherwise: the
    match is somewhere else now). It no longer applies because others changed some of its context lines
    or made some of its change already: the lines of it that nobody changed, with what now lies between
    them, must occur exactly once in the current file (``no_unique_match`` otherwise), so the place the
    merge chose is the only place the edit's text can mean. Several matches now: ``no_unique_match``.
    """
    try:
        outcome = apply_edits(current, specs, match) if len(specs) > 1 else _apply_one(current, specs[0], match)
    except CoordinatorError as exc:
        if exc.code != ErrorCode.NO_MATCH or not _anchored(current, regions, own, foreign):
            raise _stale(
                name,
                changes,
                f"old_string no longer matches uniquely in the current file ({exc.message}).",
                "no_unique_match",
            ) from None
        return _merged_outcome(merges[0], current, len(specs))
    if outcome.text not in merges:
        raise _stale(
            name,
            changes,
            "old_string now matches at a place that does not correspond to where it was in the version you read.",
            "moved_match",
        )
    return outcome


def _anchored(current: str, regions: Sequence[_Claim], own: Sequence[_Span], foreign: Sequence[_Span]) -> bool:
    """Does each block of the edit (its matched lines and own hunks, touching ones joined) keep at least
    one line nobody changed, and does the current text from its first such line to its last occur
    exactly once in the current file?"""
    blocks = sorted([(c.first, c.end) for c in regions] + [(x.hunk.a1, x.hunk.a2) for x in own])
    joined: list[list[int]] = []
    for first, end in blocks:
        if joined and first <= joined[-1][1]:
            joined[-1][1] = max(joined[-1][1], end)
        else:
            joined.append([first, end])
    lines = split_keepends(current)
    for first, end in joined:
        kept = [i for i in range(first, end) if not any(f.hunk.a1 <= i < f.hunk.a2 for f in foreign)]
        if not kept:
            return False
        lo, hi = _current_line(kept[0], foreign), _current_line(kept[-1], foreign)
        text = "".join(lines[lo : hi + 1])
        at = current.find(text)
        if at < 0 or current.find(text, at + 1) >= 0:
            return False
    return True


def _current_line(i: int, foreign: Sequence[_Span]) -> int:
    """Where base line `i`, which no foreign hunk replaced, is in the current text (0-based)."""
    return i + sum((f.hunk.b2 - f.hunk.b1) - (f.hunk.a2 - f.hunk.a1) for f in foreign if f.hunk.a2 <= i)


def _merged_outcome(merged: str, current: str, replacements: int) -> EditOutcome:
    """The outcome of a landing made from the merge alone: where the changed part starts in it, and how
    long it is (from the first changed line through the last)."""
    start, length = changed_region(current, merged)
    return EditOutcome(merged, replacements, start, length)


def rebase_edit(base: str, current: str, spec: EditSpec, name: str = "The file", match: str = "exact") -> RebaseOutcome:
    """`rebase_edits` for a single edit."""
    return rebase_edits(base, current, [spec], name, match)


@dataclass(frozen=True)
class CarryOutcome:
    text: str  # `current` with the change applied
    changes: tuple[LineChange, ...]  # what changed between `base` and `current`
    nearby: tuple[LineChange, ...]  # those of them within NEARBY_LINES of the change
    first_offset: int  # where the first carried hunk starts in `text` (0 when nothing moved)
    inserted_len: int  # its length in `text`


def carry_change(
    base: str, changed: str, current: str, name: str = "The file", what: str = "the change"
) -> CarryOutcome:
    """Carry the change ``base -> changed`` onto ``current`` (which is ``base`` changed by others), or raise
    STALE (reason ``overlap`` or ``same_place``). The whole-text form of the merge rule, used by undo: the
    inverse of a write is ``after -> before``, carried onto the file as it is now. `what` names the change
    in the refusal ("your undo").

    When the change is nothing (``base == changed``) the result is `current`; the caller decides whether
    that is worth a write.
    """
    own = diff_texts(base, changed)
    if base == current:
        first = own[0].b_start if own else 0
        return CarryOutcome(changed, (), (), first, _own_len(own))
    foreign_spans = diff_texts(base, current)
    foreign = [x.hunk for x in foreign_spans]
    changes = tuple(_line_change(h) for h in foreign)
    claims = [_Claim(x.hunk.a1, x.hunk.a2) for x in own]
    _check_commutes(name, changes, foreign, claims, what, carrying=True)
    text = _merge(current, foreign_spans, changed, own)
    first = _mapped_start(foreign_spans, own[0]) if own else 0
    return CarryOutcome(text, changes, _nearby(claims, foreign, changes, own), first, _own_len(own))


# ---------------------------------------------------------------------------------------------------------
# An agent's own tools on an older view (the hooks: coordinator/engine/agentwrites.py)
# ---------------------------------------------------------------------------------------------------------
def replay_edits(base: str, current: str, specs: Sequence[EditSpec], name: str = "The file") -> RebaseOutcome:
    """An agent's own Edit made on `base` (the version its session read) that its tool will run on `current`:
    the tool replaces each ``old_string`` wherever it finds it now, which is safe only when that gives the
    rebase's result. So: the rebase (`rebase_edits`) must carry the edit over, each ``old_string`` must occur
    exactly once in `current`, and the edit applied to `current` directly must give the rebase's text. Returns
    the rebase (its ``outcome.text`` is what the file will hold), or raises STALE: the edit's change already
    in the file (its tool would find nothing to replace) is refused too, reason ``already_made``."""
    rb = rebase_edits(base, current, specs, name)
    if rb.already:
        raise _stale(name, rb.changes, "your change is already in the file (made by another write).", "already_made")
    for spec in specs:
        if current.count(spec.old_string) != 1:
            raise _stale(
                name, rb.changes, "the text to replace no longer occurs exactly once in the file.", "no_unique_match"
            )
    try:
        direct = apply_edits(current, specs) if len(specs) > 1 else _apply_one(current, specs[0])
    except CoordinatorError:
        direct = None
    if direct is None or direct.text != rb.outcome.text:
        raise _stale(
            name, rb.changes, "your edit, replaced where its text is now, would land elsewhere than where you made it.",
            "moved_match",
        )  # fmt: skip
    return rb


def merge_write(base: str, content: str, current: str, name: str = "The file") -> CarryOutcome:
    """An agent's whole-file write of `content` made on `base` (the version its session read), merged 3-way
    onto `current`: the change ``base -> content`` carried over by the rule of `carry_change` (every hunk
    commutes with the changes ``base -> current``; two insertions at one point are refused), or STALE with
    the read-again message of an edit. The result's ``text`` is what the agent's tool is to write instead."""
    own = diff_texts(base, content)
    foreign_spans = diff_texts(base, current)
    foreign = [x.hunk for x in foreign_spans]
    changes = tuple(_line_change(h) for h in foreign)
    claims = [_Claim(x.hunk.a1, x.hunk.a2) for x in own]
    _check_commutes(name, changes, foreign, claims, "your write")
    text = _merge(current, foreign_spans, content, own)
    first = _mapped_start(foreign_spans, own[0]) if own else 0
    return CarryOutcome(text, changes, _nearby(claims, foreign, changes, own), first, _own_len(own))


def changed_region(old: str, new: str) -> tuple[int, int]:
    """Where `new` differs from `old`, as (offset in `new` of the first changed line, length through the
    end of the last changed line); (0, 0) when they are equal. The snippet and the history's line range of
    a whole-content swap (an undo or redo of the newest write) come from this, not from the whole file."""
    own = diff_texts(old, new)
    return (own[0].b_start, _own_len(own)) if own else (0, 0)


def _own_len(own: Sequence[_Span]) -> int:
    """Characters from the start of the first own hunk to the end of the last one, in the changed text."""
    return own[-1].b_start + own[-1].b_len - own[0].b_start if own else 0


def _mapped_start(foreign: Sequence[_Span], x: _Span) -> int:
    """Where own hunk `x`'s new text starts in the merged text (the shift of the foreign hunks before it)."""
    shift = sum(f.b_len - f.a_len for f in foreign if f.hunk.a2 <= x.hunk.a1)
    return x.a_start + shift


def _apply_one(text: str, spec: EditSpec, match: str = "exact") -> EditOutcome:
    return apply_edit(text, spec.old_string, spec.new_string, spec.replace_all, match)


def _match_regions(base: str, specs: Sequence[EditSpec], match: str) -> list[_Claim]:
    """The base lines each edit's old_string spans (matched on the base alone; an edit whose old_string
    only exists after an earlier edit of the same call has none, and its lines are covered by the own-hunk
    claims instead)."""
    regions: list[_Claim] = []
    for spec in specs:
        try:
            regions.append(_match_region(base, _apply_one(base, spec, match)))
        except CoordinatorError:
            continue
    return regions


def _match_region(base: str, out: EditOutcome) -> _Claim:
    """The base lines spanned by the text a single-replacement edit `out` of `base` matched.

    A match that begins with a line's terminator (``"\nx = 1\n"``, a common way to anchor on whole lines)
    does not claim that line: none of its text is matched, and if the edit changes the terminator, the
    edit's own diff hunk covers the line anyway. A match of nothing but a terminator is then a point: the
    gap between two lines.
    """
    start = out.first_offset
    removed = len(base) - len(out.text) + out.inserted_len
    skip = 2 if base.startswith("\r\n", start) else 1 if base.startswith("\n", start) else 0
    first = line_number_at(base, start + skip) - 1
    last = line_number_at(base, max(start, start + removed - 1)) - 1
    return _Claim(first, max(last + 1, first))


def _merge(
    current: str,
    foreign: Sequence[_Span],
    view: str,
    own: Sequence[_Span],
    before_points: bool = False,
    starts: list[int] | None = None,
) -> str:
    """The current text with the session's own hunks put at the corresponding place. The own hunks commute
    with the foreign ones (no shared line), so each maps by the character shift of the foreign hunks that
    end at or before its start. An own insertion at the point of a foreign one goes after it, or before it
    with `before_points`. `starts` gets where each own hunk's text starts in the result."""
    out: list[str] = []
    cursor = 0
    shift = 0
    grown = 0  # length added so far by own hunks
    i = 0
    for x in own:
        while i < len(foreign) and foreign[i].hunk.a2 <= x.hunk.a1:
            f = foreign[i].hunk
            if before_points and f.a1 == f.a2 == x.hunk.a1 == x.hunk.a2:
                break
            shift += foreign[i].b_len - foreign[i].a_len
            i += 1
        start = x.a_start + shift
        if starts is not None:
            starts.append(start + grown)
        out.append(current[cursor:start])
        out.append(view[x.b_start : x.b_start + x.b_len])
        grown += x.b_len - x.a_len
        cursor = start + x.a_len
    out.append(current[cursor:])
    return "".join(out)


def _line_change(h: Hunk) -> LineChange:
    return LineChange(base_first=h.a1 + 1, base_last=h.a2, first=h.b1 + 1, last=h.b2)


def _span(first: int, last: int) -> str:
    if last < first:
        return f"nothing (at line {first})"
    return f"line {first}" if first == last else f"lines {first}-{last}"


def describe_changes(changes: Sequence[LineChange]) -> str:
    """ "lines 4-6, 40 and 2 more blocks" style summary (current file's numbering), for messages."""
    if not changes:
        return "no lines"
    parts = [c.describe() for c in changes[:_MAX_RANGES_SHOWN]]
    if len(changes) > _MAX_RANGES_SHOWN:
        more = len(changes) - _MAX_RANGES_SHOWN
        parts.append(f"and {more} more block{'s' if more != 1 else ''}")
    return ", ".join(parts)


def _stale(
    name: str,
    changes: Sequence[LineChange],
    reason: str,
    kind: str,
    summary: bool = True,
    carrying: bool = False,
    **extra: object,
) -> CoordinatorError:
    """A STALE refusal: the rebase of an edit made on an older view, or (`carrying`) a change such as an
    undo carried onto a file that others changed since."""
    told = ""
    if summary:
        told = (
            f" Since then, other writes changed {describe_changes(changes)} (current numbering)."
            if changes
            else " Since then, the file was changed by another write."
        )
    if carrying:
        message = (
            f"{name} has changed since that write, and {reason[0].lower()}{reason[1:]}{told} Nothing was "
            "written. Read the file again (at least around those lines) and make the change you need by hand."
        )
    else:
        message = (
            f"{name} has been modified since you last read it, and your change could not be carried over onto "
            f"the current version: {reason}{told} Read the file again (at least around those lines), then "
            "redo your change on the current content."
        )
    return CoordinatorError(
        ErrorCode.STALE, message, changes=[[c.first, c.last] for c in changes], reason=kind, **extra
    )
