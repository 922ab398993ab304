"""Measure the placeholder rule's false positives on real code: ``python3 scripts/placeholder_scan.py``.

Two figures, on text nobody meant as a placeholder:

* lines: every line of the given source files (default: this package's sources and the standard-library
  files the ``markers`` / ``mixed`` stress workloads copy) run through `placeholders.marker_key`; each hit
  is printed, since each is a line a model could write on purpose.
* edits: every change of a git history (default: this repository's), one diff hunk at a time, checked as an
  edit would be (`placeholders.find_marker` with the file before, the hunk's old lines, its new lines);
  every refusal there is a false positive.
"""

from __future__ import annotations

import argparse
import difflib
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from coordinator.text import placeholders
from worker.agent import stdlib_sources

_PACKAGE = Path(__file__).resolve().parent.parent


def _default_files() -> list[Path]:
    own = [p for d in ("coordinator", "worker", "benchmarks", "tests") for p in sorted((_PACKAGE / d).rglob("*.py"))]
    return own + stdlib_sources(10_000, seed=0)


def scan_lines(files: Iterable[Path]) -> tuple[int, int, list[str]]:
    """(files, lines, hits as "path:line: text")."""
    n_files = n_lines = 0
    hits: list[str] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        n_files += 1
        for number, line in enumerate(text.splitlines(), start=1):
            n_lines += 1
            if placeholders.marker_key(line) is not None:
                hits.append(f"{path}:{number}: {line.strip()}")
    return n_files, n_lines, hits


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _changes(repo: Path) -> Iterator[tuple[str, str, str, str]]:
    """(commit:path, file before, old lines, new lines) for every hunk of every text file's change."""
    for commit in _git(repo, "rev-list", "--no-merges", "HEAD").split():
        parent = f"{commit}^"
        try:
            names = _git(repo, "diff", "--name-only", "--diff-filter=M", parent, commit).split("\n")
        except subprocess.CalledProcessError:
            continue  # the root commit
        for name in filter(None, names):
            try:
                before = _git(repo, "show", f"{parent}:{name}")
                after = _git(repo, "show", f"{commit}:{name}")
            except (subprocess.CalledProcessError, UnicodeDecodeError):
                continue
            a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
            matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
            for tag, i1, i2, j1, j2 in matcher.get_opcodes():
                if tag != "equal":
                    yield f"{commit[:8]}:{name}", before, "".join(a[i1:i2]), "".join(b[j1:j2])


def scan_history(repo: Path) -> tuple[int, list[str]]:
    """(hunks checked, refusals as "commit:path: marker")."""
    checked = 0
    refused: list[str] = []
    for where, before, old, new in _changes(repo):
        checked += 1
        found = placeholders.find_marker(before, old, new)
        if found is not None:
            refused.append(f"{where}: {found.text}")
    return checked, refused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="source files (default: package and stdlib corpus)")
    parser.add_argument("--repo", type=Path, default=_PACKAGE, help="git repository whose history is checked")
    args = parser.parse_args(argv)
    n_files, n_lines, hits = scan_lines(args.files or _default_files())
    print(f"lines: {len(hits)} of {n_lines} lines in {n_files} files look like omission markers")
    for hit in hits:
        print(f"  {hit}")
    checked, refused = scan_history(args.repo)
    print(f"edits: {len(refused)} of {checked} hunks of {args.repo}'s history would be refused as placeholders")
    for r in refused:
        print(f"  {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
