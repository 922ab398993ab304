"""One cell, one repetition: a row of a scenario run in one column on a fresh root, then judged.

Each repetition gets a new repository root (fresh files, a fresh state folder) and a flushed Redis, so
that nothing carries over from the cell before; the suite's one Redis server serves every cell (and the
naive-lock baseline's locks). The figures of a repetition are those of `worker.fleet.summarize` and the
oracle (`worker.fleet.verify`), plus CPU, memory and Redis figures measured around the run.
"""

from __future__ import annotations

import cProfile
import os
import re
import resource
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from coordinator.disk import layout
from coordinator.disk.fsio import resolve
from coordinator.history import content_hash
from coordinator.state.views import KIND_READ, ReadState, StateStore
from coordinator_bench.columns import KIND_HTTP, KIND_UNSAFE, Column, spec_for
from coordinator_bench.deployments import Deployment
from coordinator_bench.fleetrun import WorkerExtras, bench_fleet, read_usage
from coordinator_bench.measure import machine_busy, machine_cpu_ticks, redis_stats
from coordinator_bench.scenarios import Row, Scenario
from worker.agent import counters_text, prepare_corpus
from worker.fleet import FleetConfig, Progress, pair_ops, summarize, verify
from worker.stats import percentile

MiB = 1024 * 1024
_PRELOAD_BATCH = 5000


@dataclass
class CellContext:
    """What every cell of a run shares (and the Redis deployments of the scenario running)."""

    scratch: Path
    redis_url: str
    redis: redis.Redis
    duration_s: float
    keep_latencies: bool = True
    deployments: dict[str, Deployment] = field(default_factory=dict)


@dataclass
class CellOutcome:
    """A repetition's figures (the JSON record) and its samples (pooled per cell for the CDFs)."""

    record: dict[str, Any]
    latencies_s: list[float] = field(default_factory=list)
    change_latencies_s: list[float] = field(default_factory=list)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def _ms(values: list[float], q: float) -> float | None:
    p = percentile(values, q)
    return None if p is None else p * 1000.0


def _pcts(values: list[float]) -> dict[str, float | None]:
    return {"p50": _ms(values, 50), "p95": _ms(values, 95), "p99": _ms(values, 99)}


# ---------------------------------------------------------------------------------------------------------
# Preloaded read state (the scale scenario)
# ---------------------------------------------------------------------------------------------------------
def preload_read_state(client: redis.Redis, root: Path, files: list[str], sessions: int) -> dict[str, Any]:
    """Write read state for `sessions` x `files` as the engine would (same keys, same packed value, same TTL)
    and the session registry; returns the entry count, the time taken and the Redis memory it added. The
    namespace is the one the coordinator will use for `root` (its state folder's repository id, made
    here if there is none yet), so the entries are the ones its sessions' edits sit among."""
    ns = layout.namespace_for(root, layout.ensure_state_dir(layout.state_dir_of(root)))
    store = StateStore(client, ns)
    now = time.time()
    states = []
    for rel in files:
        key = resolve(str(root.resolve()), rel).key
        st = (root / rel).stat()
        rs = ReadState(content_hash((root / rel).read_bytes()), st.st_mtime_ns, st.st_size, 0, 0, now, KIND_READ)
        states.append((key, rs.pack()))
    before = int(client.info("memory")["used_memory"])
    t0 = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    queued = 0
    for s in range(sessions):
        sid = f"preload-{s:05d}"
        for key, packed in states:
            pipe.set(store.rs_key(sid, key), packed, ex=store.ttl_s)
            queued += 1
        pipe.zadd(store.sessions_key, {sid: now})
        if queued >= _PRELOAD_BATCH:
            pipe.execute()
            queued = 0
    pipe.execute()
    elapsed = time.perf_counter() - t0
    after = int(client.info("memory")["used_memory"])
    entries = sessions * len(files)
    sample_key = store.rs_key("preload-00000", states[0][0]) if states else None
    sample = int(client.memory_usage(sample_key) or 0) if sample_key else None
    return {
        "entries": entries,
        "seconds": elapsed,
        "used_memory_before": before,
        "used_memory_after": after,
        "bytes_per_entry": (after - before) / entries if entries else None,
        "memory_usage_one_key": sample,
    }


