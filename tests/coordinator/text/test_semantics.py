"""Tests of coordinator.text.semantics: each Edit rule by example, then the properties it must keep."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from coordinator.errors import ErrorCode
from coordinator.text.codecs import Encoding, decode_bytes, encode_text
from coordinator.text.semantics import (
    LEFT_DOUBLE,
    LEFT_SINGLE,
    MAX_LINE_CHARS,
    RIGHT_DOUBLE,
    RIGHT_SINGLE,
    EditOutcome,
    EditSpec,
    apply_edit,
    apply_edits,
    count_occurrences,
    detect_eol,
    find_actual_string,
    line_number_at,
    normalize_quotes,
    number_lines,
    preserve_quote_style,
    render_snippet,
    render_snippet_at,
    split_lines,
    suggest_path,
    to_eol,
)
from tests.coordinator.text import examples
from tests.refusals import refused

# --- quotes -------------------------------------------------------------------------------------------


def test_normalize_quotes_maps_each_curly_quote_to_one_straight_char() -> None:
    s = f"{LEFT_DOUBLE}hi{RIGHT_DOUBLE} {LEFT_SINGLE}x{RIGHT_SINGLE} it{RIGHT_SINGLE}s"
    assert normalize_quotes(s) == "\"hi\" 'x' it's"
    assert len(normalize_quotes(s)) == len(s)
    assert normalize_quotes("plain «guillemets» „low“") == 'plain «guillemets» „low"'


def test_find_actual_string_prefers_exact_match() -> None:
    content = f'say {LEFT_DOUBLE}hi{RIGHT_DOUBLE} and say "hi"'
    assert find_actual_string(content, 'say "hi"') == 'say "hi"'


def test_find_actual_string_returns_the_files_curly_slice() -> None:
    content = f"print({LEFT_DOUBLE}it{RIGHT_SINGLE}s{RIGHT_DOUBLE})\n"
    assert find_actual_string(content, '"it\'s"') == f"{LEFT_DOUBLE}it{RIGHT_SINGLE}s{RIGHT_DOUBLE}"


def test_find_actual_string_also_folds_curly_quotes_in_the_search() -> None:
    assert find_actual_string("a 'b' c", f"{LEFT_SINGLE}b{RIGHT_SINGLE}") == "'b'"


def test_find_actual_string_none_when_absent() -> None:
    assert find_actual_string("hello", "world") is None
    assert find_actual_string("hello", "Hello") is None


def test_preserve_quote_style_unchanged_when_matched_exactly() -> None:
    assert preserve_quote_style('"a"', '"a"', "\"b\" 'c'") == "\"b\" 'c'"


def test_preserve_quote_style_double_quotes_open_and_close_by_context() -> None:
    actual = f"{LEFT_DOUBLE}old{RIGHT_DOUBLE}"
    new = '"a" ("b") ["c"] {"d"} \u2014"e" \u2013"f" x"g"'
    expected = (
        f"{LEFT_DOUBLE}a{RIGHT_DOUBLE} ({LEFT_DOUBLE}b{RIGHT_DOUBLE}) [{LEFT_DOUBLE}c{RIGHT_DOUBLE}] "
        f"{{{LEFT_DOUBLE}d{RIGHT_DOUBLE}}} "
        f"\u2014{LEFT_DOUBLE}e{RIGHT_DOUBLE} \u2013{LEFT_DOUBLE}f{RIGHT_DOUBLE} "
        f"x{RIGHT_DOUBLE}g{RIGHT_DOUBLE}"
    )
    assert preserve_quote_style('"old"', actual, new) == expected


def test_preserve_quote_style_tab_and_newline_are_opening_context() -> None:
    actual = f"{LEFT_DOUBLE}x{RIGHT_DOUBLE}"
    assert preserve_quote_style('"x"', actual, 'a\t"b"\n"c"') == (
        f"a\t{LEFT_DOUBLE}b{RIGHT_DOUBLE}\n{LEFT_DOUBLE}c{RIGHT_DOUBLE}"
    )


def test_preserve_quote_style_single_quotes_apostrophe_rule() -> None:
    actual = f"{LEFT_SINGLE}it{RIGHT_SINGLE}s{RIGHT_SINGLE}"
    new = "'don't' l'été 'x' 5'"
    expected = (
        f"{LEFT_SINGLE}don{RIGHT_SINGLE}t{RIGHT_SINGLE} l{RIGHT_SINGLE}été {LEFT_SINGLE}x{RIGHT_SINGLE} 5{RIGHT_SINGLE}"
    )
    assert preserve_quote_style("'it's'", actual, new) == expected


def test_preserve_quote_style_only_converts_kinds_present_in_file() -> None:
    # The file's slice has curly double quotes only: single quotes in new_string stay straight.
    actual = f"{LEFT_DOUBLE}a{RIGHT_DOUBLE}"
    assert preserve_quote_style('"a"', actual, '"it\'s"') == f"{LEFT_DOUBLE}it's{RIGHT_DOUBLE}"
    # Neither kind present (the slice differs for another reason): nothing converted.
    assert preserve_quote_style("ab", "aB", "\"x\" 'y'") == "\"x\" 'y'"


# --- line endings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "eol"),
    [
        ("", "\n"),
        ("no newline", "\n"),
        ("a\nb\n", "\n"),
        ("a\r\nb\r\n", "\r\n"),
        ("a\r\nb\r\nc\n", "\r\n"),
        ("a\r\nb\nc\n", "\n"),
        ("a\r\nb\n", "\n"),  # tie goes to LF
        ("a\rb\r", "\n"),  # bare CR is not a line end here
    ],
)
def test_detect_eol(text: str, eol: str) -> None:
    assert detect_eol(text) == eol


def test_to_eol_converts_both_ways_and_leaves_lone_cr() -> None:
    assert to_eol("a\nb\r\nc", "\r\n") == "a\r\nb\r\nc"
    assert to_eol("a\nb\r\nc", "\n") == "a\nb\nc"
    assert to_eol("a\rb", "\r\n") == "a\rb"
    assert to_eol("a\r\n", "\r\n") == "a\r\n"  # never doubles the CR


def test_to_eol_rejects_unknown_eol() -> None:
    refused(ErrorCode.INVALID_ARGUMENT, to_eol, "a", "\r")


def test_count_occurrences_is_non_overlapping() -> None:
    assert count_occurrences("aaaa", "aa") == 2
    assert count_occurrences("abc", "x") == 0


# --- apply_edit: the rules ----------------------------------------------------------------------------


def test_simple_edit_reports_offset_and_inserted_len() -> None:
    out = apply_edit("alpha\nbeta\ngamma\n", "beta", "BETA!")
    assert out == EditOutcome("alpha\nBETA!\ngamma\n", 1, 6, 5)


def test_identical_old_and_new_is_no_change() -> None:
    refused(ErrorCode.NO_CHANGE, apply_edit, "abc", "b", "b")


def test_empty_old_string_fills_empty_or_blank_file() -> None:
    assert apply_edit("", "", "new\n") == EditOutcome("new\n", 1, 0, 4)
    assert apply_edit("  \n\t\n", "", "x") == EditOutcome("x", 1, 0, 1)


def test_empty_old_string_refused_on_file_with_content() -> None:
    err = refused(ErrorCode.FILE_EXISTS, apply_edit, "x = 1\n", "", "y = 2\n")
    assert "Write" in err.message


def test_empty_old_string_that_writes_same_blank_content_is_no_change() -> None:
    refused(ErrorCode.NO_CHANGE, apply_edit, "\n", "", "\n")


def test_no_match_message_tells_how_to_recover() -> None:
    err = refused(ErrorCode.NO_MATCH, apply_edit, "def f():\n    return 1\n", "return 2", "return 3")
    assert "curly" in err.message and "Read" in err.message and "indentation" in err.message


def test_no_match_hints_at_line_number_prefixes() -> None:
    err = refused(ErrorCode.NO_MATCH, apply_edit, "a\nb\n", "     2\tb", "c")
    assert "line numbers" in err.message


def test_ambiguous_match_reports_count_and_lines() -> None:
    err = refused(ErrorCode.AMBIGUOUS, apply_edit, "x = 1\ny = 2\nx = 1\nx = 1\n", "x = 1", "x = 3")
    assert err.details["count"] == 3
    assert err.details["lines"] == [1, 3, 4]
    assert "3 times" in err.message and "replace_all" in err.message


def test_replace_all_replaces_every_occurrence() -> None:
    out = apply_edit("x = 1\ny = 2\nx = 1\n", "x = 1", "x = 3", replace_all=True)
    assert out.text == "x = 3\ny = 2\nx = 3\n"
    assert out.replacements == 2
    assert (out.first_offset, out.inserted_len) == (0, 5)


def test_replace_all_with_single_occurrence_is_fine() -> None:
    assert apply_edit("abc", "b", "B", replace_all=True).replacements == 1


def test_replacement_is_literal() -> None:
    content = "price = 1\n"
    for new in ("price = $&", "price = \\1", "price = $1$$", "price = \\g<0>", "price = $'"):
        assert apply_edit(content, "price = 1", new).text == new + "\n"


def test_result_equal_to_content_is_no_change() -> None:
    # old and new differ only in line ending, which the file's line ending erases.
    refused(ErrorCode.NO_CHANGE, apply_edit, "a\nb\n", "a\nb", "a\r\nb")


def test_crlf_file_stays_crlf() -> None:
    content = "one\r\ntwo\r\nthree\r\n"
    out = apply_edit(content, "two\nthree", "2\n2.5\n3")
    assert out.text == "one\r\n2\r\n2.5\r\n3\r\n"


def test_lf_file_stays_lf_even_if_new_string_has_crlf() -> None:
    out = apply_edit("one\ntwo\n", "two", "2\r\n2.5")
    assert out.text == "one\n2\n2.5\n"
    assert out.inserted_len == len("2\n2.5")


def test_mixed_file_retries_other_eol_and_keeps_untouched_lines() -> None:
    # Mostly CRLF, but lines b and c end in LF: an LF old_string spanning them matches on the retry.
    content = "a\r\nb\nc\nd\r\ne\r\nf\r\n"
    out = apply_edit(content, "b\nc\n", "B\nC\n")
    assert out.text == "a\r\nB\nC\nd\r\ne\r\nf\r\n"


def test_mixed_file_edit_inside_one_line_keeps_every_line_end() -> None:
    content = "a\r\nb\nc\r\n"
    assert apply_edit(content, "b", "B").text == "a\r\nB\nc\r\n"


def test_deleting_whole_line_swallows_its_newline() -> None:
    out = apply_edit("a\nb\nc\n", "b", "")
    assert out.text == "a\nc\n"
    assert (out.first_offset, out.inserted_len) == (2, 0)


def test_deleting_whole_line_in_crlf_file_swallows_crlf() -> None:
    assert apply_edit("a\r\nb\r\nc\r\n", "b", "").text == "a\r\nc\r\n"


def test_deleting_several_lines_swallows_final_newline() -> None:
    assert apply_edit("a\nb\nc\nd\n", "b\nc", "").text == "a\nd\n"


def test_deleting_last_line_without_newline() -> None:
    assert apply_edit("a\nb", "b", "").text == "a\n"


def test_deleting_old_string_that_ends_with_newline_does_not_swallow_more() -> None:
    assert apply_edit("a\nb\n\nc\n", "b\n", "").text == "a\n\nc\n"


def test_deleting_tail_of_a_line_does_not_join_lines() -> None:
    assert apply_edit("x = 1  # note\ny = 2\n", "  # note", "").text == "x = 1\ny = 2\n"
    # A partial line that is not at a line start keeps its line end too.
    assert apply_edit("    foo()\nbar()\n", "foo()", "").text == "    \nbar()\n"


def test_replace_all_delete_swallows_only_whole_lines() -> None:
    out = apply_edit("dbg\nx = dbg\ndbg\n", "dbg", "", replace_all=True)
    assert out.text == "x = \n"
    assert out.replacements == 3


def test_curly_match_replaces_files_slice_and_keeps_quote_style() -> None:
    content = f"msg = {LEFT_DOUBLE}don{RIGHT_SINGLE}t panic{RIGHT_DOUBLE}\n"
    out = apply_edit(content, '"don\'t panic"', "\"don't worry, it's fine\"")
    assert out.text == (f"msg = {LEFT_DOUBLE}don{RIGHT_SINGLE}t worry, it{RIGHT_SINGLE}s fine{RIGHT_DOUBLE}\n")


def test_exact_match_keeps_new_string_quotes_as_given() -> None:
    out = apply_edit("a = 'x'\n", "'x'", '"y"')
    assert out.text == 'a = "y"\n'


def test_curly_match_ambiguous_across_quote_styles() -> None:
    content = f"{LEFT_SINGLE}a{RIGHT_SINGLE}\n{RIGHT_SINGLE}a{RIGHT_SINGLE}\n"
    err = refused(ErrorCode.AMBIGUOUS, apply_edit, content, "'a'", "'b'")
    assert err.details["count"] == 2
    out = apply_edit(content, "'a'", "'b'", replace_all=True)
    # Each replacement takes the style of its own slice (both slices are curly single quotes).
    assert out.text == f"{LEFT_SINGLE}b{RIGHT_SINGLE}\n{LEFT_SINGLE}b{RIGHT_SINGLE}\n"
    assert out.replacements == 2


def test_unicode_offsets_are_char_offsets() -> None:
    out = apply_edit("héllo 🌍 wörld", "wörld", "welt")
    assert out.text == "héllo 🌍 welt"
    assert out.first_offset == len("héllo 🌍 ")


# --- apply_edits (multi_edit) -------------------------------------------------------------------------


def test_apply_edits_in_order() -> None:
    out = apply_edits(
        "a = 1\nb = 2\nc = 3\n",
        [EditSpec("c = 3", "c = 30"), EditSpec("a = 1", "a = 10"), EditSpec("= 2", "= 20")],
    )
    assert out.text == "a = 10\nb = 20\nc = 30\n"
    assert out.replacements == 3
    assert out.first_offset == 0  # the earliest changed region
    assert out.text[out.first_offset : out.first_offset + out.inserted_len] == "a = 10"


def test_apply_edits_sequential_semantics() -> None:
    # The second edit sees the first edit's result (not the original).
    out = apply_edits("x y\n", [EditSpec("x", "z"), EditSpec("z y", "done")])
    assert out.text == "done\n"


def test_apply_edits_all_or_nothing_with_index() -> None:
    err = refused(
        ErrorCode.NO_MATCH,
        apply_edits,
        "a\nb\n",
        [EditSpec("a", "A"), EditSpec("missing", "M")],
    )
    assert err.details["index"] == 1
    assert "edits[1]" in err.message and "unchanged" in err.message


def test_apply_edits_ambiguous_keeps_count_and_index() -> None:
    err = refused(ErrorCode.AMBIGUOUS, apply_edits, "a a\n", [EditSpec("a", "b")])
    assert err.details == {"count": 2, "lines": [1, 1], "index": 0}


def test_apply_edits_replace_all() -> None:
    out = apply_edits("a a\nb\n", [EditSpec("a", "c", replace_all=True), EditSpec("b", "d")])
    assert out.text == "c c\nd\n"
    assert out.replacements == 3


def test_apply_edits_refuses_editing_just_inserted_text() -> None:
    err = refused(
        ErrorCode.INVALID_ARGUMENT,
        apply_edits,
        "def f(): pass\n",
        [EditSpec("f", "g_helper"), EditSpec("helper", "h")],
    )
    assert err.details["index"] == 1
    assert err.details["earlier_index"] == 0


def test_apply_edits_overlap_rule_folds_quotes_and_eols() -> None:
    refused(
        ErrorCode.INVALID_ARGUMENT,
        apply_edits,
        "a\nb\n",
        [EditSpec("a", f"{LEFT_DOUBLE}q{RIGHT_DOUBLE}\r\nz"), EditSpec('"q"\nz', "w")],
    )


def test_apply_edits_empty_list_refused() -> None:
    refused(ErrorCode.INVALID_ARGUMENT, apply_edits, "a", [])


def test_apply_edits_empty_old_string_only_first() -> None:
    assert apply_edits("", [EditSpec("", "a b\n")]).text == "a b\n"
    # Every later edit of a freshly filled file edits text this call inserted: refused.
    refused(ErrorCode.INVALID_ARGUMENT, apply_edits, "", [EditSpec("", "a b\n"), EditSpec("b", "c")])
    err = refused(ErrorCode.INVALID_ARGUMENT, apply_edits, "", [EditSpec("x", "y"), EditSpec("", "z")])
    assert err.details["index"] == 1


def test_apply_edits_net_no_change_refused() -> None:
    # Neither edit edits what the other inserted, yet together they change nothing.
    refused(
        ErrorCode.NO_CHANGE,
        apply_edits,
        "ab\n",
        [EditSpec("a", "xa"), EditSpec("xab", "ab")],
    )


def test_apply_edits_merges_touching_regions() -> None:
    out = apply_edits("0123456789\n", [EditSpec("45", "FOUR-FIVE"), EditSpec("3", "THREE")])
    assert out.text == "012THREEFOUR-FIVE6789\n"
    assert out.text[out.first_offset : out.first_offset + out.inserted_len] == "THREEFOUR-FIVE"


def test_apply_edits_later_region_does_not_move_earlier() -> None:
    out = apply_edits("aaa\nbbb\nccc\n", [EditSpec("bbb", "B"), EditSpec("ccc", "CCCCCC")])
    assert (out.first_offset, out.inserted_len) == (4, 1)


# --- lines, numbering, snippets -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("", []),
        ("a", ["a"]),
        ("a\n", ["a"]),
        ("a\r\nb\r\n", ["a", "b"]),
        ("a\n\nb", ["a", "", "b"]),
        ("\n", [""]),
        ("\n\n", ["", ""]),
        ("a\rb\x0cc\u2028d\n", ["a\rb\x0cc\u2028d"]),
    ],
)
def test_split_lines(text: str, lines: list[str]) -> None:
    assert split_lines(text) == lines


def test_line_number_at() -> None:
    text = "ab\ncd\r\nef"
    assert [line_number_at(text, i) for i in range(len(text) + 1)] == [1, 1, 1, 2, 2, 2, 2, 3, 3, 3]
    assert line_number_at(text, -5) == 1
    assert line_number_at(text, 999) == 3


def test_number_lines_cat_n_style() -> None:
    assert number_lines(["a", "", "b"], 9) == "     9\ta\n    10\t\n    11\tb"
    assert number_lines([], 1) == ""
    assert number_lines(["x"], 1234567) == "1234567\tx"


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.text(alphabet="ab\t \u00e9", max_size=5), max_size=12),
    st.sampled_from([1, 2, 9, 9_990, 9_995, 10_000, 10_001, 123_456]),
    st.booleans(),
)
def test_number_lines_is_the_cat_n_rendering_of_any_sequence(lines, start, as_tuple) -> None:
    """The table's rendering (numbers and lines interleaved in C) against the plain one, for lists and
    tuples, one line or none, and numbers running past the table's end."""
    expected = "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, start=start))
    assert number_lines(tuple(lines) if as_tuple else lines, start) == expected


