"""`edit-coordinator watch`: follow the change events of a repository (every successful write, live).

It only inspects: it never starts a Redis server nor creates a state folder; with none running it says so
and exits with the `state_unavailable` status. With `--server URL --token T` it follows a remote `serve`'s
events through `HttpClient` (`Client.recent_events` and `Client.events`, long polls)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator.errors import CoordinatorError, ErrorCode


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "watch",
        help="follow change events: every write through the coordinator, as it happens",
        description="Print one line (or one JSON object with --json) per successful write: path, session, "
        "version, changed lines. Follows until interrupted, or until --timeout seconds pass without events.",
        formatter_class=cmd_common.DefaultsFormatter,
    )
    cmd_common.add_common(p)
    from coordinator.client import operations as ops

    cmd_common.add_server(p, cmd_common.tokens_of(ops.PollEvents))
    p.add_argument(
        "--path", action="append", default=None, metavar="GLOB", help="only paths matching this (repeatable)"
    )
    p.add_argument("--since", default="$", help="'$' new events only, '0' from the oldest kept, or an event id")
    p.add_argument("--last", type=int, default=0, metavar="N", help="first print the N most recent events")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="stop after S seconds without events")
    p.add_argument("--count", type=int, default=None, metavar="N", help="stop after N events")
    p.set_defaults(func=cmd_common.guarded(run))


def run(args: argparse.Namespace) -> int:
    if args.server:
        return _remote(args)
    if args.path:  # globs as PATHs are taken: relative to the current folder inside the root
        args.path = [cmd_common.shell_path(args.root, p) for p in args.path]
    coord = cmd_common.open_running(args.root, args.redis_url)
    if coord is None:
        message = f"{cmd_common.not_running(args.root, args.redis_url)} There is nothing to watch."
        return cmd_common.fail(CoordinatorError(ErrorCode.STATE_UNAVAILABLE, message))
    try:
        _follow(args, coord.recent_events, coord.events, coord.root)
    except KeyboardInterrupt:
        pass
    finally:
        coord.close()
    return 0


def _remote(args: argparse.Namespace) -> int:
    client = cmd_common.open_client(args)
    try:
        _follow(args, client.recent_events, client.events, None)
    except KeyboardInterrupt:
        pass
    finally:
        client.close()
    return 0


def _follow(
    args: argparse.Namespace,
    recent: Callable[[int], list[Any]],
    follow: Callable[[str, list[str] | None, float | None], Iterator[Any]],
    root: str | None,
) -> None:
    """Print the --last events, then follow (`root`: patterns are made relative to it; None: given so)."""
    from coordinator.state.leases import normalize_pattern, pattern_regex

    def show(event: Any) -> None:
        print(json.dumps(event.to_dict()) if args.json else event.describe(), flush=True)

    since = args.since
    if args.last > 0:
        wanted = [pattern_regex(normalize_pattern(p, root)) for p in args.path or []]
        for event in recent(args.last):
            since = event.id
            if not wanted or any(m.fullmatch(event.path) for m in wanted):
                show(event)
    for shown, event in enumerate(follow(since, args.path, args.timeout), start=1):
        show(event)
        if args.count is not None and shown >= args.count:
            break
