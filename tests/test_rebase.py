"""Tests of coordinator.rebase: the line diff, the rebase of one edit over concurrent ones, by example and
by property.

The properties it guards:
* Non-overlapping, non-adjacent edits made against one base commute: every order of writing gives the
  same final text, equal to applying the edits one after the other.
* Edits whose lines overlap or touch (adjacent lines) are refused with `stale`, never merged.
* A rebase that succeeds loses nothing: every line another session put in is still there.
"""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from coordinator import rebase
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.rebase import Hunk, line_diff, rebase_edit, rebase_edits, split_keepends
from coordinator.semantics import LEFT_DOUBLE, RIGHT_DOUBLE, EditSpec, apply_edit, apply_edits, split_lines


def stale(fn, *args) -> CoordinatorError:  # type: ignore[no-untyped-def]
    with pytest.raises(CoordinatorError) as info:
        fn(*args)
    assert info.value.code is ErrorCode.STALE, info.value
    assert "Read the file again" in info.value.message
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


@settings(max_examples=300, deadline=None)
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
    t = time.perf_counter()
    hunks = line_diff(a, b)
    assert time.perf_counter() - t < 1.0
    assert replay(a, b, hunks) == b
    assert len(hunks) == 11
    assert Hunk(30_001, 30_001, 30_001, 30_002) in hunks


def test_line_diff_without_unique_lines_falls_back_to_difflib_or_one_block(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    a = ["x\n"] * 50 + ["y\n"] * 50
    b = ["x\n"] * 49 + ["z\n"] + ["y\n"] * 51
    assert replay(a, b, line_diff(a, b)) == b
    monkeypatch.setattr(rebase, "DIFFLIB_MAX_PRODUCT", 10)
    hunks = line_diff(a, b)
    assert replay(a, b, hunks) == b


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
    [(9, True), (10, True), (11, True), (12, True), (13, True), (8, False), (14, False)],
)
def test_overlapping_or_adjacent_lines_are_refused(foreign_line: int, refused: bool) -> None:
    base = numbered(20)
    current = apply_edit(base, f"line {foreign_line}\n", "changed\n").text
    spec = EditSpec("line 10\nline 11\nline 12\n", "new block\n")
    if refused:
        err = stale(rebase_edit, base, current, spec)
        assert err.details["reason"] == "overlap"
        assert err.details["clashing"] == [[foreign_line, foreign_line]]
        assert f"line {foreign_line}" in err.message
    else:
        assert rebase_edit(base, current, spec).outcome.text == apply_edit(current, spec.old_string, "new block\n").text


def test_insertion_next_to_the_edit_is_refused_but_one_line_away_is_not() -> None:
    base = numbered(10)
    spec = EditSpec("line 5\n", "five\n")
    below = apply_edit(base, "line 5\n", "line 5\nnew\n").text  # insertion right after line 5
    stale(rebase_edit, base, below, spec)
    above = apply_edit(base, "line 4\n", "new\nline 4\n").text  # before line 4: line 4 in between
    assert rebase_edit(base, above, spec).outcome.text == apply_edit(above, "line 5\n", "five\n").text


def test_deletion_next_to_the_edit_is_refused() -> None:
    base = numbered(10)
    current = apply_edit(base, "line 6\n", "").text
    stale(rebase_edit, base, current, EditSpec("line 5\n", "five\n"))


def test_old_string_duplicated_elsewhere_by_another_session_is_refused() -> None:
    base2 = "head\nneedle = 1\nmid\nmid2\nmid3\ntail\n"
    current2 = base2.replace("tail\n", "tail\nneedle = 1\n")
    err = stale(rebase_edit, base2, current2, EditSpec("needle = 1", "needle = 2"))
    assert err.details["reason"] == "no_unique_match"
    assert "2 times" in err.message


def test_replace_all_and_empty_old_string_are_never_rebased() -> None:
    base = numbered(10)
    current = apply_edit(base, "line 1\n", "first\n").text
    assert stale(rebase_edit, base, current, EditSpec("line 9", "nine", True)).details["reason"] == "not_rebasable"
    stale(rebase_edit, "", "x\n", EditSpec("", "y\n"))


def test_edit_invalid_on_the_version_read_is_stale() -> None:
    base = numbered(10)
    current = base + "appended\n"
    err = stale(rebase_edit, base, current, EditSpec("appended", "x"))
    assert err.details["reason"] == "invalid_on_base"


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
    # ...but next to the foreign change it is refused.
    stale(rebase_edit, r1.view, r1.outcome.text, EditSpec("line 21\n", "x\n"))


def test_multi_edit_is_rebased_as_a_whole() -> None:
    base = numbered(30)
    current = apply_edit(base, "line 15\n", "fifteen\n").text
    specs = [EditSpec("line 3\n", "three\n"), EditSpec("line 27\n", "twenty-seven\n")]
    r = rebase_edits(base, current, specs)
    assert r.outcome.text == apply_edits(current, specs).text
    stale(rebase_edits, base, current, [*specs, EditSpec("line 16\n", "x\n")])


