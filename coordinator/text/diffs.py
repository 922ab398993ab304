"""Unified diffs of two versions of a file, for people: the one renderer behind `history --diff` and the
dashboard's diff of a version. Pure: bytes in, text out."""

from __future__ import annotations

import difflib

from coordinator.errors import CoordinatorError
from coordinator.text.codecs import decode_bytes


def text_lines(data: bytes) -> list[str] | None:
    """The lines of `data` decoded as the engine decodes files (line ends kept); None when it is not text."""
    try:
        return decode_bytes(data).text.splitlines(keepends=True)
    except CoordinatorError:
        return None


def unified_diff(before: bytes, after: bytes, fromfile: str, tofile: str, context: int = 3) -> str | None:
    """The unified diff from `before` to `after` ("" when they are equal); a last line without its line end
    is marked as diff(1) does. None when either side is binary or undecodable."""
    a, b = text_lines(before), text_lines(after)
    if a is None or b is None:
        return None
    out: list[str] = []
    for line in difflib.unified_diff(a, b, fromfile=fromfile, tofile=tofile, n=context):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)
