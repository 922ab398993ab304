"""The benchmark's worker entry point for `worker.fleet.Fleet(target=...)`: the fleet's own loop, with the
benchmark's clients and per-worker resource figures.

`bench_worker_main` is `worker.fleet.worker_main` with `coordinator_bench.columns.make_bench_client` as the client
factory (the naive-lock baseline, the plain HTTP client, Redis deployments), plus a `getrusage` at the end
(and, when asked, cProfile around the agent). Everything else (start barrier, agents, records, oracle) is
the fleet's own. `bench_fleet(config, extras)` is the fleet that runs it.
"""

from __future__ import annotations

import cProfile
import functools
import json
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator_bench.columns import make_bench_client
from worker.fleet import Fleet, FleetConfig, SharedState, WorkerSpec, worker_main


@dataclass(frozen=True)
class WorkerExtras:
    """Where a worker writes its resource usage (and its profile, when profiling)."""

    usage_dir: str
    profile_dir: str | None = None


def bench_worker_main(spec: WorkerSpec, shared: SharedState, extras: WorkerExtras) -> None:
    """Entry point of a benchmark worker: `worker.fleet.worker_main` with the benchmark's client factory,
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

    worker_main(spec, shared, make=make_bench_client, run=run)


def bench_fleet(config: FleetConfig, extras: WorkerExtras) -> Fleet:
    """A fleet whose workers run `bench_worker_main` with `extras`."""
    Path(extras.usage_dir).mkdir(parents=True, exist_ok=True)
    if extras.profile_dir:
        Path(extras.profile_dir).mkdir(parents=True, exist_ok=True)
    return Fleet(config, target=functools.partial(bench_worker_main, extras=extras))


def read_usage(usage_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The usage records the workers of a run left."""
    out = []
    for path in sorted(Path(usage_dir).glob("*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out
