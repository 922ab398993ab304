"""Pure text logic of Read / Edit: matching, quote style, replacement, line endings, numbering, snippets.

Nothing here does I/O; every function is deterministic on its arguments, so the engine can call it inside
the critical section and the tests can state its properties directly.

Decisions where Claude Code's behaviour is either unspecified or worth tightening:

* Deleting a whole line swallows its terminator only when the match really is a whole line (or lines):
  it starts at the start of a line and is directly followed by a line end. Deleting the tail of a line
  never joins it with the next one. The terminator swallowed is the one actually in the file (``\\r\\n``
  or ``\\n``), so a mixed file keeps every other line end as it was.
* When ``old_string`` only matches with curly quotes folded, occurrences are counted (and, with
  ``replace_all``, replaced) in the folded text: two lines that differ only in quote style are ambiguous,
  never a silent pick of the first. Each replacement takes the quote style of its own slice.
* ``multi_edit``'s "do not edit what this call just inserted" rule compares with line ends and curly
  quotes folded, since matching folds both.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.frozen import fast_init
from coordinator.text import flexmatch

LEFT_SINGLE, RIGHT_SINGLE, LEFT_DOUBLE, RIGHT_DOUBLE = "\u2018", "\u2019", "\u201c", "\u201d"
MAX_LINE_CHARS = 2000

_CRLF = "\r\n"
_LF = "\n"
_EOLS = (_LF, _CRLF)

# One char for one char: an index into the folded text is an index into the original text.
_QUOTE_FOLD = str.maketrans({LEFT_SINGLE: "'", RIGHT_SINGLE: "'", LEFT_DOUBLE: '"', RIGHT_DOUBLE: '"'})
_OPENING_PRECEDERS = frozenset("([{\u2014\u2013")
_LINE_NUMBER_PREFIX = re.compile(r"^\s*\d+\t", re.MULTILINE)
_MAX_LINES_LISTED = 10


# --- quotes -------------------------------------------------------------------------------------------


def normalize_quotes(s: str) -> str:
    """Fold curly quotes to straight ones.

    Invariant: ``len(normalize_quotes(s)) == len(s)`` and the mapping is char for char, so offsets found
    in the folded text are offsets in ``s``.
    """
    return s.translate(_QUOTE_FOLD)


def find_actual_string(content: str, search: str) -> str | None:
    """The text in ``content`` that ``search`` denotes: ``search`` itself if present verbatim, else the
    file's own slice at the first place where the two agree with curly quotes folded, else None."""
    if search in content:
        return search
    index = normalize_quotes(content).find(normalize_quotes(search))
    if index < 0:
        return None
    return content[index : index + len(search)]


def _is_opening_context(chars: Sequence[str], index: int) -> bool:
    if index == 0:
        return True
    prev = chars[index - 1]
    return prev.isspace() or prev in _OPENING_PRECEDERS


def _curl(s: str, straight: str, left: str, right: str) -> str:
    """Each `straight` quote in `s` becomes `left` in an opening context, else `right`.

    An apostrophe (don't, l'heure) follows a letter, which is never an opening context, so it becomes a
    closing quote (’) by the same rule as any other single quote: it needs no rule of its own."""
    chars = list(s)
    for i, ch in enumerate(chars):
        if ch == straight:
            chars[i] = left if _is_opening_context(chars, i) else right
    return "".join(chars)


def preserve_quote_style(old_string: str, actual_old: str, new_string: str) -> str:
    """Carry the file's curly quotes into ``new_string`` when ``old_string`` only matched with quotes folded.

    A straight quote becomes an opening curly quote at the start or after whitespace, an opening bracket or
    an em/en dash, and a closing one otherwise; a single quote between two letters is an apostrophe (’).
    """
    if actual_old == old_string:
        return new_string
    has_double = LEFT_DOUBLE in actual_old or RIGHT_DOUBLE in actual_old
    has_single = LEFT_SINGLE in actual_old or RIGHT_SINGLE in actual_old
    result = new_string
    if has_double:
        result = _curl(result, '"', LEFT_DOUBLE, RIGHT_DOUBLE)
    if has_single:
        result = _curl(result, "'", LEFT_SINGLE, RIGHT_SINGLE)
    return result


