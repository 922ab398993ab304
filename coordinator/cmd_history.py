"""History, undo and a live view for people: `history`, `undo`, `gc`, `status`, `top`.

An adapter over the engine: it reads the history index and objects (history.py), and every change it makes
to a file goes through `Session.undo`, the check-then-write, under an operator session id (default
`operator:<user>`), so that each undo is recorded in the history and is itself undoable.

Decisions:
* `undo PATH` undoes the newest version of PATH. `--to N` makes the file what it was right after version N
  was written (it undoes N+1 and everything after it: the engine's `undo(version=N+1)`). `--before N`
  restores the content from just before version N (the engine's `undo(version=N)`); `--to 0` is "before
  any recorded write".
* `undo --session ID` undoes all of a session's writes, file by file, back to the content before its first
  write of each file. It is refused as a whole, and nothing is written, when any file has a later write by
  another session, was changed outside the coordinator since, or has lost the needed pre-image to gc:
  those later changes may build on the session's work, so a person must decide.
* Reading commands (`history`, `status`, `top`) never start the embedded Redis server; `undo` does (it
  needs the read state for the check-then-write).
* Conflicts by code are shown when the state store exposes `error_counts()`; the engine does not count
  them yet, and `status` says so. Leases are listed when this build has `coordinator.leases`.
* "Locks held now" is a probe: a shared, non-blocking flock on each lock file fails iff a writer holds it.
  Lock files and history index files are named by the same hash of the path, so the index names the path.
"""

from __future__ import annotations

import argparse
import difflib
import getpass
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import cmd_common, fsio
from .errors import CoordinatorError, ErrorCode
from .history import History, HistoryEntry, content_hash
from .layout import history_dir, state_dir_of
from .retention import (
    RetentionPolicy,
    collect,
    format_size,
    parse_size,
    settle,
)

REDIS_URL_ENV = "EDIT_COORDINATOR_REDIS_URL"
MAX_DIFF_LINES = 50_000  # beyond this, "lines changed" shows the changed range instead of a diff count

# ---------------------------------------------------------------------------------------------------------
# Common
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Repo:
    root: str
    state_dir: Path

    @property
    def has_state(self) -> bool:
        return history_dir(self.state_dir).is_dir()

    def history(self) -> History:
        return History(self.state_dir, fsync=True)


def open_repo(root: str) -> Repo:
    real = os.path.realpath(root)
    if not os.path.isdir(real):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"The root {real!r} is not a folder.")
    return Repo(real, state_dir_of(real))


def _add_common(p: argparse.ArgumentParser, redis: bool = False) -> None:
    cmd_common.add_common(p, redis=redis)


