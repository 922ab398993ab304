"""The whole text of every refusal the pure core raises (semantics, textio, rebase), one case per message.

A refusal's message is what the model reads: what went wrong and what to do next. These tests pin each one
in full, so that the guidance of every error code these modules raise is asserted word for word (a change
of wording is a deliberate change of this table, never an accident), together with its code and details.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.text.codecs import Encoding, decode_bytes, encode_text
from coordinator.text.rebase import carry_change, rebase_edit, rebase_edits
from coordinator.text.semantics import (
    LEFT_DOUBLE,
    RIGHT_DOUBLE,
    EditSpec,
    apply_edit,
    apply_edits,
    number_lines,
    to_eol,
)

_SUPPORTED = "supported are UTF-8, UTF-8 with BOM, and UTF-16 (LE or BE) with BOM."
_NOT_FOUND = (
    "old_string was not found in the file, not even with curly quotes folded to straight ones. Read the file "
    "again and copy the exact text to replace, including whitespace and indentation."
)
_BINARY = (
    "The file appears to be binary (NUL or many control bytes near its start); this tool edits text only. "
    "Leave the file alone, or change it with a tool made for its format."
)
_REBASE_HEAD = (
    "The file has been modified since you last read it, and your change could not be carried over onto the "
    "current version: "
)
_REBASE_TAIL = " Read the file again (at least around those lines), then redo your change on the current content."


def _lines(n: int) -> str:
    return "".join(f"l{i}\n" for i in range(n))


def _changed(text: str, blocks: int) -> str:
    """`text` with `blocks` lines changed, every third one from l1 on (blocks apart: one change each)."""
    for i in range(1, 3 * blocks, 3):
        text = text.replace(f"l{i}\n", f"L{i}\n")
    return text


# (id, code, call, expected message, expected details)
CASES: list[tuple[str, ErrorCode, Callable[[], Any], str, dict[str, Any]]] = [
    (
        "to_eol-unknown",
        ErrorCode.INVALID_ARGUMENT,
        lambda: to_eol("a", "\r"),
        "Unknown line ending '\\r'; use '\\n' or '\\r\\n'.",
        {"eol": "\r"},
    ),
    ("no_match", ErrorCode.NO_MATCH, lambda: apply_edit("abc", "abd", "x"), _NOT_FOUND, {}),
    (
        "no_match-line-numbers",
        ErrorCode.NO_MATCH,
        lambda: apply_edit("abc", "     3\tabd", "x"),
        _NOT_FOUND + " old_string seems to start lines with line numbers and a tab from the Read output; those "
        "prefixes are not part of the file, so leave them out.",
        {},
    ),
    (
        "no_match-flexible",
        ErrorCode.NO_MATCH,
        lambda: apply_edit("abc", "abd", "x", match="flexible"),
        "old_string was not found in the file, not even with curly quotes folded, trailing whitespace ignored or "
        "the indentation shifted. Read the file again and copy the exact text to replace, including whitespace "
        "and indentation.",
        {},
    ),
    (
        "ambiguous",
        ErrorCode.AMBIGUOUS,
        lambda: apply_edit("a\na\n", "a", "b"),
        "old_string occurs 2 times in the file (at lines 1, 2), so the edit is ambiguous. Add surrounding lines "
        "to old_string to make it unique, or set replace_all to replace every occurrence.",
        {"count": 2, "lines": [1, 2]},
    ),
    (
        "ambiguous-flexible",
        ErrorCode.AMBIGUOUS,
        lambda: apply_edit("a  \nb\na \n", "a\n", "c\n", match="flexible"),
        "old_string occurs 2 times in the file (at lines 1, 3), so the edit is ambiguous. Add surrounding lines "
        "to old_string to make it unique, or set replace_all to replace every occurrence.",
        {"count": 2, "lines": [1, 3]},
    ),
    (
        "no_change-identical",
        ErrorCode.NO_CHANGE,
        lambda: apply_edit("a", "a", "a"),
        "old_string and new_string are identical, so the edit would change nothing. Give the new text in "
        "new_string, or skip this edit.",
        {},
    ),
    (
        "no_change-same-result",
        ErrorCode.NO_CHANGE,
        lambda: apply_edit(f"{LEFT_DOUBLE}a{RIGHT_DOUBLE}", '"a"', f"{LEFT_DOUBLE}a{RIGHT_DOUBLE}"),
        "The edit leaves the file exactly as it was (new_string equals the matched text once line endings and "
        "the file's quote style are applied). Nothing was changed.",
        {},
    ),
    (
        "no_change-flexible",
        ErrorCode.NO_CHANGE,
        lambda: apply_edit("a  \n", "a\n", "a  \n", match="flexible"),
        "The edit leaves the file exactly as it was (new_string equals the lines it matched). Nothing was changed.",
        {},
    ),
    (
        "no_change-empty-old-string",
        ErrorCode.NO_CHANGE,
        lambda: apply_edit("  ", "", "  "),
        "The file already holds exactly new_string; nothing to change.",
        {},
    ),
    (
        "file_exists",
        ErrorCode.FILE_EXISTS,
        lambda: apply_edit("x\n", "", "y"),
        "old_string is empty, which only creates a file or fills an empty one, but this file has content; to "
        "replace it use Write after reading it, or give a non-empty old_string.",
        {},
    ),
    (
        "multi_edit-empty",
        ErrorCode.INVALID_ARGUMENT,
        lambda: apply_edits("a", []),
        "edits is empty; give at least one {old_string, new_string} edit.",
        {},
    ),
    (
        "multi_edit-empty-old-string",
        ErrorCode.INVALID_ARGUMENT,
        lambda: apply_edits("ab", [EditSpec("a", "x"), EditSpec("", "y")]),
        "edits[1] has an empty old_string; only the first edit may have one (to create or fill an empty file). "
        "Give the exact text to replace.",
        {"index": 1},
    ),
    (
        "multi_edit-edits-own-insert",
        ErrorCode.INVALID_ARGUMENT,
        lambda: apply_edits("ab", [EditSpec("a", "xyz"), EditSpec("y", "q")]),
        "edits[1].old_string is contained in edits[0].new_string, so it would edit text that this same call "
        "inserts. Fold the two into one edit, or make the earlier new_string final.",
        {"index": 1, "earlier_index": 0},
    ),
    (
        "multi_edit-one-fails",
        ErrorCode.NO_MATCH,
        lambda: apply_edits("a b", [EditSpec("a", "c"), EditSpec("z", "y")]),
        "edits[1] failed, so none of the 2 edits was applied and the file is unchanged: " + _NOT_FOUND,
        {"index": 1},
    ),
    (
        "multi_edit-no_change",
        ErrorCode.NO_CHANGE,
        lambda: apply_edits("ab", [EditSpec("a", ""), EditSpec("b", "ab")]),
        "Taken together the edits leave the file exactly as it was. Nothing was changed.",
        {},
    ),
    (
        "number_lines-start",
        ErrorCode.INVALID_ARGUMENT,
        lambda: number_lines(["x"], 0),
        "start_line must be 1 or more, got 0.",
        {"start_line": 0},
    ),
    (
        "number_lines-width",
        ErrorCode.INVALID_ARGUMENT,
        lambda: number_lines(["x"], 1, 0),
        "max_line_chars must be 1 or more, got 0.",
        {"max_line_chars": 0},
    ),
    (
        "utf-32",
        ErrorCode.UNSUPPORTED_ENCODING,
        lambda: decode_bytes(b"\xff\xfe\x00\x00x"),
        f"The file starts with a UTF-32 byte order mark; {_SUPPORTED} Convert the file to UTF-8 with another "
        "tool, or leave it alone.",
        {"encoding": "utf-32"},
    ),
    ("binary-nul", ErrorCode.BINARY_FILE, lambda: decode_bytes(b"a\x00b"), _BINARY, {}),
    ("binary-utf16-nul", ErrorCode.BINARY_FILE, lambda: decode_bytes(b"\xff\xfea\x00\x00\x00"), _BINARY, {}),
    (
        "bad-utf8",
        ErrorCode.UNSUPPORTED_ENCODING,
        lambda: decode_bytes(b"ok \xff\n"),
        f"The file is not valid utf-8 (bad byte sequence at byte offset 3: invalid start byte); {_SUPPORTED} "
        "Convert the file or leave it alone.",
        {"encoding": "utf-8", "byte_offset": 3},
    ),
    (
        "unencodable",
        ErrorCode.INVALID_ARGUMENT,
        lambda: encode_text("a\ud800", Encoding.UTF16_LE),
        "The text cannot be written as utf-16-le: character '\\ud800' at index 1 (surrogates not allowed), "
        "usually a lone surrogate. Remove or replace that character and try again.",
        {"encoding": "utf-16-le", "char_offset": 1},
    ),
    ("rebase-nothing", ErrorCode.INVALID_ARGUMENT, lambda: rebase_edits("a\n", "b\n", []), "No edits to rebase.", {}),
    (
        "rebase-not_rebasable",
        ErrorCode.STALE,
        lambda: rebase_edit("a\nb\n", "a\nB\n", EditSpec("a", "x", replace_all=True)),
        _REBASE_HEAD + "an edit with replace_all is never carried over onto a changed file. Since then, other "
        "writes changed line 2 (current numbering)." + _REBASE_TAIL,
        {"changes": [[2, 2]], "reason": "not_rebasable"},
    ),
    (
        "rebase-overlap",
        ErrorCode.STALE,
        lambda: rebase_edit("a\nb\nc\n", "a\nB\nc\n", EditSpec("b\n", "x\n")),
        _REBASE_HEAD + "your edit changes lines that another write also changed since your read (line 2 of the "
        "current file)." + _REBASE_TAIL,
        {"changes": [[2, 2]], "reason": "overlap", "clashing": [[2, 2]]},
    ),
    (
        "rebase-invalid_on_base",
        ErrorCode.STALE,
        lambda: rebase_edit("a\n", "a\n", EditSpec("zz", "y")),
        _REBASE_HEAD + f"the edit does not apply to the version you read either ({_NOT_FOUND}). Since then, the "
        "file was changed by another write." + _REBASE_TAIL,
        {"changes": [], "reason": "invalid_on_base"},
    ),
    (
        "rebase-overlap-lines-and-others",
        ErrorCode.STALE,
        lambda: rebase_edit("a\nb\nc\nd\ne\n", "a\nB\nC\nd\nE\n", EditSpec("b\nc\n", "x\n")),
        _REBASE_HEAD + "your edit changes lines that another write also changed since your read (lines 2-3 of the "
        "current file). Since then, other writes changed lines 2-3, line 5 (current numbering)." + _REBASE_TAIL,
        {"changes": [[2, 3], [5, 5]], "reason": "overlap", "clashing": [[2, 3]]},
    ),
    (
        "rebase-no_unique_match",
        ErrorCode.STALE,
        lambda: rebase_edit("a\nb\nc\nd\ne\nf\n", "a\nb\nc\nd\ne\nf\nb\n", EditSpec("b\n", "B\n")),
        _REBASE_HEAD + "old_string no longer matches uniquely in the current file (old_string occurs 2 times in the "
        "file (at lines 2, 7), so the edit is ambiguous. Add surrounding lines to old_string to make it unique, or "
        "set replace_all to replace every occurrence.). Since then, other writes changed line 7 (current "
        "numbering)." + _REBASE_TAIL,
        {"changes": [[7, 7]], "reason": "no_unique_match"},
    ),
    (
        "rebase-moved_match",
        ErrorCode.STALE,
        lambda: rebase_edit(
            f"say {LEFT_DOUBLE}hi{RIGHT_DOUBLE}\nx\ny\n",
            f'say {LEFT_DOUBLE}hi{RIGHT_DOUBLE}\nx\ny\nsay "hi"\n',
            EditSpec('say "hi"', 'say "bye"'),
        ),
        _REBASE_HEAD + "old_string now matches at a place that does not correspond to where it was in the version "
        "you read. Since then, other writes changed line 4 (current numbering)." + _REBASE_TAIL,
        {"changes": [[4, 4]], "reason": "moved_match"},
    ),
    (
        "rebase-eight-changes",
        ErrorCode.STALE,
        lambda: rebase_edit(_lines(30), _changed(_lines(30), 8), EditSpec("l1\n", "x\n")),
        _REBASE_HEAD + "your edit changes lines that another write also changed since your read (line 2 of the "
        "current file). Since then, other writes changed line 2, line 5, line 8, line 11, line 14, line 17, line "
        "20, line 23 (current numbering)." + _REBASE_TAIL,
        {"changes": [[n, n] for n in range(2, 24, 3)], "reason": "overlap", "clashing": [[2, 2]]},
    ),
    (
        "rebase-nine-changes",
        ErrorCode.STALE,
        lambda: rebase_edit(_lines(30), _changed(_lines(30), 9), EditSpec("l1\n", "x\n")),
        _REBASE_HEAD + "your edit changes lines that another write also changed since your read (line 2 of the "
        "current file). Since then, other writes changed line 2, line 5, line 8, line 11, line 14, line 17, line "
        "20, line 23, and 1 more block (current numbering)." + _REBASE_TAIL,
        {"changes": [[n, n] for n in range(2, 27, 3)], "reason": "overlap", "clashing": [[2, 2]]},
    ),
    (
        "rebase-ten-changes",
        ErrorCode.STALE,
        lambda: rebase_edit(_lines(33), _changed(_lines(33), 10), EditSpec("l1\n", "x\n")),
        _REBASE_HEAD + "your edit changes lines that another write also changed since your read (line 2 of the "
        "current file). Since then, other writes changed line 2, line 5, line 8, line 11, line 14, line 17, line "
        "20, line 23, and 2 more blocks (current numbering)." + _REBASE_TAIL,
        {"changes": [[n, n] for n in range(2, 30, 3)], "reason": "overlap", "clashing": [[2, 2]]},
    ),
]


@pytest.mark.parametrize(("code", "call", "message", "details"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_refusal_of_the_core_says_what_to_do_next(
    code: ErrorCode, call: Callable[[], Any], message: str, details: dict[str, Any]
) -> None:
    with pytest.raises(CoordinatorError) as info:
        call()
    assert info.value.code is code
    assert info.value.message == message
    assert info.value.details == details


def test_a_refused_carry_names_the_file_and_the_change_by_default() -> None:
    with pytest.raises(CoordinatorError) as info:
        carry_change("a\nb\nc\n", "a\nX\nc\n", "a\nY\nc\n")
    assert info.value.code is ErrorCode.STALE
    assert info.value.message == (
        "The file has changed since that write, and the change changes lines that another write also changed "
        "since then (line 2 of the current file). Nothing was written. Read the file again (at least around "
        "those lines) and make the change you need by hand."
    )
    assert info.value.details == {"changes": [[2, 2]], "reason": "overlap", "clashing": [[2, 2]]}
