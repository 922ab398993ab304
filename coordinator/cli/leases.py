"""`edit-coordinator leases list|break`: see the live leases of a repository, or end one as an administrator.

`list` only inspects: it never starts a Redis server nor creates a state folder; with none running it says
so (and that no lease can then be live). With `--server URL --token T` both act on a remote `serve` through
`HttpClient` (`Client.leases` / `Client.break_lease`; breaking needs the admin token)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator.errors import CoordinatorError, ErrorCode


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "leases",
        help="list the live leases of a root, or break one (administrator)",
        description="list: every lease that has not ended (holder, pattern, mode, token, time left). break: end "
        "a lease by --id, or every lease of a --session, whoever holds it; its holder's next write under it is "
        "refused once with `leased`.",
        epilog=cmd_common.EXIT_STATUSES_SEE,
        formatter_class=cmd_common.DefaultsAndEpilogFormatter,
    )
    p.add_argument("action", choices=["list", "break"])
    cmd_common.add_common(p)
    from coordinator.client import operations as ops

    cmd_common.add_server(p, f"list: {cmd_common.tokens_of(ops.Leases)}; break: {cmd_common.tokens_of(ops.BreakLease)}")
    p.add_argument("--id", default=None, help="break: the lease id")
    p.add_argument("--session", default=None, help="break: every lease of this session")
    p.set_defaults(func=cmd_common.guarded(run))


def run(args: argparse.Namespace) -> int:
    if args.action == "break" and not args.id and not args.session:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give --id or --session to break leases.")
    if args.server:
        client: Any = cmd_common.open_client(args)
    else:
        coord = cmd_common.open_running(args.root, args.redis_url)
        if coord is None:
            print(cmd_common.not_running(args.root, args.redis_url) + " No lease is live.")
            return 0 if args.action == "list" else 1
        from coordinator.client import LocalClient

        client = LocalClient(coord, owns=True)
    try:
        if args.action == "list":
            leases = list(client.leases(None))
        else:
            leases = list(client.break_lease(lease_id=args.id, session=args.session))
    finally:
        client.close()
    return _show(args, leases)


def _show(args: argparse.Namespace, leases: list[Any]) -> int:
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