_fail = cmd_common.fail
_guarded = cmd_common.guarded


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _duration(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d"


def _ago(seconds: float) -> str:
    return f"{_duration(seconds)} ago"


def operator_id() -> str:
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    user = re.sub(r"[^A-Za-z0-9._-]", "_", user)[:60] or "unknown"
    return f"operator:{user}"


class ContentLookup:
    """The bytes of a file content by its hash: from the history store, or the file itself when its
    current content has that hash. None when neither has it (changed outside, or removed by gc)."""

    def __init__(self, repo: Repo, history: History) -> None:
        self.repo = repo
        self.history = history
        self._current: dict[str, tuple[str | None, bytes | None]] = {}

    def current(self, key: str) -> tuple[str | None, bytes | None]:
        """(hash, bytes) of the file now; (None, None) if it is missing or not a regular file."""
        if key not in self._current:
            self._current[key] = read_current(self.repo, key)
        return self._current[key]

    def get(self, key: str, digest: str | None) -> bytes | None:
        if digest is None:
            return b""
        try:
            return self.history.load(digest, key)
        except CoordinatorError:
            pass
        h, data = self.current(key)
        return data if h == digest else None


def read_current(repo: Repo, key: str) -> tuple[str | None, bytes | None]:
    """The file's hash and bytes as they are on disk now, read without locks or Redis."""
    try:
        rp = fsio.resolve(repo.root, key)
        dfd = fsio.open_parent(rp, repo.root)
    except CoordinatorError:
        return None, None
    try:
        found = fsio.read_at(dfd, rp, 1 << 40)
    except CoordinatorError:
        return None, None
    finally:
        os.close(dfd)
    if found is None:
        return None, None
    return content_hash(found[0]), found[0]


def _text_lines(data: bytes) -> list[str] | None:
    from .textio import decode_bytes

    try:
        return decode_bytes(data).text.splitlines(keepends=True)
    except CoordinatorError:
        return None


def lines_changed(before: bytes | None, after: bytes | None) -> tuple[int, int] | None:
    """(added, removed) lines between two contents; None if either is unknown or not text."""
    if before is None or after is None:
        return None
    a, b = _text_lines(before), _text_lines(after)
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


def _changed_text(row: dict[str, Any]) -> str:
    if row["after"] is None:
        return "file removed"
    if row["added"] is None:
        return f"lines {row['first_line']}-{row['last_line']}"
    text = f"+{row['added']} -{row['removed']}"
    if row["before"] is None:
        text += " (created)"
    return text


# ---------------------------------------------------------------------------------------------------------
# history
# ---------------------------------------------------------------------------------------------------------


def _add_history(sub: Any) -> None:
    p = sub.add_parser(
        "history",
        help="list the recorded versions of a file, or a session's writes",
        description=(
            "List the versions of PATH (newest first): version, time, session, operation, lines changed. "
            "--diff VERSION shows what that version changed; --session ID lists a session's writes across "
            "all files."
        ),
    )
    p.add_argument("path", nargs="?", help="file path (relative to the root, or absolute inside it)")
    p.add_argument("--diff", type=int, metavar="VERSION", help="show the unified diff of VERSION")
    p.add_argument("--session", metavar="ID", help="list this session's writes across files")
    p.add_argument("--limit", type=int, default=50, help="show at most this many versions (default 50)")
    p.add_argument("--context", type=int, default=3, help="lines of context in --diff (default 3)")
    _add_common(p)
    p.set_defaults(func=_guarded(cmd_history))


def cmd_history(args: argparse.Namespace) -> int:
    repo = open_repo(args.root)
    if args.session:
        if args.path or args.diff is not None:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give either PATH or --session ID, not both.")
        return _session_history(repo, args.session, args)
    if not args.path:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give a PATH, or --session ID.")
    key = fsio.resolve(repo.root, args.path).key
    entries = repo.history().entries(key) if repo.has_state else []
    if entries and settle(repo.state_dir, key, repo.root):  # list only versions that reached the file
        entries = repo.history().entries(key)
    if args.diff is not None:
        return _show_diff(repo, key, entries, args.diff, args)
    if not entries:
        if args.json:
            print(json.dumps({"path": key, "versions": []}))
        else:
            print(f"No recorded writes of {key}.")
        return 0
    lookup = ContentLookup(repo, repo.history())
    shown = entries[: max(args.limit, 1)]
    rows = [_entry_row(e, lookup) for e in shown]
    if args.json:
        print(json.dumps({"path": key, "versions": rows, "total": len(entries)}, indent=2))
        return 0
    from rich.table import Table

    table = Table(title=f"History of {key}", title_justify="left")
    for col in ("Version", "Time", "Session", "Operation", "Lines changed"):
        table.add_column(col, justify="right" if col == "Version" else "left", no_wrap=col != "Session")
    for row in rows:
        table.add_row(str(row["version"]), _when(row["time"]), row["session"], row["operation"], _changed_text(row))
    console = _console()
    console.print(table)
    if len(entries) > len(shown):
        console.print(f"({len(entries) - len(shown)} older versions not shown; use --limit.)")
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
    a, b = _text_lines(before), _text_lines(after)
    if a is None or b is None:
        return f"Binary or undecodable content; version {entry.version} changed {key} " + (
            f"from {len(before)} to {len(after)} bytes.\n"
        )
    who = f"version {entry.version}: {entry.operation} by {entry.session}, {_when(entry.time)}"
    out: list[str] = []
    for line in difflib.unified_diff(
        a, b, fromfile=f"a/{key} (before version {entry.version})", tofile=f"b/{key} ({who})", n=context
    ):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _show_diff(repo: Repo, key: str, entries: list[HistoryEntry], version: int, args: Any) -> int:
    entry = next((e for e in entries if e.version == version), None)
    if entry is None:
        known = ", ".join(str(e.version) for e in entries[:10]) or "none"
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"{key} has no version {version} (newest versions: {known})."
        )
    text = diff_text(repo, key, entry, context=args.context)
    if args.json:
        print(json.dumps({"path": key, "version": version, "diff": text}))
        return 0
    console = _console()
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
        print(json.dumps({"session": session, "writes": rows}, indent=2))
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
        table.add_row(_when(row["time"]), row["path"], str(row["version"]), row["operation"], _changed_text(row))
    _console().print(table)
    return 0


