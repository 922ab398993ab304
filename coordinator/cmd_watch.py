"""`edit-coordinator watch`: follow the change events of a repository (every successful write, live)."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import CoordinatorError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "watch",
        help="follow change events: every write through the coordinator, as it happens",
        description="Print one line (or one JSON object with --json) per successful write: path, session, "
        "version, changed lines. Follows until interrupted, or until --timeout seconds pass without events.",
    )
    p.add_argument("--root", default=".", help="repository root (default: current folder)")
    p.add_argument("--redis-url", default=None, help="Redis URL (default: the root's embedded server)")
    p.add_argument(
        "--path",
        action="append",
        default=None,
        metavar="GLOB",
        help="only paths matching this pattern (src/**/*.py); repeatable",
    )
    p.add_argument(
        "--since", default="$", help="'$' new events only (default), '0' from the oldest kept, or an event id"
    )
    p.add_argument("--last", type=int, default=0, metavar="N", help="first print the N most recent events")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="stop after S seconds without events")
    p.add_argument("--count", type=int, default=None, metavar="N", help="stop after N events")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .engine import Coordinator
    from .events import recent
    from .leases import normalize_pattern, pattern_regex

    def show(event) -> None:  # type: ignore[no-untyped-def]
        print(json.dumps(event.to_dict()) if args.json else event.describe(), flush=True)

    try:
        with Coordinator(args.root, args.redis_url) as coord:
            since = args.since
            if args.last > 0:
                wanted = [pattern_regex(normalize_pattern(p, coord.root)) for p in args.path or []]
                for event in recent(coord.redis, coord.namespace, args.last):
                    since = event.id
                    if not wanted or any(m.fullmatch(event.path) for m in wanted):
                        show(event)
            stream = coord.events(since=since, paths=args.path, timeout_s=args.timeout)
            for shown, event in enumerate(stream, start=1):
                show(event)
                if args.count is not None and shown >= args.count:
                    break
    except CoordinatorError as exc:
        print(f"error [{exc.code}]: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0
