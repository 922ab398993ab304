"""`edit-coordinator commit`, `git-guard` and `blame`: the git commands (coordinator/git does the work)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator.errors import CoordinatorError, ErrorCode


def register(sub: Any) -> None:
    p = sub.add_parser(
        "commit",
        help="git commit of exactly one session's uncommitted writes",
        description=(
            "Commit on the current branch exactly the writes session S made and did not commit, applied to "
            "HEAD's version of each file, in a private index: the working tree, the other sessions' "
            "uncommitted changes and anything staged stay as they are. No git hook runs (docs/git.md)."
        ),
    )
    cmd_common.add_session(p, help="the session whose writes to commit")
    _required_unless_set(p, "--session")
    p.add_argument("-m", "--message", required=True, help="the commit message (a session trailer is added)")
    p.add_argument(
        "--include-others",
        action="store_true",
        help="where the session's change cannot be separated from another session's, commit both",
    )
    p.add_argument(
        "--check",
        metavar="CMD",
        help="run CMD (bash -c) on the commit's tree in a scratch folder first; the branch moves only when it "
        "exits 0 (rebuilt and checked again if the branch moved meanwhile)",
    )
    p.add_argument("--check-timeout", type=float, metavar="SECONDS", help="a check running longer fails")
    cmd_common.add_common(p, redis=False)
    p.set_defaults(func=cmd_common.guarded(cmd_commit))

    g = sub.add_parser(
        "git-guard",
        help="check a shell command for git commands that would sweep up others' work",
        description=(
            "Exit 0 if CMD may run in this shared checkout; else print why not (and the safe equivalent) and "
            "exit 1. Without --session every uncommitted change counts as another's. "
            "Example: edit-coordinator git-guard --session S -- git stash"
        ),
    )
    cmd_common.add_session(g, help="the session that would run the command; without one, nothing is its own")
    g.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")
    cmd_common.add_common(g, redis=False)
    g.set_defaults(func=cmd_common.guarded(cmd_git_guard))

    b = sub.add_parser(
        "blame",
        help="which session wrote each line of a file",
        description="Each line of PATH with the session and version that wrote it, from the history. "
        "--json prints an Agent Trace record.",
    )
    b.add_argument("path", metavar="PATH", help=cmd_common.PATH_HELP)
    cmd_common.add_common(b, redis=False)
    b.set_defaults(func=cmd_common.guarded(cmd_blame))


def _required_unless_set(p: argparse.ArgumentParser, flag: str) -> None:
    """Mark an option that has no value from its variable as required, so that usage shows it as such."""
    for action in p._actions:
        if flag in action.option_strings:
            action.required = action.default is None


def _session(args: argparse.Namespace) -> str:
    if not args.session:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"Give --session ID (or set ${cmd_common.SESSION_ENV}).")
    return str(args.session)


def cmd_commit(args: argparse.Namespace) -> int:
    from coordinator.git.commit import commit_session

    result = commit_session(
        cmd_common.real_root(args.root),
        _session(args),
        args.message,
        include_others=args.include_others,
        check=args.check,
        check_timeout_s=args.check_timeout,
    )
    if args.json:
        print(json.dumps(result.to_dict()))
    elif result.commit is None:
        print(f"Nothing new to commit: {', '.join(result.recognised)} already in HEAD (marked committed).")
    else:
        checked = f", checked {result.checks} time(s)" if result.checks else ""
        print(f"{result.commit} on {result.branch}: {len(result.paths)} file(s) of session {result.session}{checked}")
        for path in result.paths:
            print(f"  {path}")
    return 0


def cmd_git_guard(args: argparse.Namespace) -> int:
    from coordinator.git.guard import judge_shell_command

    words = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not words:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give the command after --: git-guard -- git stash")
    import shlex

    # One argument is a whole shell line (a script passing "$CMD"); several are the words of one command.
    line = words[0] if len(words) == 1 else shlex.join(words)
    answer = judge_shell_command(line, cmd_common.real_root(args.root), args.session or "", os.getcwd())
    refusal = answer.refusal
    if args.json:
        print(json.dumps({"allowed": refusal is None, "message": refusal, "doubts": list(answer.doubts)}))
    else:
        if refusal:
            print(refusal, file=sys.stderr)
        for doubt in answer.doubts:
            print(f"not judged: {doubt}", file=sys.stderr)
    return 0 if refusal is None else 1


def cmd_blame(args: argparse.Namespace) -> int:
    from coordinator.git.blame import ORIGIN, agent_trace, blame_lines
    from coordinator.git.ledger import Ledger

    root = cmd_common.real_root(args.root)
    key = cmd_common.path_key(root, args.path)
    if not cmd_common.exists_in_root(root, key):
        raise cmd_common.no_such_path(key, "so has no lines to attribute (`history` lists a removed file's versions)")
    recorded = bool(Ledger(root).path_writes(key).entries)
    lines = blame_lines(root, key)
    if args.json:
        print(json.dumps(agent_trace(key, lines), indent=2))
        return 0
    if not recorded:
        print(
            f"No recorded writes of {key}: the coordinator has seen no session write it, so its "
            f"{len(lines)} line(s) are shown as {ORIGIN} (written before or outside the history).",
            file=sys.stderr,
        )
    width = max((len(line.session) for line in lines), default=0)
    for line in lines:
        version = f"v{line.version}" if line.version else "-"
        print(f"{line.session:<{width}} {version:>5} {line.number:>5}: {line.text.rstrip(chr(10))}")
    return 0
