"""Tests of coordinator.text.rebase: the line diff, the rebase of one edit over concurrent ones, by example and
by property.

The properties it guards:
* Non-overlapping, non-adjacent edits made against one base commute: every order of writing gives the
  same final text, equal to applying the edits one after the other.
* Edits whose lines overlap or touch (adjacent lines) are refused with `stale`, never merged.
* A rebase that succeeds loses nothing: every line another session put in is still there.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.text import rebase
from coordinator.text.rebase import Hunk, line_diff, rebase_edit, rebase_edits, split_keepends
from coordinator.text.semantics import LEFT_DOUBLE, RIGHT_DOUBLE, EditSpec, apply_edit, apply_edits, split_lines
from tests.coordinator.text import examples


def stale(fn, *args) -> CoordinatorError:  # type: ignore[no-untyped-def]
    with pytest.raises(CoordinatorError) as info:
        fn(*args)
    assert info.value.code is ErrorCode.STALE, info.value
    assert info.value.message.startswith("The file has been modified since you last read it, and your change")
    assert "Read the file again (at least around those lines), then redo your change" in info.value.message
    return info.value


def numbered(n: int, eol: str = "\n") -> str:
    return "".join(f"line {i}{eol}" for i in range(1, n + 1))


def replay(a: list[str], b: list[str], hunks: list[Hunk]) -> list[str]:
    """Rebuild b from a and the hunks, checking that everything outside them is equal."""
    out: list[str] = []
    ia = ib = 0
    for h in hunks:
        assert h.a1 >= ia and h.b1 >= ib
        assert a[ia : h.a1] == b[ib : h.b1]
        out.extend(a[ia : h.a1])
        out.extend(b[h.b1 : h.b2])
        ia, ib = h.a2, h.b2
    assert a[ia:] == b[ib:]
    out.extend(a[ia:])
    return out


# --- line diff ----------------------------------------------------------------------------------------


def test_split_keepends_agrees_with_split_lines() -> None:
    for text in ["", "a", "a\n", "a\r\nb", "a\n\nb\n", "\n", "x\ry\n"]:
        lines = split_keepends(text)
        assert "".join(lines) == text
        assert [line.removesuffix("\n").removesuffix("\r") for line in lines] == split_lines(text)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.sampled_from("abcde"), max_size=30),
    st.lists(st.sampled_from("abcdef"), max_size=30),
)
def test_line_diff_is_exact(a: list[str], b: list[str]) -> None:
    hunks = line_diff(a, b)
    assert replay(a, b, hunks) == b
    for x, y in itertools.pairwise(hunks):
        assert x.a2 < y.a1 or x.b2 < y.b1  # never abutting: each hunk is a maximal change


def test_line_diff_big_file_is_fast_and_local() -> None:
    a = [f"row {i}\n" for i in range(50_000)]
    b = list(a)
    for k in range(0, 50_000, 5_000):
        b[k + 7] = "changed\n"
    b.insert(30_001, "inserted\n")
    hunks = line_diff(a, b)  # how fast is measured in the benchmarks, not here
    assert replay(a, b, hunks) == b
    assert len(hunks) == 11
    assert Hunk(30_001, 30_001, 30_001, 30_002) in hunks


def test_line_diff_without_unique_lines_falls_back_to_difflib_or_one_block(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    a = ["x\n", "y\n"] * 10  # no line occurs once: no patience anchor, and nothing in common at the ends
    b = ["y\n", "x\n"] * 10
    fine = line_diff(a, b)
    assert replay(a, b, fine) == b and len(fine) > 1  # difflib: small hunks
    monkeypatch.setattr(rebase, "DIFFLIB_MAX_PRODUCT", 10)
    assert line_diff(a, b) == [Hunk(0, 20, 0, 20)]  # the gap is too big for difflib: one block


def test_line_diff_trims_common_head_and_tail_before_anchoring() -> None:
    # Repeated lines: where an insertion lands depends on trimming the common head first...
    assert line_diff(["a\n", "b\n", "a\n"], ["a\n", "b\n", "a\n", "a\n"]) == [Hunk(3, 3, 3, 4)]
    # ...and the common tail: without it difflib would align the y's differently.
    assert line_diff(["p\n", "y\n", "y\n"], ["q\n", "y\n", "y\n", "y\n"]) == [Hunk(0, 1, 0, 2)]
    assert line_diff(["a\n"], ["a\n"]) == [] and rebase.diff_texts("a\nb", "a\nb") == []


def test_line_diff_keeps_patience_anchors() -> None:
    """Two changes on either side of a line that occurs once on each side stay two hunks (a coarser diff
    would also be exact, and would refuse edits near that line)."""
    a = ["x\n"] * 3 + ["anchor\n"] + ["x\n"] * 3
    b = ["x\n", "CHANGED\n", "x\n", "anchor\n", "x\n", "OTHER\n", "x\n"]
    assert line_diff(a, b) == [Hunk(1, 2, 1, 2), Hunk(5, 6, 5, 6)]
    # anchors are the longest run increasing on both sides: a crossed pair is dropped, not both
    a = ["u\n", "v\n", "w\n", "z\n"]
    b = ["w\n", "u\n", "v\n", "z\n"]
    assert line_diff(a, b) == [Hunk(0, 0, 0, 1), Hunk(2, 3, 3, 3)]


def test_line_diff_does_not_treat_popular_lines_as_junk() -> None:
    """difflib's autojunk would call lines that make up over 1 % of 200+ lines junk and match nothing."""
    a = ["x\n", "y\n"] * 150
    b = list(a)
    b[150] = "z\n"
    assert line_diff(a, b) == [Hunk(150, 151, 150, 151)]


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.sampled_from(["a\n", "b\n", "c\r\n", "dd\n", "e"]), max_size=25),
    st.lists(st.sampled_from(["a\n", "b\n", "c\r\n", "dd\n", "f\n", "e"]), max_size=25),
)
def test_diff_texts_finds_the_hunks_of_the_line_diff(a: list[str], b: list[str]) -> None:
    """The head and tail found on the texts are only a shortcut: the hunks are those of the line diff."""
    ta, tb = "".join(a), "".join(b)
    assert [x.hunk for x in rebase.diff_texts(ta, tb)] == line_diff(split_keepends(ta), split_keepends(tb))