# ---------------------------------------------------------------------------------------------------------
# undo
# ---------------------------------------------------------------------------------------------------------


def _add_undo(sub: Any) -> None:
    p = sub.add_parser(
        "undo",
        help="undo writes to a file, or all of a session's writes",
        description=(
            "Undo through the check-then-write, as an operator session: the undo is recorded in the history "
            "and can itself be undone. `undo PATH` undoes the newest version; --to N makes the file what it "
            "was right after version N; --before N restores the content from just before version N. "
            "`undo --session ID` undoes all of a session's writes, and is refused (nothing written) when "
            "later writes by others may build on them."
        ),
    )
    p.add_argument("path", nargs="?", help="file path (relative to the root, or absolute inside it)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--to", type=int, metavar="VERSION", help="back to the content right after VERSION")
    target.add_argument("--before", type=int, metavar="VERSION", help="back to the content before VERSION")
    p.add_argument("--session", metavar="ID", help="undo all writes of this session")
    p.add_argument("--dry-run", action="store_true", help="with --session: show the plan, write nothing")
    p.add_argument("--as", dest="operator", default=None, help="the operator session id (default operator:<user>)")
    _add_common(p, redis=True)
    p.set_defaults(func=_guarded(cmd_undo))


def _coordinator(repo: Repo, redis_url: str | None) -> Any:
    from .engine import Coordinator

    return Coordinator(repo.root, redis_url or os.environ.get(REDIS_URL_ENV) or None)


def cmd_undo(args: argparse.Namespace) -> int:
    repo = open_repo(args.root)
    if args.session:
        if args.path or args.to is not None or args.before is not None:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT, "--session undoes whole files: give no PATH, --to or --before."
            )
        return _undo_session(repo, args)
    if not args.path:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give a PATH, or --session ID.")
    if args.dry_run:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "--dry-run goes with --session.")
    result = undo_file(
        repo, args.path, to=args.to, before=args.before, operator=args.operator, redis_url=args.redis_url
    )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(result["message"])
        for note in result["notes"]:
            print(f"Note: {note}")
    return 0


def undo_file(
    repo: Repo,
    path: str,
    *,
    to: int | None = None,
    before: int | None = None,
    operator: str | None = None,
    redis_url: str | None = None,
) -> dict[str, Any]:
    """Undo writes to one file (see `undo --help`). Returns the engine's result plus notes."""
    key = fsio.resolve(repo.root, path).key
    entries = repo.history().entries(key) if repo.has_state else []
    if not entries:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{key} has no recorded writes to undo.")
    newest, oldest = entries[0], entries[-1]
    notes: list[str] = []
    if before is not None:
        target = before
    elif to is not None:
        if to >= newest.version:
            raise CoordinatorError(
                ErrorCode.NO_CHANGE,
                f"Version {to} is not older than the newest version of {key} ({newest.version}): nothing to undo.",
            )
        if to < oldest.version - 1:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                f"Version {to} of {key} is no longer in the history (the oldest kept is {oldest.version}); "
                f"the furthest back is --to {oldest.version - 1}.",
            )
        after_to = [e for e in entries if e.version > to]
        target = after_to[-1].version
        base = next((e for e in entries if e.version == to), None)
        first_after = after_to[-1]
        if base is not None and base.after != first_after.before:
            notes.append(
                f"{key} was changed outside the coordinator between versions {to} and {target}; it is "
                f"restored as version {target}'s writer found it."
            )
    else:
        target = newest.version
    if not any(e.version == target for e in entries):
        known = ", ".join(str(e.version) for e in entries[:10])
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{key} has no version {target} (newest versions: {known}).")
    with _coordinator(repo, redis_url) as coord:
        op = coord.session(operator or operator_id())
        current = _operator_read(op, key)
        # From this read on, the engine's undo refuses (stale) if the file changes; a write that came in
        # before it must not be discarded unseen either.
        latest = repo.history().entries(key)[0]
        if latest.version != newest.version:
            raise CoordinatorError(
                ErrorCode.STALE,
                f"{key} was written again (now version {latest.version}, by {latest.session}) while the undo "
                "was being prepared; nothing was undone. Look at `edit-coordinator history` and try again.",
            )
        if current != newest.after:
            notes.append(
                f"{key} had been changed outside the coordinator since version {newest.version}; that content "
                "is kept in the history as the pre-image of this undo (undo the undo to get it back)."
            )
        res = op.restore(key, before_version=target, operation="undo")
    return {
        "path": res.path,
        "undone_from_version": target,
        "version": res.version,
        "session": op.id,
        "message": res.message,
        "notes": notes,
    }


