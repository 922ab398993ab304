"""`edit-coordinator` command line: a thin adapter. Each subcommand lives in its own module, which exposes
`register(subparsers)`; the handler it sets (`func`) takes the parsed arguments and returns an exit code."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from coordinator.version import __version__

if TYPE_CHECKING:
    import argparse

# Modules that contribute subcommands, in the order they appear in --help.
COMMAND_MODULES = (
    "coordinator.cli.demo",
    "worker.stress",
    "coordinator_bench.cli",
    "coordinator.cli.serve",
    "coordinator.cli.mcp",
    "coordinator.cli.files",
    "coordinator.cli.history",
    "coordinator.cli.undo",
    "coordinator.cli.gc",
    "coordinator.cli.status",
    "coordinator.cli.restore",
    "coordinator.cli.redis_server",
    "coordinator.cli.watch",
    "coordinator.cli.leases",
    "coordinator.cli.git",
    "coordinator.cli.agents_init",
    "coordinator.cli.hook",
    "coordinator.cli.hookservice",
)


def _epilog() -> str:
    """The top-level help's closing part, wrapped at the width the help is (`help_width`): its tables keep
    their columns, with a long row's continuation under the row's text."""
    import textwrap

    from coordinator.cli import common as cmd_common
    from coordinator.state import connection

    width = cmd_common.help_width()
    config = textwrap.fill(
        "project config: .edit-coordinator.toml, or [tool.edit-coordinator] in pyproject.toml, at the root "
        "(keys: policy, match, durability, redis-url, server, auto-commit): below the flags and variables, "
        "above the built-in defaults.",
        width,
        subsequent_indent="  ",
        break_on_hyphens=False,
    )
    root = textwrap.fill(
        "The root, unless --root is given: the nearest folder upwards holding .edit-coordinator/ or .git.",
        width,
        initial_indent="  ",
        subsequent_indent="  ",
        break_on_hyphens=False,
    )
    return f"""environment (each the default of its option, in every command that has it):
  {cmd_common.ROOT_ENV}  --root      {connection.REDIS_URL_ENV}  --redis-url
  {cmd_common.SESSION_ENV}  --session   {cmd_common.SERVER_ENV}  --server
  {cmd_common.TOKEN_ENV}  --token
  {cmd_common.POLICY_ENV}  --policy   {cmd_common.MATCH_ENV}  --match

{config}
{root}

{cmd_common._exit_statuses(width)}

Errors are one line on stderr: `edit-coordinator: [code] message`."""


def build_parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog="edit-coordinator",
        description="Safe Read / Write / Edit for fleets of parallel coding agents on one repository.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"edit-coordinator {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # that part is not installed in this build
            raise
        module.register(sub)
    from coordinator.cli.common import fit_help

    fit_help(parser)
    return parser


def _settle(args: argparse.Namespace) -> None:
    """The root and the project config's defaults (`coordinator.cli.config.settle`). A command given a
    --server needs no local repository: run from / or the home folder (no root found) its root stays None,
    and only the remote service is asked."""
    from coordinator.cli.config import find_root, settle
    from coordinator.errors import CoordinatorError

    if getattr(args, "server", None) and getattr(args, "root", None) is None:
        try:
            find_root()
        except CoordinatorError:
            return
    settle(args)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["hook"]:  # an agent's hook runs on every tool call: straight there, nothing else loaded
        from coordinator.cli.hook import main as hook_main

        return hook_main(words[1:])
    from coordinator.cli import common as cmd_common
    from coordinator.errors import CoordinatorError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except BrokenPipeError:  # --help read by `head`
        return _reader_gone()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if getattr(args, "settle_options", False):
        try:
            _settle(args)
        except CoordinatorError as exc:
            return cmd_common.fail(exc)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """The output's reader has gone (`... | head`): what was asked for was read, so no traceback and no
    error; later writes (the interpreter's last flush included) go nowhere. Exit 0."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
    os.close(devnull)
    return 0
