"""The state folder's layout: the one place that names what lives where.

Every process that touches a repository's coordination state on disk finds it through here::

    <root>/.edit-coordinator/            the state folder (`state_dir_of`), never committed
        .gitignore                       "*" (`ensure_state_dir`)
        locks/                           one lock file per path, never deleted (disk/locks.py)
        tmp/                             temporary files of atomic replaces (disk/fsio.py)
        fences/                          lease fences (state/leases.py)
        tickets/                         agents' write tickets, one mark per ticketed path (disk/tickets.py)
        history/                         pre-images and indexes (the history/ package owns what is inside)
        redis/                           the embedded server's pid, log, socket record (state/embedded.py)
        retention.json                   the history retention policy (history/retention.py)
        metrics/<pid>/                   a multi-worker serve's Prometheus counts (its supervisor's pid),
                                         one file per worker (server/metrics.py; new when serve starts)
        repository-id                    the repository's Redis namespace (`namespace_for`)
        epoch                            the Redis state generation last seen (state/views.py, reset detection)
        hook-service/                    the per-repository hook service: sock, token, pid, log (cli/hookservice.py)
        hook-failures.log                the hooks' own failures, newest last (agents/failures.py)

The Redis namespace of a repository (`namespace_for`) is decided here too: an id kept in the state folder,
so that every process (library, service, commands, benchmarks) on the same checkout meets the same keys,
wherever the checkout is mounted, and two checkouts at the same path on two hosts sharing one Redis do not.

This module does no I/O beyond creating the state folder and its `.gitignore` and the repository id, and
imports only the ground module `coordinator.hashing`: any module may depend on it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

from coordinator.hashing import path_hash

__all__ = [
    "STATE_DIR_NAME",
    "ensure_state_dir",
    "epoch_file",
    "fences_dir",
    "history_dir",
    "hook_failures_file",
    "hook_service_dir",
    "is_state_key",
    "locks_dir",
    "metrics_dir",
    "namespace_for",
    "redis_dir",
    "retention_config",
    "state_dir_of",
    "tickets_dir",
    "tmp_dir",
]

STATE_DIR_NAME = ".edit-coordinator"
LOCKS = "locks"
TMP = "tmp"
FENCES = "fences"
TICKETS = "tickets"
CALLS = "calls"
HISTORY = "history"
REDIS = "redis"
METRICS = "metrics"
RETENTION_CONFIG = "retention.json"
REPOSITORY_ID = "repository-id"
EPOCH = "epoch"
HOOK_SERVICE = "hook-service"  # the per-repository hook service (coordinator/cli/hookservice.py)
HOOK_FAILURES = "hook-failures.log"  # the hooks' own failures (coordinator/agents/failures.py)
_PRIOR_STATE = (LOCKS, HISTORY, FENCES, REDIS)

PathLike = str | os.PathLike[str]


def hook_service_dir(state_dir: PathLike) -> Path:
    """The hook service's folder: its socket `sock`, its token `token`, `pid`, `log` and the start lock."""
    return Path(state_dir) / HOOK_SERVICE


def hook_failures_file(state_dir: PathLike) -> Path:
    """The log of the hooks' own failures (coordinator/agents/failures.py owns its lines)."""
    return Path(state_dir) / HOOK_FAILURES


def state_dir_of(root: PathLike) -> Path:
    """The state folder of the repository at `root` (its real path: symlinks resolved)."""
    return Path(os.path.realpath(os.fspath(root))) / STATE_DIR_NAME


def locks_dir(state_dir: PathLike) -> Path:
    return Path(state_dir) / LOCKS


def tmp_dir(state_dir: PathLike) -> Path:
    return Path(state_dir) / TMP


def fences_dir(state_dir: PathLike) -> Path:
    return Path(state_dir) / FENCES


def tickets_dir(state_dir: PathLike) -> Path:
    """The write tickets' marks (disk/tickets.py owns what is inside)."""
    return Path(state_dir) / TICKETS


def calls_dir(state_dir: PathLike) -> Path:
    """The agents' open write calls' copy on disk (disk/calljournal.py owns what is inside)."""
    return Path(state_dir) / CALLS


def history_dir(state_dir: PathLike) -> Path:
    """The history's folder; what is inside it belongs to the history/ package."""
    return Path(state_dir) / HISTORY


def redis_dir(state_dir: PathLike) -> Path:
    """The embedded Redis server's folder (pid, log, recorded socket); state/embedded.py owns what is inside."""
    return Path(state_dir) / REDIS


def metrics_dir(state_dir: PathLike) -> Path:
    """The folder of a multi-worker service's metric files (server/metrics.py)."""
    return Path(state_dir) / METRICS


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


def epoch_file(state_dir: PathLike) -> Path:
    return Path(state_dir) / EPOCH


def namespace_for(root: PathLike, state_dir: PathLike | None = None) -> str:
    """The Redis namespace of the repository at `root`: the id in its state folder's `repository-id`.

    A state folder without one gets one (created once, atomically: concurrent first users agree): a
    random id for a new folder; for a folder that already holds state from before ids were kept (locks,
    history, fences or the embedded server's folder), the hash of the root's real path that named it
    then, so existing namespaces keep working. Where there is no state folder yet (a command that only
    inspects, in a folder nobody has used), nothing is created and that path hash is returned.
    """
    sd = Path(state_dir) if state_dir is not None else state_dir_of(root)
    id_file = sd / REPOSITORY_ID
    found = _read_id(id_file)
    if found is not None:
        return found
    legacy = path_hash(os.path.realpath(os.fspath(root)))
    if not sd.is_dir():
        return legacy
    chosen = legacy if any((sd / name).exists() for name in _PRIOR_STATE) else uuid.uuid4().hex
    tmp = sd / f".{REPOSITORY_ID}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
        tmp.write_text(chosen + "\n", encoding="ascii")
        with contextlib.suppress(FileExistsError):
            os.link(tmp, id_file)  # create-if-absent: the first writer wins
    except OSError:
        return legacy  # a read-only state folder: the path hash, as before ids were kept
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return _read_id(id_file) or chosen


def _read_id(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if text and all(c in "0123456789abcdef" for c in text) and len(text) <= 64 else None