# --- rebase by example --------------------------------------------------------------------------------


def test_edit_far_from_a_concurrent_change_is_carried_over() -> None:
    base = numbered(40)
    current = apply_edit(base, "line 3\n", "line three\nand more\n").text
    r = rebase_edit(base, current, EditSpec("line 30\n", "line thirty\n"))
    assert r.outcome.text == apply_edit(current, "line 30\n", "line thirty\n").text
    assert r.view == apply_edit(base, "line 30\n", "line thirty\n").text  # no foreign change in the view
    assert [(c.first, c.last) for c in r.changes] == [(3, 4)]
    assert [(c.base_first, c.base_last) for c in r.changes] == [(3, 3)]


@pytest.mark.parametrize(
    ("foreign_line", "refused"),
    [(9, False), (10, True), (11, True), (12, True), (13, False), (8, False), (14, False)],
)
def test_overlapping_lines_are_refused_and_adjacent_ones_commute(foreign_line: int, refused: bool) -> None:
    base = numbered(20)
    current = apply_edit(base, f"line {foreign_line}\n", "changed\n").text
    spec = EditSpec("line 10\nline 11\nline 12\n", "new block\n")
    if refused:
        err = stale(rebase_edit, base, current, spec)
        assert err.details["reason"] == "overlap"
        assert err.details["clashing"] == [[foreign_line, foreign_line]]
        assert f"line {foreign_line} of the current file" in err.message
        assert "changes lines that another write also changed" in err.message
    else:
        r = rebase_edit(base, current, spec)
        assert r.outcome.text == apply_edit(current, spec.old_string, "new block\n").text
        assert (
            r.outcome.text
            == apply_edit(
                apply_edit(base, spec.old_string, "new block\n").text, f"line {foreign_line}\n", "changed\n"
            ).text
        )
        # the new block is one line, so the numbering after it moves up by 2
        at = foreign_line if foreign_line < 10 else foreign_line - 2
        assert [(c.first, c.last) for c in r.nearby] == [(at, at)]  # all within 3 lines of the edit


def test_nearby_names_only_changes_within_three_lines() -> None:
    base = numbered(40)
    current = apply_edit(base, "line 16\n", "sixteen\n").text  # 4 lines below the edit's last line
    current = apply_edit(current, "line 15\n", "fifteen\n").text  # 3 lines below: nearby
    current = apply_edit(current, "line 2\n", "two\n").text  # far
    r = rebase_edit(base, current, EditSpec("line 11\nline 12\n", "x\n"))
    assert [(c.first, c.last) for c in r.changes] == [(2, 2), (15, 16)]
    assert [(c.first, c.last) for c in r.nearby] == [(14, 15)]  # numbered in the result: 2 lines became 1
    current = apply_edit(base, "line 16\n", "sixteen\n").text
    assert rebase_edit(base, current, EditSpec("line 11\nline 12\n", "x\n")).nearby == ()


def test_insertion_or_deletion_next_to_the_edit_commutes() -> None:
    base = numbered(10)
    spec = EditSpec("line 5\n", "five\n")
    below = apply_edit(base, "line 5\n", "line 5\nnew\n").text  # insertion right after line 5
    assert rebase_edit(base, below, spec).outcome.text == apply_edit(below, "line 5\n", "five\n").text
    above = apply_edit(base, "line 5\n", "new\nline 5\n").text  # right before it
    assert rebase_edit(base, above, spec).outcome.text == base.replace("line 5\n", "new\nfive\n")
    deleted = apply_edit(base, "line 6\n", "").text
    assert rebase_edit(base, deleted, spec).outcome.text == base.replace("line 5\nline 6\n", "five\n")


