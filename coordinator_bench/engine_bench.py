"""Engine benchmarks: `solo` (one session, consecutive edits vs the unsafe baseline) and `handoff`
(8 processes on one file: lock wait next to lock hold, and the same hand-off through filelock's polling FileLock).

Run: python -m coordinator_bench.engine_bench [--quick]. Writes coordinator_bench/results/engine.json and
coordinator_bench/results/handoff_cdf.png. Figures are medians of repetitions measured side by side in one run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
LINES = 200


def _make_file(path: Path) -> None:
    path.write_text("".join(f"value_{i} = {i}\n" for i in range(LINES)))


# ------------------------------------------------------------------------------------------------- solo
def _solo_coordinator(root: Path, edits: int, durability: str, state_check: str = "always") -> float:
    from coordinator import Coordinator

    f = root / f"solo_{durability}_{state_check}.py"
    _make_file(f)
    with Coordinator(root, durability=durability, state_check=state_check) as c:  # type: ignore[arg-type]
        s = c.session("solo")
        s.read(f.name)
        vals = list(range(LINES))
        t0 = time.perf_counter()
        for k in range(edits):
            i = k % LINES
            s.edit(f.name, f"value_{i} = {vals[i]}\n", f"value_{i} = {vals[i] + 1}\n")
            vals[i] += 1
        return edits / (time.perf_counter() - t0)


def _solo_unsafe(root: Path, edits: int) -> float:
    f = root / "solo_unsafe.py"
    _make_file(f)
    vals = list(range(LINES))
    t0 = time.perf_counter()
    for k in range(edits):
        i = k % LINES
        text = f.read_text()
        f.write_text(text.replace(f"value_{i} = {vals[i]}\n", f"value_{i} = {vals[i] + 1}\n", 1))
        vals[i] += 1
    return edits / (time.perf_counter() - t0)


def bench_solo(root: Path, edits: int, reps: int) -> dict[str, Any]:
    runs: dict[str, list[float]] = {
        "unsafe": [],
        "coordinator_none": [],
        "coordinator_none_cached": [],
        "coordinator_fsync": [],
    }
    for _ in range(reps):  # interleaved so that machine noise hits all alike
        runs["unsafe"].append(_solo_unsafe(root, edits))
        runs["coordinator_none"].append(_solo_coordinator(root, edits, "none"))
        runs["coordinator_none_cached"].append(_solo_coordinator(root, edits, "none", "cached"))
        runs["coordinator_fsync"].append(_solo_coordinator(root, max(edits // 4, 50), "fsync"))
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {
        "edits_per_s": {k: {"median": med[k], "min": min(v), "max": max(v)} for k, v in runs.items()},
        "ratio_none_vs_unsafe": med["coordinator_none"] / med["unsafe"],
        "ratio_none_cached_vs_unsafe": med["coordinator_none_cached"] / med["unsafe"],
        "ratio_fsync_vs_unsafe": med["coordinator_fsync"] / med["unsafe"],
        "edits": edits,
        "reps": reps,
    }


# ---------------------------------------------------------------------------------------------- hand-off
def _handoff_worker(root: str, idx: int, edits: int, start: Any) -> list[tuple[float, float, float]]:
    """Counters on one shared file; returns (lock_wait, lock_hold, latency) per acknowledged edit."""
    import re

    from coordinator import Coordinator, CoordinatorError

    out = []
    with Coordinator(root, durability="none") as c:
        s = c.session(f"h{idx}")
        start.wait()
        content = s.read("hot.txt").content
        done = 0
        while done < edits:
            v = int(re.search(rf"^slot {idx}: (\d+)$", content, re.M).group(1))  # type: ignore[union-attr]
            t0 = time.perf_counter()
            try:
                r = s.edit("hot.txt", f"slot {idx}: {v}\n", f"slot {idx}: {v + 1}\n")
            except CoordinatorError:
                content = s.read("hot.txt").content
                continue
            out.append((r.timings["lock_wait_s"], r.timings["lock_hold_s"], time.perf_counter() - t0))
            content = content.replace(f"slot {idx}: {v}\n", f"slot {idx}: {v + 1}\n")
            done += 1
    return out


def _filelock_worker(root: str, idx: int, n: int, hold_s: float, start: Any) -> list[tuple[float, float]]:
    """The same hand-off through filelock's FileLock (polling acquisition), holding the lock `hold_s`."""
    from filelock import FileLock

    lock = FileLock(os.path.join(root, "fl.lock"))
    start.wait()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        lock.acquire()
        t1 = time.perf_counter()
        end = t1 + hold_s
        while time.perf_counter() < end:
            pass
        lock.release()
        out.append((t1 - t0, time.perf_counter() - t1))
    return out


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else 0.0


