"""Where the repository is, and what its project config says: the settling of a command's options.

The root (`find_root`): --root or $EDIT_COORDINATOR_ROOT when given (any folder, `/` and the home folder
included: asked explicitly); else the nearest folder, from the current one upwards, that holds the state
folder `.edit-coordinator/` or is a git repository's top (`.git`). `/` and the home folder are never found
this way: a state folder or `.git` there is left alone, and a command run from either, outside any
repository, is refused with what to do. Outside any repository elsewhere the current folder is the root.
So a command run from a subfolder uses the same coordinator (the same state folder, the same Redis) as one
run from the top.

The project config (`project_config`): `<root>/.edit-coordinator.toml`, else the table
`[tool.edit-coordinator]` of `<root>/pyproject.toml`. Its keys (`KEYS`) are the defaults of the options of
the same name; a flag wins over its environment variable, the variable over the config, the config over
the built-in default. Unknown keys and bad values are refused (`invalid_argument`), naming the file.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from coordinator.arguments import MATCHES, POLICIES
from coordinator.disk.layout import STATE_DIR_NAME
from coordinator.errors import CoordinatorError, ErrorCode

OWN_FILE = ".edit-coordinator.toml"
PYPROJECT = "pyproject.toml"
TABLE = "edit-coordinator"

# key in the file -> (attribute of the parsed arguments, allowed values or None for any string; BOOLEAN for
# true / false). Every key a document names must be here: tests/coordinator/cli/test_root_and_config.py
# reads the config examples of README.md and docs/ back through `project_config`.
BOOLEAN = (True, False)
KEYS: dict[str, tuple[str, tuple[str, ...] | tuple[bool, ...] | None]] = {
    "policy": ("policy", tuple(POLICIES)),
    "match": ("match", tuple(MATCHES)),
    "durability": ("durability", ("fsync", "none")),
    "redis-url": ("redis_url", None),
    "server": ("server", None),
    # coordinator.git.autocommit reads it at each session's end (so a change needs no restart); a session's
    # own EDIT_COORDINATOR_AUTO_COMMIT, forwarded with its hook events, wins over it.
    "auto-commit": ("auto_commit", BOOLEAN),
}

# The built-in defaults of the settled options that have one (the others default to None).
BUILT_IN = {"durability": "fsync"}


def _never_found(folder: Path, home: Path | None) -> bool:
    return folder == Path(folder.anchor) or (home is not None and folder == home)


def _home() -> Path | None:
    home = os.environ.get("HOME")
    return Path(os.path.realpath(home)) if home else None


def find_root(start: str | os.PathLike[str] | None = None) -> str:
    """The repository root for a command run in `start` (default: the current folder); see the module
    docstring. Raises `invalid_argument` for `/` or the home folder outside any repository."""
    here = Path(os.path.realpath(start if start is not None else os.getcwd()))
    home = _home()
    for folder in (here, *here.parents):
        if _never_found(folder, home):
            continue
        if (folder / STATE_DIR_NAME).is_dir() or (folder / ".git").exists():
            return str(folder)
    if _never_found(here, home):
        where = "the home folder" if here == home else "/"
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"The current folder is {where} ({here}), which is no repository: run the command from inside the "
            f"repository whose files it coordinates, or name it with --root PATH (--root {here} to really use "
            f"{where}).",
        )
    return str(here)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"The project config {path} is not valid TOML ({exc}): fix or remove it."
        ) from None
    except OSError as exc:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"The project config {path} cannot be read ({exc.strerror or exc})."
        ) from None


def _table(root: Path) -> tuple[Path, dict[str, Any]] | None:
    own = root / OWN_FILE
    if own.is_file():
        return own, _read_toml(own)
    pyproject = root / PYPROJECT
    if pyproject.is_file():
        tool = _read_toml(pyproject).get("tool")
        table = tool.get(TABLE) if isinstance(tool, dict) else None
        if table is not None:
            if not isinstance(table, dict):
                raise CoordinatorError(
                    ErrorCode.INVALID_ARGUMENT, f"[tool.{TABLE}] in {pyproject} must be a table of settings."
                )
            return pyproject, table
    return None


def project_config(root: str | os.PathLike[str]) -> dict[str, str | bool]:
    """The defaults the project config of `root` sets: {attribute of the parsed arguments: value}; {} when
    there is no config. Refuses unknown keys and values outside a key's choices."""
    found = _table(Path(root))
    if found is None:
        return {}
    path, table = found
    settled: dict[str, str | bool] = {}
    for raw_key, value in table.items():
        key = str(raw_key).replace("_", "-")
        if key not in KEYS:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                f"The project config {path} has an unknown key {raw_key!r}: the keys are {', '.join(KEYS)}.",
            )
        attribute, choices = KEYS[key]
        if not _allowed(value, choices):
            allowed = (
                "true or false"
                if choices is BOOLEAN
                else f"one of {', '.join(map(str, choices))}"
                if choices
                else "a non-empty string"
            )
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT, f"The project config {path} sets {raw_key} = {value!r}: give {allowed}."
            )
        settled[attribute] = value
    return settled


def engine_options(root: str, environ: Any = os.environ) -> dict[str, Any]:
    """The Coordinator's options a command on `root` runs with when it is given no flag: each option's
    variable, else the project config, else the built-in default (the order `settle` gives a parsed command
    line). For a coordinator made without a command line (a hook decided in the hook's own process), so that
    it works on the same Redis, with the same policy, as the repository's hook service (`serve --root`)."""
    from coordinator.cli.common import MATCH_ENV, POLICY_ENV
    from coordinator.state.connection import REDIS_URL_ENV

    config = project_config(root)
    options: dict[str, Any] = {}
    for attribute, variable in (("redis_url", REDIS_URL_ENV), ("policy", POLICY_ENV), ("match", MATCH_ENV)):
        value = environ.get(variable) or config.get(attribute)
        if value:
            options[attribute] = value
    options["durability"] = config.get("durability", BUILT_IN["durability"])
    return options


def _allowed(value: object, choices: tuple[str, ...] | tuple[bool, ...] | None) -> bool:
    if choices is BOOLEAN:
        return isinstance(value, bool)
    return isinstance(value, str) and bool(value) and (choices is None or value in choices)


def settle(args: Any) -> None:
    """Fill in what the command line left open, in place: the root (`find_root`), then each option the
    command has that is still None from the project config, else its built-in default."""
    if getattr(args, "root", None) is None:
        args.root = find_root()
    attributes = [attribute for attribute, _ in KEYS.values() if hasattr(args, attribute)]
    if not attributes:
        return
    config = project_config(os.path.realpath(args.root)) if os.path.isdir(args.root) else {}
    for attribute in attributes:
        if getattr(args, attribute) is None:
            setattr(args, attribute, config.get(attribute, BUILT_IN.get(attribute)))
