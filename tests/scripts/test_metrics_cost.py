"""scripts/metrics_cost.py: each side's edit loop lands every edit (the child checks the file), the
multiprocess side writes its counts into its folder, and the scrape figures come out."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.scripts import run_tool


def test_the_multiprocess_side_lands_its_edits_and_counts_in_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The side with the most wiring (the service's observers, counts in files); the other sides run the
    same loop with less of it."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    out = run_tool("metrics_cost.py", "child", "multiprocess", "--edits", "12")
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"edits": 12}  # the child checked the file
    assert any(p.name.startswith("counter_") for p in tmp_path.iterdir())  # its counts went to files


@pytest.mark.slow
def test_the_scrape_figures_are_printed() -> None:
    out = run_tool("metrics_cost.py", "scrape", "--paths", "4", "--versions", "2", "--workers", "2")
    assert out.returncode == 0, out.stderr[-2000:]
    entries = re.search(r"history_entries: ([\d,.]+)", out.stdout)
    assert entries is not None and float(entries.group(1).replace(",", "")) == 8, out.stdout
    for name in ("footprint_first_ms", "footprint_unchanged_ms", "scrape_one_process_ms", "scrape_multiprocess_ms"):
        assert re.search(rf"{name}: [\d,.]+", out.stdout), out.stdout
