"""`edit-coordinator read|edit|write PATH`: the file operations for people and scripts.

Each acts as one session (`--session`, default `$EDIT_COORDINATOR_SESSION`, else `cli:<user>`), on a local
engine (`--root`) or a remote service (`--server URL --token T`), through the `Client` interface. The
session's read state lives in Redis, so `read` in one command and `edit` in the next work together, as an
agent's calls do; an edit without a read first is refused (`not_read`), as it would be for an agent.

Output: `read` prints the numbered lines (`--raw`: the content only), `edit` and `write` the result's
message and snippet; `--json` prints the result as JSON. Refusals: one line on stderr and the exit status
of the code (`edit-coordinator --help` lists them).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Callable
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator.client.base import plain
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.tokens import claimed_session


def _session_id(args: argparse.Namespace) -> str:
    """--session; else, with --server and a session token, the token's session; else cli:<user>."""
    if args.session:
        return str(args.session)
    claimed = claimed_session(args.token) if args.server and args.token else None
    if claimed:
        return claimed
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "user"
    return f"cli:{''.join(c for c in user if c.isalnum() or c in '._-') or 'user'}"


#: Kept for callers of the earlier name: the rule lives in `coordinator.cli.common.shell_path`.
cli_path = cmd_common.shell_path


def _add(sub: Any, name: str, help: str, description: str, run: Callable[[Any, str, argparse.Namespace], Any]) -> Any:
    p = sub.add_parser(
        name,
        help=help,
        description=description,
        epilog=cmd_common.EXIT_STATUSES_SEE,
        formatter_class=cmd_common.DefaultsAndEpilogFormatter,
    )
    p.add_argument(
        "path",
        metavar="PATH",
        help=cmd_common.PATH_HELP,
    )
    cmd_common.add_root(p)
    cmd_common.add_redis(p)
    from coordinator.client import operations as ops

    cmd_common.add_server(p, cmd_common.tokens_of(ops.Read))
    cmd_common.add_session(p, "the session to act as (else, with --server, a session token's; else cli:<user>)")
    cmd_common.add_json(p, "print the result as JSON")
    p.set_defaults(func=cmd_common.guarded(lambda args: _run(args, run)))
    return p


def _run(args: argparse.Namespace, op: Callable[[Any, str, argparse.Namespace], Any]) -> int:
    args.path = cli_path(args.root, args.path) if not args.server else args.path
    options = {key: getattr(args, key, None) for key in ("policy", "match", "durability")}
    client = cmd_common.open_client(args, **{key: value for key, value in options.items() if value})
    try:
        result = op(client, _session_id(args), args)
    finally:
        client.close()
    if args.json:
        print(json.dumps(plain(result), indent=2))
    elif getattr(args, "raw", False):
        sys.stdout.write(result.content)
    else:
        _print_text(result)
    return 0


def _print_text(result: Any) -> None:
    if hasattr(result, "num_lines"):  # a ReadResult
        print(result.text)
        if result.notice:
            print(f"Note: {result.notice}", file=sys.stderr)
        return
    print(result.message)
    if result.snippet:
        print(result.snippet)


def _read(client: Any, session: str, args: argparse.Namespace) -> Any:
    return client.read(session, args.path, args.offset, args.limit)


def _edit(client: Any, session: str, args: argparse.Namespace) -> Any:
    return client.edit(session, args.path, args.old, args.new, args.replace_all)


def _write(client: Any, session: str, args: argparse.Namespace) -> Any:
    data = sys.stdin.buffer.read()
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"The content on stdin is not UTF-8 text (byte {exc.start})."
        ) from None
    return client.write(session, args.path, content)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _add(
        sub,
        "read",
        "print the numbered lines of a file, recording this session's view",
        "Read a text file as a session: prints its lines numbered (cat -n style) and records the session's "
        "view, so that its next edit or write is checked against what it saw.",
        _read,
    )
    p.add_argument("--offset", type=int, default=None, metavar="N", help="first line (1-based)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="number of lines")
    p.add_argument("--raw", action="store_true", help="print the content only, without line numbers")
    p = _add(
        sub,
        "edit",
        "replace text in a file (read it first, as the same session)",
        "Replace --old with --new in a file, as a session that has read it (exact match, unique unless "
        "--replace-all). Refused, with nothing written, when the file changed since the session's read.",
        _edit,
    )
    p.add_argument("--old", required=True, metavar="TEXT", help="the exact text to replace ('' creates a file)")
    p.add_argument("--new", required=True, metavar="TEXT", help="the replacement")
    p.add_argument("--replace-all", action="store_true", help="replace every occurrence")
    cmd_common.add_policy_match(p)
    cmd_common.add_durability(p)
    p = _add(
        sub,
        "write",
        "create or overwrite a file with the content on stdin",
        "Write the content on stdin (UTF-8) to a file, as a session. A new file needs no read; an existing "
        "one must have been read by the session and be unchanged since.",
        _write,
    )
    cmd_common.add_durability(p)