def test_number_lines_truncates_long_lines_visibly() -> None:
    long = "x" * 5123
    out = number_lines([long, "short"], 1)
    first, second = out.split("\n")
    assert first == "     1\t" + "x" * MAX_LINE_CHARS + "… [line truncated: 5123 chars]"
    assert second == "     2\tshort"
    assert number_lines(["abcdef"], 1, max_line_chars=6) == "     1\tabcdef"
    assert number_lines(["abcdefg"], 1, max_line_chars=6) == "     1\tabcdef… [line truncated: 7 chars]"


def test_number_lines_rejects_bad_arguments() -> None:
    refused(ErrorCode.INVALID_ARGUMENT, number_lines, ["a"], 0)
    refused(ErrorCode.INVALID_ARGUMENT, number_lines, ["a"], 1, 0)


def test_render_snippet_context_and_clamping() -> None:
    text = "".join(f"line{i}\n" for i in range(1, 21))
    snippet = render_snippet(text, 10, 11, context=2)
    assert snippet.split("\n") == [f"{n:>6}\tline{n}" for n in range(8, 14)]
    assert render_snippet(text, 1, 1, context=4).split("\n")[0] == "     1\tline1"
    assert len(render_snippet(text, 1, 1, context=4).split("\n")) == 5
    assert render_snippet(text, 20, 25).split("\n")[-1] == "    20\tline20"
    assert render_snippet("", 1, 1) == ""