def bench_handoff(root: Path, procs: int, edits: int) -> dict[str, Any]:
    (root / "hot.txt").write_text("".join(f"slot {i}: 0\n" for i in range(procs)))
    ctx = mp.get_context("spawn")
    mgr = ctx.Manager()
    start = mgr.Event()
    with ctx.Pool(procs) as pool:
        res = [pool.apply_async(_handoff_worker, (str(root), i, edits, start)) for i in range(procs)]
        time.sleep(1.0)
        start.set()
        rows = [x for r in res for x in r.get(timeout=600)]
    waits = [w for w, _, _ in rows]
    holds = [h for _, h, _ in rows]
    lats = [lat for _, _, lat in rows]
    hold_median = statistics.median(holds)
    start2 = mgr.Event()
    with ctx.Pool(procs) as pool:
        res2 = [
            pool.apply_async(_filelock_worker, (str(root), i, max(edits // 2, 20), hold_median, start2))
            for i in range(procs)
        ]
        time.sleep(1.0)
        start2.set()
        fl = [x for r in res2 for x in r.get(timeout=600)]
    fl_waits = [w for w, _ in fl]
    mgr.shutdown()
    return {
        "processes": procs,
        "edits_per_process": edits,
        "coordinator": {
            "wait_p50_ms": _pct(waits, 50) * 1e3,
            "wait_p99_ms": _pct(waits, 99) * 1e3,
            "hold_p50_ms": _pct(holds, 50) * 1e3,
            "hold_p99_ms": _pct(holds, 99) * 1e3,
            "latency_p50_ms": _pct(lats, 50) * 1e3,
            "latency_p99_ms": _pct(lats, 99) * 1e3,
            "waits_ms": [w * 1e3 for w in waits],
        },
        "filelock_polling": {
            "wait_p50_ms": _pct(fl_waits, 50) * 1e3,
            "wait_p99_ms": _pct(fl_waits, 99) * 1e3,
            "hold_ms": hold_median * 1e3,
            "waits_ms": [w * 1e3 for w in fl_waits],
        },
    }


def plot_handoff(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    series = (("coordinator (kernel hand-off)", "coordinator"), ("filelock FileLock (polling)", "filelock_polling"))
    for label, key in series:
        xs = sorted(result[key]["waits_ms"])
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.plot(xs, ys, label=label)
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlabel("lock wait (ms)")
    ax.set_ylabel("fraction of acquisitions")
    ax.set_title(f"Lock hand-off, {result['processes']} processes on one file")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def machine() -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    edits, reps, hedits = (300, 3, 40) if args.quick else (2000, 5, 200)
    from coordinator.embedded import stop_embedded_redis
    from coordinator.layout import state_dir_of

    RESULTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ec-bench-") as tmp:
        root = Path(tmp)
        try:
            solo = bench_solo(root, edits, reps)
            handoff = bench_handoff(root, 8, hedits)
        finally:
            stop_embedded_redis(state_dir_of(root))
    result = {"machine": machine(), "solo": solo, "handoff": handoff}
    (RESULTS / "engine.json").write_text(json.dumps(result, indent=1))
    plot_handoff(handoff, RESULTS / "handoff_cdf.png")
    s = solo["edits_per_s"]
    print(
        f"solo: unsafe {s['unsafe']['median']:.0f}/s, "
        f"coordinator none {s['coordinator_none']['median']:.0f}/s "
        f"(ratio {solo['ratio_none_vs_unsafe']:.2f}), none+cached {s['coordinator_none_cached']['median']:.0f}/s "
        f"(ratio {solo['ratio_none_cached_vs_unsafe']:.2f}), fsync {s['coordinator_fsync']['median']:.0f}/s"
    )
    c, f = handoff["coordinator"], handoff["filelock_polling"]
    print(
        f"hand-off: wait p50 {c['wait_p50_ms']:.2f} ms p99 {c['wait_p99_ms']:.2f} ms; hold p50 "
        f"{c['hold_p50_ms']:.2f} p99 {c['hold_p99_ms']:.2f} ms; filelock wait p50 {f['wait_p50_ms']:.2f} "
        f"p99 {f['wait_p99_ms']:.2f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
