"""`edit-coordinator history`: the recorded versions of a file, what one of them changed, or a session's
writes across files. It only reads: the history (coordinator/history) and the files, never Redis, so it
never starts the embedded server. A listing first settles the path's newest entry (retention.settle), so
it shows only versions that reached the file.

`--json` speaks the HTTP service's names (`POST /v1/history`, in its OpenAPI document): `{path, entries:
[...]}`, each entry with the fields of `HistoryEntry`; the command adds `total` (entries recorded) and, per
entry, `added` / `removed` (lines). `--session ID` gives `{session, entries}`.

With `--server URL --token T` (any token, a session token included) a listing comes from a remote `serve`
through `HttpClient` (`Client.history`, the same call a local client makes), shown by the same code in the
same columns; "lines changed" is counted from the service's diff of each version (the admin or a viewer
token; with a session token, which may not ask for diffs, each version's recorded range is shown).
`--diff` and `--session` read the history files and need the file host.

"Lines changed" is a line diff of a version's pre-image and result, when both are still known (the history
keeps them until gc; the file itself serves for its current content) and text; past `MAX_DIFF_LINES` lines,
or for contents no longer known, the changed range recorded with the entry is shown instead.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator.cli.repo import ContentLookup, Repo, find_version, open_repo, rich_console, when
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.history import HistoryEntry
from coordinator.text.diffs import text_lines, unified_diff

MAX_DIFF_LINES = 50_000  # beyond this, "lines changed" shows the changed range instead of a diff count


def lines_changed(before: bytes | None, after: bytes | None) -> tuple[int, int] | None:
    """(added, removed) lines between two contents; None if either is unknown or not text."""
    if before is None or after is None:
        return None
    a, b = text_lines(before), text_lines(after)
    if a is None or b is None or len(a) + len(b) > MAX_DIFF_LINES:
        return None
    added = removed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


def _entry_row(e: HistoryEntry, lookup: ContentLookup) -> dict[str, Any]:
    changed = lines_changed(lookup.get(e.path, e.before), lookup.get(e.path, e.after))
    row = e.to_dict()
    row["added"], row["removed"] = changed if changed else (None, None)
    return row


def changed_text(e: HistoryEntry, lookup: ContentLookup) -> str:
    """What a version changed, in the words of `history`'s column (+added -removed, or the range)."""
    return _changed_text(_entry_row(e, lookup))


def _changed_text(row: dict[str, Any]) -> str:
    if row["after"] is None:
        return "file removed"
    if row["added"] is None:
        return f"lines {row['first_line']}-{row['last_line']}"
    text = f"+{row['added']} -{row['removed']}"
    if row["before"] is None:
        text += " (created)"
    return text


def register(sub: Any) -> None:
    p = sub.add_parser(
        "history",
        help="list the recorded versions of a file, or a session's writes",
        description=(
            "List the versions of PATH (newest first): version, time, session, operation, lines changed. "
            "--diff VERSION shows what that version changed; --session ID lists a session's writes across "
            "all files."
        ),
    )
    p.add_argument("path", nargs="?", metavar="PATH", help=cmd_common.PATH_HELP)
    p.add_argument("--diff", type=int, metavar="VERSION", help="show the unified diff of VERSION")
    p.add_argument("--session", metavar="ID", help="list this session's writes across files")
    p.add_argument("--limit", type=int, default=50, help="show at most this many versions (default 50)")
    p.add_argument("--context", type=int, default=3, help="lines of context in --diff (default 3)")
    cmd_common.add_common(p, redis=False)
    from coordinator.client import operations as ops

    cmd_common.add_server(p, cmd_common.tokens_of(ops.History))
    p.set_defaults(func=cmd_common.guarded(cmd_history))


def cmd_history(args: argparse.Namespace) -> int:
    if args.server:
        return _remote_history(args)
    repo = open_repo(args.root)
    if args.session:
        if args.path or args.diff is not None:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give either PATH or --session ID, not both.")
        return _session_history(repo, args.session, args)
    if not args.path:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give a PATH, or --session ID.")
    key = cmd_common.path_key(repo.root, args.path)
    entries = repo.entries(key, settled=True)  # list only versions that reached the file
    if not entries and not cmd_common.exists_in_root(repo.root, key):
        raise cmd_common.no_such_path(key)
    if args.diff is not None:
        return _show_diff(repo, key, entries, args.diff, args)
    if not entries:
        if args.json:
            print(json.dumps({"path": key, "entries": [], "total": 0}))
        else:
            print(f"No recorded writes of {key}.")
        return 0
    lookup = ContentLookup(repo, repo.history())
    shown = entries[: max(args.limit, 1)]
    return _print_listing(key, [_entry_row(e, lookup) for e in shown], len(entries), args)