# ---------------------------------------------------------------------------------------------------------
# A cell
# ---------------------------------------------------------------------------------------------------------
def prepare_root(scenario: Scenario, row: Row, root: Path) -> Any:
    """The row's files under a new root: counters (200 lines), hot-line, or a copy of stdlib sources."""
    root.mkdir(parents=True)
    slots = max(row.slots, row.sessions) if row.workload == "counters" else row.sessions
    corpus = prepare_corpus(root, row.workload, row.files, slots, scenario.seed)
    extra: list[str] = []
    if row.preload_files > len(corpus.files):
        # The preloaded read state covers more files than the fleet edits: create the others too.
        for i in range(len(corpus.files), row.preload_files):
            rel = f"stress/c{i:02d}.txt"
            (root / rel).write_text(counters_text(f"c{i:02d}", corpus.slots), encoding="utf-8")
            extra.append(rel)
    return corpus, extra


class _Redis:
    """The Redis a cell's column uses: the suite's embedded server, or a deployment of the scenario."""

    def __init__(self, ctx: CellContext, column: Column) -> None:
        self.ctx = ctx
        self.dep = ctx.deployments.get(column.deployment) if column.deployment else None
        if column.deployment and self.dep is None:
            raise RuntimeError(f"the {column.deployment} deployment is not running")
        self.url = self.dep.url if self.dep is not None else ctx.redis_url
        self.used = column.kind != KIND_UNSAFE

    def flush(self) -> None:
        self.ctx.redis.flushall()
        if self.dep is not None:
            self.dep.flush()

    def stats(self) -> dict[str, Any]:
        st = redis_stats(self.ctx.redis)
        if self.dep is not None:
            st["cpu_s"] = self.dep.cpu_s()
        return st

    def figures(self, r0: dict[str, Any], r1: dict[str, Any]) -> dict[str, Any]:
        if not self.used:
            return {"used_memory_mib": None, "delta_bytes": None, "keys": None, "cpu_s": None}
        local = self.dep is None  # a deployment's memory and keys are spread over its nodes: not reported
        return {
            "used_memory_mib": r1["used_memory"] / MiB if local else None,
            "delta_bytes": r1["used_memory"] - r0["used_memory"] if local else None,
            "keys": r1["keys"] if local else None,
            "cpu_s": r1["cpu_s"] - r0["cpu_s"],
        }


def run_cell(
    ctx: CellContext,
    scenario: Scenario,
    row: Row,
    column: Column,
    rep: int,
    progress: Callable[[Progress], None] | None = None,
    profile_dir: Path | None = None,
) -> CellOutcome:
    """Run one repetition of (`row`, `column`) and judge it."""
    name = _slug(f"{scenario.name}-{row.key}-{column.name}-r{rep}")
    cell_dir = ctx.scratch / name
    root = cell_dir / "repo"
    service = None
    rds = _Redis(ctx, column)
    try:
        rds.flush()
        corpus, extra_files = prepare_root(scenario, row, root)
        preload = None
        if row.preload_sessions:
            preload = preload_read_state(ctx.redis, root, [*corpus.files, *extra_files], row.preload_sessions)
        url = token = None
        if column.kind == KIND_HTTP:
            from coordinator_bench.httpserver import HttpService

            durability, uds = column.durability or "none", column.listener == "uds"
            service = HttpService(root, rds.url, cell_dir / "service", durability=durability, uds=uds)
            service.start()
            url, token = service.url, service.token
        spec = spec_for(column, str(root), rds.url, url=url, token=token)
        r0 = rds.stats()
        ticks0 = machine_cpu_ticks()
        outcome = _run_mode(ctx, scenario, row, column, spec, root, cell_dir / "run", corpus, progress, profile_dir)
        ticks1 = machine_cpu_ticks()
        rec = outcome.record
        rec["redis"] = rds.figures(r0, rds.stats())
        if preload is not None:
            rec["preload"] = preload
        _resource_figures(rec, service.usage() if service is not None else None, machine_busy(ticks0, ticks1))
        rec["rep"] = rep
        return outcome
    finally:
        if service is not None:
            service.stop()
        shutil.rmtree(cell_dir, ignore_errors=True)


