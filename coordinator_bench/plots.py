"""PNG plots of the results: throughput vs sessions, conflict rates, latency CDFs, and bars of the ratios
side by side (solo and HTTP against their baselines, strict vs rebase, the Redis deployments).

Each plot is drawn from whatever scenarios are in the results (a quick run draws single points); a plot
with no data is not written. Returns the paths written, keyed by plot name. matplotlib is an optional
extra (`pip install -e ".[bench]"`): it is imported here only, when plots are drawn; without it no plot is
written and `MISSING_MATPLOTLIB` says how to get them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

MISSING_MATPLOTLIB = (
    "matplotlib is not installed, so no plot is drawn (the figures and tables are not affected). "
    'Install the benchmark extra: pip install "edit-coordinator[bench]" (in a clone: pip install -e ".[bench]").'
)


def matplotlib_missing() -> str | None:
    """None when plots can be drawn, else what to install."""
    return MISSING_MATPLOTLIB if importlib.util.find_spec("matplotlib") is None else None


# One colour and marker per column, stable across plots.
_STYLE: dict[str, tuple[str, str, str]] = {
    "unsafe": ("#9e9e9e", "x", ":"),
    "naive-lock": ("#e07b39", "s", "--"),
    "strict-none": ("#1f5fbf", "o", "-"),
    "strict-fsync": ("#6fa8dc", "o", "-."),
    "rebase-none": ("#2e8b57", "^", "-"),
    "rebase-fsync": ("#93c47d", "^", "-."),
    "http-strict-none": ("#8e44ad", "D", "-"),
    "http-plain": ("#c27ba0", "D", "--"),
    "http-uds": ("#5b2c6f", "P", "-."),
    "redis-server": ("#674ea7", "o", "-"),
    "redis-sentinel": ("#b45f06", "s", "-"),
    "redis-cluster": ("#38761d", "^", "-"),
    "async": ("#0b5394", "o", "-"),
}


def _style(name: str) -> dict[str, Any]:
    color, marker, ls = _STYLE.get(name, ("#333333", ".", "-"))
    return {"color": color, "marker": marker, "linestyle": ls}


def _by_scenario(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["scenario"]["name"]: r for r in results if not r.get("skipped")}


def _series(result: dict[str, Any], metric: str) -> dict[str, list[tuple[float, float, float, float]]]:
    """column -> [(x, median, min, max)] of `metric` over the scenario's rows."""
    out: dict[str, list[tuple[float, float, float, float]]] = {}
    for c in result["cells"]:
        s = c["agg"].get(metric)
        if s is None or c.get("x") is None:
            continue
        out.setdefault(c["column"], []).append((float(c["x"]), s["median"], s["min"], s["max"]))
    for pts in out.values():
        pts.sort()
    return out


def _line_panel(ax: Any, result: dict[str, Any], metric: str, scale: float = 1.0, skip: tuple[str, ...] = ()) -> bool:
    drew = False
    for col, pts in _series(result, metric).items():
        if col in skip:
            continue
        xs = [p[0] for p in pts]
        med = [p[1] * scale for p in pts]
        lo = [(p[1] - p[2]) * scale for p in pts]
        hi = [(p[3] - p[1]) * scale for p in pts]
        ax.errorbar(xs, med, yerr=[lo, hi], label=col, capsize=3, markersize=5, linewidth=1.4, **_style(col))
        drew = True
    return drew


def make_plots(results: list[dict[str, Any]], out: Path) -> dict[str, Path]:
    """Draw every plot the results allow into `out`; returns {name: path} ({} without matplotlib)."""
    if matplotlib_missing():
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    res = _by_scenario(results)
    written: dict[str, Path] = {}
    for name, draw in _PLOTS:
        fig = draw(plt, res)
        if fig is not None:
            written[name] = out / f"bench-{name.replace('_', '-')}.png"
            fig.tight_layout()
            fig.savefig(written[name], dpi=100)
            plt.close(fig)
    return written


def _throughput(plt: Any, res: dict[str, dict[str, Any]]) -> Any:
    """Throughput vs sessions: disjoint (processes on own files), hot (one file), hot-line (one line)."""
    names = (("disjoint", "disjoint: own file each"), ("hot", "hot: one file, own lines"), ("hot-line", "one line"))
    panels = [(n, t) for n, t in names if n in res]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, (name, title) in zip(axes[0], panels, strict=True):
        _line_panel(ax, res[name], "throughput_per_s")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(res[name]["scenario"]["x_label"])
        ax.set_ylabel("acknowledged edits/s")
        ax.set_title(title)
        ax.grid(alpha=0.3, which="both")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle("Throughput vs sessions (median, bars: min-max)")
    return fig


def _conflicts(plt: Any, res: dict[str, dict[str, Any]]) -> Any:
    """Conflict rate (stale / attempts) vs sessions per file."""
    panels = [(n, t) for n, t in (("hot", "hot: own lines of one file"), ("hot-line", "the same line")) if n in res]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, (name, title) in zip(axes[0], panels, strict=True):
        _line_panel(ax, res[name], "conflict_rate", scale=100.0, skip=("unsafe",))
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 100)
        ax.set_xlabel("sessions per file")
        ax.set_ylabel("stale refusals, % of attempts")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=8)
    fig.suptitle("Conflict rate vs sessions per file (unsafe never refuses)")
    return fig


