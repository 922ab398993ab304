"""The write's result as the write path makes it (`results.result_of`, `with_message`, the Session's message
functions): the same WriteResult, field by field, as the keyword call makes, and the same messages."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.engine.results import WRITE_FIELD_ORDER, WriteResult, evolve, result_of, set_message, with_message
from coordinator.engine.session import _edit_message, _write_message


def _as_made_by_init(res: WriteResult) -> WriteResult:
    return WriteResult(**{name: getattr(res, name) for name in WRITE_FIELD_ORDER})


def _check_like_init(res: WriteResult) -> None:
    """`res` is what WriteResult's own __init__ makes of its fields: every field in its dict, in field order,
    equal (and equal in to_dict and repr), frozen."""
    made = _as_made_by_init(res)
    assert list(vars(res)) == list(vars(made)) == list(WRITE_FIELD_ORDER)
    assert res == made and res.to_dict() == made.to_dict() and repr(res) == repr(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.message = "x"  # type: ignore[misc]


def test_result_of_makes_the_instance_the_keyword_call_makes() -> None:
    values = {
        f.name: getattr(WriteResult("p", "edit", False, 3, "h", "m"), f.name) for f in dataclasses.fields(WriteResult)
    }
    values["timings"] = {"lock_wait_s": 0.5}
    res = result_of(dict(values))
    _check_like_init(res)
    assert res == WriteResult(**values) and res.timings == {"lock_wait_s": 0.5}


def test_with_message_is_evolve_of_the_message_and_leaves_the_original_as_it_was() -> None:
    res = WriteResult("p", "edit", False, 3, "h", "", warnings=("w",), timings={"a": 1.0})
    new = with_message(res, "done")
    assert new == evolve(res, message="done") and new is not res and res.message == ""
    _check_like_init(new)


def test_set_message_fills_the_draft_itself_and_evolve_still_copies() -> None:
    """The Session's message functions set the message of the engine's draft in place (no copy of its
    fields); a copy made after with `evolve` carries it and leaves the draft as it is."""
    draft = result_of({f: getattr(WriteResult("p", "edit", False, 3, "h", ""), f) for f in WRITE_FIELD_ORDER})
    done = set_message(draft, "done")
    assert done is draft and draft.message == "done"
    _check_like_init(done)
    warned = evolve(draft, warnings=("w",))
    assert warned is not draft and warned.message == "done" and draft.warnings == ()


def test_a_write_s_result_is_made_as_its_init_would(coord: Coordinator, root: Path) -> None:
    """The common path's result and a rebased one (with intervening writes), and a created file's."""
    (root / "a.txt").write_text("one\ntwo\nthree\n")
    s, t = coord.session("s"), coord.session("t")
    s.read("a.txt")
    t.read("a.txt")
    first = s.edit("a.txt", "one", "ONE")
    _check_like_init(first)
    assert first.message == "The file a.txt has been updated (1 replacement). Snippet (around line 1 after the edit):"
    rebased = coord.session("t", policy="rebase").edit("a.txt", "three", "THREE")
    assert rebased.rebased and rebased.intervening_writes == 1 and rebased.intervening_sessions == ("s",)
    _check_like_init(rebased)
    created = s.write("b.txt", "new\n")
    _check_like_init(created)
    assert created.created and created.message.startswith("File created successfully at: b.txt Note: 1 file you read")


@pytest.mark.parametrize(
    ("changes", "filled", "expected"),
    [
        ({}, False, "The file a.txt has been updated (1 replacement). Snippet (around line 7 after the edit):"),
        (
            {"replacements": 2},
            False,
            "The file a.txt has been updated (2 replacements). Snippet (around line 7 after the edit):",
        ),
        (
            {"replacements": 0},
            False,
            "The file a.txt has been updated (0 replacements). Snippet (around line 7 after the edit):",
        ),
        (
            {"warnings": ("W1", "W2")},
            False,
            "The file a.txt has been updated (1 replacement). Warning: W1 W2 Snippet (around line 7 after the edit):",
        ),
        (
            {"notice": "N."},
            False,
            "The file a.txt has been updated (1 replacement). Note: N. Snippet (around line 7 after the edit):",
        ),
        (
            {},
            True,
            "The file a.txt was empty and has been filled with new_string. Snippet (around line 7 after the edit):",
        ),
        ({"created": True}, False, "Created a.txt."),
        (
            {"match_lines": (6, 7), "match": "trailing_whitespace"},
            False,
            "The file a.txt has been updated (1 replacement). old_string matched lines 6-7 of the file only with "
            "trailing whitespace ignored; check the snippet. Snippet (around line 7 after the edit):",
        ),
    ],
)
def test_the_edit_message_for_each_kind_of_edit(changes: dict[str, object], filled: bool, expected: str) -> None:
    """The usual edit's message (made in one step) and every other kind's, pinned as they read."""
    res = evolve(WriteResult("a.txt", "edit", False, 2, "h", "", replacements=1, start_line=7), **changes)
    out = _edit_message(res, filled)
    assert out.message == expected
    assert out == evolve(res, message=expected)
    _check_like_init(out)


def test_the_write_message_says_created_or_updated() -> None:
    res = WriteResult("a.txt", "write", False, 2, "h", "", warnings=("W",))
    assert _write_message(res).message == "File updated successfully at: a.txt Warning: W"
