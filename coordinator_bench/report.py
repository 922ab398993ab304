"""BENCHMARKS.md: the part between `<!-- bench:begin -->` and `<!-- bench:end -->`, generated from results.

Only the text between the two markers is ever replaced; everything else in the file (hand-written
sections, other tools' sections) is kept byte for byte. A file without the markers gets them appended at
its end; a missing file is created with a title and the markers.

The generated part: when, where and from which commit the figures come; the method; the targets with
met / missed and by how much; for a missed target, the summary of its profile; the plots; then one
table per scenario with the coordinator/baseline ratios next to the absolute figures. When
`coordinator_bench/analysis.md` exists, its text is included as the analysis (it is written by hand after
looking at the figures, and lives next to the code so that the generated part stays generated).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator_bench.measure import REPO, now_iso
from coordinator_bench.targets import cell, evaluate, median_of, paired_ratios

BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"
HEADING = "## Benchmark suite (`edit-coordinator bench`)"
DEFAULT_MARKDOWN = REPO / "BENCHMARKS.md"
ANALYSIS = Path(__file__).resolve().parent / "analysis.md"

COLUMN_TEXT = {
    "unsafe": "read-modify-write of what the session read, no lock, no check, written in place (the "
    "physical floor for speed: `worker.unsafe.UnsafeClient`)",
    "naive-lock": "a redis-py `Lock` per file with its defaults (blocking, 0.1 s sleep between tries, no "
    "lease timeout) around a plain read-modify-write, plus an mtime check against the session's last read "
    "(`coordinator_bench.naive.NaiveLockClient`)",
    "strict-none": "the coordinator in-process, policy `strict`, durability `none` (atomic rename, no fsync)",
    "strict-fsync": "the coordinator in-process, policy `strict`, durability `fsync` (file and folder fsynced)",
    "rebase-none": "the coordinator in-process, policy `rebase` (an edit on a stale view is carried over "
    "when the lines it touches did not change), durability `none`",
    "rebase-fsync": "the coordinator in-process, policy `rebase`, durability `fsync`",
    "http-strict-none": "the coordinator over HTTP (`edit-coordinator serve`, one server worker, the "
    "project's `HttpClient`), policy `strict`, durability `none`; its CPU includes the service's",
    "http-uds": "the same as `http-strict-none` on a unix socket (`edit-coordinator serve --uds PATH`, the URL "
    "`unix:///PATH`) instead of TCP",
    "http-plain": "the coordinator over HTTP (`edit-coordinator serve`, one server worker) through a plain "
    "`httpx.Client` with keep-alive and no idempotency key (`coordinator_bench.plainhttp`); its CPU includes the "
    "service's",
    "redis-server": "the coordinator in-process (strict, durability none) with its read state on one "
    "redis-server over TCP (Debian's package)",
    "redis-sentinel": "the same behind Sentinel (`redis+sentinel://`: a primary, a replica, 3 sentinels)",
    "redis-cluster": "the same on a Redis Cluster (`redis+cluster://`: 3 primaries, a replica each)",
    "async": "`AsyncClient` in-process (strict, durability none), coroutines on one event loop",
}
# The column a scenario's rows are compared with, beside `unsafe` and `naive-lock`.
REFERENCE = {"http": "strict-none", "distributed": "redis-server"}


# ---------------------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------------------
def _num(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _med(c: dict[str, Any], metric: str) -> float | None:
    s = c["agg"].get(metric)
    return None if s is None else s["median"]


def _range(c: dict[str, Any], metric: str, fmt: Callable[[float], str] = _num) -> str:
    s = c["agg"].get(metric)
    if s is None:
        return "-"
    if s["n"] > 1:
        return f"{fmt(s['median'])} [{fmt(s['min'])}-{fmt(s['max'])}]"
    return fmt(s["median"])


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or not b:
        return "-"
    r = a / b
    return f"{r:.2f}x" if r < 10 else f"{r:.1f}x"


def _esc(text: str) -> str:
    return text.replace("|", "\\|")


# ---------------------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------------------
def _header(results: list[dict[str, Any]], raw_dir: str) -> list[str]:
    skipped = [r for r in results if r.get("skipped")]
    results = [r for r in results if not r.get("skipped")] or results
    first = results[0]
    m, v = first["machine"], first["versions"]
    starts = sorted(r["started"] for r in results)
    ends = sorted(r["finished"] for r in results)
    commits = sorted({r["commit"]["short"] or "?" for r in results})
    dirty = any(r["commit"]["dirty"] for r in results)
    reps = sorted({r["reps"] for r in results})
    durations = sorted({r["duration_s"] for r in results})
    quick = any(r.get("quick") for r in results)
    mem = f"{m['memory_mib'] / 1024:.0f} GiB RAM, " if m.get("memory_mib") else ""
    load = m.get("loadavg_at_start")
    load_s = f"; load average when the run started {', '.join(f'{x:.2f}' for x in load)}" if load else ""
    lines = [
        f"_Generated by `edit-coordinator bench --report` on {now_iso()[:10]} from "
        f"{len(results)} scenario results, `{raw_dir}/<scenario>.json` (raw figures of every repetition). "
        "This part of the file is rewritten by each report; edit outside the bench markers._",
        "",
    ]
    if quick:
        lines += ["**These are `--quick` results: a smoke test with one short repetition, figures, no verdicts.**", ""]
    lines += [
        f"- **When:** {starts[0][:16].replace('T', ' ')} to {ends[-1][:16].replace('T', ' ')}; commit "
        f"{', '.join(f'`{x}`' for x in commits)}" + (" plus uncommitted changes in the working tree" if dirty else ""),
        f"- **Machine:** {m['cpu']}, {m['cpus']} cores, {mem}{m['platform']}; scratch folders on "
        f"{m.get('filesystem') or '?'}{load_s}. The machine is shared and noisy: read ratios measured side by "
        "side rather than absolute figures.",
        f"- **Versions:** Python {v['python']}, redis-server {v.get('redis-server')}, redis-py {v.get('redis')}, "
        f"hiredis {v.get('hiredis')}, xxhash {v.get('xxhash')}, edit-coordinator {v.get('edit-coordinator')}.",
        f"- **Method:** {'/'.join(str(x) for x in reps)} repetition{'s' if reps != [1] else ''} of "
        f"{'/'.join(f'{d:g}' for d in durations)} s "
        "per cell (zipf at 100 ms think time: 1.5x; conflicts: 3x), interleaved: for each repetition, each "
        "row runs in "
        "every column back to back, the column order rotated from one repetition to the next. Every figure "
        "is the median over the repetitions; [min-max] where shown. Each cell starts on a fresh repository "
        "and a flushed Redis (one embedded server for the suite). Sessions are real worker processes "
        "(`worker.fleet`, the same simulated agents as `edit-coordinator stress`: read, think, edit, read "
        "again when refused), and every cell is judged by the fleet's oracle from the final bytes on disk.",
        "- **Measures:** edits/s = acknowledged edits per second of wall time; attempts = edit calls "
        "(refusals included); stale % = conflict rate (stale refusals / attempts); lost = acknowledged "
        "updates missing at the end (oracle); latency = per edit call, refusals included; per change = "
        "from the first attempt to the acknowledgement, re-reads and retries included; lock wait p99 = "
        "time to get the file lock, acknowledged edits; CPU ms/edit = CPU of the workers, Redis and (HTTP) "
        "the service per acknowledged edit; RSS = peak RSS of the largest worker; Redis = used memory "
        "at the end of the cell.",
        "",
        "Columns:",
        "",
    ]
    seen: list[str] = []
    for r in results:
        for col in r["columns"]:
            if col["name"] not in seen:
                seen.append(col["name"])
    for name in seen:
        lines.append(f"- `{name}`: {COLUMN_TEXT.get(name, name)}")
    absent = {a["column"]: a["why"] for r in results for a in r.get("columns_absent", [])}
    for name, why in absent.items():
        lines.append(f"- `{name}`: not in this run ({why})")
    lines.append("")
    for r in skipped:
        lines += [f"**Skipped: {r['scenario']['name']}** ({r['scenario']['title']}): {r['skipped']}.", ""]
    return lines


def _targets(results: list[dict[str, Any]]) -> list[str]:
    # Evaluated again from the cells, so that the report follows the current definition of the targets.
    rows = [t.to_dict() for r in results for t in evaluate(r)]
    if not rows:
        return []
    lines = [
        "### Targets",
        "",
        "| scenario | target | column | measured | goal | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for t in rows:
        verdict = {True: "**met**", False: "**MISSED**", None: "info"}[t["met"]]
        if t["margin"]:
            verdict += (" " if t["margin"].startswith("by ") else ": ") + _esc(t["margin"])
        detail = f"<br>{_esc(t['detail'])}" if t.get("detail") else ""
        lines.append(
            f"| {t['scenario']} | {_esc(t['text'])} | {t['column'] or ''} | {_esc(t['measured'])}{detail} | "
            f"{t['goal']} | {verdict} |"
        )
    lines.append("")
    return lines


def _profiles(results: list[dict[str, Any]]) -> list[str]:
    found = [(r["scenario"]["name"], key, p) for r in results for key, p in (r.get("profiles") or {}).items()]
    if not found:
        return []
    lines = [
        "### What holds back the missed targets (cProfile)",
        "",
        "Each cell behind a missed target was run once more with cProfile in its worker processes; the "
        "time of all its workers is merged and put in buckets by where it is spent (self time). cProfile "
        "inflates Python-level time relative to system calls, so the shares show what to look at next, "
        "not exact costs.",
        "",
    ]
    for scen, key, p in found:
        lines.append(
            f"**{scen} {key}** ({p['processes']} process{'es' if p['processes'] != 1 else ''}, "
            f"{p['total_s']:.1f} s profiled; {_num(p.get('throughput_per_s_profiled'))} edits/s under the profiler)"
        )
        lines.append("")
        lines.append("| where the time goes | share | | top functions (self time) | share | calls |")
        lines.append("|---|---:|---|---|---:|---:|")
        buckets = [b for b in p["buckets"] if b["share"] >= 0.01][:9]
        tops = p["top"][:9]
        for i in range(max(len(buckets), len(tops))):
            left = ["", ""]
            right = ["", "", ""]
            if i < len(buckets):
                b = buckets[i]
                left = [b["bucket"], f"{b['share'] * 100:.0f} %"]
            if i < len(tops):
                t = tops[i]
                name = f"`{t['function']}`"
                if t.get("callers"):
                    name += " from " + ", ".join(
                        f"`{c['function'].split(' (')[0]}` {c['calls']:,}" for c in t["callers"][:5]
                    )
                right = [_esc(name), f"{t['share'] * 100:.1f} %", f"{t['calls']:,}"]
            lines.append("| " + " | ".join([*left, "", *right]) + " |")
        lines.append("")
    return lines


def _plots(plots: dict[str, Path], markdown: Path) -> list[str]:
    if not plots:
        return []
    titles = {
        "throughput": "Throughput vs sessions",
        "conflicts": "Conflict rate vs sessions per file",
        "latency_cdf": "Latency CDF per policy",
        "zipf": "zipf: throughput vs think time",
        "solo_http": "solo and HTTP: edits/s and CPU per edit beside their baselines",
        "policies": "conflicts: strict vs rebase",
        "distributed": "Redis deployments: throughput and CPU per edit",
    }
    lines = ["### Plots", ""]
    for name, path in plots.items():
        rel = os.path.relpath(path, markdown.parent).replace(os.sep, "/")
        lines += [f"![{titles.get(name, name)}]({rel})", ""]
    return lines


def _scenario_table(res: dict[str, Any], raw_dir: str) -> list[str]:
    sc = res["scenario"]
    if res.get("skipped"):
        return [f"### {sc['title']}", "", sc["description"], "", f"**Skipped in this run:** {res['skipped']}.", ""]
    cols = [c["name"] for c in res["columns"]]
    refs = [r for r in ("unsafe", "naive-lock", REFERENCE.get(sc["name"])) if r is not None and r in cols]
    head = ["row", "column", "edits/s [min-max]", *(f"vs {r}" for r in refs)]
    head += [
        "attempts",
        "acked",
        "stale %",
        "other refusals",
        "lost",
        "latency p50 / p95 ms",
        "p99 ms [min-max]",
        "p99 per change ms",
        "lock wait p99 ms",
        "CPU ms/edit",
        "RSS MiB",
        "Redis MiB",
    ]
    stall = sc["name"] == "asyncio"
    if stall:
        head.append("loop stall ms: max / p99 / ticker alone")
    lines = [
        f"### {sc['title']}",
        "",
        sc["description"],
        "",
        f"Seed {sc['seed']}; {res['reps']} repetition{'s' if res['reps'] != 1 else ''} of {res['duration_s']:g} s; ran "
        f"{res['started'][:16].replace('T', ' ')}, {res['elapsed_s'] / 60:.1f} min. "
        f"Raw figures: `{raw_dir}/{sc['name']}.json`.{_tenants(res)}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|",
    ]
    for row in sc["rows"]:
        first = True
        for col in cols:
            c = cell(res, row["key"], col)
            if c is None:
                continue
            tput = _med(c, "throughput_per_s")
            vals = [f"**{row['key']}**" if first else "", f"`{col}`", _range(c, "throughput_per_s")]
            first = False
            vals += [_ratio(tput, median_of(cell(res, row["key"], r), "throughput_per_s")) for r in refs]
            other = {k: s["median"] for k, s in c["refused"].items() if k != "stale" and s and s["median"]}
            lost = c["agg"].get("lost_updates")
            lost_s = "-"
            if lost is not None:
                lost_s = (
                    _num(lost["median"])
                    if lost["max"] == lost["min"]
                    else f"{_num(lost['median'])} [{_num(lost['min'])}-{_num(lost['max'])}]"
                )
            cr = _med(c, "conflict_rate")
            redis_mib = _med(c, "redis_memory_mib")
            vals += [
                _num(_med(c, "attempts")),
                _num(_med(c, "acknowledged")),
                "-" if cr is None else f"{cr * 100:.0f}",
                ", ".join(f"{k} {v:,.0f}" for k, v in sorted(other.items())) or "-",
                lost_s,
                f"{_ms(_med(c, 'latency_p50_ms'))} / {_ms(_med(c, 'latency_p95_ms'))}",
                _range(c, "latency_p99_ms", _ms),
                _ms(_med(c, "change_latency_p99_ms")),
                _ms(_med(c, "lock_wait_p99_ms")),
                _ms(_med(c, "cpu_ms_per_edit")),
                _num(_med(c, "rss_max_mib"), 0),
                "-" if redis_mib is None else f"{redis_mib:.1f}",
            ]
            if stall:
                st, p99, idle = (c["agg"].get(k) for k in ("loop_stall_ms", "loop_stall_p99_ms", "loop_stall_idle_ms"))
                vals.append(
                    "-"
                    if st is None or p99 is None or idle is None
                    else f"{st['max']:.1f} / {p99['median']:.1f} / {idle['max']:.1f}"
                )
            lines.append("| " + " | ".join(vals) + " |")
    lines.append("")
    if sc["name"] == "scale":
        lines += _scale_notes(res)
    if sc["name"] == "disjoint":
        lines += _disjoint_notes(res)
    return lines


def _tenants(res: dict[str, Any]) -> str:
    """How much of the machine's CPU others used while the scenario ran (a shared machine)."""
    rows = [r["machine_cpu"] for c in res["cells"] for r in c["reps"] if r.get("machine_cpu")]
    if not rows or not all("others" in x for x in rows):
        return ""
    others = statistics.median(x["others"] for x in rows) * 100
    steal = statistics.median(x["steal"] for x in rows) * 100
    return (
        f" While its cells ran, other tenants of the machine used {others:.0f} % of its CPU (median over cells; "
        f"hypervisor steal {steal:.0f} %)."
    )


