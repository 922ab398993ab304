"""`edit-coordinator undo` and `redo`: revert a write to a file, or all of a session's writes, and bring an
undo's change back, for people.

Every change it makes to a file goes through the engine's check-then-write (`Session.undo` / `redo`; a
session's undo, whose plan admits no later writes by others, puts each file back to its pre-image with
`Session.restore`, recorded as operation "undo"), under an operator session id (default
`operator:<user>`), so that each undo is recorded in the history and is itself undoable. Unlike the
reading commands, it starts the embedded Redis server if none runs (the check-then-write needs the read
state).

Decisions:
* `undo` means what it means on every way in (library, HTTP, MCP): revert one write's *change* and keep
  everything written since (`Session.undo`); a later write that overlaps it makes the undo `stale`, nothing
  written. `undo PATH` reverts the newest write of PATH still in effect that is not itself an undo (so
  repeated undos step back, as the library's do); `--version N` reverts version N, whoever wrote it (an
  undo of an undo is recorded as a redo). `--dry-run` says which write it would revert and what it keeps.
  Putting a whole file back as it was at a version, discarding later versions, is `restore PATH --to N`
  (cli/restore.py); `undo --to / --before` refer there.
* `undo --session ID` undoes all of a session's writes, file by file, back to the content before its first
  write of each file. It is refused as a whole, and nothing is written, when any file has a later write by
  another session, was changed outside the coordinator since, or has lost the needed pre-image to gc:
  those later changes may build on the session's work, so a person must decide.
* `redo PATH` brings back the change that the operator session's newest undo of PATH took away (the
  engine's `redo`, recorded as operation "redo"): `--as ID` redoes the undo of another session. Writes by
  others since that undo are kept (the change is carried over them, as an undo of a version is); it is
  refused (no_change) when that session has no undo of PATH in effect, or has written PATH since.
* Nothing written meanwhile is discarded unseen: the operator session reads the file, the checks are made
  again against what it read, and the engine refuses (stale) if the file changed after that read.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator.cli.repo import Repo, open_repo, operator_id, read_current, when
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.history import HistoryEntry
from coordinator.text import undoing


def register(sub: Any) -> None:
    p = sub.add_parser(
        "undo",
        help="undo writes to a file, or all of a session's writes",
        description=(
            "Revert one write's change, keeping everything written since, through the check-then-write as an "
            "operator session: the undo is recorded in the history and can itself be undone (redo). "
            "`undo PATH` reverts the newest write not undone yet; --version N reverts version N. "
            "`undo --session ID` undoes all of a session's writes, and is refused (nothing written) when "
            "later writes by others may build on them. To put a whole file back as it was at a version, "
            "discarding later versions, use `restore PATH --to N`."
        ),
    )
    p.add_argument("path", nargs="?", metavar="PATH", help=cmd_common.PATH_HELP)
    p.add_argument("--version", type=int, metavar="N", help="revert version N (default: the newest not undone)")
    for moved in ("--to", "--before"):  # whole-file restores: `restore PATH --to N` (told so when given)
        p.add_argument(moved, type=int, dest=moved[2:], help=argparse.SUPPRESS)
    p.add_argument("--session", metavar="ID", help="undo all writes of this session")
    p.add_argument("--dry-run", action="store_true", help="show what would be undone; write nothing")
    p.add_argument("--as", dest="operator", default=None, help="the operator session id (default operator:<user>)")
    cmd_common.add_common(p)
    p.set_defaults(func=cmd_common.guarded(cmd_undo))

    r = sub.add_parser(
        "redo",
        help="bring back the change of the newest undo of a file",
        description=(
            "Redo through the check-then-write: bring back the change that the operator session's newest "
            "undo of PATH took away (--as ID: that session's undo), keeping what others wrote since. "
            "Recorded in the history as a redo, and itself undoable."
        ),
    )
    r.add_argument("path", metavar="PATH", help=cmd_common.PATH_HELP)
    r.add_argument(
        "--as", dest="operator", default=None, help="the session whose undo is redone (default operator:<user>)"
    )
    cmd_common.add_common(r)
    r.set_defaults(func=cmd_common.guarded(cmd_redo))


def _coordinator(repo: Repo, redis_url: str | None) -> Any:
    from coordinator.engine import Coordinator

    return Coordinator(repo.root, redis_url)  # None: $EDIT_COORDINATOR_REDIS_URL, else the embedded server


def cmd_undo(args: argparse.Namespace) -> int:
    repo = open_repo(args.root)
    if args.to is not None or args.before is not None:
        flag = f"--to {args.to}" if args.to is not None else f"--before {args.before}"
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"undo reverts one write's change and keeps later writes; putting the whole file back is "
            f"`edit-coordinator restore {args.path or 'PATH'} {flag}` (add --dry-run to see what it discards), "
            "or revert one version with `undo PATH --version N`.",
        )
    if args.session:
        if args.path or args.version is not None:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT, "--session undoes whole files: give no PATH or --version."
            )
        return _undo_session(repo, args)
    if not args.path:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give a PATH, or --session ID.")
    result = undo_file(
        repo, args.path, version=args.version, operator=args.operator, redis_url=args.redis_url, dry_run=args.dry_run
    )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(result["message"])
    return 0


def cmd_redo(args: argparse.Namespace) -> int:
    result = redo_file(open_repo(args.root), args.path, operator=args.operator, redis_url=args.redis_url)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(result["message"])
    return 0


def redo_file(repo: Repo, path: str, *, operator: str | None = None, redis_url: str | None = None) -> dict[str, Any]:
    """Redo the newest undo of one file by `operator` (see `redo --help`). Returns the engine's result."""
    key = cmd_common.path_key(repo.root, path)
    if not repo.entries(key) and not cmd_common.exists_in_root(repo.root, key):
        raise cmd_common.no_such_path(key, "has no recorded history to redo")
    with _coordinator(repo, redis_url) as coord:
        op = coord.session(operator or operator_id())
        _operator_read(op, key)  # the redo is judged against this view: refused (stale) if the file moves
        res = op.redo(key)
    return {
        "path": res.path,
        "redid_version": res.reverts,
        "version": res.version,
        "session": op.id,
        "message": res.message,
    }


