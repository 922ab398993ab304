"""scripts/fastpath_figures.py: its loops make real edits (the engine's file holds every one), and it prints
every figure of issue 30's in-process list: CPU per edit with the Redis server's, lock hold time, the
ratios to the floor and to both unsafe loops, the paced p50 and p99, and the floor's own CPU per edit and
paced p50 and p99 beside them."""

from __future__ import annotations

import re
from pathlib import Path

from tests.scripts import run_tool


def test_the_figures_come_from_edits_that_land(tmp_path: Path) -> None:
    out = run_tool(
        "fastpath_figures.py", "--seconds", "0.2", "--rounds", "1", "--paced", "20", "--pause-ms", "1",
        env={"TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []  # its scratch folder is removed at the end
    landed = re.search(r"every edit the engine acknowledged \((\d+)\) is in its file", out.stdout)
    assert landed is not None and int(landed.group(1)) > 20, out.stdout
    figures = re.search(
        r"CPU ([\d.]+) ms per edit in this process \+ ([\d.]+) ms in redis-server = ([\d.]+) ms; lock held (\d+) us "
        r"per edit; against the floor ([\d.]+)x; against unsafe \(disk-dependent\) ([\d.]+)x, atomic unsafe ([\d.]+)x",
        out.stdout,
    )
    assert figures is not None, out.stdout
    cpu, redis_cpu, total = (float(x) for x in figures.groups()[:3])
    assert cpu > 0 and abs(cpu + redis_cpu - total) < 0.002
    assert all(float(x) > 0 for x in figures.groups()[4:])
    paced = re.search(r"p50 ([\d.]+) ms, p99 ([\d.]+) ms", out.stdout)
    assert paced is not None and 0 < float(paced.group(1)) <= float(paced.group(2)), out.stdout
    floor = re.search(
        r"the same-I/O floor: CPU ([\d.]+) ms per edit in this process \+ ([\d.]+) ms in redis-server = ([\d.]+) ms",
        out.stdout,
    )
    assert floor is not None and float(floor.group(1)) > 0, out.stdout
    assert abs(float(floor.group(1)) + float(floor.group(2)) - float(floor.group(3))) < 0.002
    floor_paced = re.search(r"the floor paced the same way: p50 ([\d.]+) ms, p99 ([\d.]+) ms", out.stdout)
    assert floor_paced is not None and 0 < float(floor_paced.group(1)) <= float(floor_paced.group(2)), out.stdout
