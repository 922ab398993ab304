"""Issue 30's in-process figures of the solo edit, in one run: CPU per edit (this process plus the Redis
server), paced latency, lock hold time, and the same-I/O floor and the unsafe loops beside the engine.

    python3 scripts/fastpath_figures.py [--seconds 2] [--rounds 3] [--paced 400] [--pause-ms 5]

The engine measured is the `coordinator` on PYTHONPATH (so a checkout of an older commit can be measured
with the same script). Per round, each for `--seconds`, alternating so that a drift of the machine hits
all alike:
- unsafe: read the file, replace, write it in place (no lock, no check); its speed is the disk's
  (open(O_TRUNC) waits for the previous write's writeback), so its ratio is labelled disk-dependent;
- atomic unsafe: the same, written to a temporary and renamed over the file (what a careful single-agent
  tool does), still no lock and no check;
- floor: the engine's own system calls with no logic between them and its one Redis round trip
  (scripts/syscall_floor.py `floor_step`): the most this design could reach if its Python cost nothing;
  its CPU per edit (this process plus the Redis server) is measured as the engine's is;
- engine: `Session.edit` of a 200-line counters file (durability none, the embedded Redis), timing each
  edit, with the CPU time of this process and of the redis-server process (its /proc/<pid>/stat)
  over the loop, and the lock hold time each result reports (`timings["lock_hold_s"]`).
Then `--paced` edits with a pause of `--pause-ms` between them (caches and the other core cold, as for
an agent that thinks between calls): p50 and p99 of each edit's wall time; then as many floor edits paced
the same way (what the paced targets are bounded by on this machine).

Printed: one line per round, then the medians. Every edit the engine acknowledged is checked to be in the
file at the end. Timed figures move with the machine's load (the load average is printed before and
after); the instruction count (scripts/engine_ab.py --instructions) does not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from syscall_floor import _total, _unsafe, floor_scratch, floor_step, rate

SLOTS = 200
_TICK = os.sysconf("SC_CLK_TCK")


def _atomic_unsafe(path: Path, seconds: float) -> float:
    """Read, replace, write a temporary beside the file and rename it over the file: no lock, no check."""
    tmp = path.with_name(path.name + ".tmp")

    def step() -> None:
        tmp.write_text(path.read_text().replace("s000 = ", "s000 = ", 1))
        os.replace(tmp, path)

    return rate(step, seconds)[0]


def _floor_loop(step: Callable[[], None], seconds: float, redis_pid: int) -> dict[str, float]:
    """The same-I/O floor back to back for `seconds`: edits per second, and CPU per edit of this process
    and of the Redis server (the floor's one round trip is a plain SET, lighter than the engine's record)."""
    c0, r0 = _self_cpu_s(), _proc_cpu_s(redis_pid)
    per_s, n = rate(step, seconds)
    cpu, redis_cpu = _self_cpu_s() - c0, _proc_cpu_s(redis_pid) - r0
    return {"floor": per_s, "floor_cpu_ms": cpu / n * 1e3, "floor_redis_cpu_ms": redis_cpu / n * 1e3}


def _paced(edit: Callable[[], object], count: int, pause_s: float) -> tuple[float, float]:
    """p50 and p99 in ms of `count` calls of `edit`, each after a pause of `pause_s` (caches cold)."""
    walls = []
    for _ in range(count):
        time.sleep(pause_s)
        t0 = time.perf_counter()
        edit()
        walls.append(time.perf_counter() - t0)
    walls.sort()
    return walls[len(walls) // 2] * 1e3, walls[min(len(walls) - 1, int(len(walls) * 0.99))] * 1e3


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (its /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _self_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class _Engine:
    """One coordinator editing its own counters file, slot after slot."""

    def __init__(self, root: Path, url: str) -> None:
        from coordinator import Coordinator

        self.coord = Coordinator(root, url, durability="none")
        self.session = self.coord.session("figures")
        self.session.read("f.txt", limit=SLOTS + 10)
        self.values = [int(ln.partition(" = ")[2]) for ln in (root / "f.txt").read_text().splitlines()[1:]]
        self.n = 0

    def edit(self) -> tuple[float, float]:
        """One edit: its wall time and the lock hold time it reports, in seconds."""
        i = self.n % SLOTS
        old, new = f"\ns{i:03d} = {self.values[i]}\n", f"\ns{i:03d} = {self.values[i] + 1}\n"
        t0 = time.perf_counter()
        res = self.session.edit("f.txt", old, new)
        wall = time.perf_counter() - t0
        self.values[i] += 1
        self.n += 1
        return wall, res.timings["lock_hold_s"]

    def loop(self, seconds: float, redis_pid: int) -> dict[str, float]:
        holds: list[float] = []
        c0, r0, t0 = _self_cpu_s(), _proc_cpu_s(redis_pid), time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            holds.append(self.edit()[1])
        wall = time.perf_counter() - t0
        cpu, redis_cpu = _self_cpu_s() - c0, _proc_cpu_s(redis_pid) - r0
        n = len(holds)
        return {
            "rate": n / wall,
            "cpu_ms": cpu / n * 1e3,
            "redis_cpu_ms": redis_cpu / n * 1e3,
            "hold_us": statistics.mean(holds) * 1e6,
        }


def _redis_pid(state: Path) -> int:
    return int((state / "redis" / "redis.pid").read_text().strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--paced", type=int, default=400, help="paced edits (default 400)")
    ap.add_argument("--pause-ms", type=float, default=5.0, help="pause before each paced edit (default 5 ms)")
    ap.add_argument("--json", type=Path, help="also write the rounds, medians and paced figures here")
    args = ap.parse_args()
    import coordinator

    load_before = os.getloadavg()[0]
    print(f"engine: {Path(coordinator.__file__).parent}; load average {load_before:.2f}", flush=True)
    rows: list[dict[str, Any]] = []
    with floor_scratch("ec-figures-", ("f.txt", "u.txt", "a.txt")) as (base, url, sock):
        engine = _Engine(base / "repo", url)
        pid = _redis_pid(base / "repo" / ".edit-coordinator")
        floor = floor_step(base, sock)
        for r in range(args.rounds):
            row = {"unsafe": _unsafe(base / "u.txt", args.seconds)}
            row["atomic"] = _atomic_unsafe(base / "a.txt", args.seconds)
            row.update(_floor_loop(floor, args.seconds, pid))
            row.update(engine.loop(args.seconds, pid))
            rows.append(row)
            print(_round_line(r, row), flush=True)
        p50, p99 = _paced(engine.edit, args.paced, args.pause_ms / 1e3)
        floor_p50, floor_p99 = _paced(floor, args.paced, args.pause_ms / 1e3)
        engine.coord.close()
        if _total(base / "repo" / "f.txt") != _total(base / "u.txt") + engine.n:
            print("the engine's file does not hold every edit it acknowledged: no figures", file=sys.stderr)
            return 1
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(
        f"median of {args.rounds}: engine {med['rate']:,.0f} edits/s, CPU {med['cpu_ms']:.3f} ms per edit in this "
        f"process + {med['redis_cpu_ms']:.3f} ms in redis-server = {med['cpu_ms'] + med['redis_cpu_ms']:.3f} ms; "
        f"lock held {med['hold_us']:.0f} us per edit; against the floor {med['rate'] / med['floor']:.2f}x; "
        f"against unsafe (disk-dependent) {med['rate'] / med['unsafe']:.2f}x, atomic unsafe "
        f"{med['rate'] / med['atomic']:.2f}x"
    )
    print(
        f"the same-I/O floor: CPU {med['floor_cpu_ms']:.3f} ms per edit in this process + "
        f"{med['floor_redis_cpu_ms']:.3f} ms in redis-server = {med['floor_cpu_ms'] + med['floor_redis_cpu_ms']:.3f} ms"
    )
    print(f"paced ({args.paced} edits, {args.pause_ms:g} ms apart): p50 {p50:.3f} ms, p99 {p99:.3f} ms")
    print(f"the floor paced the same way: p50 {floor_p50:.3f} ms, p99 {floor_p99:.3f} ms")
    print(f"every edit the engine acknowledged ({engine.n}) is in its file; load average {os.getloadavg()[0]:.2f}")
    if args.json is not None:
        paced = {
            "edits": args.paced, "pause_ms": args.pause_ms, "p50_ms": p50, "p99_ms": p99,
            "floor_p50_ms": floor_p50, "floor_p99_ms": floor_p99,
        }  # fmt: skip
        load = [load_before, os.getloadavg()[0]]
        figures: dict[str, Any] = {"engine": str(Path(coordinator.__file__).parent), "rounds": rows, "median": med}
        args.json.write_text(json.dumps({**figures, "paced": paced, "load": load}, indent=1))
    return 0


def _round_line(r: int, row: dict[str, float]) -> str:
    return (
        f"round {r + 1}: unsafe {row['unsafe']:,.0f}/s, atomic unsafe {row['atomic']:,.0f}/s, floor "
        f"{row['floor']:,.0f}/s, engine {row['rate']:,.0f}/s (CPU {row['cpu_ms']:.3f} + redis "
        f"{row['redis_cpu_ms']:.3f} ms, lock held {row['hold_us']:.0f} us)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
