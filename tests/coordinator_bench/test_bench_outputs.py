"""Where `bench` writes without --out: the checkout's results folder when it runs from the source tree, the
current folder for an installed copy (never into site-packages)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator_bench import cli as bench_cli
from coordinator_bench import measure


def _installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The package as pip installs it: its parent is site-packages (no pyproject.toml of the project)."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "coordinator_bench").mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(measure, "REPO", site)
    monkeypatch.chdir(work)
    return site, work


def test_an_installed_copy_writes_results_and_report_into_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    site, work = _installed(tmp_path, monkeypatch)
    assert bench_cli._default_out(False) == work / "bench-results"
    assert bench_cli._default_out(True) == work / "bench-results" / "quick"
    assert measure.default_markdown() == work / "BENCHMARKS.md"
    assert bench_cli.main(["--report"]) == 2  # no results yet: says where it looked
    assert str(work / "bench-results") in capsys.readouterr().err.replace("\n", "")
    assert not any(p.name in ("results", "BENCHMARKS.md") for p in site.rglob("*"))


def test_a_source_checkout_keeps_its_results_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "edit-coordinator"\n')
    monkeypatch.setattr(measure, "REPO", tmp_path)
    assert bench_cli._default_out(False) == tmp_path / "coordinator_bench" / "results"
    assert measure.default_markdown() == tmp_path / "BENCHMARKS.md"
    assert measure.source_checkout() == tmp_path
