"""`edit-coordinator redis start|stop|status`: the embedded Redis server of a repository's state folder."""

from __future__ import annotations

import argparse
import json

from .embedded import embedded_status, ensure_embedded_redis, stop_embedded_redis
from .errors import CoordinatorError
from .layout import state_dir_of


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("redis", help="start, stop or inspect the embedded Redis server of a root")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--root", default=".", help="repository root (default: current folder)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    state_dir = state_dir_of(args.root)
    try:
        if args.action == "start":
            print(ensure_embedded_redis(state_dir))
        elif args.action == "stop":
            print("stopped" if stop_embedded_redis(state_dir) else "not running")
        else:
            status = embedded_status(state_dir)
            print(json.dumps(status, indent=2) if status else "not running")
            return 0 if status else 1
    except CoordinatorError as exc:
        print(f"error [{exc.code}]: {exc.message}")
        return 1
    return 0
