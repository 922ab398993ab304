"""Issue 30's measures in one run, for a base revision and this checkout side by side: a table and a plot.

    python3 scripts/speed_report.py BASE [--runs 2] [--edits 400] [--out DIR] [--no-http]

BASE is a git revision of this repository (checked out into a temporary worktree, removed at the end);
the other side is this checkout (its commit, plus "dirty" when its tree has changes). In one run:

1. instructions per solo edit, both sides (`scripts/engine_ab.py BASE . --instructions`: callgrind, user
   space; the count load does not move);
2. `scripts/fastpath_figures.py` once per side per run, the sides alternating (BASE, HEAD, HEAD, BASE, ...,
   so a drift of the machine hits both alike): CPU per edit (engine process + redis-server), the lock's
   hold time, paced p50 / p99, and the ratios to the same-I/O floor, the unsafe loop (disk-dependent) and
   the atomic unsafe loop; the medians over the runs are reported;
3. this checkout's HTTP figures: `scripts/http_latency.py` (added p50 and the service's CPU per edit with
   the project's HttpClient over TCP, with and without idempotency keys, and on a unix socket; httpx's as
   information) and
   `scripts/http_instructions.py` (the service's instructions per edit beyond the engine's); their output
   is kept whole in the report, and the figures the table needs are read from it (skipped with --no-http).

Written to --out (default coordinator_bench/results/speed/): `speed.json` (every figure and the raw
outputs), `speed.md` (the table, with both commits, the date and the load), and `speed.png` (each measure
against issue 30's target, both sides; needs matplotlib, the `bench` extra). Every figure comes from this one
run. A command, not a test: with the defaults about 10-15 minutes on the 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from math import nan
from pathlib import Path
from typing import Any

from coordinator_bench.harness import markdown_table, revision_tree

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"

# issue 30's targets: (label, key in the side's figures, target, "max" or "min", unit)
TARGETS = (
    ("instructions per solo edit", "instructions", 400_000, "max", ""),
    ("CPU per edit, engine + redis-server", "cpu_ms", 0.20, "max", "ms"),
    ("paced p50 (5 ms between edits)", "paced_p50_ms", 0.3, "max", "ms"),
    ("paced p99", "paced_p99_ms", 1.0, "max", "ms"),
    ("against the same-I/O floor", "floor_x", 0.5, "min", "x"),
)


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def _head() -> str:
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return _git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")


def _run(cmd: list[str], pythonpath: Path | None = None, timeout: float = 3600) -> str:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    print("$", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        raise SystemExit(f"{cmd[1]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def instructions(base: str, edits: int) -> dict[str, int]:
    """Both sides' instructions per edit, from one engine_ab run."""
    out = _run(
        [sys.executable, str(SCRIPTS / "engine_ab.py"), base, str(REPO), "--instructions", "--edits", str(edits)]
    )
    found = re.findall(r"^(\S+): ([\d,]+) instructions per edit", out, re.M)
    if len(found) != 2:
        raise SystemExit(f"engine_ab printed no instruction counts:\n{out}")
    return {"base": int(found[0][1].replace(",", "")), "head": int(found[1][1].replace(",", ""))}


def timed(base_tree: Path, runs: int) -> dict[str, list[dict[str, Any]]]:
    """fastpath_figures per side, `runs` times each, alternating (ABBA...)."""
    got: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
    order = [("base", "head") if i % 2 == 0 else ("head", "base") for i in range(runs)]
    with tempfile.TemporaryDirectory(prefix="ec-speed-") as tmp:
        for i, pair in enumerate(order):
            for side in pair:
                out = Path(tmp) / f"{side}-{i}.json"
                tree = base_tree if side == "base" else REPO
                cmd = [sys.executable, str(SCRIPTS / "fastpath_figures.py"), "--seconds", "1.5", "--rounds", "3"]
                _run([*cmd, "--paced", "300", "--pause-ms", "5", "--json", str(out)], pythonpath=tree)
                got[side].append(json.loads(out.read_text()))
    return got


