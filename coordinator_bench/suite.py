"""The suite: every scenario, every row, every column, repetitions interleaved; results to JSON.

Order of a scenario's runs: for each repetition, for each row, every column (their order rotated from one
repetition to the next). The columns of one row and repetition therefore run back to back, so that the
noise of a shared machine hits them alike, and their ratios are taken side by side.

One embedded Redis server (in a scratch folder) serves the whole suite; it is flushed before each cell and
stopped at the end, whatever happens. Each scenario's result is written to `<out>/<scenario>.json` as soon
as the scenario is done: the raw figures of every repetition, their medians with min and max, the latency
CDFs, the machine, the versions, the commit, and the targets evaluated on it. When a coordinator target is
missed, the cell is run once more with cProfile in its workers, and the summary is stored with the result.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import redis

from coordinator_bench.cells import CellContext, CellOutcome, run_cell
from coordinator_bench.columns import Column, all_columns
from coordinator_bench.harness import scratch
from coordinator_bench.measure import (
    QUANTILE_GRID,
    commit,
    get_path,
    machine,
    now_iso,
    quantiles,
    redis_stats,
    spread,
    versions,
)
from coordinator_bench.profiling import summarize_stats
from coordinator_bench.scenarios import Row, Scenario
from coordinator_bench.targets import evaluate
from worker.fleet import Progress, shutdown_fork_server

SCHEMA = "edit-coordinator-bench/1"
RESULTS_DIR = Path(__file__).resolve().parent / "results"

# Aggregated figures of a cell: name -> dotted path in a repetition's record.
METRICS: dict[str, str] = {
    "throughput_per_s": "throughput_per_s",
    "attempts": "attempts",
    "acknowledged": "acknowledged",
    "stale": "stale",
    "conflict_rate": "conflict_rate",
    "refusal_rate": "refusal_rate",
    "lost_updates": "lost_updates",
    "torn_reads": "oracle.torn_reads",
    "latency_p50_ms": "latency_ms.p50",
    "latency_p95_ms": "latency_ms.p95",
    "latency_p99_ms": "latency_ms.p99",
    "change_latency_p50_ms": "change_latency_ms.p50",
    "change_latency_p99_ms": "change_latency_ms.p99",
    "lock_wait_p50_ms": "lock_wait_ms.p50",
    "lock_wait_p99_ms": "lock_wait_ms.p99",
    "lock_hold_p50_ms": "lock_hold_ms.p50",
    "cpu_ms_per_edit": "cpu_ms_per_edit",
    "cpu_ms_per_edit_clients": "cpu_ms_per_edit_clients",
    "cpu_ms_per_edit_server": "cpu_ms_per_edit_server",
    "rss_max_mib": "rss_mib.max",
    "redis_memory_mib": "redis.used_memory_mib",
    "redis_delta_bytes": "redis.delta_bytes",
    "server_rss_mib": "server.rss_mib",
    "preload_bytes_per_entry": "preload.bytes_per_entry",
    "loop_stall_ms": "loop_stall_ms",
    "loop_stall_p99_ms": "loop_stall_p99_ms",
    "loop_stall_idle_ms": "loop_stall_idle_ms",
    "loop_stall_outside_gc_ms": "loop_stall_outside_gc_ms",
    "loop_gc_max_ms": "loop_gc_max_ms",
    "loop_heap_objects": "loop_heap_objects",
}


class Reporter(Protocol):
    """What the suite tells its caller while it runs (the CLI draws a progress bar from it)."""

    def plan(self, total_cells: int) -> None: ...

    def cell_started(self, scenario: str, row: str, column: str, rep: int, duration_s: float) -> None: ...

    def fleet_progress(self, p: Progress) -> None: ...

    def cell_done(self, record: dict[str, Any]) -> None: ...

    def note(self, text: str) -> None: ...


class SilentReporter:
    def plan(self, total_cells: int) -> None:
        pass

    def cell_started(self, scenario: str, row: str, column: str, rep: int, duration_s: float) -> None:
        pass

    def fleet_progress(self, p: Progress) -> None:
        pass

    def cell_done(self, record: dict[str, Any]) -> None:
        pass

    def note(self, text: str) -> None:
        pass


@dataclass
class SuiteOptions:
    scenarios: Sequence[Scenario]
    reps: int = 3
    duration_s: float = 3.0
    out: Path = RESULTS_DIR
    quick: bool = False
    with_http: bool = True
    columns: Sequence[str] | None = None  # only these column names (None: all this build has)
    profile_missed: bool = True
    reporter: Reporter = field(default_factory=SilentReporter)


@dataclass
class _Acc:
    """A cell's repetitions as they come in."""

    records: list[dict[str, Any]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    change_latencies: list[float] = field(default_factory=list)

    def add(self, o: CellOutcome) -> None:
        self.records.append(o.record)
        self.latencies.extend(o.latencies_s)
        self.change_latencies.extend(o.change_latencies_s)


def columns_for(scenario: Scenario, available: Sequence[Column], only: Sequence[str] | None) -> list[Column]:
    """The columns of `scenario` that this build has (in the scenario's order), limited to `only`."""
    by_name = {c.name: c for c in available}
    names = scenario.columns if scenario.columns is not None else [c.name for c in available]
    cols = [by_name[n] for n in names if n in by_name]
    return [
        c
        for c in cols
        if (c.durability is None or c.durability in scenario.durability)
        and not (scenario.coordinator_only and c.is_baseline)
        and (not only or c.name in only)
    ]


def _why_missing(scenario: Scenario, absent: Sequence[dict[str, str]]) -> str:
    """Why a scenario has no column to run: the reasons its columns are absent."""
    wanted = scenario.columns or ()
    why = [a["why"] for a in absent if any(fnmatch.fnmatchcase(w, a["column"]) for w in wanted)]
    return "; ".join(dict.fromkeys(why)) or "no column to run (--column left none of its columns)"


def _aggregate(scenario: Scenario, row: Row, col: Column, acc: _Acc) -> dict[str, Any]:
    recs = sorted(acc.records, key=lambda r: r["rep"])
    agg = {name: spread(get_path(r, path) for r in recs) for name, path in METRICS.items()}
    codes = sorted({code for r in recs for code in r["refused"]})
    refused = {code: spread(r["refused"].get(code, 0) for r in recs) for code in codes}
    return {
        "row": row.key,
        "column": col.name,
        "x": row.x,
        "agg": agg,
        "refused": refused,
        "latency_quantiles_ms": _q_ms(acc.latencies),
        "change_latency_quantiles_ms": _q_ms(acc.change_latencies),
        "samples": len(acc.latencies),
        "reps": recs,
    }


def _q_ms(values: list[float]) -> list[float] | None:
    q = quantiles(values)
    return None if q is None else [round(v * 1000.0, 4) for v in q]


def run_suite(opts: SuiteOptions) -> list[dict[str, Any]]:
    """Run the scenarios; write one JSON per scenario into `opts.out`; return the results. Everything runs
    in one scratch folder (`harness.scratch`) on its repository's embedded Redis, both gone at the end."""
    opts.out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    with scratch("ec-bench-") as sc:
        client: redis.Redis | None = None
        try:
            redis_url = sc.redis_url()
            client = redis.Redis.from_url(redis_url)
            available, absent = all_columns(redis_url, with_http=opts.with_http)
            meta = {
                "machine": machine(sc.work),
                "versions": versions(redis_stats(client)["version"]),
                "commit": commit(),
            }
            ctx = CellContext(sc.work / "cells", redis_url, client, opts.duration_s)
            ctx.scratch.mkdir()
            plans = [(sc_, columns_for(sc_, available, opts.columns)) for sc_ in opts.scenarios]
            opts.reporter.plan(sum(len(s.rows) * len(cols) * _reps(s, opts) for s, cols in plans))
            for scenario, cols in plans:
                if not cols:
                    result = _skipped(scenario, opts, meta, _why_missing(scenario, absent))
                    opts.reporter.note(f"{scenario.name}: skipped: {result['skipped']}")
                else:
                    with _deployments(ctx, scenario, cols, opts.reporter, absent) as running:
                        result = _run_scenario(ctx, scenario, running, opts, meta, absent)
                results.append(result)
                _write_json(opts.out / f"{scenario.name}.json", result)
        finally:
            shutdown_fork_server()
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
    return results


def _skipped(sc: Scenario, opts: SuiteOptions, meta: dict[str, Any], why: str) -> dict[str, Any]:
    """The result of a scenario that could not run in this build: what it would measure, and why not."""
    return {
        "schema": SCHEMA,
        "scenario": sc.to_dict(),
        "skipped": why,
        "quick": opts.quick,
        "reps": 0,
        "duration_s": opts.duration_s,
        "started": now_iso(),
        "finished": now_iso(),
        "elapsed_s": 0.0,
        **meta,
        "columns": [],
        "cells": [],
        "targets": [],
    }


@contextlib.contextmanager
def _deployments(
    ctx: CellContext, sc: Scenario, cols: list[Column], reporter: Reporter, absent: list[dict[str, str]]
) -> Iterator[list[Column]]:
    """Start the Redis deployments the scenario's columns use; yield the columns that can run (a
    deployment that does not start, or whose URL this build's Coordinator refuses, drops its column)."""
    from coordinator_bench.deployments import started

    with contextlib.ExitStack() as stack:
        running = []
        for col in cols:
            if col.deployment is None:
                running.append(col)
                continue
            reporter.note(f"{sc.name}: starting the {col.deployment} deployment")
            try:
                dep = stack.enter_context(started(col.deployment, ctx.scratch.parent / f"redis-{col.deployment}"))
                _probe(dep.url, ctx.scratch.parent)
            except Exception as exc:  # a build or machine without this deployment: say so, run the rest
                why = f"could not run on {col.deployment}: {type(exc).__name__}: {str(exc)[:200]}"
                absent.append({"column": col.name, "why": why})
                reporter.note(f"{sc.name}: {col.name} {why}")
                continue
            ctx.deployments[col.deployment] = dep
            running.append(col)
        try:
            yield running
        finally:
            ctx.deployments.clear()


def _probe(url: str, folder: Path) -> None:
    """One read through a Coordinator on `url`: raises when this build cannot use the deployment."""
    from coordinator import Coordinator

    root = Path(tempfile.mkdtemp(prefix="probe-", dir=folder))
    try:
        (root / "probe.txt").write_text("probe\n")
        with Coordinator(root, url, durability="none") as c:
            c.session("probe").read("probe.txt")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _reps(sc: Scenario, opts: SuiteOptions) -> int:
    return opts.reps if opts.quick else opts.reps + sc.extra_reps


def _run_scenario(
    ctx: CellContext,
    sc: Scenario,
    cols: list[Column],
    opts: SuiteOptions,
    meta: dict[str, Any],
    absent: list[dict[str, str]],
) -> dict[str, Any]:
    started, t0 = now_iso(), time.monotonic()
    accs: dict[tuple[str, str], _Acc] = {(row.key, c.name): _Acc() for row in sc.rows for c in cols}
    rep_r = opts.reporter
    reps = _reps(sc, opts)
    for rep in range(reps):
        order = cols[rep % len(cols) :] + cols[: rep % len(cols)]
        for row in sc.rows:
            for col in order:
                rep_r.cell_started(sc.name, row.key, col.name, rep, ctx.duration_s * row.duration_factor)
                outcome = run_cell(ctx, sc, row, col, rep, progress=rep_r.fleet_progress)
                outcome.record["order"] = order.index(col)
                accs[(row.key, col.name)].add(outcome)
                rep_r.cell_done(outcome.record)
    cells = [_aggregate(sc, row, c, accs[(row.key, c.name)]) for row in sc.rows for c in cols]
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "scenario": sc.to_dict(),
        "quick": opts.quick,
        "reps": reps,
        "duration_s": opts.duration_s,
        "started": started,
        "finished": now_iso(),
        "elapsed_s": round(time.monotonic() - t0, 1),
        **meta,
        "columns": [c.to_dict() for c in cols],
        "columns_absent": absent,
        "quantile_grid": list(QUANTILE_GRID),
        "cells": cells,
        "profiles": {},
    }
    targets = evaluate(result)
    if opts.profile_missed and not opts.quick:
        _profile_missed(ctx, sc, cols, targets, result, rep_r)
    result["targets"] = [t.to_dict() for t in targets]
    return result