def _remote_history(args: argparse.Namespace) -> int:
    """A listing from a remote `serve` (see the module docstring): `Client.history` over HTTP."""
    if args.session or args.diff is not None:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "--session and --diff read the history files, so they run on the file host only; with --server, "
            "give a PATH alone to list its versions.",
        )
    if not args.path:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give a PATH to list its versions.")
    client = cmd_common.open_client(args)
    try:
        entries = client.history(args.path, max(args.limit, 1))
        rows = [_remote_row(client, e) for e in entries]
    finally:
        client.close()
    key = entries[0].path if entries else args.path
    if not entries and not args.json:
        print(f"No recorded writes of {key}.")
        return 0
    return _print_listing(key, rows, len(rows), args)


def _remote_row(client: Any, e: HistoryEntry) -> dict[str, Any]:
    """A listing row of a remote entry, with its lines added and removed counted from the service's diff of
    the version (POST /v1/dashboard/diff), as a local listing counts them; the recorded range when the
    service cannot give the diff (a session token, a content no longer kept)."""
    row = {**e.to_dict(), "added": None, "removed": None}
    try:
        found = client.version_diff(e.path, e.version, context=0)
    except CoordinatorError:
        return row
    diff = found.get("diff")
    if isinstance(diff, str) and not found.get("truncated"):
        lines = [ln for ln in diff.splitlines() if not ln.startswith(("+++", "---", "@@"))]
        row["added"] = sum(1 for ln in lines if ln.startswith("+"))
        row["removed"] = sum(1 for ln in lines if ln.startswith("-"))
    return row


def _print_listing(key: str, rows: list[dict[str, Any]], total: int, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps({"path": key, "entries": rows, "total": total}, indent=2))
        return 0
    from rich.table import Table

    table = Table(title=f"History of {key}", title_justify="left")
    for col in ("Version", "Time", "Session", "Operation", "Lines changed"):
        table.add_column(col, justify="right" if col == "Version" else "left", no_wrap=col != "Session")
    for row in rows:
        table.add_row(str(row["version"]), when(row["time"]), row["session"], row["operation"], _changed_text(row))
    console = rich_console()
    console.print(table)
    if total > len(rows):
        console.print(f"({total - len(rows)} older versions not shown; use --limit.)")
    return 0


def diff_text(repo: Repo, key: str, entry: HistoryEntry, context: int = 3) -> str:
    """The unified diff of `entry` against its pre-image."""
    lookup = ContentLookup(repo, repo.history())
    before = lookup.get(key, entry.before)
    after = lookup.get(key, entry.after)
    if before is None:
        raise CoordinatorError(
            ErrorCode.FILE_NOT_FOUND,
            f"The content before version {entry.version} of {key} is no longer in the history (removed by gc).",
        )
    if after is None:
        raise CoordinatorError(
            ErrorCode.FILE_NOT_FOUND,
            f"The content written by version {entry.version} of {key} is no longer available: the file was "
            "changed outside the coordinator before a later write kept it, or gc removed it.",
        )
    who = f"version {entry.version}: {entry.operation} by {entry.session}, {when(entry.time)}"
    text = unified_diff(before, after, f"a/{key} (before version {entry.version})", f"b/{key} ({who})", context=context)
    if text is None:
        return f"Binary or undecodable content; version {entry.version} changed {key} " + (
            f"from {len(before)} to {len(after)} bytes.\n"
        )
    return text


def _show_diff(repo: Repo, key: str, entries: list[HistoryEntry], version: int, args: Any) -> int:
    text = diff_text(repo, key, find_version(entries, key, version), context=args.context)
    if args.json:
        print(json.dumps({"path": key, "version": version, "diff": text}))
        return 0
    console = rich_console()
    if console.is_terminal and text:
        from rich.syntax import Syntax

        console.print(Syntax(text, "diff", theme="ansi_dark", background_color="default"))
    else:
        sys.stdout.write(text if text else f"Version {version} of {key} left the content unchanged.\n")
    return 0


def session_entries(repo: Repo, session: str) -> list[HistoryEntry]:
    """Every recorded write of `session`, in time order, across all files (scans the index files)."""
    if not repo.has_state:
        return []
    found = [e for ix in repo.history().scan() for e in ix.entries if e.session == session]
    found.sort(key=lambda e: (e.time, e.path, e.version))
    return found


def _session_history(repo: Repo, session: str, args: Any) -> int:
    entries = session_entries(repo, session)
    lookup = ContentLookup(repo, repo.history()) if repo.has_state else None
    rows = [_entry_row(e, lookup) for e in entries] if lookup else []
    if args.json:
        print(json.dumps({"session": session, "entries": rows}, indent=2))
        return 0
    if not rows:
        print(f"No recorded writes by session {session}.")
        return 0
    from rich.table import Table

    files = len({r["path"] for r in rows})
    table = Table(
        title=f"Writes by session {session}: {len(rows)} in {files} file{'s' if files != 1 else ''}",
        title_justify="left",
    )
    for col in ("Time", "Path", "Version", "Operation", "Lines changed"):
        table.add_column(col, justify="right" if col == "Version" else "left")
    for row in rows:
        table.add_row(when(row["time"]), row["path"], str(row["version"]), row["operation"], _changed_text(row))
    rich_console().print(table)
    return 0
