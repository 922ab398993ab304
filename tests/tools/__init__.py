"""Tests of the scripts in tools/. `run_tool` runs one as a person would, with this checkout importable."""

from __future__ import annotations

import os
import subprocess
import sys

from tests import REPO_ROOT


def run_tool(script: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`python3 tools/<script> <args>`, its output captured; the caller checks the exit status."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools" / script), *args],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )  # fmt: skip
