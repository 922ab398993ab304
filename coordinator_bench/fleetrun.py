"""A thin adapter over `worker.fleet`: the same fleet, with the benchmark's clients and per-worker usage.

`worker.fleet.Fleet` builds each worker's client with `worker.fleet.make_client`, which knows the
coordinator (strict policy), HTTP and the unsafe baseline. The benchmarks also need the coordinator's other
policies and the naive-lock baseline, and each worker's CPU seconds and peak RSS. `BenchFleet` therefore
starts its workers with `bench_worker_main`, which is `worker.fleet._worker_main` with
`coordinator_bench.columns.make_bench_client` as the factory, plus a `getrusage` at the end (and, when asked,
cProfile around the agent). Everything else (start barrier, agents, records, oracle) is the fleet's own.
"""

from __future__ import annotations

import cProfile
import json
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.fleet import Fleet, FleetConfig, WorkerSpec, _Shared, _worker_main

from .columns import make_bench_client


@dataclass(frozen=True)
class WorkerExtras:
    """Where a worker writes its resource usage (and its profile, when profiling)."""

    usage_dir: str
    profile_dir: str | None = None


def bench_worker_main(spec: WorkerSpec, shared: _Shared, extras: WorkerExtras) -> None:
    """Entry point of a benchmark worker: `worker.fleet._worker_main` with the benchmark's client factory,
    and the agent run wrapped to record its resource usage (and profile, when asked)."""

    def run(agent: Any) -> None:
        profile = cProfile.Profile() if extras.profile_dir else None
        before = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.monotonic()
        try:
            if profile is not None:
                profile.runcall(agent.run)
            else:
                agent.run()
        finally:
            after = resource.getrusage(resource.RUSAGE_SELF)
            usage = {
                "session": spec.agent.session,
                "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
                "user_s": after.ru_utime - before.ru_utime,
                "system_s": after.ru_stime - before.ru_stime,
                "maxrss_kib": after.ru_maxrss,
                "wall_s": time.monotonic() - t0,
                "voluntary_switches": after.ru_nvcsw - before.ru_nvcsw,
                "involuntary_switches": after.ru_nivcsw - before.ru_nivcsw,
            }
            Path(extras.usage_dir, f"{spec.agent.session}.json").write_text(json.dumps(usage))
            if profile is not None and extras.profile_dir:
                profile.dump_stats(os.path.join(extras.profile_dir, f"{spec.agent.session}.prof"))

    _worker_main(spec, shared, make=make_bench_client, run=run)


class BenchFleet(Fleet):
    """`worker.fleet.Fleet` whose workers run `bench_worker_main`."""

    def __init__(self, config: FleetConfig, extras: WorkerExtras) -> None:
        super().__init__(config)
        self.extras = extras
        Path(extras.usage_dir).mkdir(parents=True, exist_ok=True)
        if extras.profile_dir:
            Path(extras.profile_dir).mkdir(parents=True, exist_ok=True)

    def _spawn(self, i: int) -> None:
        # As Fleet._spawn, with the benchmark's entry point (and its extras) instead of _worker_main.
        inc = self.incarnation.get(i, -1) + 1
        self.incarnation[i] = inc
        p = self.ctx.Process(
            target=bench_worker_main,
            args=(self._spec(i, inc), self.shared, self.extras),
            name=f"ec-bench-worker-{i}.{inc}",
        )
        p.daemon = True
        p.start()
        self.procs[i] = p


def read_usage(usage_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The usage records the workers of a run left."""
    out = []
    for path in sorted(Path(usage_dir).glob("*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out
