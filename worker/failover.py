"""Failover drill: real processes edit one file while the Redis primary they depend on is SIGKILLed.

    python -m worker.failover --topology cluster      # or sentinel; prints the figures as JSON

The deployment is started from the system's redis-server (`worker.deployments`). `workers` processes
each increment their own line of one file (`slot i: N`), reading again after any refusal. Once every
worker has `before` acknowledged edits, the busiest primary (Cluster) or the primary (Sentinel) is killed
with SIGKILL; the drill ends when every worker has at least `after` acknowledged edits stamped after the
kill (or at `timeout_s`).

The oracle: each line's final value must equal the number of edits its worker saw acknowledged. Less would
be a lost update; more, an edit reported as refused that is in the file. Any exception other than a
`CoordinatorError` is recorded as raw. The refusal window is measured from the kill to the moment every
worker has been acknowledged again (and the span of `state_unavailable` refusals).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FILE = "counters.txt"


@dataclass
class WorkerOutcome:
    acked: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    unavailable_at: list[float] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)


@dataclass
class DrillReport:
    topology: str
    workers: int
    killed: str
    killed_at: float
    acked: list[int]
    final: dict[int, int]
    refusals: dict[str, int]
    raw: list[str]
    lost: int  # acknowledged edits missing from the file
    phantom: int  # edits in the file beyond those acknowledged (a refused edit that landed)
    resumed_all_s: float | None  # kill -> every worker acknowledged again
    resumed_first_s: float | None  # kill -> first acknowledged edit after it
    unavailable_span_s: float | None  # first -> last state_unavailable refusal
    acked_after_kill: list[int]

    def ok(self) -> bool:
        return self.lost == 0 and self.phantom == 0 and not self.raw and all(n > 0 for n in self.acked_after_kill)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _slot(content: str, idx: int) -> int:
    m = re.search(rf"^slot {idx}: (\d+)$", content, re.M)
    if m is None:
        raise AssertionError(f"slot {idx} missing from the file")
    return int(m.group(1))


def _worker(url: str, root: str, idx: int, progress: Any, stop: Any) -> WorkerOutcome:
    from coordinator import Coordinator, CoordinatorError, ErrorCode

    out = WorkerOutcome()
    refusals: Counter[str] = Counter()
    with Coordinator(root, redis_url=url, durability="none", redis_timeout=1.0) as coord:
        s = coord.session(f"drill-{idx}")
        content: str | None = None
        while not stop.is_set():
            try:
                if content is None:
                    content = s.read(FILE).content
                v = _slot(content, idx)
                old, new = f"slot {idx}: {v}\n", f"slot {idx}: {v + 1}\n"
                s.edit(FILE, old, new)
                out.acked += 1
                out.acked_at.append(time.time())
                progress[idx] = out.acked
                content = content.replace(old, new)
            except CoordinatorError as exc:
                refusals[exc.code.value] += 1
                content = None
                if exc.code is ErrorCode.STATE_UNAVAILABLE:
                    out.unavailable_at.append(time.time())
                    time.sleep(0.02)
            except Exception as exc:  # the drill's finding: nothing but CoordinatorError may escape
                out.raw.append(f"{type(exc).__name__}: {exc}")
                content = None
                time.sleep(0.05)
    out.refusals = dict(refusals)
    return out


def _wait_for(pred: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def run_drill(
    topology: str, folder: Path, workers: int = 4, before: int = 10, after: int = 10, timeout_s: float = 60.0
) -> DrillReport:
    """Start a `topology` ("cluster" | "sentinel") deployment under `folder`, run the drill, stop it."""
    from worker.deployments import LocalCluster, deployment

    root = Path(folder) / "repo"
    root.mkdir(parents=True)
    (root / FILE).write_text("".join(f"slot {i}: 0\n" for i in range(workers)))
    with deployment(topology, Path(folder) / "redis") as dep:
        ctx = mp.get_context("spawn")
        with ctx.Manager() as manager:
            progress = manager.list([0] * workers)
            stop = manager.Event()
            with ctx.Pool(workers) as pool:
                jobs = [pool.apply_async(_worker, (dep.url, str(root), i, progress, stop)) for i in range(workers)]
                try:
                    _wait_for(lambda: min(progress) >= before, timeout_s)
                    port = dep.busiest_primary() if isinstance(dep, LocalCluster) else dep.primary_port()
                    # The kill time first, then the counts: a worker may have one ack stamped before killed_at
                    # whose count reaches `progress` only after the snapshot (its next one is stamped after
                    # that), so `after + 1` counted past the snapshot are at least `after` acks after the kill.
                    killed_at = time.time()
                    snapshot = list(progress)
                    dep.kill(port)
                    _wait_for(lambda: all(p - s > after for p, s in zip(progress, snapshot, strict=True)), timeout_s)
                finally:
                    stop.set()
                outs: list[WorkerOutcome] = [j.get(timeout=timeout_s) for j in jobs]
    text = (root / FILE).read_text()
    final = {i: _slot(text, i) for i in range(workers)}
    return _report(topology, f"127.0.0.1:{port}", killed_at, outs, final)


def _report(
    topology: str, killed: str, killed_at: float, outs: list[WorkerOutcome], final: dict[int, int]
) -> DrillReport:
    refusals: Counter[str] = Counter()
    for o in outs:
        refusals.update(o.refusals)
    after_kill = [[t for t in o.acked_at if t > killed_at] for o in outs]
    firsts = [a[0] - killed_at for a in after_kill if a]
    unavailable = sorted(t for o in outs for t in o.unavailable_at)
    return DrillReport(
        topology=topology,
        workers=len(outs),
        killed=killed,
        killed_at=killed_at,
        acked=[o.acked for o in outs],
        final=final,
        refusals=dict(refusals),
        raw=[r for o in outs for r in o.raw],
        lost=sum(max(0, o.acked - final[i]) for i, o in enumerate(outs)),
        phantom=sum(max(0, final[i] - o.acked) for i, o in enumerate(outs)),
        resumed_all_s=round(max(firsts), 3) if len(firsts) == len(outs) else None,
        resumed_first_s=round(min(firsts), 3) if firsts else None,
        unavailable_span_s=round(unavailable[-1] - unavailable[0], 3) if unavailable else None,
        acked_after_kill=[len(a) for a in after_kill],
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topology", choices=["cluster", "sentinel"], default="cluster")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--before", type=int, default=20, help="acknowledged edits per worker before the kill")
    p.add_argument("--after", type=int, default=20, help="acknowledged edits per worker after the kill")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ec-drill-") as d:
        report = run_drill(args.topology, Path(d), args.workers, args.before, args.after)
    print(json.dumps(report.to_dict(), indent=2))
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