# --- line endings -------------------------------------------------------------------------------------


def detect_eol(text: str) -> str:
    """``"\\r\\n"`` if the text has more CRLF than bare LF line ends, else ``"\\n"`` (ties and no line ends
    give LF)."""
    crlf = text.count(_CRLF)
    bare_lf = text.count(_LF) - crlf
    return _CRLF if crlf > bare_lf else _LF


def _is_mixed(text: str) -> bool:
    crlf = text.count(_CRLF)
    return crlf > 0 and text.count(_LF) > crlf


def to_eol(s: str, eol: str) -> str:
    """Every ``\\r\\n`` and bare ``\\n`` in ``s`` becomes ``eol``; a lone ``\\r`` is left alone."""
    if eol not in _EOLS:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"Unknown line ending {eol!r}; use '\\n' or '\\r\\n'.",
            eol=eol,
        )
    folded = s.replace(_CRLF, _LF)
    return folded.replace(_LF, _CRLF) if eol == _CRLF else folded


def count_occurrences(content: str, needle: str) -> int:
    """Non-overlapping occurrences, as ``str.count`` counts them."""
    return content.count(needle)


# --- edits --------------------------------------------------------------------------------------------


@fast_init
@dataclass(frozen=True)
class EditSpec:
    old_string: str
    new_string: str
    replace_all: bool = False


EXACT, QUOTES = "exact", "quotes"
MATCH_MODES: tuple[str, ...] = ("exact", "flexible")
# Looser matches rank higher: a multi-edit reports the loosest one any of its edits needed.
_MATCH_RANK = {EXACT: 0, QUOTES: 1, flexmatch.TRAILING_WHITESPACE: 2, flexmatch.INDENTATION: 3}


@fast_init
@dataclass(frozen=True)
class EditOutcome:
    text: str  # the whole new text
    replacements: int
    first_offset: int  # char index in the new text where the first replacement starts
    inserted_len: int  # length of the first replacement's inserted text (after eol / quote conversion)
    match: str = EXACT  # how old_string was found: exact, quotes, trailing_whitespace or indentation
    match_lines: tuple[int, int] | None = None  # for a flexible match: the lines of the old text it spans


@fast_init
@dataclass(frozen=True)
class _Match:
    """Where to look: the haystack is ``content`` itself, or ``content`` with quotes folded."""

    haystack: str
    needle: str
    old: str  # old_string with the line ending that matched
    folded: bool = False  # found only with curly quotes folded


def _find_all(haystack: str, needle: str) -> list[int]:
    """Starts of the non-overlapping occurrences, left to right (the ones ``str.count`` counts)."""
    positions: list[int] = []
    start = haystack.find(needle)
    while start >= 0:
        positions.append(start)
        start = haystack.find(needle, start + len(needle))
    return positions


def _locate(content: str, old_string: str) -> tuple[_Match, str] | None:
    """Match ``old_string`` in the file's dominant line ending, then (mixed files only) in the other one.

    Returns the match and the line ending it was made with (new_string is converted to the same one).
    """
    if "\r" not in content:  # no CRLF at all (most files): LF, not mixed, without counting line ends
        eol, candidates = _LF, [_LF]
    else:
        eol = detect_eol(content)
        candidates = [eol]
        if _is_mixed(content):
            candidates.append(_LF if eol == _CRLF else _CRLF)
    # An exact match in either line ending beats a quote-folded one.
    for candidate in candidates:
        old = to_eol(old_string, candidate)
        if old in content:
            return _Match(content, old, old), candidate
    folded_content = normalize_quotes(content)
    for candidate in candidates:
        old = to_eol(old_string, candidate)
        folded_old = normalize_quotes(old)
        if folded_old in folded_content:
            return _Match(folded_content, folded_old, old, folded=True), candidate
    return None


