"""What the service's Prometheus metrics cost: per edit on the write path, and per scrape.

    python3 scripts/metrics_cost.py edits [--edits 400]         instructions per edit (valgrind's callgrind)
    python3 scripts/metrics_cost.py scrape [--paths 2000] [--versions 5] [--workers 8]

`edits`: the engine's solo edit loop (one session, a 200-line file, durability none, the embedded Redis),
one process per side: `none` (no observer, the library's case), `memory` (the service's observers, one
process: counts in memory) and `multiprocess` (the same with PROMETHEUS_MULTIPROC_DIR set: counts in
files, as under `serve --workers N`). What each side's edits add is the observers' calls the service makes
per edit besides its own per-call ones: the lock's wait and hold, the write's outcome, the event, the
Redis round trips. Each side runs under callgrind twice, with `--edits` edits and with a quarter of them;
the difference of the instructions over the difference of the edits is the side's instructions per edit
(start-up and imports cancel out). Counts do not move with the machine's load.

`scrape`: a history of `--paths` files with `--versions` versions each, then the time of the history's
size measure (`FootprintMeter`: the first, and one with nothing changed), and of a whole scrape's text
(`ServiceMetrics.exposition`) in one process and in multiprocess mode over the files of `--workers`
processes that each counted some calls. Wall times, median of 5, on whatever the machine is doing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from coordinator_bench.harness import SlotEditor, instructions_of, instructions_per_edit, require_valgrind, scratch
from coordinator_bench.measure import REPO

SIDES = ("none", "memory", "multiprocess")


def child_edits(side: str, edits: int) -> dict[str, float]:
    """One side's edit loop in this process (module docstring); checks every edit reached the file."""
    from coordinator import Coordinator
    from coordinator.state.connection import observe_redis

    with scratch("metrics-cost-") as sc, Coordinator(sc.root, durability="none") as coord:
        if side != "none":
            from coordinator.server.metrics import ServiceMetrics

            metrics = ServiceMetrics(dict, os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
            coord.observe(metrics)
            observe_redis(metrics)
        s = coord.session("solo")
        editor = SlotEditor("f.txt", s.edit)
        editor.write_file(sc.root)
        s.read("f.txt")
        for _ in range(edits):
            editor.step()
        if not editor.landed(sc.root):
            raise SystemExit("an edit is missing from the file")
    return {"edits": edits}


def count_side(side: str, edits: int) -> float:
    """Instructions per edit of one side (two callgrind runs, see the module docstring)."""

    def count(n: int) -> int:
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "0"}
        folder = tempfile.mkdtemp(prefix="metrics-mp-") if side == "multiprocess" else None
        if folder is not None:
            env["PROMETHEUS_MULTIPROC_DIR"] = folder
        try:
            argv = [sys.executable, __file__, "child", side, "--edits", str(n)]
            return instructions_of(argv, env, f"the {side} side")[0]
        except RuntimeError as exc:
            raise SystemExit(str(exc)) from exc
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    return instructions_per_edit(count, edits)


def edits_report(edits: int) -> None:
    require_valgrind()
    per_edit = {side: count_side(side, edits) for side in SIDES}
    base = per_edit["none"]
    for side, ir in per_edit.items():
        extra = "" if side == "none" else f"  (+{ir - base:,.0f}, {ir / base:.3f}x)"
        print(f"{side:>12}: {ir:,.0f} instructions per edit{extra}", flush=True)


def _median_s(fn: object, reps: int = 5) -> float:
    assert callable(fn)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _counting_worker(folder: str, calls: int) -> None:
    """A stand-in worker process: counts `calls` answered calls in the multiprocess folder."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PROMETHEUS_MULTIPROC_DIR": folder}
    subprocess.run([sys.executable, __file__, "count", "--calls", str(calls)], env=env, check=True, timeout=120)


def child_count(calls: int) -> None:
    from coordinator.server.metrics import ServiceMetrics

    metrics = ServiceMetrics(dict, os.environ["PROMETHEUS_MULTIPROC_DIR"])
    for i in range(calls):
        operation = ("read", "edit", "write", "lease")[i % 4]
        metrics.observe(operation, None if i % 5 else "stale", 0.001 * (i % 7))
        metrics.write_finished(operation, "applied")
        metrics.lock_released(0.00001, 0.0002)
        metrics.round_trip()


def scrape_report(paths: int, versions: int, workers: int) -> dict[str, float]:
    from coordinator import Coordinator
    from coordinator.server.metrics import ServiceMetrics

    figures: dict[str, float] = {}
    with scratch("metrics-scrape-") as sc, Coordinator(sc.root, durability="none") as coord:
        s = coord.session("filler")
        for p in range(paths):
            for v in range(versions):
                s.write(f"d{p % 50}/f{p}.txt", f"file {p} version {v}\n" * 20)
        meter = coord.footprint_meter()
        start = time.perf_counter()
        size = meter.measure()
        figures["footprint_first_ms"] = (time.perf_counter() - start) * 1e3
        figures["footprint_unchanged_ms"] = _median_s(meter.measure) * 1e3
        figures["history_entries"] = size.entries
        memory = ServiceMetrics(lambda: {"history_entries": 1.0, "history_bytes": 1.0})
        for i in range(1000):
            memory.observe(("read", "edit", "write", "lease")[i % 4], None, 0.001)
            memory.lock_released(0.00001, 0.0002)
        figures["scrape_one_process_ms"] = _median_s(memory.exposition) * 1e3
    folder = tempfile.mkdtemp(prefix="metrics-mp-")
    try:
        for _ in range(workers):
            _counting_worker(folder, 500)
        env = {**os.environ, "PYTHONPATH": str(REPO), "PROMETHEUS_MULTIPROC_DIR": folder}
        out = subprocess.run(
            [sys.executable, __file__, "scrape-files"], env=env, check=True, capture_output=True, text=True
        )
        figures["scrape_multiprocess_ms"] = json.loads(out.stdout)["ms"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return figures


def child_scrape_files() -> None:
    from coordinator.server.metrics import ServiceMetrics

    metrics = ServiceMetrics(dict, os.environ["PROMETHEUS_MULTIPROC_DIR"])
    print(json.dumps({"ms": _median_s(metrics.exposition) * 1e3}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    e = sub.add_parser("edits", help="instructions per edit with and without the observers (callgrind)")
    e.add_argument("--edits", type=int, default=400)
    sc = sub.add_parser("scrape", help="the history's size measure and a scrape's cost (wall time)")
    sc.add_argument("--paths", type=int, default=2000)
    sc.add_argument("--versions", type=int, default=5)
    sc.add_argument("--workers", type=int, default=8)
    c = sub.add_parser("child")  # internal: one side's edit loop
    c.add_argument("side", choices=SIDES)
    c.add_argument("--edits", type=int, default=400)
    n = sub.add_parser("count")  # internal: a stand-in worker's counts
    n.add_argument("--calls", type=int, default=500)
    sub.add_parser("scrape-files")  # internal: a scrape over the multiprocess folder
    args = parser.parse_args(argv)
    if args.what == "edits":
        if args.edits < 4:
            parser.error("--edits must be at least 4")
        edits_report(args.edits)
    elif args.what == "scrape":
        figures = scrape_report(args.paths, args.versions, args.workers)
        for name, value in figures.items():
            print(f"{name}: {value:,.2f}")
    elif args.what == "child":
        print(json.dumps(child_edits(args.side, args.edits)))
    elif args.what == "count":
        child_count(args.calls)
    else:
        child_scrape_files()
    return 0


if __name__ == "__main__":
    sys.exit(main())
