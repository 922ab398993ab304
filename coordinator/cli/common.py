"""What every `edit-coordinator` command shares: its options, their environment variables, the error format
and exit statuses, and a way to look at a root's state without starting anything.

Options and their variables (a flag wins over its variable, the variable over the default):
    --root PATH        $EDIT_COORDINATOR_ROOT        repository root (default: found upwards from the
                                                     current folder, see coordinator.cli.config)
    --redis-url URL    $EDIT_COORDINATOR_REDIS_URL   Redis (default: the root's embedded server)
    --session ID       $EDIT_COORDINATOR_SESSION     the session to act as
    --server URL       $EDIT_COORDINATOR_SERVER      a remote `edit-coordinator serve` instead of a local engine
    --token T          $EDIT_COORDINATOR_TOKEN       its bearer token
    --ca-file FILE     $EDIT_COORDINATOR_CA_FILE     PEM CA certificate(s) an https:// --server is checked against
    --tls-cert FILE    $EDIT_COORDINATOR_TLS_CERT    `serve`: its certificate chain (PEM); with --tls-key, HTTPS
    --tls-key FILE     $EDIT_COORDINATOR_TLS_KEY     `serve`: the certificate's private key (PEM, unencrypted)
    --policy P         $EDIT_COORDINATOR_POLICY      strict or rebase (commands that edit)
    --match M          $EDIT_COORDINATOR_MATCH       exact or flexible (commands that edit)
    --json                                           JSON output

The project config (`.edit-coordinator.toml`, or `[tool.edit-coordinator]` in pyproject.toml, at the root)
sits between a variable and the built-in default for policy, match, durability, redis-url and server.

Errors: one line on stderr, `edit-coordinator: [code] message`, and the exit status of the code's row in
`coordinator.errors.CODES` (see `EXIT_STATUSES`).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from coordinator import errors
from coordinator.arguments import DURABILITIES, MATCHES, POLICIES
from coordinator.disk.layout import STATE_DIR_NAME
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.connection import REDIS_URL_ENV

if TYPE_CHECKING:
    from coordinator.engine import Coordinator

ROOT_ENV = "EDIT_COORDINATOR_ROOT"
SESSION_ENV = "EDIT_COORDINATOR_SESSION"
SERVER_ENV = "EDIT_COORDINATOR_SERVER"
TOKEN_ENV = "EDIT_COORDINATOR_TOKEN"
CA_FILE_ENV = "EDIT_COORDINATOR_CA_FILE"
TLS_CERT_ENV = "EDIT_COORDINATOR_TLS_CERT"
TLS_KEY_ENV = "EDIT_COORDINATOR_TLS_KEY"
POLICY_ENV = "EDIT_COORDINATOR_POLICY"
MATCH_ENV = "EDIT_COORDINATOR_MATCH"

_EXIT_MEANINGS = {
    1: "refused because of the file's state (read the file again)",
    2: "bad arguments",
    3: "the path",
    4: "held by another session",
    5: "the coordination state or the service could not be reached",
    6: "the disk failed",
    7: "the content",
    8: "the token (authentication: missing, malformed, expired, or not one this call takes)",
}


def _exit_statuses(width: int = 100) -> str:
    """The exit statuses, from the per-code table (coordinator.errors.CODES), wrapped to `width` columns."""
    import textwrap

    lines = ["exit statuses:", "  0    success"]
    for status, meaning in _EXIT_MEANINGS.items():
        codes = [code for code, row in errors.CODES.items() if row.exit_status == status]
        text = f"{status:<4} {meaning}: {', '.join(codes)}"
        lines.extend(textwrap.wrap(text, width, initial_indent="  ", subsequent_indent=" " * 7))
    lines.append("  130  interrupted")
    return "\n".join(lines)


#: The whole table: in `edit-coordinator --help` only (wrapped there at `help_width()`).
EXIT_STATUSES = _exit_statuses()
#: What each command's own --help says of them (one table, in one place).
EXIT_STATUSES_SEE = (
    "exit statuses: 0 success; 1-8 a refusal, by its cause (the code in the error line); 130 interrupted.\n"
    "`edit-coordinator --help` lists which code gives which."
)


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default once: not where the help already names it, nor for empty defaults."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return super()._get_help_string(action)


class DefaultsAndEpilogFormatter(DefaultsFormatter, argparse.RawDescriptionHelpFormatter):
    """DefaultsFormatter that keeps the epilog's (and description's) own line breaks."""


HELP_WIDTH = 100  # every --help wraps here however wide the terminal (narrower terminals: at their width)


_CAPPED: dict[type[argparse.HelpFormatter], type[argparse.HelpFormatter]] = {}


def help_width() -> int:
    """The width every --help wraps at: HELP_WIDTH, or the terminal's width when narrower."""
    import shutil

    return min(HELP_WIDTH, shutil.get_terminal_size().columns - 2)


