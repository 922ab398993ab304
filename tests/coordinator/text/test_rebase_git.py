"""The merge rule of coordinator.text.rebase against a reference merge: real `git merge-file`.

Two sessions read one base and each make one Edit of a block of lines, sent the way an agent sends it:
the changed lines with 0-3 lines of context on each side. The first lands; the second is rebased onto it.
The properties:
* Whatever git merge-file merges cleanly, the rebase lands too, with the same bytes (an identical change is
  answered as already made; changes whose context lines overlap land, as git's changed-lines rule says).
* Two insertions at one point, which git leaves as a conflict, land in the order of the writes: the text is
  git merge-file --union's (the file's side first), or the other order when the second edit's old_string
  still matches and puts its lines right after its own anchor.
* Every landing holds both changes, each at the place where its edit matched in the base (0 lost, 0 at a
  wrong place); anything else is refused as stale.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.text.rebase import rebase_edit
from coordinator.text.semantics import EditSpec, apply_edit
from tests.coordinator.text import examples

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@dataclass(frozen=True)
class Change:
    """Base lines [a, b) replaced by `new` (a == b: an insertion before line a), sent as `spec`."""

    a: int
    b: int
    new: tuple[str, ...]
    spec: EditSpec


def git_merge_file(ours: str, base: str, theirs: str, union: bool = False) -> tuple[str, bool]:
    """`git merge-file -p [--union] ours base theirs`: (merged text, clean)."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, text in (("ours", ours), ("base", base), ("theirs", theirs)):
            p = Path(tmp) / name
            p.write_bytes(text.encode())
            paths.append(str(p))
        args = ["git", "merge-file", "-p", *(["--union"] if union else []), *paths]
        done = subprocess.run(args, capture_output=True, check=False)
    assert done.returncode >= 0, done.stderr
    return done.stdout.decode(), done.returncode == 0


def _change(draw: st.DrawFn, lines: list[str], tag: str, at: tuple[int, int] | None = None) -> Change:
    n = len(lines)
    if at is None:
        a = draw(st.integers(0, n))
        kind = "insert" if a == n else draw(st.sampled_from(["replace", "insert", "delete"]))
        b = a if kind == "insert" else draw(st.integers(a + 1, min(n, a + 3)))
    else:
        a, b = at
        kind = "insert" if a == b else draw(st.sampled_from(["replace", "delete"]))
    new = () if kind == "delete" else tuple(f"{tag}{j}\n" for j in range(draw(st.integers(1, 3))))
    before, after = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    lo, hi = max(0, a - before), min(n, b + after)
    if lo == hi:  # an insertion needs a line to anchor on
        lo, hi = (lo - 1, hi) if lo > 0 else (lo, hi + 1)
    spec = EditSpec("".join(lines[lo:hi]), "".join([*lines[lo:a], *new, *lines[b:hi]]))
    return Change(a, b, new, spec)


@st.composite
def two_changes(draw: st.DrawFn, kind: str) -> tuple[list[str], Change, Change]:
    """A base of unique lines and two changes: `near` (anywhere, often within 3 lines of each other),
    `identical` (the same change, each with its own context) or `same_point` (two insertions at one point)."""
    n = draw(st.integers(6, 18))
    lines = [f"L{i} = {i}\n" for i in range(n)]
    first = _change(draw, lines, "a")
    if kind == "near":
        lo = max(0, min(first.a, n) - 5)
        a = draw(st.integers(lo, min(n, first.b + 5)))
        b = a if a == n or draw(st.booleans()) else draw(st.integers(a + 1, min(n, a + 3)))
        second = _change(draw, lines, "b", (a, b))
    elif kind == "identical":
        second = _change(draw, lines, "b", (first.a, first.b))
        lo, hi = max(0, first.a - draw(st.integers(0, 3))), min(n, first.b + draw(st.integers(0, 3)))
        if lo == hi:
            lo, hi = (lo - 1, hi) if lo > 0 else (lo, hi + 1)
        spec = EditSpec("".join(lines[lo:hi]), "".join([*lines[lo : first.a], *first.new, *lines[first.b : hi]]))
        second = Change(first.a, first.b, first.new, spec)
    else:
        a = draw(st.integers(0, n))
        first = _change(draw, lines, "a", (a, a))
        second = _change(draw, lines, "b", (a, a))
    return lines, first, second


