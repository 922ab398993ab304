"""scripts/syscall_floor.py: its loops make real edits (the files hold every one), and it prints the four
ratios to the unsafe loop."""

from __future__ import annotations

import re

from tests.scripts import run_tool


def test_the_lean_loop_and_the_engine_make_edits_that_land() -> None:
    out = run_tool("syscall_floor.py", "--seconds", "0.2", "--rounds", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    landed = re.search(r"every edit of the lean loop \((\d+)\) and of the engine \((\d+)\) is in its file", out.stdout)
    assert landed is not None, out.stdout
    assert int(landed.group(1)) > 0 and int(landed.group(2)) > 0
    ratios = re.search(
        r"disk calls only ([\d.]+)x, with Redis ([\d.]+)x, lean ([\d.]+)x, the engine ([\d.]+)x", out.stdout
    )
    assert ratios is not None, out.stdout
    assert all(float(x) > 0 for x in ratios.groups())