def test_two_insertions_at_the_same_point_land_in_a_recorded_order() -> None:
    base = numbered(10)
    theirs = apply_edit(base, "line 6\n", "THEIRS\nline 6\n").text  # inserted before line 6
    # anchored above (old_string still matches): MINE right after line 5, before THEIRS
    r = rebase_edit(base, theirs, EditSpec("line 5\n", "line 5\nMINE\n"))
    assert "line 5\nMINE\nTHEIRS\nline 6\n" in r.outcome.text
    assert [(c.first, c.last) for c in r.placed_before] == [(7, 7)] and r.placed_after == ()  # numbered after
    # anchored on both sides (old_string no longer matches): after THEIRS, the order of the writes
    r = rebase_edit(base, theirs, EditSpec("line 5\nline 6\n", "line 5\nMINE\nline 6\n"))
    assert "line 5\nTHEIRS\nMINE\nline 6\n" in r.outcome.text
    assert [(c.first, c.last) for c in r.placed_after] == [(6, 6)] and r.placed_before == ()
    # the same insertion at the same point is the same change: already made, nothing to write
    same = apply_edit(base, "line 6\n", "MINE\nline 6\n").text
    r = rebase_edit(base, same, EditSpec("line 5\n", "line 5\nMINE\n"))
    assert r.already and r.outcome.text == same and r.outcome.replacements == 0
    assert r.view == apply_edit(base, "line 5\n", "line 5\nMINE\n").text
    # one line apart they commute, as before
    r = rebase_edit(base, theirs, EditSpec("line 4\n", "line 4\nMINE\n"))
    assert "line 4\nMINE\nline 5\nTHEIRS\nline 6\n" in r.outcome.text and r.placed_after == ()


def test_an_insertion_inside_the_matched_lines_lands_when_the_changed_lines_commute() -> None:
    """git's rule: the changed lines decide, not the context lines the old_string matched."""
    base = numbered(10)
    current = apply_edit(base, "line 5\n", "line 5\nwedge\n").text
    r = rebase_edit(base, current, EditSpec("line 5\nline 6\n", "line 5\nsix\n"))
    assert "line 5\nwedge\nsix\nline 7\n" in r.outcome.text
    # but an insertion strictly inside the changed lines is an overlap
    err = stale(rebase_edit, base, current, EditSpec("line 5\nline 6\n", "five\nsix\n"))
    assert err.details["reason"] == "overlap" and err.details["clashing"] == [[6, 6]]


def test_a_change_of_a_matched_but_unchanged_line_lands() -> None:
    """The edit matched lines 5-6 and rewrote only line 5: another write's change of line 6 touches only
    the edit's context, so both land (as git merges them)."""
    base = numbered(10)
    current = apply_edit(base, "line 6\n", "six\n").text
    r = rebase_edit(base, current, EditSpec("line 5\nline 6", "five\nline 6"))
    assert "line 4\nfive\nsix\nline 7\n" in r.outcome.text
    current = apply_edit(base, "line 7\n", "seven\n").text
    assert (
        "five\nline 6\nseven\n" in rebase_edit(base, current, EditSpec("line 5\nline 6", "five\nline 6")).outcome.text
    )


def test_context_that_nobody_changed_must_still_be_unique() -> None:
    """A landing made from the merge alone (the old_string no longer matches) needs the context lines that
    survived, with what lies between them now, to occur once in the file: else no_unique_match."""
    base = "k\nb\nv\nq\nk\nb\nw\n"
    current = "k\nb\nV\nq\nk\nb\nw\n"
    # the edit inserts after the first "k\nb\n", anchored on "v": v changed, only "k\nb\n" kept, twice
    err = stale(rebase_edit, base, current, EditSpec("k\nb\nv\n", "k\nb\nNEW\nv\n"))
    assert err.details["reason"] == "no_unique_match"
    # with a unique line kept, it lands
    r = rebase_edit(base, current, EditSpec("q\nk\nb\nw\n", "q\nk\nb\nNEW\nw\n"))
    assert r.outcome.text == "k\nb\nV\nq\nk\nb\nNEW\nw\n"


def test_deletion_of_the_line_after_a_partial_line_match_is_an_overlap() -> None:
    base = "alpha = 1\nbeta = 2\ngamma = 3\n"
    current = "alpha = 1\ngamma = 3\n"
    err = stale(rebase_edit, base, current, EditSpec("1\nbeta", "1\nBETA"))
    assert err.details["reason"] == "overlap"


def test_old_string_duplicated_elsewhere_by_another_session_is_refused() -> None:
    base2 = "head\nneedle = 1\nmid\nmid2\nmid3\ntail\n"
    current2 = base2.replace("tail\n", "tail\nneedle = 1\n")
    err = stale(rebase_edit, base2, current2, EditSpec("needle = 1", "needle = 2"))
    assert err.details["reason"] == "no_unique_match"
    assert "2 times" in err.message
    assert "old_string no longer matches uniquely in the current file" in err.message


def test_replace_all_and_empty_old_string_are_never_rebased() -> None:
    base = numbered(10)
    current = apply_edit(base, "line 1\n", "first\n").text
    err = stale(rebase_edit, base, current, EditSpec("line 9", "nine", True))
    assert err.details["reason"] == "not_rebasable"
    assert "an edit with replace_all is never carried over" in err.message
    err = stale(rebase_edit, "", "x\n", EditSpec("", "y\n"))
    assert err.details["reason"] == "not_rebasable"
    assert "an edit with an empty old_string is never carried over" in err.message
    # in a multi-edit too, and an empty old_string is named even after a first ordinary edit
    err = stale(rebase_edits, base, current, [EditSpec("line 3", "three"), EditSpec("line 9", "nine", True)])
    assert "replace_all" in err.message
    with pytest.raises(CoordinatorError) as info:
        rebase_edits(base, current, [])
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_old_string_that_now_matches_exactly_elsewhere_is_a_moved_match() -> None:
    """In the version read, old_string matched a curly-quoted line only with quotes folded; another write
    has since added an exact straight-quoted copy far away, which an edit of the current text would pick."""
    base = f"say {LEFT_DOUBLE}hi{RIGHT_DOUBLE}\n" + numbered(10)
    current = base + 'say "hi"\n'
    err = stale(rebase_edit, base, current, EditSpec('say "hi"', 'say "bye"'))
    assert err.details["reason"] == "moved_match"
    assert "old_string now matches at a place that does not correspond to where it was" in err.message
    assert err.details["changes"] == [[12, 12]]


