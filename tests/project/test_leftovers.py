"""The suite's session-end check (tests/conftest.py): a process running from the run's folders is found."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import REPO_ROOT
from tests.conftest import leftover_processes

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder of this test's own (not tmp_path: pytest runs elsewhere on the machine may rename an older
    basetemp to garbage-* while this one runs, which would change the working folder a process reports)."""
    path = Path(tempfile.mkdtemp(prefix="ec-leftover-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_process_running_in_the_runs_folder_is_a_leftover(folder: Path) -> None:
    tmp_path = folder
    (tmp_path / "work").mkdir()
    proc = subprocess.Popen(["sleep", "60"], cwd=tmp_path / "work")
    try:
        assert proc.pid in leftover_processes(str(tmp_path))
        assert proc.pid not in leftover_processes(str(tmp_path / "other"))
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in leftover_processes(str(tmp_path))


def test_a_process_naming_the_runs_folder_is_a_leftover(folder: Path) -> None:
    tmp_path = folder
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path / "state")], cwd="/")
    try:
        for _ in range(100):  # the new program's command line is readable once exec has set it up
            if leftover_processes(str(tmp_path)):
                break
            time.sleep(0.02)
        assert proc.pid in leftover_processes(str(tmp_path))
    finally:
        proc.kill()
        proc.wait()


def test_a_run_that_leaves_a_process_running_fails_and_ends_it(folder: Path) -> None:
    """The check as a run meets it: an inner pytest run (this suite's session-end hook, nothing else) whose
    one test passes but leaves `sleep` running in its folder exits 1, names the process, and ends it."""
    (folder / "conftest.py").write_text("from tests.conftest import pytest_sessionfinish  # noqa: F401\n")
    (folder / "test_leaks.py").write_text(
        "import subprocess\n\n\n"
        "def test_passes_but_leaves_a_process(tmp_path):\n"
        "    subprocess.Popen(['sleep', '300'], cwd=tmp_path)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         f"--basetemp={folder / 'base'}", f"--rootdir={folder}", str(folder / "test_leaks.py")],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed" in done.stdout and "LEFTOVER PROCESSES" in done.stdout and "sleep 300" in done.stdout
    assert not leftover_processes(str(folder)), "the leaked process was not ended"
