"""Omission markers: the `// ... rest of code ...` a model writes instead of the code it means to keep.

This tool writes text literally, so such a line in ``new_string`` (or in a Write's content) deletes the code
it stands for. `check_placeholder` refuses that with ``placeholder``. Pure: no I/O.

A line is an omission marker when, once its comment leader and closer (``//``, ``#``, ``/*``, ``*/``,
``<!--``, ``-->``, ``--``, ``;``, ``%``, ``{/*``), brackets and quotes are taken off, what is left is made
only of marker vocabulary (`_VOCABULARY`: "rest", "of", "the", "existing", "code", "unchanged", "here",
...), at most `_MAX_WORDS` words, and says omission: an ellipsis with a marker word ("... unchanged ...",
"... other methods ..."), or a strong marker word with a noun ("existing code here", "rest of methods";
"other", "same", "previous" alone are too common in real comments). A line that is not
a comment counts only when wrapped in brackets (``(rest of methods ...)``) or holding an ellipsis. So plain
``...`` (Python's Ellipsis, a TypeScript overload's body), ``# same as above`` and ``// existing users are
migrated below`` are not markers.

Refused only when the marker *replaces code*:

* the marker is new: the same marker line (compared without leader and case) is not already in the old
  text (the file as it was, for an edit as for a write);
* something is lost: a non-blank line of the replaced text (``old_string``, or the old file for a write)
  is missing from the new text. A marker comment added next to code that all stays is not refused: that
  is also the way to write such a comment on purpose.

Creating a file never refuses (there was no code to lose).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coordinator.errors import CoordinatorError, ErrorCode

_MAX_WORDS = 12
_ELLIPSIS = re.compile(r"\.\.\.|…")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_LEADERS = ("{/*", "<!--", "///", "//", "/*", "--", "#", ";", "%", "*")
_CLOSERS = ("*/}", "-->", "*/")
_WRAPPERS = {"(": ")", "[": "]", "{": "}", "<": ">", '"': '"', "'": "'", "`": "`"}
# A marker is a comment (starts with a leader), wrapped (starts with a wrapper) or holds an ellipsis
# (`marker_key`); a line that is none of them is skipped before the full test.
_MARKER_STARTS = frozenset(leader[0] for leader in _LEADERS) | frozenset(_WRAPPERS)
# Words that say "something was left out here": strong ones with a noun or an ellipsis, weak ones (common
# in real comments: "// other cases", "# same as before") only with an ellipsis.
_MARKER_WORDS = frozenset(
    [
        "rest",
        "remainder",
        "remaining",
        "existing",
        "unchanged",
        "omitted",
        "omit",
        "elided",
        "snip",
        "snipped",
        "untouched",
        "unmodified",
        "truncated",
        "abbreviated",
        "shortened",
    ]
)
_WEAK_MARKER_WORDS = frozenset(["previous", "previously", "original", "same", "other", "more", "similar"])
# What was left out.
_NOUNS = frozenset(
    [
        "code",
        "codes",
        "method",
        "methods",
        "function",
        "functions",
        "implementation",
        "implementations",
        "class",
        "classes",
        "file",
        "module",
        "logic",
        "body",
        "content",
        "contents",
        "line",
        "lines",
        "test",
        "tests",
        "import",
        "imports",
        "field",
        "fields",
        "property",
        "properties",
        "definition",
        "definitions",
        "member",
        "members",
        "component",
        "components",
        "case",
        "cases",
        "section",
        "sections",
        "part",
        "parts",
        "block",
        "blocks",
        "statement",
        "statements",
        "stuff",
        "html",
        "css",
        "markup",
        "styles",
        "config",
        "configuration",
        "setup",
        "handlers",
        "routes",
        "props",
        "state",
        "hooks",
        "helpers",
        "utils",
        "query",
        "queries",
        "rule",
        "rules",
        "entries",
        "items",
        "values",
        "options",
        "settings",
        "elements",
        "templates",
        "attributes",
    ]
)
_FILLER = frozenset(
    [
        "the",
        "of",
        "this",
        "that",
        "these",
        "those",
        "your",
        "my",
        "our",
        "a",
        "an",
        "is",
        "are",
        "as",
        "here",
        "goes",
        "go",
        "remain",
        "remains",
        "remaining",
        "stays",
        "stay",
        "before",
        "for",
        "brevity",
        "etc",
        "and",
        "all",
        "keep",
        "kept",
        "left",
        "not",
        "shown",
        "same",
        "like",
        "above",
        "below",
        "earlier",
        "no",
        "changes",
        "change",
        "to",
        "in",
        "from",
        "everything",
        "else",
        "continue",
        "continues",
        "continued",
        "more",
        "unchanged",
        "omitted",
        "so",
        "on",
        "previously",
        "implemented",
        "defined",
        "written",
        "before",
        "there",
        "same",
        "it",
        "its",
        "you",
    ]
)
_VOCABULARY = _MARKER_WORDS | _WEAK_MARKER_WORDS | _NOUNS | _FILLER


@dataclass(frozen=True)
class Placeholder:
    line: int  # 1-based line of the new text holding the marker
    text: str  # the line, stripped


def _strip_comment(line: str) -> tuple[str, bool]:
    """The line without its comment leader and closer, and whether it was a comment."""
    s = line.strip()
    for leader in _LEADERS:
        if s.startswith(leader):
            s = s[len(leader) :]
            for closer in _CLOSERS:
                s = s.removesuffix(closer)
            return s.strip(), True
    return s, False


def _unwrap(s: str) -> tuple[str, bool]:
    """Take off brackets and quotes around the whole text (repeatedly); whether any were there."""
    wrapped = False
    while len(s) >= 2 and _WRAPPERS.get(s[0]) == s[-1]:
        s = s[1:-1].strip()
        wrapped = True
    return s, wrapped


def marker_key(line: str) -> str | None:
    """A normalised form of ``line`` if it is an omission marker, else None (see the module docstring)."""
    body, is_comment = _strip_comment(line)
    body, wrapped = _unwrap(body)
    lowered = body.lower()
    ellipsis = _ELLIPSIS.search(lowered) is not None
    if not (is_comment or wrapped or ellipsis):
        return None
    # Only words, ellipses, and light punctuation may make up the body.
    rest = _WORD.sub(" ", _ELLIPSIS.sub(" ", lowered))
    if rest.strip(" \t.,:;!-–—()[]{}<>/*"):
        return None
    words = _WORD.findall(lowered)
    if not words or len(words) > _MAX_WORDS or any(w not in _VOCABULARY for w in words):
        return None
    strong = any(w in _MARKER_WORDS for w in words)
    with_ellipsis = ellipsis and (strong or any(w in _WEAK_MARKER_WORDS for w in words))
    with_noun = strong and any(w in _NOUNS for w in words)
    return " ".join(words) if with_ellipsis or with_noun else None


def _may_be_marker(line: str) -> bool:
    """False only for a line `marker_key` would not take: no comment leader or wrapper first, no ellipsis."""
    s = line.strip()
    return bool(s) and (s[0] in _MARKER_STARTS or "..." in s or "\u2026" in s)  # (`_ELLIPSIS`, as plain searches)


def find_marker(old_text: str, replaced: str, new: str) -> Placeholder | None:
    """The first omission marker of ``new`` that replaces code, or None.

    ``old_text``: the file before the change (its markers are not new ones); ``replaced``: the text the
    change takes out (``old_string``, or the whole old file for a write); ``new``: the text put in.
    """
    new_lines = new.splitlines()
    fresh: list[Placeholder] = []
    for number, line in enumerate(new_lines, start=1):
        if not _may_be_marker(line):
            continue
        key = marker_key(line)
        if key is not None:
            fresh.append(Placeholder(number, line.strip()))
    if not fresh:
        return None
    known = {k for k in map(marker_key, old_text.splitlines()) if k is not None}
    fresh = [p for p in fresh if marker_key(p.text) not in known]
    if not fresh:
        return None
    kept = {line.strip() for line in new_lines}
    lost = any(line.strip() and line.strip() not in kept for line in replaced.splitlines())
    return fresh[0] if lost else None


def check_placeholder(old_text: str, replaced: str, new: str, what: str = "new_string") -> None:
    """Raise PLACEHOLDER when ``new`` puts an omission marker where ``replaced`` had code (`find_marker`)."""
    found = find_marker(old_text, replaced, new)
    if found is None:
        return
    raise CoordinatorError(
        ErrorCode.PLACEHOLDER,
        f"{what} line {found.line} is an omission marker ({found.text[:80]!r}) where the file has code. "
        "This tool writes text literally, so the code that marker stands for would be deleted. Write the "
        "full text, with every line you mean to keep, instead of a placeholder. (If the line really belongs "
        "in the file, add it with an edit that removes no code.)",
        line=found.line,
        marker=found.text,
    )