def test_edit_invalid_on_the_version_read_is_stale() -> None:
    base = numbered(10)
    current = base + "appended\n"
    err = stale(rebase_edit, base, current, EditSpec("appended", "x"))
    assert err.details["reason"] == "invalid_on_base"
    assert "the edit does not apply to the version you read either (old_string was not found" in err.message
    assert "other writes changed line 11 (current numbering)" in err.message


def test_crlf_and_curly_quotes_are_kept() -> None:
    base = numbered(12, "\r\n").replace("line 8", f"say {LEFT_DOUBLE}hi{RIGHT_DOUBLE}")
    current = apply_edit(base, "line 2\n", "line two\n").text
    r = rebase_edit(base, current, EditSpec('say "hi"\n', 'say "bye"\nand go\n'))
    assert f"say {LEFT_DOUBLE}bye{RIGHT_DOUBLE}\r\nand go\r\n" in r.outcome.text
    assert "\n" not in r.outcome.text.replace("\r\n", "")
    assert "line two\r\n" in r.outcome.text


def test_the_view_lets_a_session_rebase_again_without_counting_its_own_edit() -> None:
    base = numbered(30)
    mine1 = EditSpec("line 10\n", "ten\n")
    current = apply_edit(base, "line 20\n", "twenty\n").text
    r1 = rebase_edit(base, current, mine1)
    # The session's next edit is right next to its own first edit: not a foreign change.
    r2 = rebase_edit(r1.view, r1.outcome.text, EditSpec("line 11\n", "eleven\n"))
    assert "ten\neleven\n" in r2.outcome.text and "twenty\n" in r2.outcome.text
    # ...but on the line the foreign change rewrote it is refused (the view still has "line 20").
    err = stale(rebase_edit, r1.view, r1.outcome.text, EditSpec("line 20\n", "x\n"))
    assert err.details["reason"] == "overlap"


def test_multi_edit_is_rebased_as_a_whole() -> None:
    base = numbered(30)
    current = apply_edit(base, "line 15\n", "fifteen\n").text
    specs = [EditSpec("line 3\n", "three\n"), EditSpec("line 27\n", "twenty-seven\n")]
    r = rebase_edits(base, current, specs)
    assert r.outcome.text == apply_edits(current, specs).text
    err = stale(rebase_edits, base, current, [*specs, EditSpec("line 14\nline 15\n", "x\n")])
    assert err.details["reason"] == "overlap" and err.details["clashing"] == [[15, 15]]
    # An edit of a multi-edit that only matches once an earlier edit of the call has run (not on the
    # base) has no match claim of its own: its lines are claimed by the own hunks.
    chained = [EditSpec("line 20\n", "twenty\n"), EditSpec("y\nline 21", "y-one\nline 21")]
    r = rebase_edits(base, current, chained)
    assert "twenty-one\nline 21\n" in r.outcome.text
    twenty = apply_edit(base, "line 20\n", "XX\n").text
    err = stale(rebase_edits, base, twenty, chained)
    assert err.details["reason"] == "overlap" and err.details["clashing"] == [[20, 20]]
    # an edit after one that does not match on the base alone: a change of its context lines only lands
    more = [*chained, EditSpec("line 5\nline 6\n", "five\nline 6\n")]
    r = rebase_edits(base, base.replace("line 6\n", "six\n"), more)
    assert "line 4\nfive\nsix\nline 7\n" in r.outcome.text and "twenty-one\n" in r.outcome.text
    # and so does a flexible one; a change of its changed lines is an overlap
    flex = [EditSpec("line 1\n", "one\n"), EditSpec("  line 5\n  line 6\n", "  five\n  line 6\n")]
    r = rebase_edits(base, base.replace("line 6\n", "six\n"), flex, "The file", "flexible")
    assert r.outcome.text.startswith("one\n") and "line 4\nfive\nsix\nline 7\n" in r.outcome.text
    err = stale(rebase_edits, base, base.replace("line 5\n", "5\n"), flex, "The file", "flexible")
    assert err.details["reason"] == "overlap" and err.details["clashing"] == [[5, 5]]
    specs = [EditSpec("line 3\n", "three\n"), EditSpec("line 16\n", "sixteen\n")]
    r = rebase_edits(base, current, specs)  # line 16 is next to line 15: commutes now
    assert "fifteen\nsixteen\n" in r.outcome.text


def test_last_line_without_newline() -> None:
    base = "a\nb\nc\nd\ne"
    current = "A\nb\nc\nd\ne"
    assert rebase_edit(base, current, EditSpec("e", "E")).outcome.text == "A\nb\nc\nd\nE"
    err = stale(rebase_edit, base, "a\nb\nc\nd\ne\n", EditSpec("e", "E"))  # the last line itself changed (eol)
    assert err.details["reason"] == "overlap"


# --- properties ---------------------------------------------------------------------------------------


