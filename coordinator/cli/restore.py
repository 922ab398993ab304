"""`edit-coordinator restore PATH --to N | --before N`: put a whole file back as it was, for people.

Unlike an undo (which reverts one write's change and keeps everything written since), this discards every
later version, whoever wrote it, and says which (`Coordinator.restore`). With --dry-run it only lists them.
Runs as an operator session (default ``operator:<user>``), which reads the file first, so a write landing
meanwhile is refused as stale rather than discarded unseen.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator.cli.repo import open_repo, operator_id
from coordinator.errors import CoordinatorError, ErrorCode


def register(sub: Any) -> None:
    p = sub.add_parser(
        "restore",
        help="put a whole file back as it was at a version, discarding later versions",
        description=__doc__.split("\n\n")[0] + " " + __doc__.split("\n\n")[1].replace("\n", " "),
    )
    p.add_argument("path", metavar="PATH", help=cmd_common.PATH_HELP)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--to", type=int, metavar="VERSION", help="the content right after VERSION (0: before the first)"
    )
    target.add_argument("--before", type=int, metavar="VERSION", help="the content right before VERSION")
    p.add_argument("--dry-run", action="store_true", help="list the versions that would be discarded; write nothing")
    p.add_argument("--as", dest="operator", default=None, help="the operator session id (default operator:<user>)")
    cmd_common.add_common(p)
    p.set_defaults(func=cmd_common.guarded(cmd_restore))


def cmd_restore(args: argparse.Namespace) -> int:
    repo = open_repo(args.root)
    from coordinator.engine import Coordinator

    key = cmd_common.path_key(repo.root, args.path)
    entries = repo.entries(key)
    if not entries and not cmd_common.exists_in_root(repo.root, key):
        raise cmd_common.no_such_path(key, "has no recorded versions to restore")
    if not entries:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{key} has no recorded versions to restore.")
    if args.dry_run:
        cut = args.before - 1 if args.before is not None else args.to
        gone = sorted((e for e in entries if e.version > cut), key=lambda e: e.version)
        plan = {
            "path": key,
            "discards": [{"version": e.version, "session": e.session, "operation": e.operation} for e in gone],
        }
        if args.json:
            print(json.dumps(plan, indent=2))
        else:
            listed = ", ".join(f"{e.version} ({e.operation} by {e.session})" for e in gone) or "nothing"
            print(f"Would discard the changes of {key} versions: {listed}.")
        return 0
    with Coordinator(repo.root, args.redis_url) as coord:  # None: $EDIT_COORDINATOR_REDIS_URL, else embedded
        res = coord.restore(key, args.to, before_version=args.before, session=args.operator or operator_id())
    if args.json:
        print(json.dumps(res.to_dict(), indent=2))
    else:
        print(res.message)
    return 0
