"""scripts/engine_ab.py: both sides' processes make real edits that land, in alternating order, and the summary
pairs the runs as it says."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO_ROOT
from tests.scripts import load_tool, run_tool

engine_ab = load_tool("engine_ab")


def test_the_order_alternates_which_side_goes_first() -> None:
    assert engine_ab.order(3) == [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1)]


def test_the_summary_pairs_runs_by_index_and_takes_medians() -> None:
    s = engine_ab.Sample
    a = [s(100.0, 90.0, 120.0, 10), s(200.0, 180.0, 220.0, 10), s(300.0, 280.0, 320.0, 10)]
    b = [s(90.0, 80.0, 100.0, 10), s(210.0, 190.0, 230.0, 10), s(150.0, 140.0, 160.0, 10)]
    f = engine_ab.summary(a, b)
    assert f["a_best_wall_us"] == 200.0 and f["b_best_wall_us"] == 150.0
    assert f["ratio"] == 0.75
    assert f["b_faster"] == 2.0  # runs 1 and 3; run 2 A was faster


def test_the_processes_leave_no_scratch_folder(tmp_path: Path) -> None:
    """Each side's process removes its repository (and its history) when it ends."""
    out = run_tool(
        "engine_ab.py", str(REPO_ROOT), str(REPO_ROOT), "--runs", "1", "--edits", "10", "--reps", "1",
        env={"TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_a_folder_against_itself_makes_edits_that_land_on_both_sides() -> None:
    out = run_tool("engine_ab.py", str(REPO_ROOT), str(REPO_ROOT), "--runs", "2", "--edits", "40", "--reps", "2")
    assert out.returncode == 0, out.stderr[-2000:]
    turns = re.findall(r"run (\d) ([AB]): best .* \((\d+) edits\)", out.stdout)
    assert [(r, side) for r, side, _ in turns] == [("1", "A"), ("1", "B"), ("2", "B"), ("2", "A")]
    assert all(int(n) == 80 for _, _, n in turns)
    assert re.search(r"B / A [\d.]+ \(best-repetition wall\); B faster in \d of 2 runs", out.stdout), out.stdout


def test_a_folder_without_the_package_is_refused_with_what_to_give(tmp_path: Path) -> None:
    out = run_tool("engine_ab.py", str(tmp_path), str(REPO_ROOT), "--runs", "1", "--edits", "1", "--reps", "1")
    assert out.returncode != 0
    assert "no coordinator package in this folder" in out.stderr


def test_a_child_that_imported_another_copy_of_the_package_fails(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), engine_ab.SIDE_ENV: str(tmp_path)}
    script = str(REPO_ROOT / "scripts" / "engine_ab.py")
    out = subprocess.run(
        [sys.executable, script, "--child", "--edits", "1", "--reps", "1"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 1
    assert "not the side's own package" in out.stdout


@pytest.mark.slow  # about a minute under valgrind; .ci/run runs it in its slow step
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_a_side_is_counted_under_valgrind_from_processes_whose_edits_land() -> None:
    per_edit = engine_ab.count_side(REPO_ROOT, 24)  # a child that fails, or a file lacking an edit, raises
    assert 50_000 < per_edit < 20_000_000  # an edit of this engine: hundreds of thousands, not start-up noise


def test_instructions_mode_prints_each_sides_count_and_the_ratio(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    counts = iter([800_000.0, 600_000.0])
    monkeypatch.setattr(engine_ab, "count_side", lambda folder, edits: next(counts))
    monkeypatch.setattr(engine_ab.shutil, "which", lambda name: "/usr/bin/" + name)
    assert engine_ab.main([str(REPO_ROOT), str(REPO_ROOT), "--instructions", "--edits", "40"]) == 0
    out = capsys.readouterr().out
    assert f"{REPO_ROOT}: 800,000 instructions per edit (40 and 10 edits)" in out
    assert "B / A 0.750 (instructions per edit)" in out


def test_instructions_mode_without_valgrind_says_what_to_install(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATH": str(tmp_path)}
    script = str(REPO_ROOT / "scripts" / "engine_ab.py")
    out = subprocess.run(
        [sys.executable, script, str(REPO_ROOT), str(REPO_ROOT), "--instructions"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "valgrind is not installed" in out.stderr