def _capped(formatter: type[argparse.HelpFormatter]) -> type[argparse.HelpFormatter]:
    """`formatter` capped at HELP_WIDTH (one class per formatter)."""
    if formatter in _CAPPED or formatter in _CAPPED.values():
        return _CAPPED.get(formatter, formatter)

    class Capped(formatter):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("width", help_width())
            super().__init__(*args, **kwargs)

        def _fill_text(self, text: str, width: int, indent: str) -> str:
            """A text kept as written (a Raw formatter's) has each line that is too long wrapped, under its
            own indentation; what already fits stays as it is."""
            import textwrap

            out = []
            for line in super()._fill_text(text, width, indent).splitlines():
                lead = line[: len(line) - len(line.lstrip())]
                out.append(textwrap.fill(line, width, subsequent_indent=lead) if len(line) > width else line)
            return "\n".join(out)

    Capped.__name__ = Capped.__qualname__ = f"Capped{formatter.__name__}"
    _CAPPED[formatter] = Capped
    return Capped


def fit_help(parser: argparse.ArgumentParser) -> None:
    """Gives `parser` and every subcommand's parser (nested ones too) a formatter that wraps at HELP_WIDTH:
    one rule for every command's --help, whichever formatter the command chose (a Raw one's over-long lines
    too: tests/coordinator/cli/test_small_things.py checks every command)."""
    parser.formatter_class = _capped(cast(type[argparse.HelpFormatter], parser.formatter_class))
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in {id(c): c for c in action.choices.values()}.values():
                fit_help(child)


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def add_root(p: argparse.ArgumentParser) -> None:
    """--root, left None when neither it nor its variable is given: `main` then settles it
    (`coordinator.cli.config.settle`: found upwards, and the project config's defaults applied)."""
    p.add_argument(
        "--root",
        default=_env(ROOT_ENV),
        help=f"repository root (default: ${ROOT_ENV}, else the nearest folder upwards from the current one that "
        f"holds {STATE_DIR_NAME}/ or .git, never / or the home folder)",
    )
    p.set_defaults(settle_options=True)


def add_durability(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--durability",
        choices=DURABILITIES,
        default=None,
        help="fsync every write, or not (default: the project config's, else fsync)",
    )


def add_policy_match(p: argparse.ArgumentParser) -> None:
    """`--policy strict|rebase` and `--match exact|flexible`, for every front door that edits (`edit`, `mcp`,
    `serve`); each defaults to its variable, then the project config, then the engine's default."""
    p.add_argument(
        "--policy",
        choices=POLICIES,
        default=_env(POLICY_ENV),
        help=f"strict: refuse an edit of a file that changed since the session's read; rebase: apply it on top "
        f"when the changes do not overlap (default: ${POLICY_ENV}, else the project config's, else strict)",
    )
    p.add_argument(
        "--match",
        choices=MATCHES,
        default=_env(MATCH_ENV),
        help="how old text is found: exact, or flexible: when exact fails, whole lines with trailing whitespace "
        "ignored, then with the indentation shifted by a constant (the result says which was used) "
        f"(default: ${MATCH_ENV}, else the project config's, else exact)",
    )


def add_redis(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis-url",
        default=_env(REDIS_URL_ENV),
        metavar="URL",
        help=f"redis://, rediss://, unix://, redis+sentinel:// or redis+cluster:// URL (default: ${REDIS_URL_ENV}, "
        "else the root's embedded server)",
    )


def add_session(p: argparse.ArgumentParser, help: str = "the session to act as") -> None:
    p.add_argument("--session", default=_env(SESSION_ENV), metavar="ID", help=f"{help} (default: ${SESSION_ENV})")


def tokens_of(op: Any) -> str:
    """The tokens an operation's call takes (`coordinator.client.operations.Operation`), in the service's words."""
    from coordinator.client.operations import tokens_taken

    return tokens_taken(op.auth, op.viewer)