def test_render_snippet_after_edit() -> None:
    content = "".join(f"l{i}\r\n" for i in range(1, 31))
    out = apply_edit(content, "l15", "fifteen\nand a half")
    first = line_number_at(out.text, out.first_offset)
    last = line_number_at(out.text, out.first_offset + out.inserted_len)
    assert (first, last) == (15, 16)
    lines = render_snippet(out.text, first, last).split("\n")
    assert lines[0] == "    11\tl11"
    assert "    15\tfifteen" in lines and "    16\tand a half" in lines
    assert lines[-1] == "    20\tl19"


# --- suggest_path -------------------------------------------------------------------------------------


def test_suggest_same_stem_other_extension_first() -> None:
    assert suggest_path("config.yml", ["config.yaml", "Config.yml", "confg.yml"]) == "config.yaml"
    assert suggest_path("main", ["main.py", "mains"]) == "main.py"


def test_suggest_case_insensitive_match() -> None:
    assert suggest_path("readme.md", ["README.MD", "notes.txt"]) in {"README.MD"}
    assert suggest_path("Makefile", ["makefile", "CMakeLists.txt"]) == "makefile"


def test_suggest_close_match() -> None:
    assert suggest_path("utlis.py", ["utils.py", "other.py"]) == "utils.py"


def test_suggest_none_when_nothing_close() -> None:
    assert suggest_path("engine.py", ["readme.md", "setup.cfg"]) is None
    assert suggest_path("engine.py", []) is None
    assert suggest_path("engine.py", ["engine.py"]) is None  # the name itself is no suggestion