def _run_mode(
    ctx: CellContext,
    scenario: Scenario,
    row: Row,
    column: Column,
    spec: Any,
    root: Path,
    run_dir: Path,
    corpus: Any,
    progress: Callable[[Progress], None] | None,
    profile_dir: Path | None,
) -> CellOutcome:
    duration = ctx.duration_s * row.duration_factor
    if row.mode == "raw":
        return _run_raw_cell(spec, root, corpus.files[0], duration, profile_dir)
    if row.mode == "async":
        from coordinator_bench.asyncrun import run_async_cell

        return run_async_cell(spec, root, corpus, row, duration)
    return _run_fleet_cell(ctx, scenario, row, column, spec, root, run_dir, corpus, duration, progress, profile_dir)


def _resource_figures(rec: dict[str, Any], server: dict[str, Any] | None, busy: dict[str, float] | None) -> None:
    """CPU per acknowledged edit (clients, Redis, the HTTP service) and how busy the machine was meanwhile."""
    cpu = rec["cpu"]
    cpu["redis_s"] = rec["redis"]["cpu_s"] or 0.0
    cpu["server_s"] = server["cpu_s"] if server else 0.0
    cpu["total_s"] = (cpu["clients_s"] or 0.0) + cpu["redis_s"] + cpu["server_s"]
    # How busy the whole machine was meanwhile, and how much of that was this cell (the rest: other
    # tenants of a shared machine, which the figures cannot control for, only report).
    cores = os.cpu_count() or 1
    if busy is not None and rec.get("wall_s"):
        ours = (cpu["total_s"] + (cpu.get("harness_s") or 0.0)) / rec["wall_s"] / cores
        busy["ours"] = ours
        busy["others"] = max(busy["busy"] - ours, 0.0)
    rec["machine_cpu"] = busy
    acked = rec["acknowledged"]
    rec["cpu_ms_per_edit"] = cpu["total_s"] / acked * 1000.0 if acked else None
    rec["cpu_ms_per_edit_clients"] = (cpu["clients_s"] or 0.0) / acked * 1000.0 if acked else None
    rec["cpu_ms_per_edit_server"] = cpu["server_s"] / acked * 1000.0 if acked and server else None
    if server:
        rec["server"] = server


def _run_raw_cell(spec: Any, root: Path, path: str, duration: float, profile_dir: Path | None) -> CellOutcome:
    from coordinator_bench.raw import run_raw

    profile = cProfile.Profile() if profile_dir else None
    r = run_raw(spec, root, path, duration, profile)
    if profile is not None and profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(str(profile_dir / "raw.prof"))
    return loop_outcome(r, workers=1)


def loop_outcome(r: dict[str, Any], workers: int) -> CellOutcome:
    """The record of a cell run by a loop of the suite's own (the bare loop, the asyncio harness), in the
    shape of a fleet cell's: `r` has wall_s, attempts, acknowledged, refused, oracle (a report's dict),
    cpu_s, latencies, lock_waits and lock_holds."""
    lat = r["latencies"]
    attempts = r["attempts"]
    stale = r["refused"].get("stale", 0)
    rec: dict[str, Any] = {
        "wall_s": r["wall_s"],
        "attempts": attempts,
        "acknowledged": r["acknowledged"],
        "refused": r["refused"],
        "stale": stale,
        "conflict_rate": stale / attempts if attempts else 0.0,
        "refusal_rate": sum(r["refused"].values()) / attempts if attempts else 0.0,
        "throughput_per_s": r["acknowledged"] / r["wall_s"] if r["wall_s"] > 0 else 0.0,
        "latency_ms": _pcts(lat),
        "change_latency_ms": _pcts(lat),
        "lock_wait_ms": _pcts(r["lock_waits"]),
        "lock_hold_ms": _pcts(r["lock_holds"]),
        "oracle": r["oracle"],
        "lost_updates": r["oracle"]["lost_updates"],
        "cpu": {"clients_s": r["cpu_s"]},
        "rss_mib": {"max": None, "median": None},
        "workers": workers,
        "worker_errors": r.get("errors", []),
        **{k: v for k, v in r.items() if k.startswith("loop_")},
    }
    return CellOutcome(rec, lat, lat)


