"""`edit-coordinator redis start|stop|status`: the embedded Redis server of a repository's state folder."""

from __future__ import annotations

import argparse
import json

from coordinator.cli import common as cmd_common
from coordinator.state.embedded import embedded_status, ensure_embedded_redis, stop_embedded_redis


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "redis",
        help="start, stop or inspect the embedded Redis server of a root",
        description="The embedded Redis server keeps the coordination state (views, versions, leases, events) of "
        "a root; it starts on first use and outlives the processes that use it. start: start it (or find it) "
        "and print its URL. stop: stop it (the state persists in the state folder). status: a table of its "
        "URL, process, version and memory (--json: JSON); exit status 1 when none is running.",
    )
    p.add_argument("action", choices=["start", "stop", "status"])
    cmd_common.add_root(p)
    cmd_common.add_json(p, "status: print JSON instead of a table")
    p.set_defaults(func=cmd_common.guarded(run))


def run(args: argparse.Namespace) -> int:
    if args.action == "start":
        print(ensure_embedded_redis(cmd_common.state_dir(args.root)))
        return 0
    folder = cmd_common.state_dir(args.root)
    if args.action == "stop":
        from coordinator.cli import hookservice

        # the hook service first: left running on a stopped Redis it would refuse every guarded edit; the next
        # hook starts both again
        hookservice.stop(folder.parent)
        print("stopped" if folder.is_dir() and stop_embedded_redis(folder) else "not running")
        return 0
    status = embedded_status(folder) if folder.is_dir() else None
    if args.json:
        print(json.dumps(status, indent=2))
    elif status is None:
        print("not running")
    else:
        _print_table(status)
    return 0 if status else 1


def _print_table(status: dict[str, object]) -> None:
    from rich.table import Table

    from coordinator.history.retention import format_size

    table = Table(title="Embedded Redis", title_justify="left")
    for col in ("URL", "PID", "Version", "Memory"):
        table.add_column(col)
    memory = status.get("used_memory")
    table.add_row(
        str(status["url"]),
        str(status["pid"]),
        str(status["version"]),
        format_size(int(memory)) if isinstance(memory, int) else "?",
    )
    cmd_common.console(highlight=False, soft_wrap=True).print(table)