def test_suggest_cut_off_is_strict_and_needs_alike_stems() -> None:
    # "nope.txt" / "snip.txt" is exactly 0.75: the shared ".txt" makes them look close; they are not.
    assert suggest_path("nope.txt", ["snip.txt"]) is None
    assert suggest_path("a.txt", ["b.txt"]) is None  # 0.8 overall, but stems nothing alike
    assert suggest_path("mian.txt", ["main.txt"]) == "main.txt"  # stems 0.75 alike: enough
    assert suggest_path("ab.txt", ["ac.txt"]) == "ac.txt"  # stems exactly half alike: still enough


def test_suggest_tie_break_is_closest_then_alphabetical() -> None:
    assert suggest_path("node.txt", ["nope.txt", "note.txt"]) == "nope.txt"  # both 0.875: first by name
    assert suggest_path("node.txt", ["note.txt", "nope.txt"]) == "nope.txt"
    assert suggest_path("nodes.txt", ["modes.txt", "nodesx.txt"]) == "nodesx.txt"  # 0.95 beats 0.89


def test_suggest_uses_last_path_component() -> None:
    assert suggest_path("src/app/mian.py", ["main.py", "util.py"]) == "main.py"


def test_suggest_is_deterministic() -> None:
    names = ["foo.ts", "foo.tsx", "foo.jsx"]
    assert suggest_path("foo.js", names) == suggest_path("foo.js", list(reversed(names)))


# --- properties ---------------------------------------------------------------------------------------

MARKER = "<<EDIT-HERE>>"
# Line content: a fixed sample of what files hold (ASCII, tab, Latin-1, CJK, astral emoji that UTF-16
# stores as surrogate pairs, combining marks, NBSP, a stray U+FEFF, curly and straight quotes, `$` and `\`),
# without line breaks, '<' (keeps MARKER unique) or controls that would make UTF-8 look binary.
LINE_CHARS = st.sampled_from(
    [
        *"abcXYZ019 _.,;:(){}[]=#-",
        *["\t", "\x1b", "\u00e9", "\u00df", "\u00a0", "\u4e2d", "\u6587", "\U0001f30d", "\U0001f600"],
        *["\u0301", "\ufeff", "\u2014", "\u2018", "\u2019", "\u201c", "\u201d", "'", '"', "$", "\\", "&"],
    ]
)
LINE = st.text(LINE_CHARS, max_size=12)
EOL_MODES = st.sampled_from(["lf", "crlf", "mixed"])
ENCODINGS = st.sampled_from(list(Encoding))


