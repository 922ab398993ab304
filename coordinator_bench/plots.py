"""PNG plots of the results: throughput vs sessions, conflict rate vs sessions per file, latency CDFs.

Each plot is drawn from whatever scenarios are in the results (a quick run draws single points); a plot
with no data is not written. Returns the paths written, keyed by plot name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# One colour and marker per column, stable across plots.
_STYLE: dict[str, tuple[str, str, str]] = {
    "unsafe": ("#9e9e9e", "x", ":"),
    "naive-lock": ("#e07b39", "s", "--"),
    "strict-none": ("#1f5fbf", "o", "-"),
    "strict-fsync": ("#6fa8dc", "o", "-."),
    "rebase-none": ("#2e8b57", "^", "-"),
    "rebase-fsync": ("#93c47d", "^", "-."),
    "http-strict-none": ("#8e44ad", "D", "-"),
}


def _style(name: str) -> dict[str, Any]:
    color, marker, ls = _STYLE.get(name, ("#333333", ".", "-"))
    return {"color": color, "marker": marker, "linestyle": ls}


def _by_scenario(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["scenario"]["name"]: r for r in results}


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
    """Draw every plot the results allow into `out`; returns {name: path}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    res = _by_scenario(results)
    written: dict[str, Path] = {}

    # 1. Throughput vs sessions: disjoint (processes on own files) and hot (sessions on one file).
    panels = [
        (n, t)
        for n, t in (
            ("disjoint", "disjoint: own file each"),
            ("hot", "hot: one file, own lines"),
            ("hot-line", "hot-line: one line"),
        )
        if n in res
    ]
    if panels:
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
        fig.tight_layout()
        written["throughput"] = out / "bench-throughput.png"
        fig.savefig(written["throughput"], dpi=100)
        plt.close(fig)

    # 2. Conflict rate (stale / attempts) vs sessions per file.
    panels = [
        (n, t) for n, t in (("hot", "hot: own lines of one file"), ("hot-line", "hot-line: the same line")) if n in res
    ]
    if panels:
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
        fig.tight_layout()
        written["conflicts"] = out / "bench-conflicts.png"
        fig.savefig(written["conflicts"], dpi=100)
        plt.close(fig)

    # 3. Latency CDF per policy (and baseline) at the headline contention point.
    hot = res.get("hot")
    if hot is not None:
        rows = [c["row"] for c in hot["cells"]]
        row = "N=16" if "N=16" in rows else (rows[-1] if rows else None)
        cells = [c for c in hot["cells"] if c["row"] == row and c.get("latency_quantiles_ms")]
        if cells:
            grid = [q / 100.0 for q in hot["quantile_grid"]]
            fig, axes = plt.subplots(1, 2, figsize=(10.4, 4.2), squeeze=False)
            for ax, key, title in (
                (axes[0][0], "latency_quantiles_ms", "per call (refusals included)"),
                (axes[0][1], "change_latency_quantiles_ms", "per change (re-reads and retries included)"),
            ):
                for c in cells:
                    q = c.get(key)
                    if not q:
                        continue
                    st = _style(c["column"])
                    ax.plot(
                        [max(v, 1e-3) for v in q], grid, label=c["column"], color=st["color"], linestyle=st["linestyle"]
                    )
                ax.set_xscale("log")
                ax.set_xlabel("latency (ms)")
                ax.set_ylabel("fraction of calls" if key.startswith("latency") else "fraction of changes")
                ax.set_title(title)
                ax.grid(alpha=0.3, which="both")
            axes[0][1].legend(fontsize=8)
            fig.suptitle(f"Latency CDF per policy and baseline, hot {row} (all repetitions pooled)")
            fig.tight_layout()
            written["latency_cdf"] = out / "bench-latency-cdf.png"
            fig.savefig(written["latency_cdf"], dpi=100)
            plt.close(fig)

    # 4. zipf: throughput vs think time.
    zipf = res.get("zipf")
    if zipf is not None and len({c["row"] for c in zipf["cells"]}) > 1:
        fig, ax = plt.subplots(figsize=(5.6, 4.2))
        _line_panel(ax, zipf, "throughput_per_s")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_yscale("log")
        ax.set_xlabel("mean think time per edit (ms)")
        ax.set_ylabel("acknowledged edits/s")
        ax.set_title("zipf: 16 sessions, 64 files, Zipf(1.1)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        fig.tight_layout()
        written["zipf"] = out / "bench-zipf.png"
        fig.savefig(written["zipf"], dpi=100)
        plt.close(fig)
    return written