@st.composite
def concurrent_edits(draw: st.DrawFn, *, commuting: bool, same_point: bool | None = None) -> tuple[str, list[EditSpec]]:
    """A base text of unique lines and 2-4 edits of blocks of whole lines (or of part of one line).

    commuting=True: the blocks are disjoint but may be adjacent (no untouched line between them); an edit
    that inserts after its block is never followed by one that inserts right before the next block (two
    insertions at one point). The edits must commute.
    commuting=False: two edits that do not commute: their blocks share a line, or they insert at the same
    point (after one block and before the block that follows it; `same_point` True: only those, False:
    only shared lines, None: either).
    """
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    if commuting:
        blocks = []
        pos = draw(st.integers(0, 3))
        for _ in range(draw(st.integers(2, 4))):
            length = draw(st.integers(1, 3))
            blocks.append((pos, pos + length))
            pos += length + draw(st.integers(0, 3))
        n = blocks[-1][1] + draw(st.integers(0, 3))
        kinds = [draw(st.sampled_from(["replace", "delete", "insert", "prepend", "inline"])) for _ in blocks]
        for k in range(1, len(blocks)):
            if kinds[k] == "prepend" and kinds[k - 1] == "insert" and blocks[k][0] == blocks[k - 1][1]:
                kinds[k] = "replace"
    else:
        a = draw(st.integers(0, 10))
        b = a + draw(st.integers(1, 3))
        if not same_point if same_point is not None else draw(st.booleans()):  # overlapping blocks
            c = draw(st.integers(max(0, a - 3), b - 1))
            d = max(c + draw(st.integers(1, 3)), a + 1)
            kinds = [draw(st.sampled_from(["replace", "delete"])) for _ in range(2)]
        else:  # insertions at one point: after block 1, before block 2 that starts right there
            c, d = b, b + draw(st.integers(1, 3))
            kinds = ["insert", "prepend"]
        blocks = [(a, b), (c, d)]
        n = max(b, d) + draw(st.integers(0, 3))
    words = draw(st.lists(st.sampled_from(["x", "y = 1", "", "  pass", "}"]), min_size=n, max_size=n))
    lines = [f"L{i} {w}" for i, w in enumerate(words)]
    base = "".join(line + eol for line in lines)
    specs = []
    for idx, ((a, b), kind) in enumerate(zip(blocks, kinds, strict=True)):
        old = "".join(line + eol for line in lines[a:b])
        fresh = "".join(f"new{idx}.{j}\n" for j in range(draw(st.integers(1, 3))))
        plain = old.replace("\r\n", "\n")
        new = {"replace": fresh, "delete": "", "insert": plain + fresh, "prepend": fresh + plain}.get(kind, "")
        if kind == "inline":  # change part of the block's first line
            old = lines[a]
            new = lines[a].replace(f"L{a} ", f"L{a} new{idx} ", 1)
        specs.append(EditSpec(old.replace("\r\n", "\n") if draw(st.booleans()) else old, new))
    return base, specs


@settings(max_examples=examples(300), deadline=None)
@given(concurrent_edits(commuting=True))
def test_commuting_concurrent_edits_give_one_text_in_every_order(case: tuple[str, list[EditSpec]]) -> None:
    base, specs = case
    sequential = base
    for spec in specs:
        sequential = apply_edit(sequential, spec.old_string, spec.new_string).text
    for order in itertools.permutations(specs):
        current = base
        for spec in order:  # each session read `base`; the file has moved on by the others' writes
            current = rebase_edit(base, current, spec).outcome.text
        assert current == sequential


@settings(max_examples=examples(300), deadline=None)
@given(concurrent_edits(commuting=False, same_point=False))
def test_edits_of_shared_lines_are_refused(case: tuple[str, list[EditSpec]]) -> None:
    base, (first, second) = case
    for a, b in ((first, second), (second, first)):
        current = apply_edit(base, a.old_string, a.new_string).text
        if a.new_string == b.new_string == "" and a.old_string.replace("\r\n", "\n") == b.old_string.replace(
            "\r\n", "\n"
        ):
            r = rebase_edit(base, current, b)  # the same deletion: already made
            assert r.already and r.outcome.text == current
            continue
        err = stale(rebase_edit, base, current, b)
        assert err.details["reason"] == "overlap"
        assert err.details["clashing"]