@st.composite
def texts_with_marker(draw: st.DrawFn) -> tuple[str, str]:
    """A text of lines with random endings (per mode) and MARKER placed once, at a random spot."""
    mode = draw(EOL_MODES)
    lines = draw(st.lists(LINE, min_size=1, max_size=12))
    if mode == "mixed":
        endings = draw(st.lists(st.sampled_from(["\n", "\r\n"]), min_size=len(lines), max_size=len(lines)))
    else:
        endings = [{"lf": "\n", "crlf": "\r\n"}[mode]] * len(lines)
    if not draw(st.booleans()):
        endings[-1] = ""
    row = draw(st.integers(0, len(lines) - 1))
    col = draw(st.integers(0, len(lines[row])))
    lines[row] = lines[row][:col] + MARKER + lines[row][col:]
    return mode, "".join(line + end for line, end in zip(lines, endings, strict=True))


REPLACEMENTS = st.lists(LINE, min_size=1, max_size=3).map("\n".join).filter(bool)


@settings(max_examples=examples(200), deadline=None)
@given(texts_with_marker(), REPLACEMENTS, ENCODINGS)
def test_edit_changes_only_the_replaced_bytes(mode_text: tuple[str, str], replacement: str, encoding: Encoding) -> None:
    _, text = mode_text
    data = encode_text(text, encoding)
    decoded = decode_bytes(data)
    out = apply_edit(decoded.text, MARKER, replacement)
    new_data = encode_text(out.text, decoded.encoding)

    index = decoded.text.index(MARKER)
    prefix_len = len(encode_text(decoded.text[:index], decoded.encoding))
    marker_bytes = encode_text(MARKER, decoded.encoding)[len(encode_text("", decoded.encoding)) :]
    assert data[prefix_len : prefix_len + len(marker_bytes)] == marker_bytes
    suffix_len = len(data) - prefix_len - len(marker_bytes)

    assert new_data[:prefix_len] == data[:prefix_len]
    assert new_data[len(new_data) - suffix_len :] == data[len(data) - suffix_len :]
    inserted = new_data[prefix_len : len(new_data) - suffix_len]
    eol = detect_eol(decoded.text)
    expected = encode_text(to_eol(replacement, eol), decoded.encoding)[len(encode_text("", decoded.encoding)) :]
    assert inserted == expected
    assert out.replacements == 1
    assert out.first_offset == index
    assert out.text[out.first_offset : out.first_offset + out.inserted_len] == to_eol(replacement, eol)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(LINE, min_size=1, max_size=10),
    st.booleans(),
    REPLACEMENTS,
    st.integers(min_value=0),
)
def test_crlf_files_stay_crlf(lines: list[str], final_eol: bool, replacement: str, seed: int) -> None:
    assume(len(lines) > 1 or final_eol)  # at least one line end, so the file is a CRLF file
    row = seed % len(lines)
    lines[row] = MARKER + lines[row]
    text = "\r\n".join(lines) + ("\r\n" if final_eol else "")
    out = apply_edit(text, MARKER, replacement)
    assert out.text.count("\n") == out.text.count("\r\n")
    assert out.text.count("\r\n") == text.count("\r\n") + replacement.count("\n")


@st.composite
def curly_content_and_slice(draw: st.DrawFn) -> tuple[str, int, int]:
    content = draw(st.text(st.sampled_from("ab '\"\u2018\u2019\u201c\u201d\n"), min_size=1, max_size=40))
    start = draw(st.integers(0, len(content) - 1))
    end = draw(st.integers(start + 1, len(content)))
    return content, start, end


@settings(max_examples=examples(200), deadline=None)
@given(curly_content_and_slice())
def test_curly_matching_returns_the_files_own_slice(case: tuple[str, int, int]) -> None:
    content, start, end = case
    search = normalize_quotes(content[start:end])
    actual = find_actual_string(content, search)
    assert actual is not None
    assert normalize_quotes(actual) == search
    if search in content:
        assert actual == search
    else:
        first = normalize_quotes(content).find(search)
        assert actual == content[first : first + len(search)]
        assert first <= start


@settings(max_examples=examples(200), deadline=None)
@given(
    st.text(st.sampled_from("ab\n"), max_size=40),
    st.text(st.sampled_from("ab"), min_size=1, max_size=3),
    st.text(st.sampled_from("xyb\n"), min_size=1, max_size=4),
)
def test_replace_all_count_equals_str_count(content: str, needle: str, new: str) -> None:
    assume(needle != new and needle in content)
    out = apply_edit(content, needle, new, replace_all=True)
    assert out.replacements == content.count(needle)
    assert out.text == content.replace(needle, new)
    assert out.first_offset == content.find(needle)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.text(st.sampled_from("ab \n"), max_size=20),
    st.lists(st.sampled_from(["$&", "\\1", "$1", "$$", "\\g<0>", "$`", "$'", "\\\\", "x"]), min_size=1),
)
def test_replacement_is_always_literal(before: str, parts: list[str]) -> None:
    content = before + MARKER + "\n"
    new = "".join(parts)
    out = apply_edit(content, MARKER, new)
    assert out.text == before + new + "\n"


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(LINE, min_size=1, max_size=10), st.sampled_from(["\n", "\r\n"]), st.integers(min_value=0))
def test_deleting_a_whole_line_removes_exactly_that_line(lines: list[str], eol: str, seed: int) -> None:
    row = seed % len(lines)
    lines[row] = MARKER + lines[row]
    text = eol.join(lines) + eol
    out = apply_edit(text, lines[row], "")
    assert split_lines(out.text) == lines[:row] + lines[row + 1 :]
    assert out.text == "".join(line + eol for i, line in enumerate(lines) if i != row)


