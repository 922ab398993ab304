"""Flexible matching (opt-in, ``match="flexible"``): what is tried after the exact and the quote-folded match
of an Edit have both failed. Pure: no I/O.

Two rules, in this order, each used only when it finds exactly one place:

1. ``trailing_whitespace``: ``old_string``'s lines equal whole lines of the file once trailing spaces and
   tabs are ignored on both sides.
2. ``indentation``: they are equal once trailing whitespace is ignored and the indentation is shifted by
   one constant: every non-blank line of the file is indented by the same extra prefix (or by the same
   prefix less) than the corresponding line of ``old_string``. ``new_string`` is re-indented by that same
   shift; if a line of it cannot be (it has less indentation than a prefix to be taken away), the rule
   does not apply.

Never a fuzzy or similarity match: every non-whitespace character of ``old_string`` is compared exactly, in
order, line for line. Blank lines of ``old_string`` match blank lines only. The matched lines are replaced
whole (with their trailing whitespace); when ``old_string`` ends with a line end, so does the replaced
region. Several places are ``ambiguous``, as with an exact match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TRAILING_WHITESPACE = "trailing_whitespace"
INDENTATION = "indentation"
_WS = " \t"


@dataclass(frozen=True)
class FlexMatch:
    kind: str  # TRAILING_WHITESPACE or INDENTATION
    start: int  # char offset in the content where the replaced region starts (a line start)
    end: int  # char offset where it ends
    first_line: int  # 1-based lines of the content the match spans
    last_line: int
    new_string: str  # the text to put in (re-indented for INDENTATION; line ends not converted)


@dataclass(frozen=True)
class _Line:
    start: int  # offset of the line in the content
    end: int  # offset of its end, before the terminator
    next: int  # offset of the next line (after the terminator)
    text: str  # without terminator


def _lines(content: str) -> list[_Line]:
    out: list[_Line] = []
    pos = 0
    n = len(content)
    while pos < n:
        nl = content.find("\n", pos)
        nxt = n if nl < 0 else nl + 1
        end = n if nl < 0 else (nl - 1 if nl > pos and content[nl - 1] == "\r" else nl)
        out.append(_Line(pos, end, nxt, content[pos:end]))
        pos = nxt
    return out


def _indent(s: str) -> str:
    return s[: len(s) - len(s.lstrip(_WS))]


def _shift(old: Sequence[str], got: Sequence[str]) -> tuple[str, str] | None:
    """The constant indentation shift from `old` lines to `got` lines, as (added, removed) prefixes (one of
    them empty), or None. Lines are compared without trailing whitespace; blank lines must face blank
    lines and take no part in the shift."""
    added = removed = None
    for o, g in zip(old, got, strict=True):
        o, g = o.rstrip(_WS), g.rstrip(_WS)
        if not o or not g:
            if o or g:
                return None
            continue
        oi, gi = _indent(o), _indent(g)
        if o[len(oi) :] != g[len(gi) :]:
            return None
        if gi.endswith(oi):  # the file's indentation is a prefix more: gi == added + oi
            a, r = gi[: len(gi) - len(oi)], ""
        elif oi.endswith(gi):  # a prefix less: oi == removed + gi
            a, r = "", oi[: len(oi) - len(gi)]
        else:
            return None
        if added is None:
            added, removed = a, r
        elif (a, r) != (added, removed):
            return None
    if added is None or removed is None:
        return None
    return added, removed


def _reindent(new_string: str, added: str, removed: str) -> str | None:
    out: list[str] = []
    for line in new_string.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if not body.strip(_WS):
            out.append(line)
        elif removed:
            if not line.startswith(removed):
                return None
            out.append(line[len(removed) :])
        else:
            out.append(added + line)
    return "".join(out)


def _old_lines(old_string: str) -> tuple[list[str], bool]:
    """``old_string``'s lines (LF or CRLF ends dropped) and whether it ends with a line end."""
    text = old_string.replace("\r\n", "\n")
    ends = text.endswith("\n")
    lines = text.split("\n")
    if ends:
        lines.pop()
    return lines, ends


def find_flexible(content: str, old_string: str, new_string: str) -> list[FlexMatch]:
    """Every place of the first rule (`TRAILING_WHITESPACE`, then `INDENTATION`) that matches at least once:
    one entry when the match is unique, several when it is ambiguous, none when neither rule matches.
    ``old_string`` of whitespace only never matches flexibly."""
    old, ends = _old_lines(old_string)
    if not old_string.strip():
        return []
    lines = _lines(content)
    k = len(old)
    stripped_old = [o.rstrip(_WS) for o in old]
    found: list[FlexMatch] = []
    for i in range(len(lines) - k + 1):
        window = lines[i : i + k]
        if all(w.text.rstrip(_WS) == o for w, o in zip(window, stripped_old, strict=True)):
            found.append(_make(TRAILING_WHITESPACE, window, i, ends, new_string))
    if found:
        return found
    for i in range(len(lines) - k + 1):
        window = lines[i : i + k]
        shift = _shift(old, [w.text for w in window])
        if shift is None or shift == ("", ""):
            continue
        new = _reindent(new_string, *shift)
        if new is not None:
            found.append(_make(INDENTATION, window, i, ends, new))
    return found


def _make(kind: str, window: Sequence[_Line], index: int, ends: bool, new_string: str) -> FlexMatch:
    last = window[-1]
    return FlexMatch(
        kind=kind,
        start=window[0].start,
        end=last.next if ends else last.end,
        first_line=index + 1,
        last_line=index + len(window),
        new_string=new_string,
    )