@settings(max_examples=examples(300), deadline=None)
@given(concurrent_edits(commuting=False, same_point=True))
def test_insertions_at_one_point_land_in_the_order_of_the_writes(case: tuple[str, list[EditSpec]]) -> None:
    """Block 1 gets lines appended (its old_string ends at the point), block 2 lines prepended (its
    old_string starts there): whichever is written second, each edit's lines stay next to its own
    old_string, so the second writer's lines go on its own side of the first's."""
    base, (first, second) = case
    both = apply_edit(apply_edit(base, first.old_string, first.new_string).text, second.old_string, second.new_string)
    for a, b in ((first, second), (second, first)):
        current = apply_edit(base, a.old_string, a.new_string).text
        r = rebase_edit(base, current, b)
        assert r.outcome.text == both.text
        assert len(r.placed_before if b is first else r.placed_after) == 1


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "c", "d", "e", "a b"]), min_size=1, max_size=25),
    st.data(),
)
def test_a_successful_rebase_loses_nothing(words: list[str], data: st.DataObject) -> None:
    """Arbitrary (often duplicated) lines and edits: a rebase either refuses, or yields exactly the edit
    applied to the current text, keeping every line the other write produced outside the edit."""
    base = "".join(w + "\n" for w in words)
    lines = base.splitlines(keepends=True)

    def an_edit(tag: str) -> EditSpec:
        i = data.draw(st.integers(0, len(lines) - 1))
        j = data.draw(st.integers(i + 1, min(len(lines), i + 3)))
        return EditSpec("".join(lines[i:j]), f"{tag}\n")

    theirs, mine = an_edit("THEIRS"), an_edit("MINE")
    try:
        current = apply_edit(base, theirs.old_string, theirs.new_string).text
        apply_edit(base, mine.old_string, mine.new_string)
    except CoordinatorError:
        assume(False)
        return
    try:
        r = rebase_edit(base, current, mine)
    except CoordinatorError as exc:
        assert exc.code is ErrorCode.STALE
        return
    assert r.outcome.text == apply_edit(current, mine.old_string, mine.new_string).text
    assert "THEIRS\n" in r.outcome.text and "MINE\n" in r.outcome.text
    assert r.view == apply_edit(base, mine.old_string, mine.new_string).text


def test_rebase_of_a_big_file_is_cheap() -> None:
    base = "".join(f"    value_{i} = compute({i})  # comment\n" for i in range(20_000))
    current = base
    for i in range(500, 20_000, 1_000):
        current = apply_edit(current, f"value_{i} = ", f"value_{i}_renamed = ").text
    r = rebase_edit(base, current, EditSpec("value_10250 = compute(10250)", "value_10250 = 0"))
    assert "value_10250 = 0" in r.outcome.text and len(r.changes) == 20
    assert [(c.first, c.last) for c in r.changes][:2] == [(501, 501), (1501, 1501)]  # one line each: local


def test_an_old_string_anchored_on_the_previous_line_end_does_not_claim_that_line() -> None:
    """`"\\ns03 = 17\\n"` (the fleet's counters edit) spans line s03 only: a change two lines up is not
    adjacent; a change of the line right above is."""
    base = "".join(f"s{i:02d} = 0\n" for i in range(8))
    spec = EditSpec("\ns03 = 0\n", "\ns03 = 1\n")
    two_up = apply_edit(base, "s01 = 0", "s01 = 9").text
    assert "s01 = 9\ns02 = 0\ns03 = 1\n" in rebase_edit(base, two_up, spec).outcome.text
    one_up = apply_edit(base, "s02 = 0", "s02 = 9").text  # the line right above: commutes too
    assert "s02 = 9\ns03 = 1\n" in rebase_edit(base, one_up, spec).outcome.text
    same = apply_edit(base, "s03 = 0", "s03 = 9").text  # the line itself: overlap
    assert stale(rebase_edit, base, same, spec).details["reason"] == "overlap"
    crlf = base.replace("\n", "\r\n")
    r = rebase_edit(crlf, apply_edit(crlf, "s02 = 0", "s02 = 9").text, EditSpec("\r\ns03 = 0\r\n", "\r\ns03 = 1\r\n"))
    assert "s02 = 9\r\ns03 = 1\r\n" in r.outcome.text
    joined = EditSpec("\ns03 = 0\ns04", "\ns03 = 0 s04")  # changes the terminator of s03: joins s03 and s04
    assert "s03 = 0 s04 = 0\ns05 = 5" in rebase_edit(base, base.replace("s05 = 0", "s05 = 5"), joined).outcome.text
    assert stale(rebase_edit, base, one_up.replace("s04 = 0", "s04 = 5"), joined).details["clashing"] == [[5, 5]]


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.sampled_from(["a\n", "b\n", "c\r\n", "dd\n", "e"]), max_size=25),
    st.lists(st.sampled_from(["a\n", "b\n", "c\r\n", "dd\n", "f\n", "e"]), max_size=25),
)
def test_diff_texts_spans_rebuild_the_new_text(a: list[str], b: list[str]) -> None:
    ta, tb = "".join(a), "".join(b)
    spans = rebase.diff_texts(ta, tb)
    out, cursor = [], 0
    for x in spans:
        assert ta[x.a_start : x.a_start + x.a_len] == "".join(split_keepends(ta)[x.hunk.a1 : x.hunk.a2])
        out.append(ta[cursor : x.a_start])
        out.append(tb[x.b_start : x.b_start + x.b_len])
        cursor = x.a_start + x.a_len
    out.append(ta[cursor:])
    assert "".join(out) == tb
    assert (spans == []) == (ta == tb)


# --- carry_change: a whole change carried onto a changed text (undo) ------------------------------------


def test_carry_change_onto_an_unchanged_text_is_the_change_itself() -> None:
    base = numbered(5)
    changed = base.replace("line 3\n", "three\n")
    out = rebase.carry_change(base, changed, base)
    assert out.text == changed and out.changes == () and out.nearby == ()
    assert changed[out.first_offset :].startswith("three\n") and out.inserted_len == len("three\n")
    assert rebase.carry_change(base, base, base).text == base  # nothing to carry