def undo_file(
    repo: Repo,
    path: str,
    *,
    version: int | None = None,
    operator: str | None = None,
    redis_url: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Revert one write of a file (see `undo --help`): version `version`, or the newest write in effect
    that is not an undo. Returns the engine's result; with dry_run, what it would revert, writing nothing."""
    key = cmd_common.path_key(repo.root, path)
    entries = repo.entries(key)
    if not entries and not cmd_common.exists_in_root(repo.root, key):
        raise cmd_common.no_such_path(key, "has no recorded writes to undo")
    if not entries:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{key} has no recorded writes to undo.")
    target = _file_target(entries, key, version)
    if dry_run:
        return _dry_run(key, target, entries)
    with _coordinator(repo, redis_url) as coord:
        op = coord.session(operator or operator_id())
        _operator_read(op, key)  # the undo is judged against this view: refused (stale) if the file moves
        res = op.undo(key, version=target.version)
    return {
        "path": res.path,
        "undone_version": target.version,
        "operation": res.operation,
        "version": res.version,
        "session": op.id,
        "message": res.message,
    }


def _file_target(entries: list[HistoryEntry], key: str, version: int | None) -> HistoryEntry:
    """Version `version` if still in effect, else the newest write in effect that is not an undo (the
    library's rule for a session's own writes, over every session's)."""
    if version is not None:
        return undoing.version_target(entries, version, key)
    effect = undoing.in_effect(entries)
    for e in entries:  # newest first
        if e.operation != undoing.UNDO and effect[e.version]:
            return e
    raise CoordinatorError(
        ErrorCode.NO_CHANGE,
        f"Every recorded write of {key} has been undone already; `edit-coordinator redo {key}` steps forward.",
    )


def _dry_run(key: str, target: HistoryEntry, entries: list[HistoryEntry]) -> dict[str, Any]:
    later = [e for e in entries if e.version > target.version]
    kept = ", ".join(f"{e.version} ({e.operation} by {e.session})" for e in reversed(later))
    what = "redo" if target.operation == undoing.UNDO else "undo"
    recorded = "a redo" if what == "redo" else "an undo"
    message = f"Would revert the {target.operation} of version {target.version} of {key} by {target.session}"
    message += f" (recorded as {recorded})" + (f", keeping versions {kept}." if kept else ".")
    return {
        "path": key,
        "would_undo_version": target.version,
        "operation": what,
        "keeps": [{"version": e.version, "session": e.session, "operation": e.operation} for e in reversed(later)],
        "message": message + " Nothing was written.",
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
                    f"version {e.version} ({e.operation} by {e.session}, {when(e.time)}) came after "
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
        "Look at `edit-coordinator history PATH`, then revert single versions with `edit-coordinator undo "
        "PATH --version N` (later writes kept), or put a file back with `edit-coordinator restore PATH --to N`."
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
