"""After a fault run: does every file's history list only versions that happened, and does undo of the
newest version of every file work?

    edit-coordinator stress --chaos kill,redis --duration 180 --keep      # prints the scratch folder
    python3 scripts/check_history.py SCRATCH_FOLDER [--redis-url URL]

For each file under the root (and each path with history whose file is gone), newest first:
- the chain: version N's `after` must be version N+1's `before` and the newest `after` must be the file's
  bytes now. A stress run has no writer outside the coordinator, so a break means an entry for a version
  that never reached the file (counted as "never happened");
- undo of the newest version, by a session of its own (read, then `undo(path, version=newest)`): the file
  must then hold exactly the newest entry's `before` bytes (or be gone, when that version created it).
Prints the figures; exits 1 when an entry never happened or an undo failed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

from coordinator import Coordinator, CoordinatorError
from coordinator.disk.layout import STATE_DIR_NAME
from coordinator.history import HistoryEntry
from coordinator.history._format import content_hash
from coordinator.state.embedded import stop_embedded_redis


def files_of(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        if STATE_DIR_NAME in dirnames:
            dirnames.remove(STATE_DIR_NAME)
        out += [os.path.relpath(os.path.join(dirpath, n), root) for n in filenames]
    return sorted(out)


def digest_now(root: Path, rel: str) -> str | None:
    try:
        return content_hash((root / rel).read_bytes())
    except FileNotFoundError:
        return None


def chain_breaks(entries: list[HistoryEntry], now: str | None) -> list[int]:
    """Versions whose `after` is not what the next version found (or, for the newest, what is there now)."""
    breaks = []
    oldest_first = list(reversed(entries))
    for older, newer in itertools.pairwise(oldest_first):
        if older.after != newer.before:
            breaks.append(older.version)
    if oldest_first and oldest_first[-1].after != now:
        breaks.append(oldest_first[-1].version)
    return breaks


def undo_newest(coord: Coordinator, root: Path, rel: str, newest: HistoryEntry) -> str | None:
    """None when the undo of `newest` left exactly its `before` bytes; else what went wrong."""
    s = coord.session("history-check")
    try:
        if (root / rel).exists():
            s.read(rel, offset=1, limit=1)
        s.undo(rel, version=newest.version)
    except CoordinatorError as exc:
        return f"{exc.code.value}: {exc.message}"
    got = digest_now(root, rel)
    return None if got == newest.before else f"after undo the file is {got}, expected {newest.before}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path)
    ap.add_argument("--redis-url", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    figures = {"files": 0, "entries": 0, "never_happened": 0, "undo_ok": 0, "undo_failed": 0}
    problems: list[str] = []
    with Coordinator(root, redis_url=args.redis_url, durability="fsync") as coord:
        for rel in files_of(root):
            entries = coord.history(rel)
            if not entries:
                continue
            figures["files"] += 1
            figures["entries"] += len(entries)
            breaks = chain_breaks(entries, digest_now(root, rel))
            figures["never_happened"] += len(breaks)
            problems += [f"{rel}: version {v} never reached the file" for v in breaks]
            failed = undo_newest(coord, root, rel, entries[0])
            if failed is None:
                figures["undo_ok"] += 1
            else:
                figures["undo_failed"] += 1
                problems.append(f"{rel}: undo of version {entries[0].version}: {failed}")
    if args.redis_url is None:
        stop_embedded_redis(root / STATE_DIR_NAME)  # started above for the check; the run had stopped its own
    if args.json:
        print(json.dumps({**figures, "problems": problems}))
    else:
        for k, v in figures.items():
            print(f"{k:16} {v}")
        for p in problems[:50]:
            print("  " + p)
    return 1 if figures["never_happened"] or figures["undo_failed"] or not figures["files"] else 0


if __name__ == "__main__":
    sys.exit(main())