def test_carry_change_keeps_others_changes_and_names_the_nearby_ones() -> None:
    base = numbered(20)
    changed = base.replace("line 10\n", "ten\n")
    current = base.replace("line 2\n", "two\n").replace("line 11\n", "eleven\n")
    out = rebase.carry_change(base, changed, current)
    assert out.text == current.replace("line 10\n", "ten\n")
    assert [(c.first, c.last) for c in out.changes] == [(2, 2), (11, 11)]
    assert [(c.first, c.last) for c in out.nearby] == [(11, 11)]
    assert out.text[out.first_offset :].startswith("ten\n")
    grown = base.replace("line 1\n", "line 1\nnew a\nnew b\n")  # two lines more above the change
    out = rebase.carry_change(base, changed, grown)
    assert out.text[out.first_offset :].startswith("ten\n") and out.text == grown.replace("line 10\n", "ten\n")


def test_carry_change_refuses_overlaps_and_insertions_at_one_point() -> None:
    base = numbered(10)
    changed = base.replace("line 5\n", "five\n")
    with pytest.raises(CoordinatorError) as info:
        rebase.carry_change(
            base, changed, base.replace("line 5\n", "FIVE\n"), name="f.py", what="the undo of version 3"
        )
    err = info.value
    assert err.code is ErrorCode.STALE and err.details["reason"] == "overlap" and err.details["clashing"] == [[5, 5]]
    assert err.message.startswith("f.py has changed since that write, and the undo of version 3 changes lines")
    assert "another write also changed since then (line 5 of the current file)" in err.message
    assert "Nothing was written. Read the file again" in err.message
    inserted = base.replace("line 5\n", "line 5\nmine\n")
    with pytest.raises(CoordinatorError) as info:
        rebase.carry_change(base, inserted, base.replace("line 6\n", "theirs\nline 6\n"))
    assert info.value.details["reason"] == "same_place"
    assert "inserts lines at the very place where another write inserted lines since then" in info.value.message


@settings(max_examples=examples(300), deadline=None)
@given(concurrent_edits(commuting=True))
def test_carrying_a_commuting_change_equals_applying_both(case: tuple[str, list[EditSpec]]) -> None:
    base, (first, second, *_) = case
    changed = apply_edit(base, first.old_string, first.new_string).text
    current = apply_edit(base, second.old_string, second.new_string).text
    both = apply_edit(current, first.old_string, first.new_string).text
    assert rebase.carry_change(base, changed, current).text == both
    # The inverse carried back (an undo) takes exactly the first change out again, or is refused: a
    # deletion's inverse is an insertion, which may now meet the other edit's insertion at one point.
    try:
        assert rebase.carry_change(changed, base, both).text == current
    except CoordinatorError as exc:
        assert exc.details["reason"] == "same_place"


@settings(max_examples=examples(300), deadline=None)
@given(concurrent_edits(commuting=False))
def test_carrying_a_non_commuting_change_is_refused(case: tuple[str, list[EditSpec]]) -> None:
    base, (first, second) = case
    changed = apply_edit(base, first.old_string, first.new_string).text
    current = apply_edit(base, second.old_string, second.new_string).text
    with pytest.raises(CoordinatorError) as info:
        rebase.carry_change(base, changed, current)
    assert info.value.code is ErrorCode.STALE and info.value.details["reason"] in ("overlap", "same_place")


# --- rules pinned by surviving mutants (docs/mutation.md) ----------------------------------------------


def test_carried_change_starts_after_a_foreign_change_that_ends_where_it_begins() -> None:
    # the foreign hunk (line 1 became two lines) ends exactly where the carried one (line 2) begins
    out = rebase.carry_change("a\nb\nc\n", "a\nB\nc\n", "A1\nA2\nb\nc\n")
    assert out.text == "A1\nA2\nB\nc\n"
    assert (out.first_offset, out.inserted_len) == (6, 2) and out.text[6:8] == "B\n"


def test_carrying_no_change_reports_an_empty_region() -> None:
    base = "a\nb\nc\n"
    for current in (base, "a\nb\nC\n"):
        out = rebase.carry_change(base, base, current)
        assert out.text == current and (out.first_offset, out.inserted_len) == (0, 0)


def _changed_lines(hunks: list[Hunk]) -> int:
    return sum((h.a2 - h.a1) + (h.b2 - h.b1) for h in hunks)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("xyx", "uxy"),  # x occurs twice in a: not an anchor, whatever b holds
        ("xxy", "yyxx"),  # y occurs twice in b: not an anchor either
        ("xyx", "yuxu"),  # the only anchor (y) is b's first line
    ],
)
def test_line_diff_anchors_only_on_lines_unique_on_both_sides(a: str, b: str) -> None:
    """A diff that anchors on a repeated line (or misses an anchor) changes more lines than needed here,
    and a coarser diff refuses more rebases."""
    la, lb = [c + "\n" for c in a], [c + "\n" for c in b]
    hunks = line_diff(la, lb)
    assert replay(la, lb, hunks) == lb
    minimal = len(la) + len(lb) - 2 * _lcs_len(la, lb)
    assert _changed_lines(hunks) == minimal


def _lcs_len(a: list[str], b: list[str]) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        prev_diag = 0
        for j, y in enumerate(b, start=1):
            prev_diag, row[j] = row[j], prev_diag + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


@settings(max_examples=examples(300), deadline=None)
@given(st.text("ab\n", max_size=12), st.text("ab\n", max_size=12))
def test_common_prefix_and_suffix_lengths_are_exact(a: str, b: str) -> None:
    k = rebase._common_prefix_len(a, b)
    assert a[:k] == b[:k] and (k == min(len(a), len(b)) or a[k] != b[k])
    limit = min(len(a), len(b)) - k
    t = rebase._common_suffix_len(a, b, limit)
    assert 0 <= t <= limit and a[len(a) - t :] == b[len(b) - t :]
    assert t == limit or a[len(a) - t - 1] != b[len(b) - t - 1]