def _profile_missed(
    ctx: CellContext,
    sc: Scenario,
    cols: list[Column],
    targets: list[Any],
    result: dict[str, Any],
    reporter: Reporter,
) -> None:
    """Run each cell behind a missed target once more with cProfile, and keep the summary."""
    # One profile per missed target and row: the strict policy without fsync when it is among the columns
    # that missed (the others differ from it by one known cost), else the first column that missed.
    missed: dict[tuple[str, str], list[str]] = {}
    for t in targets:
        if t.met is False and t.profile_cell is not None:
            missed.setdefault((t.id, t.profile_cell[0]), []).append(t.profile_cell[1])
    wanted: list[tuple[str, str]] = []
    for (_tid, row_key), names in missed.items():
        pick = (row_key, "strict-none" if "strict-none" in names else names[0])
        if pick not in wanted:
            wanted.append(pick)
    rows = {r.key: r for r in sc.rows}
    by_name = {c.name: c for c in cols}
    for row_key, col_name in wanted:
        row, col = rows.get(row_key), by_name.get(col_name)
        if row is None or col is None:
            continue
        prof_dir = ctx.scratch.parent / "profiles" / f"{sc.name}-{row_key}-{col_name}".replace("=", "")
        reporter.note(f"profiling {sc.name} {row_key} {col_name} (a target was missed)")
        reporter.cell_started(sc.name, row_key, col_name + " (cProfile)", -1, ctx.duration_s * row.duration_factor)
        outcome = run_cell(ctx, sc, row, col, -1, progress=reporter.fleet_progress, profile_dir=prof_dir)
        summary = summarize_stats(sorted(prof_dir.glob("*.prof")))
        if summary is not None:
            summary["throughput_per_s_profiled"] = outcome.record["throughput_per_s"]
            result["profiles"][f"{row_key} / {col_name}"] = summary
        shutil.rmtree(prof_dir, ignore_errors=True)


