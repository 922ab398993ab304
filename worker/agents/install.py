"""Install a pinned agent release with npm into a cache folder of its own, and reuse it when it is there.

The cache is `$EDIT_COORDINATOR_AGENTS_CACHE` or `~/.cache/edit-coordinator/agents`, one folder per package and
version (`claude-code-2.1.328`), so that several versions live side by side and an upgrade never touches the
previous one. A folder counts as installed once its binary answers `--version` with the pinned version; a
half-finished install is redone."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from worker.agents.versions import PINNED, Pinned

INSTALL_TIMEOUT_S = 600


class AgentUnavailable(RuntimeError):
    """The agent cannot be run here (no node or npm, or the install failed): the reason says which and why."""


def cache_root() -> Path:
    env = os.environ.get("EDIT_COORDINATOR_AGENTS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "edit-coordinator" / "agents"


def binary_path(pin: Pinned, root: Path | None = None) -> Path:
    return (root or cache_root()) / pin.folder / "node_modules" / ".bin" / pin.binary


def _answers_version(binary: Path, version: str) -> bool:
    if not binary.exists():
        return False
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and version in out.stdout


def ensure(agent: str, root: Path | None = None) -> Path:
    """The path of the pinned agent's binary, installed with `npm install --prefix` first if it is not in the
    cache. Raises AgentUnavailable with the reason (no node/npm, npm's own error) when it cannot be."""
    pin = PINNED[agent]
    binary = binary_path(pin, root)
    if _answers_version(binary, pin.version):
        return binary
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise AgentUnavailable(f"{tool} is not installed: the real {agent} tests need Node.js and npm")
    folder = binary.parents[2]
    folder.mkdir(parents=True, exist_ok=True)
    cmd = ["npm", "install", "--prefix", str(folder), "--no-audit", "--no-fund", pin.spec]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise AgentUnavailable(f"`{' '.join(cmd)}` did not finish: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise AgentUnavailable(f"`{' '.join(cmd)}` failed ({done.returncode}): {' / '.join(tail)}")
    if not _answers_version(binary, pin.version):
        raise AgentUnavailable(f"{pin.spec} installed into {folder}, but {binary} --version does not answer it")
    return binary
