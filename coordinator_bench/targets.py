"""The targets of the issues, evaluated on a scenario's results: met or missed, and by how much.

Each evaluator reads the aggregated cells of one scenario's result (see `coordinator_bench.suite`) and returns
`Target` rows. Ratios are ratios of medians (the per-repetition ratios, paired by repetition since the
columns of one repetition ran side by side, give the range). A missed target names the cell to profile.

A quick run (`bench --quick`: one short repetition) gets figures, never verdicts: every speed target of
a quick result has `met=None` and says so. Lost updates are judged in every run: a lost update is a fact,
not a statistic.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from coordinator_bench.measure import get_path


@dataclass
class Target:
    id: str
    scenario: str
    column: str | None
    text: str  # the target, as the issue states it
    measured: str  # the figure, formatted
    value: float | None
    goal: str
    met: bool | None  # None: could not be evaluated (a column or cell is missing)
    margin: str  # by how much it is met or missed
    detail: str = ""
    profile_cell: tuple[str, str] | None = None  # (row, column) to profile when missed

    @property
    def label(self) -> str:
        """A short name for one-line summaries."""
        return LABELS.get(self.id, self.id)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["label"] = self.label
        d["profile_cell"] = list(self.profile_cell) if self.profile_cell else None
        return d


QUICK_MARGIN = "quick run: a figure, no verdict (run the full suite for one)"

LABELS = {
    "lost-coordinator": "0 lost via the coordinator",
    "lost-unsafe": "unsafe loses when contended",
    "solo-raw": "solo (bare loop) >= 0.6x unsafe",
    "http-added-p50": "HttpClient adds <= 0.4 ms p50 per edit",
    "http-service-cpu": "HTTP service CPU <= 0.25 ms per edit over the engine",
    "conflicts-counters": "conflicts counters, rebase <= 5 %",
    "conflicts-markers": "conflicts markers, rebase <= 1 %",
    "asyncio-stall": "asyncio loop stall < 20 ms",
    "distributed": "distributed vs one server",
    "solo-raw-ref": "solo (bare loop) vs unsafe",
    "solo-fleet-ref": "solo (agent) vs unsafe",
    "http-ratio-ref": "HTTP vs in-process edits/s",
    "http-added-p50-ref": "HTTP added p50 per edit",
    "http-service-cpu-ref": "HTTP service CPU per edit over the engine",
    "http-uds-vs-tcp-ref": "unix socket vs TCP, p50 per edit",
    "hot16-throughput": "hot N=16 >= 5x naive-lock edits/s",
    "hot16-p99": "hot N=16 p99 <= 1/5 naive-lock's",
    "disjoint-2v1": "disjoint N=2 >= 1.6x N=1",
    "scale-throughput": "scale P=10,000 >= 0.9x P=10",
    "scale-memory": "scale <= 200 B per entry",
}


def cell(result: dict[str, Any], row: str, column: str) -> dict[str, Any] | None:
    for c in result["cells"]:
        if c["row"] == row and c["column"] == column:
            return c  # type: ignore[no-any-return]
    return None


def median_of(c: dict[str, Any] | None, metric: str) -> float | None:
    if c is None:
        return None
    s = c["agg"].get(metric)
    return None if s is None else s["median"]


def paired_ratios(a: dict[str, Any], b: dict[str, Any], path: str) -> list[float]:
    """Per-repetition ratios a/b of the raw figure at `path` (repetitions paired by number)."""
    by_rep = {r["rep"]: get_path(r, path) for r in b["reps"]}
    out = []
    for r in a["reps"]:
        x, y = get_path(r, path), by_rep.get(r["rep"])
        if x is not None and y:
            out.append(x / y)
    return out


def _range(xs: list[float]) -> str:
    return f" (per repetition {min(xs):.2f}-{max(xs):.2f})" if len(xs) > 1 else ""


def _at_least(value: float, goal: float) -> tuple[bool, str]:
    if value >= goal:
        return True, f"{value / goal:.2f}x the goal"
    short = (1 - value / goal) * 100
    return False, f"by {short:.1f} %" if short < 10 else f"by {short:.0f} %"


def _at_most(value: float, goal: float) -> tuple[bool, str]:
    if value <= goal:
        return True, f"{goal / value:.2f}x under the limit" if value > 0 else ""
    return False, f"{value / goal:.2f}x the limit"


def coordinator_columns(result: dict[str, Any], in_process_only: bool = False) -> list[str]:
    kinds = ("coordinator",) if in_process_only else ("coordinator", "http", "async")
    return [c["name"] for c in result["columns"] if c["kind"] in kinds]


# ---------------------------------------------------------------------------------------------------------
# Every scenario: lost updates
# ---------------------------------------------------------------------------------------------------------
def lost_update_targets(result: dict[str, Any]) -> list[Target]:
    name = result["scenario"]["name"]
    out = []
    coord = set(coordinator_columns(result))
    cells = [c for c in result["cells"] if c["column"] in coord]
    if cells:
        lost = sum(r["lost_updates"] or 0 for c in cells for r in c["reps"])
        bad = sorted({f"{c['row']} / {c['column']}" for c in cells if any(r["lost_updates"] for r in c["reps"])})
        not_ok = sorted({f"{c['row']} / {c['column']}" for c in cells if any(not r["oracle"]["ok"] for r in c["reps"])})
        detail = ""
        if bad:
            detail = "lost in: " + ", ".join(bad)
        elif not_ok:
            detail = "no loss, but the oracle flagged: " + ", ".join(not_ok)
        out.append(
            Target(
                "lost-coordinator",
                name,
                None,
                "Lost updates: 0 for the coordinator in every cell",
                f"{lost} lost in {len(cells)} cells x {len(cells[0]['reps'])} repetitions",
                float(lost),
                "0",
                lost == 0,
                "" if lost == 0 else f"{lost} lost",
                detail,
            )
        )
    contended = {r["key"] for r in result["scenario"]["rows"] if r["contended"]}
    unsafe = [c for c in result["cells"] if c["column"] == "unsafe" and c["row"] in contended]
    if unsafe:
        losing = [c for c in unsafe if all((r["lost_updates"] or 0) > 0 for r in c["reps"])]
        met = len(losing) == len(unsafe)
        missing = [c["row"] for c in unsafe if c not in losing]
        out.append(
            Target(
                "lost-unsafe",
                name,
                "unsafe",
                "Lost updates: > 0 for `unsafe` in every contended cell",
                f"{len(losing)} of {len(unsafe)} contended cells lost updates in every repetition",
                float(len(losing)),
                f"{len(unsafe)} of {len(unsafe)}",
                met,
                "" if met else "no loss in " + ", ".join(missing),
            )
        )
    return out


# ---------------------------------------------------------------------------------------------------------
# Per scenario
# ---------------------------------------------------------------------------------------------------------
def solo_targets(result: dict[str, Any]) -> list[Target]:
    """Issue 14: the bare loop at least 0.6x `unsafe` with durability none; the agent row and fsync beside it."""
    out = []
    for row, what in (("raw", "bare loop"), ("fleet", "simulated agent")):
        base = cell(result, row, "unsafe")
        for col in coordinator_columns(result, in_process_only=True):
            c = cell(result, row, col)
            a, b = median_of(c, "throughput_per_s"), median_of(base, "throughput_per_s")
            if c is None or base is None or a is None or not b:
                continue
            ratio = a / b
            judged = row == "raw" and col.endswith("-none")
            met, margin = _at_least(ratio, 0.6)
            lat = f"p50 {_fmt(median_of(c, 'latency_p50_ms'))} / p99 {_fmt(median_of(c, 'latency_p99_ms'))} ms"
            cpu = f"CPU {_fmt(median_of(c, 'cpu_ms_per_edit'))} vs {_fmt(median_of(base, 'cpu_ms_per_edit'))} ms/edit"
            out.append(
                Target(
                    f"solo-{row}" if judged else f"solo-{row}-ref",
                    "solo",
                    col,
                    f"solo ({what}): at least 0.6x the `unsafe` edits/s with durability none"
                    if judged
                    else f"solo ({what}), {col}: ratio to `unsafe` (for reference)",
                    f"{ratio:.2f}x ({a:,.0f} vs {b:,.0f} edits/s){_range(paired_ratios(c, base, 'throughput_per_s'))}",
                    ratio,
                    ">= 0.6x" if judged else "-",
                    met if judged else None,
                    margin if judged else "",
                    f"{lat}; {cpu}",
                    profile_cell=(row, col) if judged else None,
                )
            )
    return out


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _paired_diff(a: dict[str, Any], b: dict[str, Any], path: str) -> list[float]:
    """Per-repetition differences a - b of the raw figure at `path` (repetitions paired by number)."""
    by_rep = {r["rep"]: get_path(r, path) for r in b["reps"]}
    out = []
    for r in a["reps"]:
        x, y = get_path(r, path), by_rep.get(r["rep"])
        if x is not None and y is not None:
            out.append(x - y)
    return out


HTTP_JUDGED = "http-strict-none"  # issue 30: the project's HttpClient over TCP carries the verdicts
HTTP_ADDED_P50_MS = 0.4
HTTP_SERVICE_CPU_MS = 0.25


def http_targets(result: dict[str, Any]) -> list[Target]:
    """Issue 30 (restating issue 14): through the project's `HttpClient`, at most 0.4 ms added to an edit's
    p50 over in-process, and at most 0.25 ms of the service's CPU per edit beyond the engine's own work (the
    service's CPU per edit minus the in-process column's). The plain httpx client, the unix socket and the
    ratios of edits/s are reported for reference."""
    out: list[Target] = []
    base = cell(result, "raw", "strict-none")
    if base is None:
        return out
    for col in (HTTP_JUDGED, "http-uds", "http-plain"):
        c = cell(result, "raw", col)
        if c is None:
            continue
        out += _http_ratio(c, base, col)
        out += _http_added_p50(c, base, col)
        out += _http_service_cpu(c, base, col)
    tcp, uds = cell(result, "raw", HTTP_JUDGED), cell(result, "raw", "http-uds")
    diffs = _paired_diff(uds, tcp, "latency_ms.p50") if uds is not None and tcp is not None else []
    if diffs:
        added = statistics.median(diffs)
        out.append(
            Target(
                "http-uds-vs-tcp-ref", "http", "http-uds",
                "p50 latency of an edit on a unix socket minus over TCP, the same HttpClient (for reference)",
                f"{added:+.3f} ms (p50 {_fmt(median_of(uds, 'latency_p50_ms'))} vs "
                f"{_fmt(median_of(tcp, 'latency_p50_ms'))} ms){_range_ms(diffs)}",
                added, "-", None, "",
            )
        )  # fmt: skip
    return out


def _http_ratio(c: dict[str, Any], base: dict[str, Any], col: str) -> list[Target]:
    a, b = median_of(c, "throughput_per_s"), median_of(base, "throughput_per_s")
    if a is None or not b:
        return []
    cpu = f"CPU {_fmt(median_of(c, 'cpu_ms_per_edit'))} vs {_fmt(median_of(base, 'cpu_ms_per_edit'))} ms/edit"
    return [
        Target(
            "http-ratio-ref", "http", col, f"`{col}`: edits/s as a ratio to in-process (for reference)",
            f"{a / b:.2f}x ({a:,.0f} vs {b:,.0f} edits/s){_range(paired_ratios(c, base, 'throughput_per_s'))}",
            a / b, "-", None, "", cpu,
        )
    ]  # fmt: skip


def _http_added_p50(c: dict[str, Any], base: dict[str, Any], col: str) -> list[Target]:
    diffs = _paired_diff(c, base, "latency_ms.p50")
    if not diffs:
        return []
    added = statistics.median(diffs)
    judged = col == HTTP_JUDGED
    met, margin = _at_most(added, HTTP_ADDED_P50_MS)
    return [
        Target(
            "http-added-p50" if judged else "http-added-p50-ref", "http", col,
            "The project's HttpClient adds at most 0.4 ms to the p50 latency of an edit" if judged
            else f"`{col}`: p50 latency added per edit (for reference)",
            f"{added:+.3f} ms (p50 {_fmt(median_of(c, 'latency_p50_ms'))} vs "
            f"{_fmt(median_of(base, 'latency_p50_ms'))} ms){_range_ms(diffs)}",
            added, f"<= {HTTP_ADDED_P50_MS} ms" if judged else "-", met if judged else None,
            margin if judged else "", profile_cell=("raw", col) if judged else None,
        )
    ]  # fmt: skip


def _http_service_cpu(c: dict[str, Any], base: dict[str, Any], col: str) -> list[Target]:
    """The service's CPU per edit beyond the engine's (the in-process column's CPU per edit, its clients)."""
    diffs = _paired_diff_paths(c, "cpu_ms_per_edit_server", base, "cpu_ms_per_edit_clients")
    if not diffs:
        return []
    added = statistics.median(diffs)
    judged = col == HTTP_JUDGED
    met, margin = _at_most(added, HTTP_SERVICE_CPU_MS)
    return [
        Target(
            "http-service-cpu" if judged else "http-service-cpu-ref", "http", col,
            "The service spends at most 0.25 ms of CPU per edit beyond the engine's own work" if judged
            else f"`{col}`: the service's CPU per edit beyond the engine's (for reference)",
            f"{added:+.3f} ms (service {_fmt(median_of(c, 'cpu_ms_per_edit_server'))} vs in-process "
            f"{_fmt(median_of(base, 'cpu_ms_per_edit_clients'))} ms/edit){_range_ms(diffs)}",
            added, f"<= {HTTP_SERVICE_CPU_MS} ms" if judged else "-", met if judged else None,
            margin if judged else "", profile_cell=("raw", col) if judged else None,
        )
    ]  # fmt: skip


def _paired_diff_paths(a: dict[str, Any], path_a: str, b: dict[str, Any], path_b: str) -> list[float]:
    """Per-repetition differences of a's figure at `path_a` minus b's at `path_b` (paired by repetition)."""
    by_rep = {r["rep"]: get_path(r, path_b) for r in b["reps"]}
    out = []
    for r in a["reps"]:
        x, y = get_path(r, path_a), by_rep.get(r["rep"])
        if x is not None and y is not None:
            out.append(x - y)
    return out


def _range_ms(xs: list[float]) -> str:
    return f" (per repetition {min(xs):+.3f} to {max(xs):+.3f})" if len(xs) > 1 else ""


def conflicts_targets(result: dict[str, Any]) -> list[Target]:
    """Issue 12: 16 sessions, 200 ms think time: rebase's conflict rate at most 5 % (counters), 1 % (markers)."""
    out = []
    for row, goal in (("counters", 0.05), ("markers", 0.01)):
        c, strict = cell(result, row, "rebase-none"), cell(result, row, "strict-none")
        v = median_of(c, "conflict_rate")
        if c is None or v is None:
            continue
        met, margin = _at_most(v, goal) if v > 0 else (True, "no stale refusal")
        sv = median_of(strict, "conflict_rate")
        detail = "" if sv is None else f"strict beside it: {sv * 100:.1f} % stale"
        spread_ = c["agg"]["conflict_rate"]
        out.append(
            Target(
                f"conflicts-{row}", "conflicts", "rebase-none",
                f"{row}, 16 sessions, 200 ms think time: rebase refuses at most {goal * 100:.0f} % of edits as stale",
                f"{v * 100:.1f} % [{spread_['min'] * 100:.1f}-{spread_['max'] * 100:.1f}] of "
                f"{median_of(c, 'attempts') or 0:,.0f} attempts",
                v, f"<= {goal * 100:.0f} %", met, margin, detail, profile_cell=None,
            )
        )  # fmt: skip
    return out


def asyncio_targets(result: dict[str, Any]) -> list[Target]:
    """Issue 16: the event loop's largest stall under 20 ms while edits wait for contended locks."""
    c = cell(result, result["scenario"]["rows"][0]["key"], "async")
    if c is None or c["agg"].get("loop_stall_ms") is None:
        return []
    worst = c["agg"]["loop_stall_ms"]["max"]
    met = worst < 20.0
    gc_max, outside = (c["agg"].get(k) for k in ("loop_gc_max_ms", "loop_stall_outside_gc_ms"))
    gc_text = (
        f"; longest GC pass {gc_max['max']:.1f} ms, largest stall no GC pass overlapped {outside['max']:.1f} ms"
        if gc_max and outside
        else ""
    )
    margin = (
        f"{20.0 / worst:.1f}x under the limit"
        if met and worst > 0
        else ("" if met else f"{worst / 20.0:.2f}x the limit")
    )
    return [
        Target(
            "asyncio-stall", "asyncio", "async",
            "16 coroutines over 8 sessions: the event loop's largest stall under 20 ms",
            f"{worst:.1f} ms (largest over {c['agg']['loop_stall_ms']['n']} repetitions; median "
            f"{c['agg']['loop_stall_ms']['median']:.1f} ms), {median_of(c, 'throughput_per_s') or 0:,.0f} edits/s"
            + gc_text,
            worst, "< 20 ms", met, margin,
        )
    ]  # fmt: skip


def distributed_targets(result: dict[str, Any]) -> list[Target]:
    """Issue 13: throughput and CPU per edit on each deployment, beside one server (figures, no goal)."""
    row = result["scenario"]["rows"][0]["key"]
    base = cell(result, row, "redis-server")
    out = []
    for col in coordinator_columns(result):
        c = cell(result, row, col)
        a = median_of(c, "throughput_per_s")
        if c is None or a is None:
            continue
        b = median_of(base, "throughput_per_s")
        rel = f"{a / b:.2f}x one server{_range(paired_ratios(c, base, 'throughput_per_s'))}, " if base and b else ""
        out.append(
            Target(
                "distributed", "distributed", col,
                f"throughput and CPU per edit on `{col}`",
                f"{a:,.0f} edits/s ({rel}CPU {_fmt(median_of(c, 'cpu_ms_per_edit'))} ms/edit)",
                a, "-", None, "",
            )
        )  # fmt: skip
    return out


def hot_targets(result: dict[str, Any]) -> list[Target]:
    out: list[Target] = []
    naive = cell(result, "N=16", "naive-lock")
    if naive is None:
        return out
    for col in coordinator_columns(result, in_process_only=True):
        c = cell(result, "N=16", col)
        a, b = median_of(c, "throughput_per_s"), median_of(naive, "throughput_per_s")
        if c is not None and a is not None and b:
            ratio = a / b
            met, margin = _at_least(ratio, 5.0)
            out.append(
                Target(
                    "hot16-throughput",
                    "hot",
                    col,
                    "hot, 16 sessions: at least 5x the acknowledged edits/s of `naive-lock`",
                    f"{ratio:.2f}x ({a:,.0f} vs {b:,.0f} edits/s){_range(paired_ratios(c, naive, 'throughput_per_s'))}",
                    ratio,
                    ">= 5x",
                    met,
                    margin,
                    profile_cell=("N=16", col),
                )
            )
        pa, pb = median_of(c, "latency_p99_ms"), median_of(naive, "latency_p99_ms")
        if c is not None and pa is not None and pb:
            ratio = pa / pb
            met, margin = _at_most(ratio, 0.2)
            ca, cb = median_of(c, "change_latency_p99_ms"), median_of(naive, "change_latency_p99_ms")
            detail = ""
            if ca is not None and cb:
                detail = f"per change, re-reads and retries included: p99 {ca:,.1f} vs {cb:,.1f} ms ({ca / cb:.2f}x)"
            out.append(
                Target(
                    "hot16-p99",
                    "hot",
                    col,
                    "hot, 16 sessions: p99 latency at most 1/5 of `naive-lock`'s",
                    f"{ratio:.3f}x ({pa:,.1f} vs {pb:,.1f} ms per call)",
                    ratio,
                    "<= 0.2x",
                    met,
                    margin,
                    detail,
                    profile_cell=("N=16", col),
                )
            )
    return out


def disjoint_targets(result: dict[str, Any]) -> list[Target]:
    out = []
    for col in [*coordinator_columns(result, in_process_only=True), "unsafe"]:
        one, two = cell(result, "N=1", col), cell(result, "N=2", col)
        a, b = median_of(two, "throughput_per_s"), median_of(one, "throughput_per_s")
        if one is None or two is None or a is None or not b:
            continue
        ratio = a / b
        met, margin = _at_least(ratio, 1.6)
        util = _cpu_busy(two, result)
        out.append(
            Target(
                "disjoint-2v1",
                "disjoint",
                col,
                "disjoint: 2 processes give at least 1.6x the throughput of 1",
                f"{ratio:.2f}x ({a:,.0f} vs {b:,.0f} edits/s){_range(paired_ratios(two, one, 'throughput_per_s'))}",
                ratio,
                ">= 1.6x",
                met if col != "unsafe" else None,
                margin if col != "unsafe" else f"baseline, for reference ({'met' if met else 'missed'}, {margin})",
                util,
                profile_cell=("N=2", col) if col != "unsafe" else None,
            )
        )
    return out


def _cpu_busy(c: dict[str, Any], result: dict[str, Any]) -> str:
    """How the machine's CPU time was spent during a cell: by the cell (workers, Redis, harness), by other
    tenants of the machine, and stolen by the hypervisor."""
    cores = (result.get("machine") or {}).get("cpus") or 1
    rows = [r["machine_cpu"] for r in c["reps"] if r.get("machine_cpu") and "ours" in r["machine_cpu"]]
    if not rows:
        return ""

    def pct(key: str) -> str:
        return f"{statistics.median(x[key] for x in rows) * 100:.0f} %"

    return (
        f"CPU of the {cores} cores during {c['row']}: this cell {pct('ours')}, other tenants {pct('others')}, "
        f"steal {pct('steal')}"
    )


def scale_targets(result: dict[str, Any]) -> list[Target]:
    out = []
    for col in coordinator_columns(result, in_process_only=True):
        small, big = cell(result, "P=10", col), cell(result, "P=10000", col)
        a, b = median_of(big, "throughput_per_s"), median_of(small, "throughput_per_s")
        if small is None or big is None or a is None or not b:
            continue
        ratio = a / b
        met, margin = _at_least(ratio, 0.9)
        out.append(
            Target(
                "scale-throughput",
                "scale",
                col,
                "scale: throughput within 10 % of the same scenario with 10 sessions",
                f"{ratio:.2f}x ({a:,.0f} vs {b:,.0f} edits/s){_range(paired_ratios(big, small, 'throughput_per_s'))}",
                ratio,
                ">= 0.9x",
                met,
                margin,
                profile_cell=("P=10000", col),
            )
        )
    entries = max((r["preload"]["entries"] for c in result["cells"] for r in c["reps"] if r.get("preload")), default=0)
    per_entry = [
        r["preload"]["bytes_per_entry"]
        for c in result["cells"]
        if c["row"] == "P=10000"
        for r in c["reps"]
        if r.get("preload") and r["preload"].get("bytes_per_entry")
    ]
    if per_entry:
        v = statistics.median(per_entry)
        met, margin = _at_most(v, 200.0)
        one_key = [
            r["preload"]["memory_usage_one_key"]
            for c in result["cells"]
            for r in c["reps"]
            if r.get("preload") and r["preload"].get("memory_usage_one_key")
        ]
        detail = f"MEMORY USAGE of one entry's key: {statistics.median(one_key):.0f} bytes" if one_key else ""
        out.append(
            Target(
                "scale-memory",
                "scale",
                None,
                "scale: at most 200 bytes of Redis memory per read-state entry",
                f"{v:.0f} bytes per entry ({entries:,} entries; {min(per_entry):.0f}-{max(per_entry):.0f})",
                v,
                "<= 200 B",
                met,
                margin,
                detail,
            )
        )
    return out


EVALUATORS: dict[str, Callable[[dict[str, Any]], list[Target]]] = {
    "solo": solo_targets,
    "http": http_targets,
    "conflicts": conflicts_targets,
    "asyncio": asyncio_targets,
    "distributed": distributed_targets,
    "hot": hot_targets,
    "disjoint": disjoint_targets,
    "scale": scale_targets,
}


def evaluate(result: dict[str, Any]) -> list[Target]:
    """Every target that `result`'s scenario can be judged on."""
    if result.get("skipped"):
        return []
    out = lost_update_targets(result)
    fn = EVALUATORS.get(result["scenario"]["name"])
    speed = fn(result) if fn is not None else []
    if result.get("quick"):
        for t in speed:
            if t.met is not None:
                t.met, t.margin, t.profile_cell = None, QUICK_MARGIN, None
    return out + speed