def _terminator_after(content: str, start: int, end: int, replacement: str) -> int:
    """Length of the line end to swallow with a deletion, or 0.

    Only a whole line (or run of lines) swallows its terminator: the match starts a line, does not already
    end with a line end, and is followed by one. The terminator is the file's own, so CRLF stays CRLF.
    """
    if replacement or end == start or content[end - 1] == _LF:
        return 0
    if start > 0 and content[start - 1] != _LF:
        return 0
    if content.startswith(_CRLF, end):
        return 2
    if content.startswith(_LF, end):
        return 1
    return 0


def _no_match_message(old_string: str, flexible: bool = False) -> str:
    tried = (
        "not even with curly quotes folded, trailing whitespace ignored or the indentation shifted"
        if flexible
        else "not even with curly quotes folded to straight ones"
    )
    message = (
        f"old_string was not found in the file, {tried}. "
        "Read the file again and copy the exact text to replace, including whitespace and indentation."
    )
    if _LINE_NUMBER_PREFIX.search(old_string):
        message += (
            " old_string seems to start lines with line numbers and a tab from the Read output; those "
            "prefixes are not part of the file, so leave them out."
        )
    return message


def _ambiguous(content: str, positions: Sequence[int], count: int) -> CoordinatorError:
    lines = [line_number_at(content, p) for p in positions[:_MAX_LINES_LISTED]]
    shown = ", ".join(map(str, lines)) + (", ..." if count > len(lines) else "")
    return CoordinatorError(
        ErrorCode.AMBIGUOUS,
        f"old_string occurs {count} times in the file (at lines {shown}), so the edit is "
        "ambiguous. Add surrounding lines to old_string to make it unique, or set replace_all to "
        "replace every occurrence.",
        count=count,
        lines=lines,
    )


def _apply_flexible(content: str, old_string: str, new_string: str) -> tuple[EditOutcome, int]:
    """The flexible match (`flexmatch`), once exact and quote-folded matching have failed."""
    found = flexmatch.find_flexible(content, old_string, new_string)
    if not found:
        raise CoordinatorError(ErrorCode.NO_MATCH, _no_match_message(old_string, flexible=True))
    if len(found) > 1:
        raise _ambiguous(content, [m.start for m in found], len(found))
    m = found[0]
    new = to_eol(m.new_string, detect_eol(content))
    text = content[: m.start] + new + content[m.end :]
    if text == content:
        raise CoordinatorError(
            ErrorCode.NO_CHANGE,
            "The edit leaves the file exactly as it was (new_string equals the lines it matched). Nothing was changed.",
        )
    outcome = EditOutcome(text, 1, m.start, len(new), m.kind, (m.first_line, m.last_line))
    return outcome, m.end - m.start


def _apply_edit(
    content: str, old_string: str, new_string: str, replace_all: bool, match: str = EXACT
) -> tuple[EditOutcome, int]:
    """`apply_edit`, also returning how many chars of ``content`` the first replacement removed."""
    if old_string == new_string:
        raise CoordinatorError(
            ErrorCode.NO_CHANGE,
            "old_string and new_string are identical, so the edit would change nothing. "
            "Give the new text in new_string, or skip this edit.",
        )

    if old_string == "":
        # Empty old_string creates or fills a file; it must never wipe out existing content.
        if content.strip() != "":
            raise CoordinatorError(
                ErrorCode.FILE_EXISTS,
                "old_string is empty, which only creates a file or fills an empty one, but this file has "
                "content; to replace it use Write after reading it, or give a non-empty old_string.",
            )
        if new_string == content:
            raise CoordinatorError(
                ErrorCode.NO_CHANGE,
                "The file already holds exactly new_string; nothing to change.",
            )
        return EditOutcome(new_string, 1, 0, len(new_string)), len(content)

    direct = replace_once(content, old_string, new_string)
    if direct is not None:
        return EditOutcome(direct[0], 1, direct[1], len(new_string)), len(old_string)
    return _apply_located(content, old_string, new_string, replace_all, match)