def side_figures(runs: list[dict[str, Any]]) -> dict[str, float]:
    """The medians over a side's runs of what the table shows."""

    def med(f: Any) -> float:  # (nan: a figure an older fastpath_figures run did not give)
        return float(statistics.median(f(r) for r in runs))

    return {
        "cpu_ms": med(lambda r: r["median"]["cpu_ms"] + r["median"]["redis_cpu_ms"]),
        "engine_cpu_ms": med(lambda r: r["median"]["cpu_ms"]),
        "redis_cpu_ms": med(lambda r: r["median"]["redis_cpu_ms"]),
        "hold_us": med(lambda r: r["median"]["hold_us"]),
        "paced_p50_ms": med(lambda r: r["paced"]["p50_ms"]),
        "paced_p99_ms": med(lambda r: r["paced"]["p99_ms"]),
        "floor_x": med(lambda r: r["median"]["rate"] / r["median"]["floor"]),
        "floor_cpu_ms": med(
            lambda r: r["median"].get("floor_cpu_ms", nan) + r["median"].get("floor_redis_cpu_ms", nan)
        ),
        "floor_paced_p50_ms": med(lambda r: r["paced"].get("floor_p50_ms", nan)),
        "floor_paced_p99_ms": med(lambda r: r["paced"].get("floor_p99_ms", nan)),
        "unsafe_x": med(lambda r: r["median"]["rate"] / r["median"]["unsafe"]),
        "atomic_x": med(lambda r: r["median"]["rate"] / r["median"]["atomic"]),
        "rate": med(lambda r: r["median"]["rate"]),
    }


def http_figures() -> dict[str, Any]:
    """This checkout's HTTP figures: the two scripts' whole output, and what the table reads from it."""
    cols = "inproc,http-project,http-project-keys,http-project-uds,http-plain"
    latency = _run([sys.executable, str(SCRIPTS / "http_latency.py"), "--columns", cols], pythonpath=REPO)
    counted = _run([sys.executable, str(SCRIPTS / "http_instructions.py")], pythonpath=REPO)
    return {"latency_output": latency, "instructions_output": counted, "columns": _http_columns(latency)}


def _http_columns(text: str) -> dict[str, dict[str, float]]:
    """Per column of http_latency's table: its numbers in order (p50, p99, +p50, CPU figures...)."""
    cols: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        m = re.match(r"\s*(inproc|http-[\w-]+|floor-\w+)\s+(.*)", line)
        if m:
            numbers = [float(x.replace(",", "")) for x in re.findall(r"[-+]?\d[\d,]*\.?\d*", m.group(2))]
            cols[m.group(1)] = {f"n{i}": v for i, v in enumerate(numbers)}
    return cols


def _fmt(value: float, unit: str) -> str:
    if unit == "":
        return f"{value:,.0f}"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:.3f} {unit}"


def table(report: dict[str, Any]) -> str:
    b, h = report["base"], report["head"]
    rows: list[list[str]] = []
    for label, key, target, how, unit in TARGETS:
        met = h[key] <= target if how == "max" else h[key] >= target
        bound = ("at most " if how == "max" else "at least ") + _fmt(target, unit)
        rows.append([label, _fmt(b[key], unit), _fmt(h[key], unit), bound, "yes" if met else "no"])
    for label, key, unit in (
        ("  of which redis-server", "redis_cpu_ms", "ms"),
        ("the same-I/O floor's CPU per edit, process + redis-server", "floor_cpu_ms", "ms"),
        ("the same-I/O floor, paced p50", "floor_paced_p50_ms", "ms"),
        ("the same-I/O floor, paced p99", "floor_paced_p99_ms", "ms"),
        ("lock held per edit", "hold_us", "us"),
        ("against the unsafe loop (disk-dependent)", "unsafe_x", "x"),
        ("against the atomic unsafe loop (temp + rename)", "atomic_x", "x"),
    ):
        shown = [f"{s[key]:.0f} us" if unit == "us" else _fmt(s[key], unit) for s in (b, h)]
        rows.append([label, *shown, "(reported)", ""])
    intro = (
        f"Issue 30's measures, one run ({report['when']}, load {report['load'][0]:.2f} -> {report['load'][1]:.2f}, "
        f"{os.cpu_count()} cores): base `{b['commit']}`, this checkout `{h['commit']}`.\n\n"
    )
    return intro + markdown_table(["measure", "base", "now", "target", "met"], rows + _http_rows(report))


