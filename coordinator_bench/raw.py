"""The `raw` row of `solo`: one session, one process, edit after edit, with nothing around the client.

The fleet's agents record every call (two JSON lines) and plan each change from their view, which costs
a few hundred microseconds per edit in every column alike; that dilutes the ratio to the unsafe floor.
This loop shows the clients' own cost: it reads the file once, then increments the 200 slot lines of a
counters file in turn, timing each call. The check at the end is the oracle's for counters
(`worker.oracle.judge_counts`): every acknowledged increment must be in the file.
"""

from __future__ import annotations

import cProfile
import resource
import time
from pathlib import Path
from typing import Any

from coordinator.errors import CoordinatorError
from coordinator_bench.columns import BenchClientSpec, make_bench_client
from worker.agent import READ_ALL_LINES, parse_counters
from worker.oracle import judge_counts

SESSION = "solo-raw"


def run_raw(
    spec: BenchClientSpec, root: Path, path: str, duration_s: float, profile: cProfile.Profile | None = None
) -> dict[str, Any]:
    """Edit `path` for `duration_s` seconds; returns the figures and the per-call samples."""
    client = make_bench_client(spec)
    try:
        view = client.read(SESSION, path, limit=READ_ALL_LINES).content
        values = parse_counters(view)
        if values is None:
            raise RuntimeError(f"{path} is not a counters file")
        slots = sorted(values)
        acked: dict[str, int] = dict.fromkeys(slots, 0)
        latencies: list[float] = []
        waits: list[float] = []
        holds: list[float] = []
        refused: dict[str, int] = {}
        attempts = 0
        k = 0
        before = resource.getrusage(resource.RUSAGE_SELF)
        t_start = time.perf_counter()
        deadline = t_start + duration_s
        if profile is not None:
            profile.enable()
        try:
            while True:
                t0 = time.perf_counter()
                if t0 >= deadline:
                    break
                slot = slots[k % len(slots)]
                v = values[slot]
                attempts += 1
                try:
                    res = client.edit(SESSION, path, f"\n{slot} = {v}\n", f"\n{slot} = {v + 1}\n")
                except CoordinatorError as exc:
                    latencies.append(time.perf_counter() - t0)
                    refused[str(exc.code)] = refused.get(str(exc.code), 0) + 1
                    values = parse_counters(client.read(SESSION, path, limit=READ_ALL_LINES).content) or values
                    continue
                latencies.append(time.perf_counter() - t0)
                values[slot] = v + 1
                acked[slot] += 1
                k += 1
                w, h = res.timings.get("lock_wait_s"), res.timings.get("lock_hold_s")
                if w is not None:
                    waits.append(w)
                if h is not None:
                    holds.append(h)
        finally:
            if profile is not None:
                profile.disable()
        wall = time.perf_counter() - t_start
        after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        client.close()
    oracle = judge_counts({(path, slot): n for slot, n in acked.items()}, {path: (root / path).read_bytes()})
    return {
        "wall_s": wall,
        "attempts": attempts,
        "acknowledged": sum(acked.values()),
        "refused": refused,
        "oracle": oracle.to_dict(),
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "latencies": latencies,
        "lock_waits": waits,
        "lock_holds": holds,
    }