def _scale_notes(res: dict[str, Any]) -> list[str]:
    pre = [r["preload"] for c in res["cells"] for r in c["reps"] if r.get("preload")]
    big = [p for p in pre if p["entries"] >= 100_000]
    if not big:
        return []
    per = statistics.median(p["bytes_per_entry"] for p in big)
    secs = statistics.median(p["seconds"] for p in big)
    one = statistics.median(p["memory_usage_one_key"] or 0 for p in big)
    return [
        f"Preloaded read state: {big[0]['entries']:,} entries in {secs:.1f} s (pipelined); Redis memory per "
        f"entry {per:.0f} bytes (used_memory before and after, divided by the entries; the session registry "
        f"included); `MEMORY USAGE` of one entry's key: {one:.0f} bytes.",
        "",
    ]


def _disjoint_notes(res: dict[str, Any]) -> list[str]:
    out = []
    for col in [c["name"] for c in res["columns"]]:
        one = cell(res, "N=1", col)
        if one is None:
            continue
        parts = []
        for row in res["scenario"]["rows"][1:]:
            c = cell(res, row["key"], col)
            if c is not None:
                pr = paired_ratios(c, one, "throughput_per_s")
                parts.append(
                    f"{row['key']} {_ratio(_med(c, 'throughput_per_s'), _med(one, 'throughput_per_s'))}"
                    + (f" [{min(pr):.2f}-{max(pr):.2f}]" if len(pr) > 1 else "")
                )
        if parts:
            out.append(f"- `{col}` scaling vs N=1: " + ", ".join(parts))
    return (["Scaling (median ratio to N=1, [per-repetition range]):", "", *out, ""]) if out else []


