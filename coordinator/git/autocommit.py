"""Optional commit of a session's uncommitted writes when it ends (the hooks' Stop / SessionEnd events).

Off by default. Switched on by EDIT_COORDINATOR_AUTO_COMMIT=1 (0 switches it off whatever the config says),
or by `auto-commit = true` in the project config (.edit-coordinator.toml at the root, or
[tool.edit-coordinator] in pyproject.toml).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.git.commit import commit_session

AUTO_COMMIT_ENV = "EDIT_COORDINATOR_AUTO_COMMIT"
CONFIG_KEY = "auto-commit"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _config_value(root: str) -> object:
    own = Path(root, ".edit-coordinator.toml")
    try:
        if own.is_file():
            return tomllib.loads(own.read_text()).get(CONFIG_KEY)
        pyproject = Path(root, "pyproject.toml")
        if pyproject.is_file():
            tool = tomllib.loads(pyproject.read_text()).get("tool", {})
            return tool.get("edit-coordinator", {}).get(CONFIG_KEY)
    except (OSError, tomllib.TOMLDecodeError, AttributeError):
        return None
    return None


def enabled(root: str, env: Mapping[str, str] | None = None) -> bool:
    """Auto-commit on for a session whose environment is `env` (None: this process's). The hooks pass the
    variables the session's hook client forwarded (coordinator.agents.core.FORWARDED_ENV), so that the
    process that decides (a hook service started by another session) never uses its own."""
    value = (os.environ if env is None else env).get(AUTO_COMMIT_ENV)
    if value is not None and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    return _config_value(root) is True


def on_session_end(root: str, session_id: str, env: Mapping[str, str] | None = None) -> str | None:
    """Commit the session's uncommitted writes if auto-commit is on for it (`enabled(root, env)`); the commit
    id, or None (off, nothing to commit, or refused: a refusal never blocks the session's end, the writes
    stay uncommitted)."""
    if not enabled(root, env):
        return None
    try:
        result = commit_session(root, session_id, f"Work of session {session_id}")
    except CoordinatorError as exc:
        if exc.code in (ErrorCode.NO_CHANGE, ErrorCode.STALE, ErrorCode.INVALID_ARGUMENT):
            return None
        raise
    return result.commit