@settings(max_examples=examples(200), deadline=None)
@given(st.text(st.sampled_from("ab\r\n\u00e9"), max_size=30), st.integers(min_value=0, max_value=40))
def test_line_number_at_agrees_with_split_lines(text: str, offset: int) -> None:
    offset = min(offset, len(text))
    n = line_number_at(text, offset)
    assert n == len(split_lines(text[:offset] + "x"))


@given(
    st.lists(st.text(alphabet="ab \r", max_size=6), max_size=15),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
    st.data(),
)
@settings(max_examples=examples(300), deadline=None)
def test_render_snippet_at_matches_whole_text_rendering(lines, eol, trailing, data):
    """The region-only snippet renders exactly what splitting the whole text would."""
    from coordinator.text.semantics import line_number_at, render_snippet, render_snippet_at

    text = eol.join(lines) + (eol if trailing and lines else "")
    offset = data.draw(st.integers(0, len(text)))
    length = data.draw(st.integers(0, len(text) - offset + 3))  # a region may run past the end: it is cut there
    context = data.draw(st.integers(0, 5))
    region = text[offset : offset + length]
    first = line_number_at(text, offset)
    last = first + max(region.count("\n") - (1 if region.endswith("\n") else 0), 0)
    expected = render_snippet(text, first, last, context)
    assert render_snippet_at(text, offset, length, first, context) == expected


# --- edge rules each pinned by one example -------------------------------------------------------------


def test_crlf_old_string_matches_in_a_mostly_lf_mixed_file() -> None:
    content = "a\nb\nc\r\nd\r\ne\nf\n"  # LF dominant, two CRLF lines
    out = apply_edit(content, "c\r\nd\r\n", "C\nD\n")
    assert out.text == "a\nb\nC\r\nD\r\ne\nf\n"  # matched in the minority ending, new text takes it
    out = apply_edit(content, "c\nd\n", "C\nD\n")  # LF old_string: tried in CRLF too, since the file is mixed
    assert out.text == "a\nb\nC\r\nD\r\ne\nf\n"
    # the dominant ending is tried first: an LF old_string in a mostly-CRLF file takes CRLF
    assert apply_edit("a\r\nb\r\nc\n", "a\nb\n", "x\n").text == "x\r\nc\n"


def test_deleting_the_tail_of_a_line_never_joins_it_with_the_next() -> None:
    assert apply_edit("xa\nb\n", "a", "").text == "x\nb\n"
    assert apply_edit("a\nb\n", "a", "").text == "b\n"  # a whole line goes with its terminator
    assert apply_edit("x\na\r\nb\n", "a", "").text == "x\nb\n"  # its own CRLF terminator


def test_an_exact_curly_match_keeps_new_strings_straight_quotes() -> None:
    content = f"say {LEFT_DOUBLE}hi{RIGHT_DOUBLE}\n"
    out = apply_edit(content, f"{LEFT_DOUBLE}hi{RIGHT_DOUBLE}", '"bye"')
    assert out.text == 'say "bye"\n' and out.match == "exact"


def test_a_slice_with_only_closing_curly_quotes_still_curls() -> None:
    content = f"don{RIGHT_SINGLE}t stop\n"
    out = apply_edit(content, "don't stop", "'do' stop")
    assert out.text == f"{LEFT_SINGLE}do{RIGHT_SINGLE} stop\n" and out.match == "quotes"
    content = f"end{RIGHT_DOUBLE} here\n"
    assert apply_edit(content, 'end" here', '"x" here').text == f"{LEFT_DOUBLE}x{RIGHT_DOUBLE} here\n"


def test_render_with_no_context_and_one_char_lines() -> None:
    text = "one\ntwo\nthree\nfour\n"
    assert render_snippet(text, 2, 3, context=0) == "     2\ttwo\n     3\tthree"
    assert render_snippet_at(text, 4, 3, 2, context=0) == "     2\ttwo"
    assert number_lines(["abc", "d"], 7, max_line_chars=1) == "     7\ta… [line truncated: 3 chars]\n     8\td"
    err = refused(ErrorCode.INVALID_ARGUMENT, number_lines, ["x"], 1, 0)
    assert err.details == {"max_line_chars": 0} and "max_line_chars must be 1 or more, got 0." in err.message
    err = refused(ErrorCode.INVALID_ARGUMENT, number_lines, ["x"], 0)
    assert err.details == {"start_line": 0} and "start_line must be 1 or more" in err.message


def test_error_details_name_the_bad_value() -> None:
    err = refused(ErrorCode.INVALID_ARGUMENT, to_eol, "a", "\r")
    assert err.details == {"eol": "\r"} and "Unknown line ending '\\r'" in err.message
    err = refused(ErrorCode.UNSUPPORTED_ENCODING, decode_bytes, b"ok \xff\n")
    assert err.details == {"encoding": "utf-8", "byte_offset": 3}
    err = refused(ErrorCode.UNSUPPORTED_ENCODING, decode_bytes, b"\xff\xfe\x00\x00x")
    assert err.details == {"encoding": "utf-32"}
    err = refused(ErrorCode.INVALID_ARGUMENT, encode_text, "a\ud800", Encoding.UTF16_LE)
    assert err.details == {"encoding": "utf-16-le", "char_offset": 1}


