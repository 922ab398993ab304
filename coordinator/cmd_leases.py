"""`edit-coordinator leases list|break`: see the live leases of a repository, or end one as an administrator."""

from __future__ import annotations

import argparse
import json
import sys
import time


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "leases",
        help="list the live leases of a root, or break one (administrator)",
        description="list: every lease that has not ended (holder, pattern, mode, token, time left). break: end "
        "a lease by --id, or every lease of a --session, whoever holds it; its holder's next write under it is "
        "refused once with `leased`.",
    )
    p.add_argument("action", choices=["list", "break"])
    p.add_argument("--root", default=".", help="repository root (default: current folder)")
    p.add_argument("--redis-url", default=None, help="Redis URL (default: the root's embedded server)")
    p.add_argument("--id", default=None, help="break: the lease id")
    p.add_argument("--session", default=None, help="break: every lease of this session")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .engine import Coordinator
    from .errors import CoordinatorError

    try:
        with Coordinator(args.root, args.redis_url) as coord:
            if args.action == "list":
                leases = coord.leases()
            else:
                if not args.id and not args.session:
                    print("error: give --id or --session to break leases", file=sys.stderr)
                    return 2
                leases = coord.break_lease(lease_id=args.id, session=args.session)
    except CoordinatorError as exc:
        print(f"error [{exc.code}]: {exc.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([x.to_dict() for x in leases], indent=2))
        return 0
    if not leases:
        print("no live leases" if args.action == "list" else "no lease matched; nothing was broken")
        return 0 if args.action == "list" else 1
    now = time.time()
    verb = "" if args.action == "list" else "broken: "
    for x in leases:
        print(
            f"{verb}{x.id}  {x.session}  {x.mode:<9}  {x.pattern}  token {x.token}  "
            f"{max(0.0, x.ends_at - now):.0f} s left"
        )
    return 0