def replace_once(content: str, old_string: str, new_string: str) -> tuple[str, int] | None:
    """The common edit, decided as `apply_edit`'s general steps would decide it: one exact match of a
    non-empty ``old_string`` in a text without CR, a different, non-empty ``new_string`` without CR (so the
    replacement swallows no line end and takes no line ending or quote style). Returns the new text and
    where the replacement starts (it is ``len(new_string)`` long, ``len(old_string)`` was removed); None for
    every other edit, which `apply_edit` then decides (the same outcome in this case, by its longer way:
    the differential tests hold the two to each other)."""
    if (
        not new_string
        or not old_string
        or old_string == new_string
        or "\r" in content
        or "\r" in old_string
        or "\r" in new_string
    ):
        return None
    start = content.find(old_string)
    if start < 0 or content.find(old_string, start + len(old_string)) >= 0:
        return None
    return content[:start] + new_string + content[start + len(old_string) :], start


def _apply_located(
    content: str, old_string: str, new_string: str, replace_all: bool, match: str
) -> tuple[EditOutcome, int]:
    """`_apply_edit`'s general steps: locate (line endings, folded quotes, flexible), then replace."""
    located = _locate(content, old_string)
    if located is None:
        if match == "flexible" and not replace_all:
            return _apply_flexible(content, old_string, new_string)
        raise CoordinatorError(ErrorCode.NO_MATCH, _no_match_message(old_string))
    found, eol = located
    new = to_eol(new_string, eol)

    positions = _find_all(found.haystack, found.needle)
    if len(positions) > 1 and not replace_all:
        raise _ambiguous(content, positions, len(positions))
    if not replace_all:
        positions = positions[:1]

    # Everything outside the replaced slices is copied verbatim: untouched bytes never change.
    length = len(found.old)
    pieces: list[str] = []
    cursor = 0
    first_offset = inserted_len = removed_len = -1
    for start in positions:
        end = start + length
        replacement = preserve_quote_style(found.old, content[start:end], new)
        end += _terminator_after(content, start, end, replacement)
        pieces.append(content[cursor:start])
        if first_offset < 0:  # the first replacement: everything before it is kept, so it starts at `start`
            first_offset, inserted_len, removed_len = start, len(replacement), end - start
        pieces.append(replacement)
        cursor = end
    pieces.append(content[cursor:])
    text = "".join(pieces)

    if text == content:
        raise CoordinatorError(
            ErrorCode.NO_CHANGE,
            "The edit leaves the file exactly as it was (new_string equals the matched text once line "
            "endings and the file's quote style are applied). Nothing was changed.",
        )
    kind = QUOTES if found.folded else EXACT
    return EditOutcome(text, len(positions), first_offset, inserted_len, kind), removed_len


def apply_edit(
    content: str, old_string: str, new_string: str, replace_all: bool = False, match: str = EXACT
) -> EditOutcome:
    """Replace ``old_string`` with ``new_string`` in ``content``, with the semantics of Claude Code's Edit.

    Matching is exact, then with curly quotes folded (the file's own slice is replaced and its quote style
    carried into the new text). ``old_string`` and ``new_string`` take the file's line ending first, so a
    CRLF file stays CRLF. The match must be unique unless ``replace_all``. Replacement is literal. Raises
    `CoordinatorError` with NO_CHANGE, FILE_EXISTS, NO_MATCH or AMBIGUOUS; nothing is returned half-done.
    ``match="flexible"``: when both fail, the rules of `flexmatch` are tried (not with ``replace_all``).
    """
    outcome, _ = _apply_edit(content, old_string, new_string, replace_all, match)
    return outcome


def _fold_for_overlap(s: str) -> str:
    return normalize_quotes(to_eol(s, _LF))


def _validate_edits(edits: Sequence[EditSpec]) -> None:
    if not edits:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "edits is empty; give at least one {old_string, new_string} edit.",
        )
    for i, edit in enumerate(edits):
        if edit.old_string == "" and i > 0:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                f"edits[{i}] has an empty old_string; only the first edit may have one (to create or fill "
                "an empty file). Give the exact text to replace.",
                index=i,
            )
        folded_old = _fold_for_overlap(edit.old_string)  # (an empty one is edits[0]: nothing before it)
        for j in range(i):
            if folded_old in _fold_for_overlap(edits[j].new_string):
                raise CoordinatorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"edits[{i}].old_string is contained in edits[{j}].new_string, so it would edit text "
                    "that this same call inserts. Fold the two into one edit, or make the earlier "
                    "new_string final.",
                    index=i,
                    earlier_index=j,
                )