def add_server(p: argparse.ArgumentParser, takes: str) -> None:
    """--server, --token and --ca-file; `takes`: the tokens the command's calls take, in the words of the
    service's refusals (`coordinator.client.operations.tokens_taken`)."""
    p.add_argument(
        "--server",
        default=_env(SERVER_ENV),
        metavar="URL",
        help=f"a remote `edit-coordinator serve` to call instead of a local engine (default: ${SERVER_ENV})",
    )
    p.add_argument(
        "--token", default=_env(TOKEN_ENV), help=f"bearer token for --server: {takes} (default: ${TOKEN_ENV})"
    )
    p.add_argument(
        "--ca-file",
        default=_env(CA_FILE_ENV),
        metavar="FILE",
        help=f"for an https:// --server: the PEM CA certificate(s) its certificate is checked against, instead of "
        f"the system's trusted CAs (default: ${CA_FILE_ENV})",
    )


def add_tls(p: argparse.ArgumentParser) -> None:
    """`serve`'s TLS options: both or neither (checked by `coordinator.cli.serve.tls_options`)."""
    p.add_argument(
        "--tls-cert",
        default=_env(TLS_CERT_ENV),
        metavar="FILE",
        help=f"serve HTTPS with this PEM certificate (chain); needs --tls-key (default: ${TLS_CERT_ENV})",
    )
    p.add_argument(
        "--tls-key",
        default=_env(TLS_KEY_ENV),
        metavar="FILE",
        help=f"the PEM private key of --tls-cert, unencrypted (default: ${TLS_KEY_ENV})",
    )


def add_json(p: argparse.ArgumentParser, help: str = "print JSON instead of text") -> None:
    p.add_argument("--json", action="store_true", help=help)


def add_common(p: argparse.ArgumentParser, *, redis: bool = True, json: bool = True) -> None:
    add_root(p)
    if redis:
        add_redis(p)
    if json:
        add_json(p)


#: The width of output that does not go to a terminal (a pipe, a file, CI logs): wide enough that no table
#: cell or message is cut (rich would assume 80 columns and end cells in "…"). $COLUMNS still wins.
PIPE_WIDTH = 4096


def console(*, stderr: bool = False, highlight: bool = True, soft_wrap: bool = False) -> Any:
    """The rich Console every command prints through: the terminal's width on a terminal, else
    `PIPE_WIDTH` (unless $COLUMNS says otherwise), so piped output is never cut at 80 columns."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    width = None if tty or os.environ.get("COLUMNS") else PIPE_WIDTH
    return Console(stderr=stderr, width=width, highlight=highlight, soft_wrap=soft_wrap)


def fail(exc: CoordinatorError) -> int:
    """The one error format: a line on stderr; the exit status of the code. A refusal that carries a service
    code with a row of its own (`tls_untrusted`, `unauthorized`, ...) is named and judged by that code."""
    code = exc.details.get("service_code")
    code = code if isinstance(code, str) and code in errors.CODES else exc.code.value
    print(f"edit-coordinator: [{code}] {exc.message}", file=sys.stderr)
    return errors.info(code).exit_status


def usage_error(message: str) -> int:
    return fail(CoordinatorError(ErrorCode.INVALID_ARGUMENT, message))


def guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A command handler whose refusals come out in the one error format (`configuration_refusal` first)."""

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return int(fn(args) or 0)
        except CoordinatorError as exc:
            return fail(configuration_refusal(args, exc))

    return run


#: Failures that mean nothing answers at an address (not a server that answers and fails).
_UNREACHABLE = ("ConnectionError", "ConnectionRefusedError", "TimeoutError", "gaierror", "MasterNotFoundError")
#: Failures that mean a server answers and refuses the URL's credentials (none given, or wrong ones).
_REFUSED_CREDENTIALS = ("AuthenticationError", "AuthenticationRequiredError", "AuthorizationError")
_URL_SOURCES = f"given by --redis-url, ${REDIS_URL_ENV} or the project config's redis-url"


def configuration_refusal(args: argparse.Namespace, exc: CoordinatorError) -> CoordinatorError:
    """A `state_unavailable` on a Redis URL the user configured, where nothing answers or the server refuses
    the URL's credentials: the fix is the URL (or its server), not waiting, so the message says that (the code,
    and so the exit status, stay)."""
    url = getattr(args, "redis_url", None)
    cause = exc.details.get("cause")
    if exc.code != ErrorCode.STATE_UNAVAILABLE or not url or cause not in (*_UNREACHABLE, *_REFUSED_CREDENTIALS):
        return exc
    from coordinator.state.connection import parse_url

    try:
        shown = parse_url(url).redacted()
    except CoordinatorError:
        return exc
    if cause in _REFUSED_CREDENTIALS:
        message = (
            f"The Redis at {shown} refused this connection's credentials ({cause}); nothing was changed. Put the "
            f"user name and password the server expects in the URL (redis://USER:PASSWORD@host:port; {_URL_SOURCES})."
        )
    else:
        message = (
            f"Nothing answers at the Redis URL {shown} ({cause}); nothing was changed. Check the URL ({_URL_SOURCES}) "
            "and that its server runs; without a URL the root's embedded server is used."
        )
    return CoordinatorError(ErrorCode.STATE_UNAVAILABLE, message, **exc.details)


