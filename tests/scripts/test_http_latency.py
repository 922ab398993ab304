"""scripts/http_latency.py, the added-latency measurement: every column runs its edits for real (the files
hold them), a lost edit is reported instead of figures, and the floor answers like the service."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator_bench.harness import SlotEditor
from tests.scripts import load_tool, run_tool

http_latency = load_tool("http_latency")


def test_every_column_runs_its_edits_and_they_land() -> None:
    out = run_tool("http_latency.py", "--edits", "24", "--rounds", "2")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line.split()}
    for name in http_latency.COLUMNS:
        assert rows[name][1] == "24", out.stdout  # 2 rounds of 12 edits, after the warm-up
        assert float(rows[name][2]) > 0
    assert "every acknowledged edit is in its file" in out.stdout
    assert rows["load"][0:2] == ["load", "average"]


def test_a_lost_edit_is_reported_not_measured(tmp_path: Path) -> None:
    editor = SlotEditor("f.txt", lambda path, old, new: None)  # acknowledges, writes nothing
    editor.write_file(tmp_path)
    editor.step()
    with pytest.raises(SystemExit, match="does not hold the 1 edits"):
        http_latency.check(tmp_path, {"inproc": http_latency.Column("inproc", editor, None)})
    editor.values[0] = 0  # what the file holds
    http_latency.check(tmp_path, {"inproc": http_latency.Column("inproc", editor, None)})