def _operator_read(op: Any, key: str) -> str | None:
    """Give the operator session a current view of the file (one line is enough: a read records the hash
    of the whole file). Returns that hash; None if the file does not exist."""
    try:
        return str(op.read(key, offset=1, limit=1).hash)
    except CoordinatorError as exc:
        if exc.code == ErrorCode.FILE_NOT_FOUND:
            return None
        raise


@dataclass
class FileUndoPlan:
    """How one file's share of a session's work would be undone."""

    path: str
    first_version: int  # the session's first write of the file: undo(version=first_version)
    newest_version: int
    session_versions: list[int]
    blockers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    already_undone: bool = False


def plan_session_undo(repo: Repo, session: str) -> list[FileUndoPlan]:
    """For each file the session wrote: what undoing its work means, and what stands in the way.

    Blockers (any one refuses the whole undo): a later write by another session (it may build on this
    session's work), a change made outside the coordinator since the newest recorded write, or a pre-image
    that gc has removed.
    """
    if not repo.has_state:
        return []
    history = repo.history()
    plans: list[FileUndoPlan] = []
    for ix in history.scan():
        mine = [e for e in ix.entries if e.session == session]
        if not mine or ix.key is None:
            continue
        first, newest = mine[0], ix.entries[-1]
        p = FileUndoPlan(ix.key, first.version, newest.version, [e.version for e in mine])
        for e in ix.entries:
            if e.version > first.version and e.session != session:
                p.blockers.append(
                    f"version {e.version} ({e.operation} by {e.session}, {_when(e.time)}) came after "
                    f"{session}'s version {first.version} and may build on it"
                )
        current, _ = read_current(repo, ix.key)
        if current == first.before:
            p.already_undone = True
            p.blockers.clear()
        elif current != newest.after:
            p.blockers.append(f"the file was changed outside the coordinator after version {newest.version}")
        if first.before is not None and not history.has(first.before, ix.key) and not p.already_undone:
            p.blockers.append(f"its content before version {first.version} was removed from the history by gc")
        if ix.entries[0].version > 1 and first is ix.entries[0]:
            p.notes.append(
                f"the history of {ix.key} starts at version {first.version} (older entries were dropped by gc): "
                f"writes by {session} before it, if any, are not undone"
            )
        plans.append(p)
    plans.sort(key=lambda p: p.path)
    return plans


def _undo_session(repo: Repo, args: Any) -> int:
    session = args.session
    plans = plan_session_undo(repo, session)
    out: dict[str, Any] = {"session": session, "files": [asdict(p) for p in plans], "undone": []}
    if not plans:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"Session {session} has no recorded writes.")
    blocked = [p for p in plans if p.blockers]
    todo = [p for p in plans if not p.blockers and not p.already_undone]
    if blocked:
        return _refuse_session_undo(session, blocked, out, args.json)
    if args.dry_run or not todo:
        return _show_session_plan(session, plans, todo, out, args.json)
    failures: list[str] = []
    with _coordinator(repo, args.redis_url) as coord:
        op = coord.session(args.operator or operator_id())
        for p in todo:
            try:
                out["undone"].append(_undo_one_of_session(repo, op, session, p))
            except CoordinatorError as exc:
                failures.append(f"{p.path}: [{exc.code.value}] {exc.message}")
                break
    return _report_session_undo(todo, out, failures, args.json)


def _refuse_session_undo(session: str, blocked: list[FileUndoPlan], out: dict[str, Any], as_json: bool) -> int:
    lines = [
        f"Refused: undoing session {session} would discard changes that may build on its work. Nothing was written."
    ]
    for p in blocked:
        lines.append(f"  {p.path}:")
        lines.extend(f"    - {b}" for b in p.blockers)
    lines.append(
        "Undo those files one at a time with `edit-coordinator undo PATH --to VERSION` after looking at "
        "`edit-coordinator history PATH`."
    )
    if as_json:
        out["refused"] = True
        print(json.dumps(out, indent=2))
    else:
        print("\n".join(lines), file=sys.stderr)
    return 1


def _show_session_plan(
    session: str, plans: list[FileUndoPlan], todo: list[FileUndoPlan], out: dict[str, Any], as_json: bool
) -> int:
    if as_json:
        print(json.dumps(out, indent=2))
        return 0
    for p in plans:
        state = "already undone" if p.already_undone else f"back to before version {p.first_version}"
        print(f"{p.path}: versions {', '.join(map(str, p.session_versions))} -> {state}")
        for note in p.notes:
            print(f"  Note: {note}")
    if not todo:
        print(f"Nothing to undo: session {session}'s writes are already undone.")
    return 0