def apply_edits(content: str, edits: Sequence[EditSpec], match: str = EXACT) -> EditOutcome:
    """Apply ``edits`` in order to ``content``, all or nothing (multi_edit).

    The first failing edit raises its own error code with its index in the message and in
    ``details["index"]``; since everything happens in memory, nothing of the earlier edits survives.
    ``first_offset`` / ``inserted_len`` describe the earliest changed region of the final text (edits
    that touch or overlap it are merged into it).
    """
    _validate_edits(edits)
    text = content
    replacements = 0
    region: tuple[int, int] | None = None  # (start, end) in the current text
    match_used, match_lines = EXACT, None  # the loosest match any edit needed
    for i, edit in enumerate(edits):
        try:
            outcome, removed = _apply_edit(text, edit.old_string, edit.new_string, edit.replace_all, match)
        except CoordinatorError as exc:
            raise CoordinatorError(
                exc.code,
                f"edits[{i}] failed, so none of the {len(edits)} edits was applied and the file is "
                f"unchanged: {exc.message}",
                **{**exc.details, "index": i},
            ) from exc
        text = outcome.text
        replacements += outcome.replacements
        region = _merge_region(region, outcome.first_offset, removed, outcome.inserted_len)
        if _MATCH_RANK[outcome.match] > _MATCH_RANK[match_used]:
            match_used, match_lines = outcome.match, outcome.match_lines
    if text == content:
        raise CoordinatorError(
            ErrorCode.NO_CHANGE,
            "Taken together the edits leave the file exactly as it was. Nothing was changed.",
        )
    assert region is not None
    return EditOutcome(text, replacements, region[0], region[1] - region[0], match_used, match_lines)


def _merge_region(region: tuple[int, int] | None, offset: int, removed: int, inserted: int) -> tuple[int, int]:
    """The earliest changed region after an edit replaced ``[offset, offset+removed)`` by ``inserted``
    chars. Approximate under replace_all (only the first replacement shifts the region)."""
    edit_region = (offset, offset + inserted)
    if region is None:
        return edit_region
    start, end = region
    if offset + removed < start:
        return edit_region  # entirely before: the new earliest region
    if offset > end:
        return region  # entirely after: the region did not move
    # An old region ending inside the replaced span ends, at the latest, with the inserted text.
    return min(start, offset), max(end + inserted - removed, offset + inserted)


# --- lines, numbering, snippets -----------------------------------------------------------------------


def line_number_at(text: str, offset: int) -> int:
    """1-based number of the line holding char ``offset`` (clamped to the text). Lines end at ``\\n``,
    the same split as `split_lines`."""
    offset = max(0, min(offset, len(text)))
    return text.count(_LF, 0, offset) + 1


def split_lines(text: str) -> list[str]:
    """Lines without their ``\\r\\n`` / ``\\n`` terminators. ``""`` has no lines, and a final line end does
    not open an extra empty line. Other characters (lone ``\\r``, form feed, U+2028) do not break lines."""
    if not text:
        return []
    lines = text.split(_LF)
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def number_lines(lines: Sequence[str], start_line: int, max_line_chars: int = MAX_LINE_CHARS) -> str:
    """``cat -n`` style: a 6-wide right-aligned number, a tab, the line; lines joined by ``\\n``.

    A line longer than ``max_line_chars`` is cut there and a visible marker with its full length appended;
    the cut exists only in this rendering.
    """
    if start_line < 1:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"start_line must be 1 or more, got {start_line}.",
            start_line=start_line,
        )
    if max_line_chars < 1:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"max_line_chars must be 1 or more, got {max_line_chars}.",
            max_line_chars=max_line_chars,
        )
    if not lines:
        return ""
    end_line = start_line + len(lines)
    if end_line <= _NUMBERED_MAX and max(map(len, lines)) <= max_line_chars:
        # The common snippet: no line to cut, numbers from the table (`_numbered`).
        return _numbered(lines, start_line, end_line)
    rendered: list[str] = []
    for n, line in enumerate(lines, start=start_line):
        if len(line) > max_line_chars:
            line = f"{line[:max_line_chars]}… [line truncated: {len(line)} chars]"
        rendered.append(str(n).rjust(6) + "\t" + line)  # f"{n:>6}\t{line}", at half the cost
    return "\n".join(rendered)


