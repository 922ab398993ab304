"""Provenance: which session wrote each line of a file, from the history (not guessed from times or commits).

Each line of the current file is given the write (session and version) that last put it there: the path's
writes are replayed oldest first, each one's line diff (pre-image to result) giving its new lines to it; lines
present before the first recorded write belong to ORIGIN, and lines changed between two writes (or after the
last) by something other than the coordinator to OUTSIDE.

Exported as Agent Trace records (`agent_trace`): a public, vendor-neutral JSON format for attributing code
ranges to the conversation (here: the session) that produced them, which is exactly this data; the ranges
are 1-based inclusive line ranges, one record per file.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.git.ledger import Ledger
from coordinator.text.rebase import line_diff

ORIGIN = "(before the history)"
OUTSIDE = "(outside the coordinator)"


@dataclass(frozen=True)
class Line:
    number: int  # 1-based
    session: str
    version: int  # 0 for ORIGIN and OUTSIDE
    text: str


Owner = tuple[str, int]  # (session, version)


def _lines(data: bytes | None) -> list[str]:
    if data is None:
        return []
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def _apply(owners: list[Owner], old: list[str], new: list[str], who: Owner) -> list[Owner]:
    out: list[Owner] = []
    pos = 0
    for h in line_diff(old, new):
        out.extend(owners[pos : h.a1])
        out.extend([who] * (h.b2 - h.b1))
        pos = h.a2
    out.extend(owners[pos:])
    return out


def blame_lines(root: str, key: str, content: bytes | None = None) -> list[Line]:
    """The owner of each line of `content` (default: the file as it is now) of path `key`."""
    ledger = Ledger(root)
    if content is None:
        try:
            content = Path(os.path.realpath(root), key).read_bytes()
        except OSError:
            content = b""
    entries = ledger.path_writes(key).entries
    text: list[str] = []
    owners: list[Owner] = []
    for i, e in enumerate(entries):
        before = _lines(ledger.load(key, e.before))
        if i == 0:
            text, owners = before, [(ORIGIN, 0)] * len(before)
        elif before != text:
            owners, text = _apply(owners, text, before, (OUTSIDE, 0)), before
        after = _lines(ledger.load(key, e.after))
        owners, text = _apply(owners, text, after, (e.session, e.version)), after
    final = _lines(content)
    if not entries:
        owners = [(ORIGIN, 0)] * len(final)
    elif final != text:
        owners = _apply(owners, text, final, (OUTSIDE, 0))
    return [Line(n + 1, s, v, t) for n, ((s, v), t) in enumerate(zip(owners, final, strict=True))]


def agent_trace(key: str, lines: list[Line]) -> dict[str, Any]:
    """One Agent Trace record for `key`: a conversation per session, its contiguous line ranges."""
    by_session: dict[str, list[dict[str, int]]] = {}
    for line in lines:
        ranges = by_session.setdefault(line.session, [])
        if ranges and ranges[-1]["end_line"] == line.number - 1 and ranges[-1].get("_v") == line.version:
            ranges[-1]["end_line"] = line.number
        else:
            ranges.append({"start_line": line.number, "end_line": line.number, "_v": line.version})
    conversations = []
    for session, ranges in by_session.items():
        kind = "unknown" if session in (ORIGIN, OUTSIDE) else "ai"
        conversations.append(
            {
                "url": f"edit-coordinator:session/{session}",
                "contributor": {"type": kind},
                "ranges": [{"start_line": r["start_line"], "end_line": r["end_line"]} for r in ranges],
                "related": [{"type": "version", "versions": sorted({r["_v"] for r in ranges})}],
            }
        )
    return {
        "version": "0.1.0",
        "id": str(uuid.uuid4()),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tool": {"name": "edit-coordinator"},
        "files": [{"path": key, "conversations": conversations}],
    }