def _report_session_undo(todo: list[FileUndoPlan], out: dict[str, Any], failures: list[str], as_json: bool) -> int:
    if as_json:
        out["failures"] = failures
        print(json.dumps(out, indent=2))
    else:
        for u in out["undone"]:
            print(u["message"])
        for p in todo:
            for note in p.notes:
                print(f"Note: {note}")
    if not failures:
        return 0
    done = ", ".join(u["path"] for u in out["undone"]) or "none"
    print(
        "Stopped: " + "; ".join(failures) + f"\nAlready undone in this run: {done}. Those undos are "
        "recorded and can be undone with `edit-coordinator undo PATH`; run the session undo again to "
        "finish once the files are quiet.",
        file=sys.stderr,
    )
    return 1


def _undo_one_of_session(repo: Repo, op: Any, session: str, p: FileUndoPlan) -> dict[str, Any]:
    """Read, check again, undo. The read records the hash H the checks are made against; the engine's
    undo then refuses (stale) if the file is no longer H, so nothing written after the checks is lost."""
    current = _operator_read(op, p.path)
    entries = repo.history().entries(p.path)  # newest first
    newest = entries[0]
    if newest.version != p.newest_version or any(e.version > p.first_version and e.session != session for e in entries):
        raise CoordinatorError(
            ErrorCode.STALE,
            f"{p.path} was written again (now version {newest.version}) while the undo was being prepared.",
        )
    if current != newest.after:
        raise CoordinatorError(
            ErrorCode.STALE, f"{p.path} was changed outside the coordinator while the undo was being prepared."
        )
    res = op.restore(p.path, before_version=p.first_version, operation="undo")
    return {"path": res.path, "version": res.version, "message": res.message}


# ---------------------------------------------------------------------------------------------------------
# gc
# ---------------------------------------------------------------------------------------------------------


def _add_gc(sub: Any) -> None:
    p = sub.add_parser(
        "gc",
        help="apply the history retention policy (versions per file, total bytes)",
        description=(
            "Drop the oldest history entries beyond the retention caps and delete the stored contents no "
            "kept entry refers to. The newest version of every file is always kept. The policy is read "
            "from <root>/.edit-coordinator/retention.json; flags override it (--save stores them)."
        ),
    )
    p.add_argument("--keep-versions", type=int, default=None, help="versions to keep per file")
    p.add_argument("--max-bytes", default=None, help="total size of stored contents, e.g. 500M or 2G")
    p.add_argument("--save", action="store_true", help="store the given caps as this repository's policy")
    p.add_argument("--dry-run", action="store_true", help="show what would be removed, change nothing")
    _add_common(p)
    p.set_defaults(func=_guarded(cmd_gc))


def cmd_gc(args: argparse.Namespace) -> int:
    repo = open_repo(args.root)
    if not repo.has_state:
        print("No history here: nothing to collect.")
        return 0
    policy = RetentionPolicy.load(repo.state_dir)
    policy = RetentionPolicy(
        max_versions_per_file=args.keep_versions if args.keep_versions is not None else policy.max_versions_per_file,
        max_total_bytes=parse_size(args.max_bytes) if args.max_bytes is not None else policy.max_total_bytes,
    )
    if args.save:
        policy.save(repo.state_dir)
    report = collect(repo.state_dir, policy, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    verb = "Would drop" if report.dry_run else "Dropped"
    print(
        f"{verb} {report.entries_dropped} of {report.entries_total} history entries"
        + ("" if report.dry_run else f" (in {report.files_rewritten} files)")
        + f"; {'would remove' if report.dry_run else 'removed'} {report.objects_removed} of "
        f"{report.objects_total} stored contents ({format_size(report.bytes_removed)})."
    )
    print(
        f"Kept: {format_size(report.bytes_after)} (cap {format_size(policy.max_total_bytes)}, "
        f"at most {policy.max_versions_per_file} version{'s' if policy.max_versions_per_file != 1 else ''} "
        "per file)."
    )
    for note in report.notes:
        print(f"Note: {note}")
    return 0


# ---------------------------------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _add_history(subparsers)
    _add_undo(subparsers)
    _add_gc(subparsers)
    from .cmd_status import add_status

    add_status(subparsers)