# The number column of `number_lines` ("     1\t" ...) for the first lines of a file, made once; and the same
# with the line end before it, for every line but the first.
_NUMBERED = tuple(str(n).rjust(6) + "\t" for n in range(10_001))
_NUMBERED_AFTER = tuple("\n" + n for n in _NUMBERED)
_NUMBERED_MAX = len(_NUMBERED)


def _numbered(lines: Sequence[str], start_line: int, end_line: int) -> str:
    """`number_lines` for lines ``start_line`` .. ``end_line - 1`` (at most `_NUMBERED_MAX`, none to cut):
    the numbers and the lines interleaved by two slice assignments and joined once, all in C (a join over
    `map(str.__add__, ...)` costs about 2.4x the instructions: a wrapper call and a new string per line)."""
    parts = [*lines, *lines]
    parts[::2] = _NUMBERED_AFTER[start_line:end_line]
    parts[1::2] = lines
    parts[0] = _NUMBERED[start_line]
    return "".join(parts)


def render_snippet(text: str, first_line: int, last_line: int, context: int = 4) -> str:
    """Numbered lines ``first_line - context`` .. ``last_line + context``, clamped to the text; ``""`` for
    an empty text."""
    lines = split_lines(text)
    if not lines:
        return ""
    context = max(0, context)
    first = max(1, min(first_line, len(lines)))
    last = max(first, min(last_line, len(lines)))
    start = max(1, first - context)
    end = min(len(lines), last + context)
    return number_lines(lines[start - 1 : end], start)


def render_snippet_at(text: str, offset: int, length: int, first_line: int, context: int = 4) -> str:
    """The same rendering as `render_snippet` for the region ``text[offset:offset + length]`` whose first
    line is ``first_line``, found by scanning only around the region (the whole text is not split).

    One function for the common case: the context lines before are cut from a window of `_SNIPPET_WINDOW`
    characters in one `rsplit`, those after from one in one `split`, and the lines shown are numbered from
    the table of `number_lines` (identical output; tests/coordinator/text/test_semantics.py checks it
    against `render_snippet`). Stepping line by line (`_context_start` / `_context_end`) happens only when a
    window holds too few lines; a region at the very end, an offset outside the text or a negative context
    go through `_snippet_at_edge`."""
    size = len(text)
    if offset < 0 or offset >= size - 1 or context < 0:
        return _snippet_at_edge(text, offset, length, first_line, context)
    window = _SNIPPET_WINDOW
    line_start = text.rfind("\n", 0, offset) + 1
    start = line_start
    shown = first_line
    if line_start:
        low = line_start - window if line_start > window else 0
        parts = text[low : line_start - 1].rsplit("\n", context)
        if len(parts) > context:  # `context` whole lines after parts[0]
            start = low + len(parts[0]) + 1
            shown = first_line - context
        elif not low:  # fewer lines than that before: from the first line
            start = 0
            shown = first_line - len(parts)
        else:
            start, shown = _context_start(text, line_start, first_line, context)
    end = offset + length - 1 if length > 1 else offset
    end = text.find("\n", end) if end < size else -1
    if end != -1:
        seg = text[end + 1 : end + 1 + window]
        after = seg.split("\n", context)
        if len(after) > context:
            end += len(seg) - len(after[-1])
        elif end + 1 + window >= size:
            end = -1
        else:
            end = _context_end(text, end, context)
    if end == -1:  # to the end of the text: a final line end opens no extra line (as split_lines)
        piece = text[start:]
        lines = piece.split("\n")
        if not lines[-1]:
            lines.pop()
    else:  # the piece stops just before a line end, so its last line may be empty: split it plainly
        piece = text[start:end]
        lines = piece.split("\n")
    if "\r" in piece:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    stop = shown + len(lines)
    if shown > 0 and stop <= _NUMBERED_MAX and (len(piece) <= MAX_LINE_CHARS or max(map(len, lines)) <= MAX_LINE_CHARS):
        # number_lines' common case (no line to cut: a piece within the limit has none longer than it)
        return _numbered(lines, shown, stop)
    return number_lines(lines, max(1, shown))


