"""Tests of the scripts in scripts/. `run_tool` runs one as a person would, with this checkout importable;
`load_tool` imports one as a module, for tests of its functions."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from types import ModuleType

from tests import REPO_ROOT


def run_tool(
    script: str, *args: str, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python3 scripts/<script> <args>`, its output captured; the caller checks the exit status. `env`:
    variables set for the script besides this environment's."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / script), *args],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )  # fmt: skip


def load_tool(name: str) -> ModuleType:
    """scripts/<name>.py imported as the module `name` (registered in sys.modules, as dataclasses need)."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