def _both(lines: list[str], x: Change, y: Change) -> str:
    """Both changes made at their own places of the base, x's lines first where two insertions meet (an
    insertion before line i comes before a block that starts at line i)."""
    out: list[str] = []
    for i in range(len(lines) + 1):
        for c in sorted((x, y), key=lambda c: c.b > c.a):
            if c.a == i:
                out.extend(c.new)
        if i < len(lines) and not any(c.a <= i < c.b for c in (x, y)):
            out.append(lines[i])
    return "".join(out)


def _rebased(base: str, current: str, spec: EditSpec) -> str | None:
    try:
        return rebase_edit(base, current, spec).outcome.text
    except CoordinatorError as exc:
        assert exc.code is ErrorCode.STALE
        return None


@settings(max_examples=examples(250), deadline=None)
@given(two_changes("near"))
def test_the_rebase_lands_what_git_merges_and_only_where_each_edit_matched(
    case: tuple[list[str], Change, Change],
) -> None:
    lines, first, second = case
    base = "".join(lines)
    current = apply_edit(base, first.spec.old_string, first.spec.new_string).text
    view = apply_edit(base, second.spec.old_string, second.spec.new_string).text
    merged, clean = git_merge_file(current, base, view)
    got = _rebased(base, current, second.spec)
    if clean:
        assert got == merged  # git's clean merge: landed, byte for byte
    if got is not None:  # every landing holds both changes at their own places (some order where they meet)
        assert got in (_both(lines, first, second), _both(lines, second, first))
        if not (first.a == first.b == second.a == second.b):
            assert got == _both(lines, first, second)


@settings(max_examples=examples(150), deadline=None)
@given(two_changes("identical"))
def test_an_identical_change_is_already_made_as_git_merges_it(case: tuple[list[str], Change, Change]) -> None:
    lines, first, second = case
    base = "".join(lines)
    current = apply_edit(base, first.spec.old_string, first.spec.new_string).text
    view = apply_edit(base, second.spec.old_string, second.spec.new_string).text
    merged, clean = git_merge_file(current, base, view)
    assert clean and merged == current
    r = rebase_edit(base, current, second.spec)
    assert r.already and r.outcome.text == current and r.outcome.replacements == 0
    assert r.view == view


@settings(max_examples=examples(150), deadline=None)
@given(two_changes("same_point"))
def test_insertions_at_one_point_land_as_git_union_merges_them(case: tuple[list[str], Change, Change]) -> None:
    lines, first, second = case
    base = "".join(lines)
    current = apply_edit(base, first.spec.old_string, first.spec.new_string).text
    view = apply_edit(base, second.spec.old_string, second.spec.new_string).text
    _, clean = git_merge_file(current, base, view)
    r = rebase_edit(base, current, second.spec)
    if first.new == second.new:
        assert clean and r.already and r.outcome.text == current
        return
    assert not clean  # git leaves it to a person; the rule lands it in a recorded order
    files_first, _ = git_merge_file(current, base, view, union=True)
    edit_first, _ = git_merge_file(view, base, current, union=True)
    expected = files_first
    if second.spec.old_string in current:  # anchored on one side only: the edit itself decides the side
        expected = apply_edit(current, second.spec.old_string, second.spec.new_string).text
        assert expected in (files_first, edit_first)
    assert r.outcome.text == expected
    before = expected == edit_first
    assert (len(r.placed_before), len(r.placed_after)) == ((1, 0) if before else (0, 1))
