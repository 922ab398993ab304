"""Flexible matching (coordinator.text.flexmatch through semantics.apply_edit): opt-in, after exact and
quote-folded matching; whole lines with trailing whitespace ignored, then a constant indentation shift;
unique or refused; never fuzzy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.text.flexmatch import INDENTATION, TRAILING_WHITESPACE, find_flexible
from coordinator.text.rebase import rebase_edit
from coordinator.text.semantics import EditSpec, apply_edit, apply_edits
from tests.coordinator.text import examples

SRC = "class A:\n    def f(self):\n        x = 1   \n        return x\n\n    def g(self):\n        pass\n"


def refused(code: ErrorCode, *args, **kwargs) -> CoordinatorError:  # type: ignore[no-untyped-def]
    with pytest.raises(CoordinatorError) as info:
        apply_edit(*args, **kwargs)
    assert info.value.code is code, info.value
    return info.value


def test_exact_is_the_default_and_flexible_is_opt_in() -> None:
    err = refused(ErrorCode.NO_MATCH, SRC, "        x = 1\n        return x\n", "        x = 2\n        return x\n")
    assert "not even with curly quotes folded to straight ones" in err.message
    out = apply_edit(SRC, "        x = 1\n        return x\n", "        x = 2\n        return x\n", match="flexible")
    assert out.text == SRC.replace("x = 1   \n", "x = 2\n")
    assert out.match == TRAILING_WHITESPACE and out.match_lines == (3, 4)
    assert apply_edit(SRC, "x = 1", "x = 3").match == "exact"
    assert apply_edit("say \u201chi\u201d\n", 'say "hi"', 'say "yo"').match == "quotes"


def test_trailing_whitespace_in_old_string_is_ignored_too() -> None:
    out = apply_edit(
        SRC, "    def g(self):  \n        pass\t\n", "    def g(self):\n        return 1\n", match="flexible"
    )
    assert out.text.endswith("    def g(self):\n        return 1\n") and out.match_lines == (6, 7)


def test_indentation_shift_reindents_new_string() -> None:
    old = "def f(self):\n    x = 1\n    return x\n"  # the model dropped the class's 4 spaces
    new = "def f(self):\n    x = 2\n\n    return x\n"
    out = apply_edit(SRC, old, new, match="flexible")
    assert out.match == INDENTATION and out.match_lines == (2, 4)
    assert out.text == SRC.replace(
        "    def f(self):\n        x = 1   \n        return x\n",
        "    def f(self):\n        x = 2\n\n        return x\n",
    )
    # and the other way: old_string indented more than the file
    deeper = "\tclass A:\n\t    def f(self):\n"
    out = apply_edit(SRC, deeper, "\tclass B:\n\t    def f(self):\n", match="flexible")
    assert out.text.startswith("class B:\n    def f(self):\n")


def test_an_inconsistent_shift_is_no_match() -> None:
    old = "def f(self):\n      x = 1\n"  # +4 on the first line, +2 on the second
    err = refused(ErrorCode.NO_MATCH, SRC, old, "y", match="flexible")
    assert "trailing whitespace ignored or the indentation shifted" in err.message
    # a new_string line that cannot lose the removed prefix: the rule does not apply
    deeper = "\tclass A:\n\t    def f(self):\n"
    refused(ErrorCode.NO_MATCH, SRC, deeper, "class B:\n\t    def f(self):\n", match="flexible")


def test_flexible_matches_must_be_unique() -> None:
    text = "a:\n  x = 1 \nb:\n  x = 1\t\n"
    err = refused(ErrorCode.AMBIGUOUS, text, "  x = 1\n", "  x = 2\n", match="flexible")
    assert err.details == {"count": 2, "lines": [2, 4]}
    text = "if a:\n    y = 2\nif b:\n        y = 2\n"
    err = refused(ErrorCode.AMBIGUOUS, text, "  y = 2\n", "  y = 3\n", match="flexible")
    assert err.details["lines"] == [2, 4]


def test_never_fuzzy_and_only_whole_lines() -> None:
    refused(ErrorCode.NO_MATCH, SRC, "        x = 2\n", "        x = 3\n", match="flexible")  # a different char
    # the first line unindented, the second not: no constant shift
    refused(ErrorCode.NO_MATCH, SRC, "x = 1\n        return x\n", "x = 3\n", match="flexible")
    refused(ErrorCode.NO_MATCH, SRC, "  \n\t\n", "x\n", match="flexible")  # whitespace only
    refused(ErrorCode.NO_MATCH, SRC, "    def g(self):\n        pass\n\n", "z", match="flexible")  # blank vs EOF
    # replace_all never matches flexibly
    refused(ErrorCode.NO_MATCH, SRC, "        x = 1\n", "x\n", replace_all=True, match="flexible")
    # a blank line of old_string must face a blank line
    refused(ErrorCode.NO_MATCH, "a\nb\n", "a\n\nb\n", "c\n", match="flexible")


def test_old_string_without_final_line_end_keeps_the_files() -> None:
    out = apply_edit(SRC, "        x = 1 \t", "        x = 5", match="flexible")
    assert "        x = 5\n        return x\n" in out.text
    crlf = SRC.replace("\n", "\r\n")
    out = apply_edit(crlf, "        x = 1\n        return x\n", "        x = 2\n        return y\n", match="flexible")
    assert out.text == crlf.replace("x = 1   \r\n        return x", "x = 2\r\n        return y")


def test_no_change_when_the_flexible_match_replaces_lines_by_themselves() -> None:
    text = "a  \nb\n"
    err = refused(ErrorCode.NO_CHANGE, text, "a\nb\n", "a  \nb\n", match="flexible")
    assert err.message == (
        "The edit leaves the file exactly as it was (new_string equals the lines it matched). Nothing was changed."
    )


def test_multi_edit_reports_the_loosest_match() -> None:
    out = apply_edits(
        SRC,
        [EditSpec("class A:", "class C:"), EditSpec("def g(self):\n    pass\n", "def g(self):\n    return 0\n")],
        match="flexible",
    )
    assert out.match == INDENTATION and out.match_lines == (6, 7)
    assert out.text.endswith("    def g(self):\n        return 0\n") and out.text.startswith("class C:")


def test_find_flexible_lists_places_and_rules() -> None:
    assert find_flexible(SRC, "nothing", "x") == []
    (m,) = find_flexible(SRC, "    return x", "    return y")
    assert (m.kind, m.first_line, m.last_line, m.new_string) == (INDENTATION, 4, 4, "        return y")
    assert SRC[m.start : m.end] == "        return x"


def test_a_flexible_edit_is_rebased_like_any_other() -> None:
    base = SRC
    current = base.replace("        pass\n", "        pass  # theirs\n")
    r = rebase_edit(base, current, EditSpec("x = 1\nreturn x\n", "x = 9\nreturn x\n"), match="flexible")
    assert "        x = 9\n        return x\n" in r.outcome.text and "# theirs" in r.outcome.text


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.sampled_from(["a = 1", "b = 2", "if c:", "pass", "", "return d"]), min_size=1, max_size=8),
    st.sampled_from(["", "  ", "    ", "\t"]),
    st.sampled_from(["", " ", "\t "]),
)
def test_a_shifted_or_padded_copy_of_unique_lines_finds_them(lines: list[str], indent: str, pad: str) -> None:
    """Whatever the model gets wrong in indentation (constant) and trailing blanks, the flexible match
    finds the file's own lines, and replacing them by themselves (re-indented) changes nothing."""
    body = "".join(f"{indent}{line}{pad}\n" if line else "\n" for line in lines)
    text = "HEAD\n" + body + "TAIL\n"
    old = "".join(f"{line}\n" for line in lines)
    if not old.strip():
        return
    found = find_flexible(text, old, old)
    assert len(found) == 1, (text, old)
    m = found[0]
    assert m.kind == (TRAILING_WHITESPACE if indent == "" else INDENTATION)
    assert (m.first_line, m.last_line) == (2, 1 + len(lines))
    unpadded = "".join(f"{indent}{line}\n" if line else "\n" for line in lines)
    assert text[: m.start] + m.new_string + text[m.end :] == "HEAD\n" + unpadded + "TAIL\n"