def _rounded(v: Any) -> Any:
    """Floats cut to the precision the figures have (4 decimals, or 4 significant digits below 0.01)."""
    if isinstance(v, float):
        return round(v, 4) if abs(v) >= 0.01 or v == 0 else float(f"{v:.4g}")
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_rounded(x) for x in v]
    return v


def dumps_result(data: dict[str, Any]) -> str:
    """A scenario result as JSON: one line per top-level key and one line per cell (diffs stay readable)."""
    data = _rounded(data)
    items = list(data.items())
    lines = ["{"]
    for n, (key, value) in enumerate(items):
        comma = "," if n < len(items) - 1 else ""
        if key == "cells" and isinstance(value, list):
            lines.append(f"{json.dumps(key)}: [")
            for m, c in enumerate(value):
                lines.append(json.dumps(c, separators=(",", ":")) + ("," if m < len(value) - 1 else ""))
            lines.append("]" + comma)
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, separators=(',', ':'))}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(dumps_result(data))
    tmp.replace(path)


def load_results(out: Path, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The scenario results in `out` (suite order first, then any others), skipping non-result JSON."""
    from coordinator_bench.scenarios import scenario_names

    found: dict[str, dict[str, Any]] = {}
    for path in sorted(out.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("schema") == SCHEMA:
            found[data["scenario"]["name"]] = data
    order = [n for n in scenario_names() if n in found] + sorted(n for n in found if n not in scenario_names())
    return [found[n] for n in order if names is None or n in names]