def test_each_refusal_of_an_edit_says_what_to_do_next() -> None:
    """The model-facing guidance of each code an edit can raise."""
    assert (
        "Give the new text in new_string, or skip this edit"
        in refused(ErrorCode.NO_CHANGE, apply_edit, "a", "a", "a").message
    )
    assert "to replace it use Write after reading it, or give a non-empty old_string" in (
        refused(ErrorCode.FILE_EXISTS, apply_edit, "x\n", "", "y").message
    )
    assert (
        "The file already holds exactly new_string" in refused(ErrorCode.NO_CHANGE, apply_edit, "  ", "", "  ").message
    )
    msg = refused(ErrorCode.NO_MATCH, apply_edit, "abc", "     3\tabd", "x").message
    assert "copy the exact text to replace, including whitespace and indentation" in msg
    assert "those prefixes are not part of the file, so leave them out" in msg
    assert "leave them out" not in refused(ErrorCode.NO_MATCH, apply_edit, "abc", "abd", "x").message
    msg = refused(ErrorCode.AMBIGUOUS, apply_edit, "a\na\n", "a", "b").message
    assert "occurs 2 times in the file (at lines 1, 2)" in msg and "set replace_all" in msg
    msg = refused(
        ErrorCode.NO_CHANGE, apply_edit, f"{LEFT_DOUBLE}a{RIGHT_DOUBLE}", '"a"', f"{LEFT_DOUBLE}a{RIGHT_DOUBLE}"
    ).message
    assert "leaves the file exactly as it was" in msg
    msg = refused(ErrorCode.NO_CHANGE, apply_edits, "ab", [EditSpec("a", ""), EditSpec("b", "ab")]).message
    assert "Taken together the edits leave the file exactly as it was" in msg
    err = refused(ErrorCode.NO_MATCH, apply_edits, "a b", [EditSpec("a", "c"), EditSpec("z", "y")])
    assert err.details["index"] == 1 and "edits[1] failed, so none of the 2 edits was applied" in err.message
    err = refused(ErrorCode.INVALID_ARGUMENT, apply_edits, "a", [])
    assert "edits is empty" in err.message
    err = refused(ErrorCode.INVALID_ARGUMENT, apply_edits, "ab", [EditSpec("a", "x"), EditSpec("", "y")])
    assert err.details == {"index": 1} and "only the first edit may have one" in err.message
    assert err.message.endswith("an empty file). Give the exact text to replace.")
    assert refused(ErrorCode.INVALID_ARGUMENT, apply_edits, "a", []).message == (
        "edits is empty; give at least one {old_string, new_string} edit."
    )
    err = refused(ErrorCode.INVALID_ARGUMENT, apply_edits, "ab", [EditSpec("a", "xyz"), EditSpec("y", "q")])
    assert err.details == {"index": 1, "earlier_index": 0} and "contained in edits[0].new_string" in err.message
    assert (
        "that this same call inserts. Fold the two into one edit, or make the earlier new_string final." in err.message
    )


def test_multi_edit_region_spans_the_edits_that_touch_it() -> None:
    out = apply_edits(
        "abcdefghij", [EditSpec("cd", "XY"), EditSpec("ef", "Z")]
    )  # the second starts where the first ends
    assert out.text == "abXYZghij" and (out.first_offset, out.inserted_len) == (2, 3)
    out = apply_edits("abcdefghij", [EditSpec("cd", "XY"), EditSpec("Yef", "W")])  # overlaps its end
    assert out.text == "abXWghij" and (out.first_offset, out.inserted_len) == (2, 2)
    out = apply_edits("abcdefghij", [EditSpec("gh", "1"), EditSpec("bc", "2")])  # before it: the new earliest
    assert out.text == "a2def1ij" and (out.first_offset, out.inserted_len) == (1, 1)
    out = apply_edits("abcdefghij", [EditSpec("bc", "2"), EditSpec("hi", "3")])  # after it: unchanged
    assert (out.first_offset, out.inserted_len) == (1, 1)
    out = apply_edits("abcdefghij", [EditSpec("def", "D"), EditSpec("bcD", "Q")])
    assert out.text == "aQghij" and (out.first_offset, out.inserted_len) == (1, 1)


def test_ambiguous_lists_at_most_ten_lines() -> None:
    err = refused(ErrorCode.AMBIGUOUS, apply_edit, "a\n" * 12, "a", "b")
    assert err.details["count"] == 12 and err.details["lines"] == list(range(1, 11))
    assert "(at lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ...)" in err.message
    err = refused(ErrorCode.AMBIGUOUS, apply_edit, "a\n" * 10, "a", "b")
    assert "(at lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)" in err.message


def test_render_snippet_at_agrees_with_render_snippet_at_the_edges() -> None:
    text = "\nb\nc\nd\n"  # a blank first line, so the scan must start at offset 0
    for offset, length in [(0, 1), (1, 2), (3, 2), (len(text) - 1, 1), (len(text) - 2, 2), (len(text), 0)]:
        first = line_number_at(text, offset)
        region = text[offset : offset + length]
        last = first + max(region.count("\n") - (1 if region.endswith("\n") else 0), 0)
        for context in (0, 1, 4):
            assert render_snippet_at(text, offset, length, first, context) == render_snippet(text, first, last, context)
    assert render_snippet_at("x\ny\nz", 4, 1, 3, 0) == "     3\tz"
    assert render_snippet_at("x\ny\nz\n", 5, 1, 3, 1) == "     2\ty\n     3\tz"


def test_find_actual_string_takes_the_first_folded_place() -> None:
    content = f"a {LEFT_SINGLE}x{RIGHT_SINGLE} b {RIGHT_SINGLE}x{LEFT_SINGLE}"
    assert find_actual_string(content, "'x'") == f"{LEFT_SINGLE}x{RIGHT_SINGLE}"


def test_a_flexible_edit_is_one_replacement_and_its_region_is_right_in_a_multi_edit() -> None:
    src = "a:\n  x = 1  \n  y = 2\nb\n"
    out = apply_edit(src, "  x = 1\n", "  x = 3\n", match="flexible")
    assert out.replacements == 1
    out = apply_edits(src, [EditSpec("  x = 1\n", "  x = 3\n"), EditSpec("b\n", "B\n")], match="flexible")
    assert out.text == "a:\n  x = 3\n  y = 2\nB\n" and out.replacements == 2
    assert (out.first_offset, out.inserted_len) == (3, len("  x = 3\n"))


# --- rules pinned by surviving mutants (docs/mutation.md) ----------------------------------------------


def test_a_file_with_one_crlf_line_among_lf_lines_is_mixed() -> None:
    # one CRLF is enough to make the file mixed: an LF old_string is then also tried in CRLF
    assert apply_edit("a\r\nb\nc\n", "a\nb", "x").text == "x\nc\n"