def real_root(root: str) -> str:
    real = os.path.realpath(root)
    if not os.path.isdir(real):
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"The root {root!r} is not a folder.")
    return real


def state_dir(root: str) -> Path:
    from coordinator.disk.layout import state_dir_of

    return state_dir_of(real_root(root))


def shell_path(root: str, path: str) -> str:
    """A PATH as typed in a shell: relative to the current folder when that is inside the root (a command
    run from a subfolder means the file there), else relative to the root; absolute paths as they are. The
    one rule of every command that takes a PATH (`read`, `edit`, `history`, `blame`, `undo`, `restore` ...)."""
    if os.path.isabs(path):
        return path
    here, top = os.path.realpath(os.getcwd()), os.path.realpath(root)
    if here != top and here.startswith(top.rstrip(os.sep) + os.sep):
        return os.path.join(here, path)
    return path


#: The help text of every PATH argument (the rule of `shell_path`).
PATH_HELP = (
    "a file inside the root: absolute, or relative to the current folder when that is inside the root, else to the root"
)


def path_key(root: str, path: str) -> str:
    """The key (relative to the root) of a PATH typed on the command line, resolved as `read` resolves it:
    `shell_path`, then confined to the root (outside_root, is_directory ... as the engine says)."""
    from coordinator.disk import fsio

    return fsio.resolve(real_root(root), shell_path(root, path)).key


def no_such_path(key: str, what: str = "has no recorded history") -> CoordinatorError:
    """The refusal for a PATH that names neither a file nor anything the history knows (exit status 3)."""
    return CoordinatorError(
        ErrorCode.FILE_NOT_FOUND,
        f"{key} does not exist and {what}: check the path (it is taken relative to the current folder when "
        "that is inside the repository, else to the repository's root).",
        path=key,
    )


def exists_in_root(root: str, key: str) -> bool:
    return os.path.lexists(os.path.join(real_root(root), key))


def running_redis_url(root: str, redis_url: str | None) -> str | None:
    """The Redis a command that only inspects may use: the given URL, else the root's embedded server if it
    is running. None: nothing is running, and nothing is started (no state folder is created either)."""
    if redis_url:
        return redis_url
    folder = state_dir(root)
    if not folder.is_dir():
        return None
    from coordinator.state.embedded import embedded_status

    found = embedded_status(folder)
    return str(found["url"]) if found else None


def not_running(root: str, redis_url: str | None = None) -> str:
    if redis_url:
        return (
            f"No coordinator has used {real_root(root)} yet: it has no state folder ({state_dir(root)}), so "
            "nothing of it is kept in that Redis."
        )
    return (
        f"No coordinator is running for {real_root(root)}: no Redis URL was given (--redis-url or "
        f"${REDIS_URL_ENV}) and the root's embedded Redis server is not running (it starts on first use)."
    )


def open_running(root: str, redis_url: str | None) -> Coordinator | None:
    """The Coordinator a command that only inspects (`leases`, `watch`) looks through: on the given Redis
    URL, else on the root's embedded server if it is running. None where nothing runs or the root has no
    state folder (no coordinator has used it, so there is nothing to see): no Redis server is started and
    no state folder is created."""
    url = running_redis_url(root, redis_url)
    if url is None or not state_dir(root).is_dir():
        return None
    from coordinator.engine import Coordinator

    return Coordinator(real_root(root), url)


def open_client(args: argparse.Namespace, **options: Any) -> Any:
    """The `Client` a command acts through: `HttpClient` with --server, else a local engine on --root
    (`options`: the Coordinator's; `policy` and `match`, when given, also go to the service with each edit)."""
    from coordinator.client import HttpClient, LocalClient

    if getattr(args, "server", None):
        if not args.token:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"--server needs --token (or ${TOKEN_ENV}).")
        ca_file = getattr(args, "ca_file", None)
        return HttpClient(
            args.server, token=args.token, policy=options.get("policy"), match=options.get("match"), ca_file=ca_file
        )
    return LocalClient.open(real_root(args.root), args.redis_url, **options)
