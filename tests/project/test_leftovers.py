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
from tests.conftest import RUN_MARK, leftover_processes

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


def test_a_process_carrying_the_runs_mark_is_a_leftover_wherever_it_runs(folder: Path) -> None:
    """A daemon started for a root outside the run's folders (a scratch folder in /tmp) runs elsewhere and
    names nothing of the run; the mark it inherited finds it, and only that run's mark."""
    env = {**os.environ, RUN_MARK: "run-a"}
    proc = subprocess.Popen(["sleep", "60"], cwd="/", env=env, start_new_session=True)
    try:
        for _ in range(100):  # the environment is readable once exec has set it up
            if leftover_processes(None, "run-a"):
                break
            time.sleep(0.02)
        assert proc.pid in leftover_processes(None, "run-a")
        assert proc.pid not in leftover_processes(None, "run-b") and proc.pid not in leftover_processes(str(folder))
    finally:
        proc.kill()
        proc.wait()


def test_a_run_that_leaves_processes_running_fails_and_ends_them(folder: Path) -> None:
    """The check as a run meets it: an inner pytest run (this suite's hooks) whose one test passes but leaves
    one process in its folder and one daemon elsewhere exits 1, names both and ends them; a process of the
    calling run (this one's mark, not the inner run's) is left alone."""
    (folder / "conftest.py").write_text(
        "from tests.conftest import pytest_configure, pytest_sessionfinish  # noqa: F401\n"
    )
    (folder / "test_leaks.py").write_text(
        "import subprocess\n\n\n"
        "def test_passes_but_leaves_processes(tmp_path):\n"
        "    subprocess.Popen(['sleep', '301'], cwd=tmp_path)\n"
        "    subprocess.Popen(['sleep', '302'], cwd='/', start_new_session=True)\n"
    )
    mine = subprocess.Popen(["sleep", "303"], cwd="/", start_new_session=True)  # carries this run's mark
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
             f"--basetemp={folder / 'base'}", f"--rootdir={folder}", str(folder / "test_leaks.py")],
            cwd=folder, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 1, done.stdout + done.stderr
        assert "1 passed" in done.stdout and "LEFTOVER PROCESSES" in done.stdout, done.stdout
        assert "sleep 301" in done.stdout and "sleep 302" in done.stdout and "sleep 303" not in done.stdout
        assert mine.poll() is None  # the calling run's process lives on
        ended = [pid for pid, cmd in leftover_processes(None, os.environ[RUN_MARK]).items() if "sleep 30" in cmd]
        assert ended == [mine.pid], ended
    finally:
        mine.kill()
        mine.wait()