def _snippet_at_edge(text: str, offset: int, length: int, first_line: int, context: int) -> str:
    """`render_snippet_at` for an offset outside ``[0, len(text) - 1)`` or a negative context: the offset
    clamped to the text, the context to 0 or more; a region at the very end (the last char, or nothing past
    it) lies on one line, and the clamping rules of render_snippet apply."""
    if not text:
        return ""
    offset = max(0, min(offset, len(text)))
    context = max(0, context)
    if offset >= len(text) - 1:
        return render_snippet(text, first_line, first_line, context)
    return render_snippet_at(text, offset, length, first_line, context)


_SNIPPET_WINDOW = 4096


def _context_start(text: str, start: int, first: int, context: int) -> tuple[int, int]:
    """The start of the line `context` lines before the one starting at `start` (clamped to the text's
    first line), and that line's number (`first` is the number of the line at `start`)."""
    if start == 0 or context == 0:
        return start, first
    low = max(0, start - _SNIPPET_WINDOW)
    parts = text[low : start - 1].rsplit(_LF, context)
    if len(parts) > context:  # `context` whole lines after parts[0]
        return low + len(parts[0]) + 1, first - context
    if low == 0:  # fewer lines than that before: from the first line
        return 0, first - len(parts)
    for _ in range(context):  # long lines: step back one line at a time
        if start == 0:
            break
        start = text.rfind(_LF, 0, start - 1) + 1
        first -= 1
    return start, first


def _context_end(text: str, end: int, context: int) -> int:
    """The line end `context` lines after the one at `end` (-1: the text ends first)."""
    if end == -1 or context == 0:
        return end
    seg = text[end + 1 : end + 1 + _SNIPPET_WINDOW]
    parts = seg.split(_LF, context)
    if len(parts) > context:
        return end + len(seg) - len(parts[-1])
    if end + 1 + _SNIPPET_WINDOW >= len(text):
        return -1
    for _ in range(context):  # long lines: step on one line at a time
        if end == -1:
            break
        end = text.find(_LF, end + 1)
    return end


# --- "did you mean" -----------------------------------------------------------------------------------


SUGGEST_CUTOFF = 0.75
_STEM_CUTOFF = 0.5


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def suggest_path(name: str, candidates: Iterable[str]) -> str | None:
    """A sibling to suggest for a missing file ``name``, or None.

    In order of preference: the same stem with another extension (``foo.ts`` for ``foo.js``), the same
    name up to case, then the closest name by `difflib` ratio, which must be *above* `SUGGEST_CUTOFF`
    (a ratio just at it, like ``nope.txt`` / ``snip.txt``, is a shared extension more than a typo) with
    stems at least half alike (so ``a.txt`` is not close to ``b.txt``). ``name`` is compared by its last
    component; candidates are sibling names and are returned as given. Ties go to the closest, then the
    alphabetically first, so the answer is deterministic.
    """
    base = PurePath(name).name or name
    pool = sorted({c for c in candidates if c and c != base})
    if not pool:
        return None

    def best(found: list[str]) -> str:
        # max() keeps the first of equal keys, and `found` is sorted.
        return max(found, key=lambda c: _similarity(base, c))

    stem = PurePath(base).stem
    same_stem = [c for c in pool if PurePath(c).stem == stem]
    if same_stem:
        return best(same_stem)
    same_case_folded = [c for c in pool if c.casefold() == base.casefold()]
    if same_case_folded:
        return best(same_case_folded)
    close = [
        c for c in pool if _similarity(base, c) > SUGGEST_CUTOFF and _similarity(stem, PurePath(c).stem) >= _STEM_CUTOFF
    ]
    return best(close) if close else None