def render(results: list[dict[str, Any]], markdown: Path, plots: dict[str, Path], results_dir: Path) -> str:
    """The generated part (without the markers)."""
    raw_dir = os.path.relpath(results_dir.resolve(), markdown.parent).replace(os.sep, "/")
    lines = _header(results, raw_dir)
    lines += _targets(results)
    lines += _profiles(results)
    if ANALYSIS.exists():
        lines += ["### Analysis", "", ANALYSIS.read_text(encoding="utf-8").strip(), ""]
    lines += _plots(plots, markdown)
    for res in results:
        lines += _scenario_table(res, raw_dir)
    return "\n".join(lines).rstrip() + "\n"


def splice(existing: str | None, generated: str) -> str:
    """`existing` with the text between the markers replaced by `generated`.

    Without the markers, the section's heading and the markers are appended at the end (a new file starts
    with a title). The heading sits outside the markers, right before the first one, so that tools which
    rewrite "their" section of the file up to the next `## ` heading never take a marker with them.
    """
    block = f"{BEGIN}\n{generated.rstrip()}\n{END}"
    start = existing.find(BEGIN) if existing is not None else -1
    end = existing.find(END, start + len(BEGIN)) if existing is not None and start >= 0 else -1
    if existing is not None and start >= 0 and end >= 0:
        return existing[:start] + block + existing[end + len(END) :]
    section = f"{HEADING}\n\n{block}\n"
    if existing is None:
        return f"# Benchmarks\n\n{section}"
    sep = "" if existing.endswith("\n\n") else ("\n" if existing.endswith("\n") else "\n\n")
    return f"{existing}{sep}{section}"


def write_report(results: list[dict[str, Any]], markdown: Path, plots: dict[str, Path], results_dir: Path) -> Path:
    """Regenerate the generated part of `markdown` from the results read from `results_dir`."""
    markdown = markdown.resolve()
    existing = markdown.read_text(encoding="utf-8") if markdown.exists() else None
    new = splice(existing, render(results, markdown, plots, results_dir))
    tmp = markdown.with_name(f".{markdown.name}.bench.tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, markdown)
    return markdown