def _http_rows(report: dict[str, Any]) -> list[list[str]]:
    """This checkout's HTTP rows (the numbers of an http_latency column: edits, p50, p99, +p50, the client's
    CPU, the server's; the in-process column has no +p50, so its CPU is its fourth number): the added p50
    over in-process and the service's CPU beyond the engine's (the server process's CPU per edit less the
    in-process engine's)."""
    cols = report.get("http", {}).get("columns", {})
    inproc = cols.get("inproc")
    if inproc is None:
        return []
    rows = []
    for name, how in (
        ("http-project", "HttpClient, TCP"),
        ("http-project-uds", "HttpClient, unix socket"),
        ("http-project-keys", "HttpClient, TCP, idempotency keys (its default)"),
        ("http-plain", "httpx (information)"),
    ):
        col = cols.get(name)
        if col is None or "n5" not in col:
            continue
        added, cpu = col["n3"], col["n5"] - inproc["n3"]
        met = "" if name == "http-plain" else ("yes" if added <= 0.4 else "no")
        rows.append([f"HTTP added p50, {how}", "", f"+{added:.3f} ms", "at most +0.400 ms", met])
        met = "" if name == "http-plain" else ("yes" if cpu <= 0.25 else "no")
        rows.append([f"service CPU beyond the engine, {how}", "", f"{cpu:.3f} ms", "at most 0.250 ms", met])
    return rows


#: The same-I/O floor's figure beside a timed target's, drawn as a third bar (what no engine of this design
#: can go below on the machine).
_FLOOR_OF = {"cpu_ms": "floor_cpu_ms", "paced_p50_ms": "floor_paced_p50_ms", "paced_p99_ms": "floor_paced_p99_ms"}


def plot(report: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib (pip install -e '.[bench]'): no plot", file=sys.stderr)
        return False
    fig, axes = plt.subplots(1, len(TARGETS), figsize=(3.2 * len(TARGETS), 3.4))
    for ax, (label, key, target, how, unit) in zip(axes, TARGETS, strict=True):
        names, values, colors = ["base", "now"], [report["base"][key], report["head"][key]], ["#999999", "#3b7dd8"]
        floor = report["head"].get(_FLOOR_OF.get(key, ""))
        if floor is not None and floor == floor:  # the same-I/O floor in now's runs (not NaN: measured)
            names, values, colors = [*names, "floor"], [*values, floor], [*colors, "#8fbf8f"]
        ax.bar(names, values, color=colors)
        ax.axhline(target, color="#d62728", linestyle="--", label=f"target ({how})")
        ax.set_title(label, fontsize=8)
        ax.set_ylabel(unit or "instructions", fontsize=8)
        ax.tick_params(labelsize=8)
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"issue 30: base {report['base']['commit']} vs {report['head']['commit']} ({report['when']})", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="the git revision to compare with")
    ap.add_argument("--runs", type=int, default=2, help="fastpath_figures runs per side (default 2)")
    ap.add_argument("--edits", type=int, default=400, help="edits per side under callgrind (default 400)")
    ap.add_argument("--out", type=Path, default=REPO / "coordinator_bench" / "results" / "speed")
    ap.add_argument("--no-http", action="store_true", help="skip the HTTP figures")
    ap.add_argument("--from-json", type=Path, help="only write the table and plot again from this speed.json")
    args = ap.parse_args()
    if args.from_json is not None:
        return _write(json.loads(args.from_json.read_text()), args.out)
    load = [os.getloadavg()[0]]
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    counts = instructions(args.base, args.edits)
    with revision_tree(args.base) as tree:
        runs = timed(tree, args.runs)
    report: dict[str, Any] = {"when": when, "timed_runs": runs}
    for side, commit in (("base", _git("rev-parse", "--short", args.base)), ("head", _head())):
        report[side] = {"commit": commit, "instructions": counts[side], **side_figures(runs[side])}
    if not args.no_http:
        report["http"] = http_figures()
    load.append(os.getloadavg()[0])
    report["load"] = load
    return _write(report, args.out)


def _write(report: dict[str, Any], out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    (out / "speed.json").write_text(json.dumps(report, indent=1))
    text = table(report)
    if "http" in report:
        text += "\nHTTP (this checkout), `scripts/http_latency.py` and `scripts/http_instructions.py`:\n\n```\n"
        text += report["http"]["latency_output"] + report["http"]["instructions_output"] + "```\n"
    (out / "speed.md").write_text(text)
    plotted = plot(report, out / "speed.png")
    print(text)
    print(f"written: {out / 'speed.json'}, {out / 'speed.md'}" + (f", {out / 'speed.png'}" if plotted else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