def _latency_cdf(plt: Any, res: dict[str, dict[str, Any]]) -> Any:
    """Latency CDF per policy and baseline at the headline contention point of `hot`."""
    hot = res.get("hot")
    if hot is None:
        return None
    rows = [c["row"] for c in hot["cells"]]
    row = "N=16" if "N=16" in rows else (rows[-1] if rows else None)
    cells = [c for c in hot["cells"] if c["row"] == row and c.get("latency_quantiles_ms")]
    if not cells:
        return None
    grid = [q / 100.0 for q in hot["quantile_grid"]]
    fig, axes = plt.subplots(1, 2, figsize=(10.4, 4.2), squeeze=False)
    for ax, key, title in (
        (axes[0][0], "latency_quantiles_ms", "per call (refusals included)"),
        (axes[0][1], "change_latency_quantiles_ms", "per change (re-reads and retries included)"),
    ):
        for c in cells:
            if c.get(key):
                st = _style(c["column"])
                ax.plot([max(v, 1e-3) for v in c[key]], grid, label=c["column"], color=st["color"], ls=st["linestyle"])
        ax.set_xscale("log")
        ax.set_xlabel("latency (ms)")
        ax.set_ylabel("fraction of calls" if key.startswith("latency") else "fraction of changes")
        ax.set_title(title)
        ax.grid(alpha=0.3, which="both")
    axes[0][1].legend(fontsize=8)
    fig.suptitle(f"Latency CDF per policy and baseline, hot {row} (all repetitions pooled)")
    return fig


def _zipf(plt: Any, res: dict[str, dict[str, Any]]) -> Any:
    zipf = res.get("zipf")
    if zipf is None or len({c["row"] for c in zipf["cells"]}) < 2:
        return None
    fig, ax = plt.subplots(figsize=(5.6, 4.2))
    _line_panel(ax, zipf, "throughput_per_s")
    ax.set_xscale("symlog", linthresh=1)
    ax.set_yscale("log")
    ax.set_xlabel("mean think time per edit (ms)")
    ax.set_ylabel("acknowledged edits/s")
    ax.set_title("zipf: 16 sessions, 64 files, Zipf(1.1)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def _bars(ax: Any, result: dict[str, Any], metric: str, scale: float = 1.0, label_fmt: str = "{:,.0f}") -> bool:
    """Grouped bars: one group per row, one bar per column, the median with min-max whiskers."""
    rows = [r["key"] for r in result["scenario"]["rows"]]
    cols = [c["name"] for c in result["columns"]]
    width = 0.8 / max(len(cols), 1)
    drew = False
    for j, col in enumerate(cols):
        xs, ys, lo, hi = [], [], [], []
        for i, row in enumerate(rows):
            c = next((c for c in result["cells"] if c["row"] == row and c["column"] == col), None)
            s = c["agg"].get(metric) if c else None
            if s is None:
                continue
            xs.append(i + (j - (len(cols) - 1) / 2) * width)
            ys.append(s["median"] * scale)
            lo.append((s["median"] - s["min"]) * scale)
            hi.append((s["max"] - s["median"]) * scale)
        if xs:
            bars = ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=col, color=_style(col)["color"])
            ax.bar_label(bars, labels=[label_fmt.format(y) for y in ys], fontsize=7, padding=2)
            drew = True
    ax.set_xticks(range(len(rows)), rows)
    ax.grid(alpha=0.3, axis="y")
    return drew


def _side_by_side(plt: Any, res: dict[str, dict[str, Any]], panels: list[tuple[str, str, str, float, str]]) -> Any:
    panels = [p for p in panels if p[0] in res]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.4 * len(panels), 4.2), squeeze=False)
    for ax, (name, metric, ylabel, scale, fmt) in zip(axes[0], panels, strict=True):
        _bars(ax, res[name], metric, scale, fmt)
        ax.set_title(res[name]["scenario"]["title"].split(":")[0] + f": {ylabel}", fontsize=10)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    return fig


def _solo_http(plt: Any, res: dict[str, dict[str, Any]]) -> Any:
    """solo and http: edits/s and CPU per edit, side by side with their baselines."""
    fig = _side_by_side(
        plt,
        res,
        [
            ("solo", "throughput_per_s", "edits/s", 1.0, "{:,.0f}"),
            ("http", "throughput_per_s", "edits/s", 1.0, "{:,.0f}"),
            ("solo", "cpu_ms_per_edit", "CPU ms per edit", 1.0, "{:.2f}"),
        ],
    )
    if fig is not None:
        fig.suptitle("One session, consecutive edits of a 200-line file (median, whiskers: min-max)")
    return fig


def _policies(plt: Any, res: dict[str, dict[str, Any]]) -> Any:
    """conflicts: stale refusals and throughput, strict beside rebase."""
    fig = _side_by_side(
        plt,
        res,
        [
            ("conflicts", "conflict_rate", "% of attempts refused as stale", 100.0, "{:.1f}"),
            ("conflicts", "throughput_per_s", "acknowledged edits/s", 1.0, "{:,.0f}"),
        ],
    )
    if fig is not None:
        fig.suptitle("16 sessions, 200 ms think time: strict vs rebase (median, whiskers: min-max)")
    return fig


def _distributed(plt: Any, res: dict[str, dict[str, Any]]) -> Any:
    """distributed: throughput and CPU per edit on each Redis deployment."""
    fig = _side_by_side(
        plt,
        res,
        [
            ("distributed", "throughput_per_s", "acknowledged edits/s", 1.0, "{:,.0f}"),
            ("distributed", "cpu_ms_per_edit", "CPU ms per edit (workers + Redis)", 1.0, "{:.2f}"),
        ],
    )
    if fig is not None:
        fig.suptitle("Redis deployments: 16 sessions, 64 files, Zipf(1.1) (median, whiskers: min-max)")
    return fig


_PLOTS: tuple[tuple[str, Any], ...] = (
    ("throughput", _throughput),
    ("conflicts", _conflicts),
    ("latency_cdf", _latency_cdf),
    ("zipf", _zipf),
    ("solo_http", _solo_http),
    ("policies", _policies),
    ("distributed", _distributed),
)