def _run_fleet_cell(
    ctx: CellContext,
    scenario: Scenario,
    row: Row,
    column: Column,
    spec: Any,
    root: Path,
    run_dir: Path,
    corpus: Any,
    duration: float,
    progress: Callable[[Progress], None] | None,
    profile_dir: Path | None,
) -> CellOutcome:
    cfg = FleetConfig(
        root=str(root),
        corpus=corpus,
        client=spec,
        run_dir=str(run_dir),
        workers=row.sessions,
        think_ms=row.think_ms,
        skew=row.skew,
        seed=scenario.seed,
        duration_s=duration,
        disjoint=row.disjoint,
        observe=True,
        timeout_s=duration + 120.0,
    )
    extras = WorkerExtras(str(run_dir / "usage"), str(profile_dir) if profile_dir else None)
    harness0 = resource.getrusage(resource.RUSAGE_SELF)
    run = bench_fleet(cfg, extras).run(progress=progress)
    harness1 = resource.getrusage(resource.RUSAGE_SELF)
    # Rebased edits write a merge of the session's change and the changes it had not seen: the result is
    # not the version the agent computed, so only the content checks (counters, tags) apply to them.
    check_versions = None if column.policy in (None, "strict") else False
    report = verify(run, check_versions=check_versions)
    summary = summarize(run)
    usage = read_usage(run_dir / "usage")
    ops, _reads = pair_ops(run.records)
    done = [o for o in ops if o.code is not None]
    lat = [o.latency_s for o in done if o.latency_s is not None]
    first: dict[tuple[str, int], float] = {}
    for o in ops:
        first.setdefault((o.session, o.change_id), o.t)
    e2e = [o.t_end - first[(o.session, o.change_id)] for o in done if o.code == "ok" and o.t_end is not None]
    attempts = summary["attempts"]
    refused = summary["refused"]
    stale = refused.get("stale", 0)
    rss = [u["maxrss_kib"] / 1024.0 for u in usage if u.get("maxrss_kib")]
    oracle = report.to_dict()
    oracle["details"] = oracle.get("details", [])[:5]
    rec: dict[str, Any] = {
        "wall_s": summary["wall_s"],
        "attempts": attempts,
        "acknowledged": summary["acknowledged"],
        "refused": refused,
        "stale": stale,
        "conflict_rate": stale / attempts if attempts else 0.0,
        "refusal_rate": summary["conflict_rate"],
        "throughput_per_s": summary["acknowledged"] / summary["wall_s"] if summary["wall_s"] else 0.0,
        "reads": summary["reads"],
        "latency_ms": summary["latency_ms"],
        "latency_ok_ms": summary["latency_ok_ms"],
        "change_latency_ms": summary["change_latency_ms"],
        "lock_wait_ms": summary["lock_wait_ms"],
        "lock_hold_ms": summary["lock_hold_ms"],
        "oracle": oracle,
        "lost_updates": report.lost_updates,
        "cpu": {
            "clients_s": sum(u["cpu_s"] for u in usage) if usage else None,
            "clients_user_s": sum(u["user_s"] for u in usage) if usage else None,
            "clients_system_s": sum(u["system_s"] for u in usage) if usage else None,
            # The fleet's supervisor and file observer (this process): measurement, not the system under test.
            "harness_s": (harness1.ru_utime - harness0.ru_utime) + (harness1.ru_stime - harness0.ru_stime),
        },
        "rss_mib": {"max": max(rss) if rss else None, "median": statistics.median(rss) if rss else None},
        "workers": row.sessions,
        "worker_errors": [e.strip().splitlines()[-1] if e.strip() else "?" for e in run.worker_errors][:3],
        "samples": run.samples,
    }
    return CellOutcome(rec, lat, e2e)
