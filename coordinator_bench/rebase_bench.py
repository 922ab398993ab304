"""Policy `rebase` beside `strict`: conflict rate, acknowledged edits/s and lost updates.

Two sets of runs, every cell with both policies back to back (durability `none`, so that the CPU, not the
disk, bounds the throughput and the conflicts are what differs), repetitions interleaved:

* Suite cells (`coordinator_bench.cells.run_cell`: real worker processes of `worker.fleet`, judged by its oracle):
  `hot` N=16 (16 sessions, each incrementing its own slot line of one counters file; the fleet puts the
  slots on consecutive lines, so every session's line is adjacent to two other sessions' lines),
  `hot-line` N=16 (all on the same line), `zipf` think=0 (16 sessions, 64 files, Zipf 1.1) and `corpus`
  (16 sessions, mixed edits on copies of standard-library sources).
* `hot-spaced`: a compact harness of its own (16 processes, one `Coordinator` each), the same counters
  edit (`"\\ns03 = 17\\n"` -> `"\\ns03 = 18\\n"`) on a 200-line file where the 16 slot lines are 12 lines
  apart, with a line nobody edits between any two. Own lines that do not touch: what the rebase policy
  is for. Its oracle: every slot's final value equals its session's acknowledged increments.

Run: python -m coordinator_bench.rebase_bench [--duration S] [--reps N] [--quick] [--no-md] [--report]
Writes coordinator_bench/results/rebase.json, coordinator_bench/results/rebase.png and the section "## Rebase policy vs
strict" of BENCHMARKS.md (only that section).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from coordinator_bench import fleet_bench

RESULTS = Path(__file__).parent / "results"
BENCHMARKS_MD = Path(__file__).parent.parent / "BENCHMARKS.md"
SECTION = "## Rebase policy vs strict"
POLICIES = ("strict", "rebase")
# (scenario, row key) of the suite cells
SUITE_CELLS = (("hot", "N=16"), ("hot-line", "N=16"), ("zipf", "think=0ms"), ("corpus", "mixed"))
SPACED_SESSIONS = 16
SPACED_LINES = 200


# ---------------------------------------------------------------------------------------------------------
# hot-spaced: own harness
# ---------------------------------------------------------------------------------------------------------
def spaced_text(sessions: int, lines: int = SPACED_LINES) -> tuple[str, list[str]]:
    """A file of `lines` lines whose slot lines are spread evenly, unrelated lines in between."""
    step = lines // sessions
    slots = [f"s{i:02d}" for i in range(sessions)]
    out = []
    for n in range(lines):
        if n % step == step // 2 and n // step < sessions:
            out.append(f"{slots[n // step]} = 0\n")
        else:
            out.append(f"# filler line {n}: nobody edits this one\n")
    return "".join(out), slots


def _spaced_worker(
    root: str, url: str, policy: str, slot: str, ready: Any, start: Any, deadline_box: Any, out: Any
) -> None:
    from coordinator import Coordinator, CoordinatorError, ErrorCode

    acked = stale = other = 0
    latencies: list[float] = []
    try:
        with Coordinator(root, url, durability="none", policy=policy) as coord:
            s = coord.session(f"{slot}-{policy}")
            value = int(re.search(rf"(?m)^{slot} = (\d+)$", s.read("hot.txt").content).group(1))  # type: ignore[union-attr]
            ready.release()
            start.wait()
            deadline = deadline_box.value
            while time.time() < deadline:
                t = time.perf_counter()
                try:
                    s.edit("hot.txt", f"\n{slot} = {value}\n", f"\n{slot} = {value + 1}\n")
                    value += 1
                    acked += 1
                    latencies.append(time.perf_counter() - t)
                except CoordinatorError as exc:
                    if exc.code != ErrorCode.STALE:
                        other += 1
                    stale += 1
                    text = s.read("hot.txt").content
                    value = int(re.search(rf"(?m)^{slot} = (\d+)$", text).group(1))  # type: ignore[union-attr]
    finally:
        out.put({"slot": slot, "acked": acked, "stale": stale, "other_errors": other, "latencies": latencies})


def run_spaced(
    url: str, scratch: Path, policy: str, duration: float, sessions: int = SPACED_SESSIONS
) -> dict[str, Any]:
    root = scratch / f"spaced-{policy}-{time.time_ns()}"
    root.mkdir(parents=True)
    text, slots = spaced_text(sessions)
    (root / "hot.txt").write_text(text)
    ctx = mp.get_context("forkserver")
    start = ctx.Event()
    ready = ctx.Semaphore(0)
    deadline_box = ctx.Value("d", 0.0)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_spaced_worker, args=(str(root), url, policy, slot, ready, start, deadline_box, out))
        for slot in slots
    ]
    for p in procs:
        p.start()
    for _ in procs:  # every worker has connected and read
        if not ready.acquire(timeout=120):
            for p in procs:
                p.kill()
            raise RuntimeError("a worker did not start")
    deadline_box.value = time.time() + duration
    t0 = time.time()
    start.set()
    results = [out.get(timeout=duration + 120) for _ in procs]
    wall = time.time() - t0
    for p in procs:
        p.join(30)
    final = (root / "hot.txt").read_text()
    lost = 0
    for r in results:
        m = re.search(rf"(?m)^{r['slot']} = (\d+)$", final)
        got = int(m.group(1)) if m else -1
        lost += max(0, r["acked"] - got)
        r["final"] = got
    intact = all(f"# filler line {n}:" in final for n in range(SPACED_LINES) if f"# filler line {n}:" in text)
    acked = sum(r["acked"] for r in results)
    attempts = acked + sum(r["stale"] for r in results)
    lat = sorted(x for r in results for x in r["latencies"])
    shutil.rmtree(root, ignore_errors=True)
    return {
        "policy": policy,
        "sessions": sessions,
        "duration_s": duration,
        "wall_s": wall,
        "acknowledged": acked,
        "attempts": attempts,
        "stale": attempts - acked,
        "conflict_rate": (attempts - acked) / attempts if attempts else 0.0,
        "throughput_per_s": acked / duration,
        "lost_updates": lost,
        "mismatched_slots": sum(1 for r in results if r["final"] != r["acked"]),
        "other_errors": sum(r["other_errors"] for r in results),
        "fillers_intact": intact,
        "latency_ms": {
            "p50": 1000 * lat[len(lat) // 2] if lat else None,
            "p99": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else None,
        },
    }


# ---------------------------------------------------------------------------------------------------------
# Suite cells
# ---------------------------------------------------------------------------------------------------------
def run_suite_cell(ctx: Any, scenario_name: str, row_key: str, policy: str, rep: int) -> dict[str, Any]:
    from coordinator_bench.cells import run_cell
    from coordinator_bench.columns import coordinator_column
    from coordinator_bench.scenarios import full_scenarios

    scenario = {s.name: s for s in full_scenarios()}[scenario_name]
    row = next(r for r in scenario.rows if r.key == row_key)
    rec = run_cell(ctx, scenario, row, coordinator_column(policy, "none"), rep).record
    oracle = rec.get("oracle") or {}
    return {
        "scenario": scenario_name,
        "row": row_key,
        "policy": policy,
        "sessions": row.sessions,
        "files": row.files,
        "throughput_per_s": rec.get("throughput_per_s"),
        "attempts": rec.get("attempts"),
        "acknowledged": rec.get("acknowledged"),
        "stale": rec.get("stale"),
        "conflict_rate": rec.get("conflict_rate"),
        "lost_updates": rec.get("lost_updates"),
        "oracle_ok": oracle.get("ok"),
        "torn_reads": oracle.get("torn_reads"),
        "latency_ms": rec.get("latency_ms"),
        "worker_errors": rec.get("worker_errors"),
    }


# ---------------------------------------------------------------------------------------------------------
# Aggregation, plot, markdown
# ---------------------------------------------------------------------------------------------------------
def _median(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def aggregate(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys: list[tuple[str, str]] = []
    for r in runs:
        k = (r["scenario"], r["policy"])
        if k not in keys:
            keys.append(k)
    out = []
    for scenario, policy in keys:
        group = [r for r in runs if r["scenario"] == scenario and r["policy"] == policy]
        out.append(
            {
                "scenario": scenario,
                "policy": policy,
                "reps": len(group),
                "throughput_per_s": _median([g["throughput_per_s"] for g in group]),
                "conflict_rate": _median([g["conflict_rate"] for g in group]),
                "conflict_rate_min": min(g["conflict_rate"] for g in group),
                "conflict_rate_max": max(g["conflict_rate"] for g in group),
                "acknowledged": sum(g["acknowledged"] or 0 for g in group),
                "attempts": sum(g["attempts"] or 0 for g in group),
                "lost_updates": sum(g["lost_updates"] or 0 for g in group),
                "oracle_ok": all(g.get("oracle_ok", True) is not False for g in group),
            }
        )
    return out


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = list(dict.fromkeys(s["scenario"] for s in summary))
    get = {(s["scenario"], s["policy"]): s for s in summary}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.38
    xs = range(len(scenarios))
    for k, (metric, title, scale) in enumerate(
        (
            ("conflict_rate", "conflict rate (% of attempts refused as stale)", 100.0),
            ("throughput_per_s", "acknowledged edits/s", 1.0),
        )
    ):
        ax = axes[k]
        for j, policy in enumerate(POLICIES):
            vals = [(get.get((sc, policy)) or {}).get(metric) or 0.0 for sc in scenarios]
            bars = ax.bar([x + (j - 0.5) * width for x in xs], [v * scale for v in vals], width, label=policy)
            for b, v in zip(bars, vals, strict=True):
                ax.annotate(
                    f"{v * scale:.0f}",
                    (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
        ax.set_xticks(list(xs))
        ax.set_xticklabels(scenarios, rotation=15)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle("policy rebase vs strict, 16 sessions, durability none (medians)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def markdown(doc: dict[str, Any]) -> str:
    summ = {(s["scenario"], s["policy"]): s for s in doc["summary"]}
    m = doc["machine"]
    lines = [
        SECTION,
        "",
        f"Measured {doc['when']} on {m['cpus']} CPUs ({m['platform']}, Python {m['python']}; load average at "
        f"start {m['load']}, on a machine shared with other work: absolute rates are noisy, the two policies "
        f"of a scenario ran back to back). {doc['reps']} repetitions of {doc['duration_s']:g} s per cell, "
        "medians; durability `none`; 16 sessions, each one process, re-reading after every `stale`. Run: "
        "`python -m coordinator_bench.rebase_bench`. Raw figures: `coordinator_bench/results/rebase.json`; plot: "
        "`coordinator_bench/results/rebase.png`.",
        "",
        "| scenario | policy | acknowledged edits/s | conflict rate (min-max) | attempts | LOST UPDATES | oracle |",
        "|---|---|---:|---:|---:|---:|:---:|",
    ]
    for scenario in dict.fromkeys(s["scenario"] for s in doc["summary"]):
        for policy in POLICIES:
            s = summ.get((scenario, policy))
            if s is None:
                continue
            lines.append(
                f"| {scenario} | {policy} | {_num(s['throughput_per_s'])} | {_pct(s['conflict_rate'])} "
                f"({_pct(s['conflict_rate_min'])}-{_pct(s['conflict_rate_max'])}) | {s['attempts']:,} | "
                f"**{s['lost_updates']}** | {'ok' if s['oracle_ok'] else 'FAILED'} |"
            )

    def ratio(scenario: str) -> str:
        a, b = summ.get((scenario, "rebase")), summ.get((scenario, "strict"))
        if not a or not b or not b["conflict_rate"]:
            return "-"
        return f"{a['conflict_rate'] / b['conflict_rate']:.2f}"

    lines += [
        "",
        f"Conflict rate of rebase / strict: hot-spaced {ratio('hot-spaced')}, hot {ratio('hot')}, "
        f"hot-line {ratio('hot-line')}, zipf {ratio('zipf')}, corpus {ratio('corpus')}.",
        "",
        "* **hot-spaced** (own lines, 12 lines apart): the target case. Under strict every other session's "
        "write makes a view stale; under rebase an edit whose line and its two neighbours are untouched is "
        "carried over, so refusals fall to the rate of real overlaps, here none. Target: rebase's conflict "
        "rate at most 1/10 of strict's at 16 sessions, with zero lost updates (each slot's final value equals "
        "its session's acknowledged increments).",
        "* **hot** (the fleet's counters file: the 16 slot lines are consecutive): every session's line is "
        "adjacent to two other sessions' lines, and a change on an adjacent line counts as touching the edit "
        "(the rebase rule, as in a three-way merge), so those are real overlaps and are refused; the rate "
        "still falls, because a change further away no longer refuses. A session's view is not advanced over "
        "changes it has not seen, so the longer it goes without reading, the likelier a neighbour has moved.",
        "* **hot-line** (every session on the same line): every intervening write overlaps the edit, and "
        "rebase refuses as strict does.",
        "* **zipf** and **corpus**: contention spread over many files; rebase removes the refusals caused by "
        "changes elsewhere in the same file.",
        "",
        "![rebase vs strict](coordinator_bench/results/rebase.png)",
        "",
    ]
    return "\n".join(lines)


def write_section(text: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace this benchmark's section of BENCHMARKS.md (or append it); other sections stay as they are."""
    fleet_bench.write_section(text, path, SECTION)


