"""Measuring helpers: the machine and versions, Redis and process resource figures, percentiles, medians.

Everything here is cheap and local; nothing decides anything about the coordinator.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import redis

from worker.stats import percentiles

REPO = Path(__file__).resolve().parent.parent
OUTSIDE_CHECKOUT_DIR = "bench-results"  # the default results folder of an installed copy, in the current folder


def source_checkout(repo: Path | None = None) -> Path | None:
    """The project's source checkout this package runs from (an editable install, or a run from the tree),
    or None for an installed copy: then `REPO` is site-packages, which is no place for results."""
    repo = REPO if repo is None else repo
    try:
        text = (repo / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return repo if 'name = "edit-coordinator"' in text else None


def default_results_dir(repo: Path | None = None) -> Path:
    """Where results go without --out: the checkout's coordinator_bench/results (what BENCHMARKS.md is made
    from), or `bench-results` in the current folder for an installed copy."""
    root = source_checkout(repo)
    return root / "coordinator_bench" / "results" if root is not None else Path.cwd() / OUTSIDE_CHECKOUT_DIR


def default_markdown(repo: Path | None = None) -> Path:
    """The file `bench --report` writes without --markdown: the checkout's BENCHMARKS.md, else one in the
    current folder."""
    root = source_checkout(repo)
    return (root if root is not None else Path.cwd()) / "BENCHMARKS.md"


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PACKAGES = ("edit-coordinator", "redis", "hiredis", "xxhash", "filelock", "httpx", "uvicorn", "matplotlib", "rich")


# ---------------------------------------------------------------------------------------------------------
# Machine, versions, commit
# ---------------------------------------------------------------------------------------------------------
def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _mem_total_mib() -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return None


def filesystem_of(path: Path) -> str | None:
    """The filesystem type that holds `path` (from /proc/mounts: the longest mount point that prefixes it)."""
    try:
        real = os.path.realpath(path)
        best, fstype = "", None
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3:
                mnt = parts[1]
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, fstype = mnt, parts[2]
        return fstype
    except OSError:
        return None


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, cwd=REPO, timeout=10, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


#: The bench's own outputs: changes to them (results copied in before a report) do not change what runs.
OUTPUTS = ("coordinator_bench/results", "BENCHMARKS.md")


def commit() -> dict[str, Any]:
    """HEAD of the repository the benchmarks ran from, and whether its working tree had changes to what
    runs (tracked files other than the bench's outputs, `OUTPUTS`)."""
    head = _git("rev-parse", "HEAD")
    excluded = [f":(exclude){path}" for path in OUTPUTS]
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", *excluded)
    return {"commit": head or None, "short": head[:7] if head else None, "dirty": bool(status)}


def versions(redis_version: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"python": platform.python_version(), "implementation": platform.python_implementation()}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    out["redis-server"] = redis_version
    return out


def machine(scratch: Path | None = None) -> dict[str, Any]:
    """A description of the machine the figures come from."""
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "platform": platform.platform(),
        "kernel": platform.release(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_mib": _mem_total_mib(),
        "filesystem": filesystem_of(scratch) if scratch else None,
        "loadavg_at_start": load,
    }


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# ---------------------------------------------------------------------------------------------------------
# Redis
# ---------------------------------------------------------------------------------------------------------
def redis_stats(client: redis.Redis) -> dict[str, Any]:
    """Memory, CPU seconds and key count of a Redis server (one INFO call)."""
    info = client.info()
    return {
        "used_memory": int(info["used_memory"]),
        "cpu_s": float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
        "keys": int(client.dbsize()),
        "version": str(info["redis_version"]),
    }


# ---------------------------------------------------------------------------------------------------------
# Processes (the HTTP service): CPU seconds and peak RSS from /proc
# ---------------------------------------------------------------------------------------------------------
def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (Linux /proc; just `pid` elsewhere)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rpartition(")")[2].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds of the given live processes."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / _CLK_TCK
    return total


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM (peak resident set) of a live process, in MiB."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return None


def machine_cpu_ticks() -> tuple[int, int, int] | None:
    """(busy, steal, total) clock ticks of all the machine's CPUs since boot, from /proc/stat; None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return user + nice + system + irq + softirq, steal, total


def machine_busy(before: tuple[int, int, int] | None, after: tuple[int, int, int] | None) -> dict[str, float] | None:
    """Share of all the machine's CPU time that was busy (and stolen by the hypervisor) between two readings."""
    if before is None or after is None or after[2] <= before[2]:
        return None
    total = after[2] - before[2]
    return {"busy": (after[0] - before[0]) / total, "steal": (after[1] - before[1]) / total}


LOADED_PER_CORE = 0.5  # a 1-minute load average above this many runnable tasks per core: the machine is busy
STOLEN_SHARE = 0.05  # a hypervisor taking more than this share of CPU time: timings are not the machine's own


def load_warning(
    loadavg: Sequence[float] | None, cpus: int | None, steal: float | None = None, *, during: bool = False
) -> str | None:
    """What to tell the person when timings cannot be trusted: the 1-minute load average per core before the
    run above `LOADED_PER_CORE`, or (`steal`, a share of CPU time) the hypervisor stealing more than
    `STOLEN_SHARE` during it. None when the machine looks quiet. Pure."""
    reasons = []
    if loadavg and cpus and loadavg[0] > LOADED_PER_CORE * cpus:
        reasons.append(f"load average {loadavg[0]:.2f} on {cpus} cores {'when the run began' if during else 'now'}")
    if steal is not None and steal > STOLEN_SHARE:
        reasons.append(f"{steal * 100:.0f} % of the CPU time stolen by the hypervisor during the run")
    if not reasons:
        return None
    return (
        "the machine is loaded (" + "; ".join(reasons) + "): timed figures, and the met/missed verdicts made "
        "from them, move with the load. Compare engines by instruction counts, which load does not move: "
        "`python3 scripts/engine_ab.py A B --instructions` (callgrind; scripts/ is in a clone of the "
        "repository, not in the installed package)."
    )


def current_load() -> tuple[list[float] | None, int | None]:
    """(the load averages, the number of CPUs) now; None where the platform does not tell."""
    try:
        return list(os.getloadavg()), os.cpu_count()
    except OSError:
        return None, os.cpu_count()


# ---------------------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------------------
# The CDF grid kept for every cell: fine in the tail, where the interesting differences are.
QUANTILE_GRID: tuple[float, ...] = (
    *[float(q) for q in range(0, 90)],
    *[90.0 + q / 2 for q in range(0, 18)],
    99.0, 99.2, 99.4, 99.5, 99.6, 99.7, 99.8, 99.9, 100.0,
)  # fmt: skip


def quantiles(values: Sequence[float], grid: Sequence[float] = QUANTILE_GRID) -> list[float] | None:
    """Values at the grid's percentiles (the one definition, `worker.stats`), or None when there are none."""
    return percentiles(values, grid)


def spread(values: Iterable[float | None]) -> dict[str, float | None] | None:
    """{median, min, max, n} of the values that are not None; None when there are none."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def get_path(d: dict[str, Any], dotted: str) -> Any:
    """d["a"]["b"] for "a.b"; None when any part is missing."""
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur
