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


def test_load_warning_names_the_load_and_points_to_instruction_counts() -> None:
    assert measure.load_warning([0.4, 0.3, 0.2], 2) is None  # a quiet machine: nothing to say
    assert measure.load_warning([0.9, 0.3, 0.2], 2, steal=0.01) is None
    busy = measure.load_warning([3.2, 2.0, 1.0], 2)
    assert busy is not None and "load average 3.20 on 2 cores" in busy and "--instructions" in busy
    stolen = measure.load_warning([0.1, 0.1, 0.1], 2, steal=0.2, during=True)
    assert stolen is not None and "20 % of the CPU time stolen" in stolen
    assert measure.load_warning(None, None) is None


def test_bench_on_a_loaded_machine_says_so_before_and_after_the_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The suite itself is stubbed (it takes minutes); what is checked is what the command prints around it."""
    from coordinator_bench import suite

    monkeypatch.setattr(measure.os, "getloadavg", lambda: (7.5, 6.0, 5.0))
    monkeypatch.setattr(measure.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(suite, "run_suite", lambda opts: [])
    assert bench_cli.main(["--quick", "--scenario", "solo", "--out", str(tmp_path / "out")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("the machine is loaded (load average 7.50 on 2 cores") == 2, err
    assert "scripts/engine_ab.py A B --instructions" in err
