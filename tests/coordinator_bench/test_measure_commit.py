"""coordinator_bench.measure.commit: the working tree counts as changed only for what runs, not for the bench's
own outputs (results copied in before a report)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from coordinator_bench import measure


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "coordinator_bench" / "results").mkdir(parents=True)
    (tmp_path / "coordinator_bench" / "results" / "solo.json").write_text("{}")
    (tmp_path / "BENCHMARKS.md").write_text("# Benchmarks\n")
    (tmp_path / "engine.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "start")
    monkeypatch.setattr(measure, "REPO", tmp_path)
    return tmp_path


def test_a_clean_tree_is_not_dirty_and_names_its_head(repo: Path) -> None:
    got = measure.commit()
    assert got["dirty"] is False
    assert got["commit"] and got["short"] == got["commit"][:7]


def test_changed_results_and_report_do_not_make_the_tree_dirty(repo: Path) -> None:
    (repo / "coordinator_bench" / "results" / "solo.json").write_text('{"changed": true}')
    (repo / "BENCHMARKS.md").write_text("# Benchmarks\n\nregenerated\n")
    assert measure.commit()["dirty"] is False


def test_a_changed_source_file_makes_the_tree_dirty(repo: Path) -> None:
    (repo / "coordinator_bench" / "results" / "solo.json").write_text('{"changed": true}')
    (repo / "engine.py").write_text("x = 2\n")
    assert measure.commit()["dirty"] is True