# ---------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per cell")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="2 s cells, 1 repetition (smoke test)")
    parser.add_argument("--no-md", action="store_true", help="do not update BENCHMARKS.md")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--report", action="store_true", help="run nothing: redo the plot and the section from rebase.json in --out"
    )
    args = parser.parse_args(argv)
    if args.report:
        doc = json.loads((args.out / "rebase.json").read_text())
        plot(doc["summary"], args.out / "rebase.png")
        write_section(markdown(doc))
        return 0
    duration, reps = (2.0, 1) if args.quick else (args.duration, args.reps)

    import redis

    from coordinator.embedded import ensure_embedded_redis, stop_embedded_redis
    from coordinator_bench.cells import CellContext
    from worker.fleet import shutdown_fork_server

    scratch = Path(tempfile.mkdtemp(prefix="ec-rebase-bench-"))
    state_dir = scratch / "redis-state"
    runs: list[dict[str, Any]] = []
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        url = ensure_embedded_redis(state_dir)
        client = redis.Redis.from_url(url)
        ctx = CellContext(scratch / "cells", url, client, duration)
        ctx.scratch.mkdir()
        for rep in range(reps):
            order = POLICIES if rep % 2 == 0 else tuple(reversed(POLICIES))
            for policy in order:
                client.flushall()
                r = run_spaced(url, scratch, policy, duration)
                r.update(scenario="hot-spaced", row="N=16", rep=rep)
                runs.append(r)
                print(
                    f"hot-spaced {policy}: {r['throughput_per_s']:.0f}/s conflicts {_pct(r['conflict_rate'])} "
                    f"lost {r['lost_updates']}",
                    flush=True,
                )
            for scenario, row in SUITE_CELLS:
                for policy in order:
                    r = run_suite_cell(ctx, scenario, row, policy, rep)
                    r["rep"] = rep
                    runs.append(r)
                    print(
                        f"{scenario} {policy}: {_num(r['throughput_per_s'])}/s conflicts "
                        f"{_pct(r['conflict_rate'])} lost {r['lost_updates']} oracle {r['oracle_ok']}",
                        flush=True,
                    )
    finally:
        shutdown_fork_server()
        stop_embedded_redis(state_dir)
        shutil.rmtree(scratch, ignore_errors=True)

    summary = aggregate(runs)
    doc = {
        "schema": "edit-coordinator-rebase-bench/1",
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "duration_s": duration,
        "reps": reps,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load": load,
        },
        "summary": summary,
        "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rebase.json").write_text(json.dumps(doc, indent=1))
    plot(summary, args.out / "rebase.png")
    if not args.no_md and args.out == RESULTS:
        write_section(markdown(doc))
    for s in summary:
        print(
            f"{s['scenario']:>10} {s['policy']:>6}: {_num(s['throughput_per_s'])}/s conflicts "
            f"{_pct(s['conflict_rate'])} lost {s['lost_updates']} oracle {s['oracle_ok']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