def test_last_line_without_newline() -> None:
    base = "a\nb\nc\nd\ne"
    current = "A\nb\nc\nd\ne"
    assert rebase_edit(base, current, EditSpec("e", "E")).outcome.text == "A\nb\nc\nd\nE"
    stale(rebase_edit, base, "a\nb\nc\nd\ne\n", EditSpec("e", "E"))  # the last line itself changed (eol)


# --- properties ---------------------------------------------------------------------------------------


@st.composite
def concurrent_edits(draw: st.DrawFn, *, separated: bool) -> tuple[str, list[EditSpec]]:
    """A base text of unique lines and 2-4 edits of disjoint blocks of whole lines (or of part of one line).

    separated=True: at least one untouched line between any two blocks (the edits must commute).
    separated=False: two of the blocks overlap or are adjacent (the later writer must be refused).
    """
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    if separated:
        # Blocks of 1-3 lines with >= 1 untouched line between neighbours.
        blocks = []
        pos = draw(st.integers(0, 3))
        for _ in range(draw(st.integers(2, 4))):
            length = draw(st.integers(1, 3))
            blocks.append((pos, pos + length))
            pos += length + draw(st.integers(1, 4))
        n = blocks[-1][1] + draw(st.integers(0, 3))
    else:
        a = draw(st.integers(0, 10))
        b = a + draw(st.integers(1, 3))
        c = draw(st.integers(max(0, a - 3), b))  # starts before, inside, or on the line right after
        d = c + draw(st.integers(1, 3))
        if d < a:  # ends right before the other block at the latest: adjacent
            d = a
        blocks = [(a, b), (c, d)]
        n = max(b, d) + draw(st.integers(0, 3))
    words = draw(st.lists(st.sampled_from(["x", "y = 1", "", "  pass", "}"]), min_size=n, max_size=n))
    lines = [f"L{i} {w}" for i, w in enumerate(words)]
    base = "".join(line + eol for line in lines)
    specs = []
    for idx, (a, b) in enumerate(blocks):
        # Unseparated blocks only get edits that change every line of their block, so that "the blocks
        # touch" means "the changes touch" (an insertion at a block's end changes no line of it).
        kinds = ["replace", "delete", "insert", "inline"] if separated else ["replace", "delete"]
        kind = draw(st.sampled_from(kinds))
        old = "".join(line + eol for line in lines[a:b])
        fresh = [f"new{idx}.{j}" for j in range(draw(st.integers(1, 3)))]
        if kind == "replace":
            new = "".join(f + "\n" for f in fresh)
        elif kind == "delete":
            new = ""
        elif kind == "insert":
            new = old.replace("\r\n", "\n") + "".join(f + "\n" for f in fresh)
        else:  # change part of the block's first line
            old = lines[a]
            new = lines[a].replace(f"L{a} ", f"L{a} {fresh[0]} ", 1)
        specs.append(EditSpec(old.replace("\r\n", "\n") if draw(st.booleans()) else old, new))
    return base, specs


@settings(max_examples=300, deadline=None)
@given(concurrent_edits(separated=True))
def test_non_overlapping_concurrent_edits_commute(case: tuple[str, list[EditSpec]]) -> None:
    base, specs = case
    sequential = base
    for spec in specs:
        sequential = apply_edit(sequential, spec.old_string, spec.new_string).text
    for order in itertools.permutations(specs):
        current = base
        for spec in order:  # each session read `base`; the file has moved on by the others' writes
            current = rebase_edit(base, current, spec).outcome.text
        assert current == sequential


@settings(max_examples=300, deadline=None)
@given(concurrent_edits(separated=False))
def test_overlapping_or_touching_concurrent_edits_are_refused(case: tuple[str, list[EditSpec]]) -> None:
    base, (first, second) = case
    for a, b in ((first, second), (second, first)):
        current = apply_edit(base, a.old_string, a.new_string).text
        err = stale(rebase_edit, base, current, b)
        assert err.details["changes"]


@settings(max_examples=300, deadline=None)
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
    t = time.perf_counter()
    r = rebase_edit(base, current, EditSpec("value_10250 = compute(10250)", "value_10250 = 0"))
    elapsed = time.perf_counter() - t
    assert "value_10250 = 0" in r.outcome.text and len(r.changes) == 20
    assert elapsed < 0.5, elapsed


def test_an_old_string_anchored_on_the_previous_line_end_does_not_claim_that_line() -> None:
    """`"\\ns03 = 17\\n"` (the fleet's counters edit) spans line s03 only: a change two lines up is not
    adjacent; a change of the line right above is."""
    base = "".join(f"s{i:02d} = 0\n" for i in range(8))
    spec = EditSpec("\ns03 = 0\n", "\ns03 = 1\n")
    two_up = apply_edit(base, "s01 = 0", "s01 = 9").text
    assert "s01 = 9\ns02 = 0\ns03 = 1\n" in rebase_edit(base, two_up, spec).outcome.text
    one_up = apply_edit(base, "s02 = 0", "s02 = 9").text
    stale(rebase_edit, base, one_up, spec)
    joined = EditSpec("s02 = 0\ns03", "s02 = 0 s03")  # joins lines: its own hunk covers both
    stale(rebase_edit, base, two_up.replace("s04 = 0", "s04 = 5"), joined)


@settings(max_examples=300, deadline=None)
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
