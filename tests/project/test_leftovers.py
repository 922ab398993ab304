"""The suite's session-end check (tests/conftest.py): a process running from the run's folders is found."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import leftover_processes

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def test_a_process_running_in_the_runs_folder_is_a_leftover(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    proc = subprocess.Popen(["sleep", "60"], cwd=tmp_path / "work")
    try:
        assert proc.pid in leftover_processes(str(tmp_path))
        assert proc.pid not in leftover_processes(str(tmp_path / "other"))
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in leftover_processes(str(tmp_path))


def test_a_process_naming_the_runs_folder_is_a_leftover(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path / "state")])
    try:
        assert proc.pid in leftover_processes(str(tmp_path))
    finally:
        proc.kill()
        proc.wait()