def test_a_pure_crlf_file_is_matched_in_crlf_only() -> None:
    # a stray CR before a line end in old_string is not folded away by also trying LF in a CRLF-only file
    err = refused(ErrorCode.NO_MATCH, apply_edit, "a\r\nb\r\n", "a\r\r\nb", "x")
    assert err.details == {}
    err = refused(ErrorCode.NO_MATCH, apply_edit, f"{LEFT_DOUBLE}a{RIGHT_DOUBLE}\r\nb\r\n", '"a"\r\r\nb', "x")
    assert err.details == {}


def test_deleting_the_first_line_of_a_file_without_final_newline_swallows_its_terminator() -> None:
    assert apply_edit("a\nb", "a", "").text == "b"
    assert apply_edit("a\r\nb", "a", "").text == "b"


def test_a_multi_edit_reports_the_first_of_its_loosest_matches() -> None:
    out = apply_edits("p  \nq\nr  \ns\n", [EditSpec("p\n", "P\n"), EditSpec("r\n", "R\n")], match="flexible")
    assert out.text == "P\nq\nR\ns\n"
    assert out.match == "trailing_whitespace" and out.match_lines == (1, 1)


def test_a_flexible_edit_after_an_exact_one_merges_into_its_region_by_what_it_removed() -> None:
    src = "0123456789\nab  \ncd\n"
    out = apply_edits(src, [EditSpec("cd", "CD"), EditSpec("ab\n", "AB\n")], match="flexible")
    assert out.text == "0123456789\nAB\nCD\n"
    # the changed region is "AB\nCD": from the flexible match's start to the end of the exact edit
    assert (out.first_offset, out.inserted_len) == (11, 5)


@pytest.mark.parametrize("window", [3, 7, 16])
def test_render_snippet_at_steps_line_by_line_when_the_window_holds_too_few_lines(monkeypatch, window):
    """Lines longer than the context window: the region-only snippet still renders what splitting the whole
    text would (the line-by-line stepping behind the windowed split)."""
    import random

    from coordinator.text import semantics
    from coordinator.text.semantics import line_number_at, render_snippet, render_snippet_at

    monkeypatch.setattr(semantics, "_SNIPPET_WINDOW", window)
    rnd = random.Random(window)
    for _ in range(3000):
        lines = ["x" * rnd.choice([0, 1, 2, 5, 30]) + rnd.choice(["", "\r"]) for _ in range(rnd.randint(1, 12))]
        text = "\n".join(lines) + ("\n" if rnd.random() < 0.5 else "")
        offset = rnd.randint(0, len(text))
        length = rnd.randint(0, len(text) - offset + 3)
        context = rnd.randint(0, 5)
        region = text[offset : offset + length]
        first = line_number_at(text, offset)
        last = first + max(region.count("\n") - (1 if region.endswith("\n") else 0), 0)
        assert render_snippet_at(text, offset, length, first, context) == render_snippet(text, first, last, context)


def test_render_snippet_at_agrees_at_the_edges_with_long_lines_and_far_line_numbers() -> None:
    """The one-function snippet against the whole-text rendering where its common case ends: an offset
    before or past the text, a negative context, a line cut by `number_lines` (over MAX_LINE_CHARS), and
    line numbers past the table of numbers made once (10,000)."""
    import random

    from coordinator.text.semantics import MAX_LINE_CHARS, line_number_at, render_snippet, render_snippet_at

    rnd = random.Random(30)
    for _ in range(400):
        widths = [0, 1, 3, MAX_LINE_CHARS, MAX_LINE_CHARS + 1, MAX_LINE_CHARS + 7]
        lines = ["y" * rnd.choice(widths) + rnd.choice(["", "\r"]) for _ in range(rnd.randint(1, 9))]
        text = "\n".join(lines) + ("\n" if rnd.random() < 0.5 else "")
        offset = rnd.choice([rnd.randint(-3, 0), rnd.randint(0, len(text)), rnd.randint(len(text) - 2, len(text) + 3)])
        length = rnd.randint(-1, 2 * MAX_LINE_CHARS)
        context = rnd.randint(-2, 5)
        at = max(0, min(offset, len(text)))
        region = text[at : at + length] if length > 0 else ""
        first = line_number_at(text, at)
        last = first + max(region.count("\n") - (1 if region.endswith("\n") else 0), 0)
        if at >= len(text) - 1:
            last = first  # a region at the very end is shown as its one line
        got = render_snippet_at(text, offset, length, first, context)
        assert got == render_snippet(text, first, last, max(0, context)), (offset, length, context)
    many = "".join(f"l{i}\n" for i in range(1, 10_010))
    offset = many.index("l9999\n")
    got = render_snippet_at(many, offset, 12, 9999)
    assert got == render_snippet(many, 9999, 10_000) and got.splitlines()[-1] == " 10004\tl10004"


@given(
    st.lists(st.sampled_from(["a", "b", "ab", "", " ", '"', "\u201c", "\r"]), min_size=0, max_size=8),
    st.sampled_from(["a", "b", "ab", "a\nb", '"a"', "\n"]),
    st.sampled_from(["x", "", "a", "b\n", "y\nz", "'q'"]),
    st.booleans(),
)
@settings(max_examples=examples(400), deadline=None)
def test_the_common_edit_gives_what_the_general_steps_give(pieces, old, new, replace_all):
    """`_apply_edit`'s common case (one exact match, no CR, a non-empty replacement) returns exactly the
    outcome of the general steps (`_apply_located`), refusals included."""
    from coordinator.errors import CoordinatorError
    from coordinator.text.semantics import _apply_edit, _apply_located, replace_once

    content = "\n".join(pieces)
    if old == new:
        return

    def outcome(fn):
        try:
            return fn(content, old, new, replace_all, "exact")
        except CoordinatorError as exc:
            return (exc.code, exc.message)

    assert outcome(_apply_edit) == outcome(_apply_located)
    direct = replace_once(content, old, new)  # what a one-edit transform takes directly (engine/session.py)
    if direct is not None:
        general, removed = _apply_located(content, old, new, replace_all, "exact")
        assert (general.text, general.first_offset, general.inserted_len, removed) == (
            direct[0],
            direct[1],
            len(new),
            len(old),
        )
        assert (general.replacements, general.match, general.match_lines) == (1, "exact", None)
