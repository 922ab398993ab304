"""The state folder's layout: the one place that names what lives where.

Every process that touches a repository's coordination state on disk finds it through here::

    <root>/.edit-coordinator/            the state folder (`state_dir_of`), never committed
        .gitignore                       "*" (`ensure_state_dir`)
        locks/                           one lock file per path, never deleted (locks.py)
        tmp/                             temporary files of atomic replaces (fsio.py)
        fences/                          lease fences (leases.py)
        history/                         pre-images and indexes (history.py owns what is inside)
        redis/                           the embedded server's pid, log, socket record (embedded.py)
        retention.json                   the history retention policy (retention.py)

The Redis namespace of a repository (`namespace_for`) is derived here too, from the real path of its root,
so that every process (library, service, commands, benchmarks) on the same checkout meets the same keys.

This module does no I/O beyond creating the state folder and its `.gitignore`, and imports nothing else of
the package at load time: any module may depend on it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = [
    "STATE_DIR_NAME",
    "ensure_state_dir",
    "fences_dir",
    "history_dir",
    "is_state_key",
    "locks_dir",
    "namespace_for",
    "redis_dir",
    "retention_config",
    "state_dir_of",
    "tmp_dir",
]

STATE_DIR_NAME = ".edit-coordinator"
LOCKS = "locks"
TMP = "tmp"
FENCES = "fences"
HISTORY = "history"
REDIS = "redis"
RETENTION_CONFIG = "retention.json"

PathLike = str | os.PathLike[str]


def state_dir_of(root: PathLike) -> Path:
    """The state folder of the repository at `root` (its real path: symlinks resolved)."""
    return Path(os.path.realpath(os.fspath(root))) / STATE_DIR_NAME


def locks_dir(state_dir: PathLike) -> Path:
    return Path(state_dir) / LOCKS


def tmp_dir(state_dir: PathLike) -> Path:
    return Path(state_dir) / TMP


def fences_dir(state_dir: PathLike) -> Path:
    return Path(state_dir) / FENCES


def history_dir(state_dir: PathLike) -> Path:
    """The history's folder; what is inside it belongs to history.py."""
    return Path(state_dir) / HISTORY


def redis_dir(state_dir: PathLike) -> Path:
    """The embedded Redis server's folder (pid, log, recorded socket); embedded.py owns what is inside."""
    return Path(state_dir) / REDIS


def retention_config(state_dir: PathLike) -> Path:
    return Path(state_dir) / RETENTION_CONFIG


def ensure_state_dir(state_dir: PathLike) -> Path:
    """Create `state_dir` (with parents) and its `.gitignore` of `*` if missing; return it.

    Mode "x": concurrent creators never truncate each other, and an existing file is left as it is. A
    `.gitignore` that cannot be written (read-only folder) is not an error: the state works without it.
    """
    path = Path(state_dir)
    path.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError), open(path / ".gitignore", "x", encoding="utf-8") as f:
        f.write("*\n")
    return path


def is_state_key(key: str) -> bool:
    """Is this root-relative POSIX path the state folder or inside it (out of bounds for agents)?"""
    return key == STATE_DIR_NAME or key.startswith(STATE_DIR_NAME + "/")


def namespace_for(root: PathLike) -> str:
    """The Redis namespace of the repository at `root`: a hash of its real path."""
    from .state import path_hash  # late: state imports redis, which this module does not need

    return path_hash(os.path.realpath(os.fspath(root)))