def test_diff_texts_never_lets_the_common_tail_overlap_the_common_head() -> None:
    # b is a's first two lines: its whole text is both a common prefix and a common suffix of a
    spans = rebase.diff_texts("x\ny\nx\ny\n", "x\ny\n")
    assert [x.hunk for x in spans] == [Hunk(2, 4, 2, 2)]
    assert (spans[0].a_start, spans[0].a_len, spans[0].b_start, spans[0].b_len) == (4, 4, 4, 0)


def test_diff_texts_numbers_lines_after_a_blank_first_line() -> None:
    spans = rebase.diff_texts("\nx\ny\n", "\nx\nY\n")
    assert [x.hunk for x in spans] == [Hunk(2, 3, 2, 3)]


def test_an_insertion_right_after_a_foreign_change_commutes() -> None:
    out = rebase.carry_change("a\nb\nc\n", "a\nb\nNEW\nc\n", "a\nB\nc\n")
    assert out.text == "a\nB\nNEW\nc\n"


def test_nearby_stops_three_lines_away_and_names_the_whole_change() -> None:
    base = numbered(20)
    spec = EditSpec("line 10\n", "ten\n")
    three_above = apply_edit(base, "line 6\n", "six\n").text  # lines 7, 8, 9 between: not nearby
    assert rebase_edit(base, three_above, spec).nearby == ()
    two_above = apply_edit(base, "line 7\n", "seven\nmore\n").text
    r = rebase_edit(base, two_above, spec)
    assert r.nearby == (rebase.LineChange(base_first=7, base_last=7, first=7, last=8),)


def test_a_flexible_multi_edit_is_rebased_with_flexible_matching() -> None:
    base = "a  \nb\nc\nd\ne\nf\n"
    current = base.replace("f\n", "F\n")
    specs = [EditSpec("a\n", "A\n"), EditSpec("c\n", "C\n")]
    r = rebase_edits(base, current, specs, match="flexible")
    assert r.outcome.text == "A\nb\nC\nd\ne\nF\n"


@pytest.mark.parametrize(
    ("base", "current", "spec", "merged"),
    [
        ("a\nb\nc\n", "A\nb\nc\n", EditSpec("a\nb", "a\nB"), "A\nB\nc\n"),  # the matched first line
        ("x\nb\nc\n", "x\nB\nc\n", EditSpec("x\nb", "X\nb"), "X\nB\nc\n"),  # the matched last line
        ("a\n\nc\n", "a\nX\nc\n", EditSpec("\n\nc", "\n\nC"), "a\nX\nC\n"),  # anchored on a line end
    ],
)
def test_a_change_of_a_short_matched_but_unchanged_line_lands(
    base: str, current: str, spec: EditSpec, merged: str
) -> None:
    """A matched line the edit leaves as it was is context: another write's change of it does not stop
    the edit (the kept line, one char long, is still unique), and both changes are in the result."""
    assert rebase_edit(base, current, spec).outcome.text == merged


def test_the_difflib_size_limit_is_the_product_of_the_gap_itself(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # a common first line, then a gap of 6 x 6 lines with no unique line: difflib up to a product of 36
    a = ["h\n"] + ["x\n", "y\n"] * 3
    b = ["h\n"] + ["y\n", "x\n"] * 3
    monkeypatch.setattr(rebase, "DIFFLIB_MAX_PRODUCT", 36)
    fine = line_diff(a, b)
    assert replay(a, b, fine) == b and _changed_lines(fine) == 2
    monkeypatch.setattr(rebase, "DIFFLIB_MAX_PRODUCT", 35)
    assert line_diff(a, b) == [Hunk(1, 7, 1, 7)]


def test_difflib_treats_no_line_as_junk_in_a_long_gap() -> None:
    """Two lines repeated 150 times, shifted by one: no anchor, no common head or tail, 300 lines for difflib;
    with autojunk every line would be popular junk and the whole text one replaced block."""
    a = ["x\n", "y\n"] * 150
    b = ["y\n", "x\n"] * 150
    hunks = line_diff(a, b)
    assert replay(a, b, hunks) == b and _changed_lines(hunks) == 2


def test_describe_changes_of_nothing_and_of_an_empty_range() -> None:
    assert rebase.describe_changes([]) == "no lines"
    assert rebase.LineChange(3, 2, 3, 2).describe() == "deleted before line 3 (was nothing (at line 3))"
    assert rebase.describe_changes([rebase.LineChange(2, 3, 2, 1), rebase.LineChange(5, 4, 4, 6)]) == (
        "deleted before line 2 (was lines 2-3), lines 4-6"
    )


def test_line_diff_keeps_the_longest_run_of_anchors_when_a_later_one_crosses() -> None:
    # unique lines u, v, w: u and v cross, so the longest increasing run is (v or u) then w
    a = ["u\n", "v\n", "w\n", "z\n"]
    b = ["v\n", "u\n", "w\n", "q\n"]
    hunks = line_diff(a, b)
    assert replay(a, b, hunks) == b and _changed_lines(hunks) == 4
