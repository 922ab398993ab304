"""The asyncio scenario's harness: coroutines on one event loop editing shared files through `AsyncClient`.

`row.sessions` coroutines share `row.sessions // 2` sessions (two coroutines per session) and each
increments its own slot line of the row's counters files, chosen at random, with no think time: edits
wait for contended file locks, which `AsyncClient` must do off the loop. Beside them a ticker coroutine
sleeps 1 ms in a loop and records how late it wakes up; the largest lateness is the loop's largest stall
(the issue's bound: under 20 ms); its p99 lateness, and the largest lateness of the ticker alone for
0.5 s before the editors start (what the machine's other load costs anyway), are recorded beside it. A
coroutine re-reads after a refusal, as an agent would. At the end the oracle
(`worker.oracle.judge_counts`) checks every slot line against the increments acknowledged for it.

Each repetition runs in a fresh interpreter (spawned), as a platform's own process would: the loop and
the in-process coordinator, nothing of the benchmark harness (its progress display, the other cells'
results), whose objects every full pass of the cyclic garbage collector would walk too. The collector's
passes are timed (`gc.callbacks`): the record has how many ran per generation, the longest, and the
largest stall that no pass overlapped, so a stall can be told apart from the host's heap.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import inspect
import multiprocessing
import random
import resource
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.errors import CoordinatorError
from coordinator_bench.cells import CellOutcome, loop_outcome
from coordinator_bench.scenarios import Row
from worker.agent import READ_ALL_LINES, Corpus, parse_counters, slot_label
from worker.oracle import judge_counts
from worker.stats import percentile

TICK_S = 0.001
IDLE_S = 0.5  # the ticker alone before the editors start: how late it wakes on this machine anyway


@dataclass
class _Tally:
    acked: Counter[tuple[str, str]] = field(default_factory=Counter)
    in_flight: Counter[tuple[str, str]] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    attempts: int = 0
    latencies: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    holds: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def open_async_client(spec: Any) -> Any:
    """`coordinator.AsyncClient` in-process on the spec's root (`AsyncClient.local`), its default pool."""
    from coordinator_bench.columns import async_client_class

    cls = async_client_class()
    assert cls is not None, "the asyncio column runs only where AsyncClient exists"
    options: dict[str, Any] = {"durability": spec.durability, "lock_timeout": spec.lock_timeout}
    return cls.local(spec.root, spec.redis_url, **options)


async def _maybe_await(x: Any) -> Any:
    return await x if inspect.isawaitable(x) else x


async def _ticker(stop_at: float) -> list[tuple[float, float]]:
    """When each 1 ms sleep woke up (perf_counter) and how late, until `stop_at`."""
    late = []
    while time.monotonic() < stop_at:
        t0 = time.perf_counter()
        await asyncio.sleep(TICK_S)
        t1 = time.perf_counter()
        late.append((t1, max(t1 - t0 - TICK_S, 0.0)))
    return late


class _GcPasses:
    """The cyclic garbage collector's passes while installed: (end time, generation, duration)."""

    def __init__(self) -> None:
        self.passes: list[tuple[float, int, float]] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._start = now
        else:
            self.passes.append((now, int(info["generation"]), now - self._start))

    def freeze(self) -> None:
        """What a host does once started (docs/embedding.md): collect, then leave everything allocated so
        far out of the collector's passes. That collection is not one of the run's passes."""
        gc.collect()
        gc.freeze()
        self.passes.clear()

    def figures(self, ticks: list[tuple[float, float]]) -> dict[str, Any]:
        """Passes per generation, the longest, and the largest stall no pass overlapped (in ms)."""
        spans = sorted((end - took, end) for end, _, took in self.passes)
        starts = [a for a, _ in spans]
        outside = 0.0
        for t1, late in ticks:
            t0 = t1 - late - TICK_S
            # A pass overlapped the tick if it began before the tick woke and ended after it slept. Passes
            # never overlap each other (one collection at a time), so only the last one that began before
            # t1 can have ended after t0. (The stop callback may run just after the woken loop thread took
            # the GIL, so that end may follow t1 slightly.)
            i = bisect.bisect_right(starts, t1)
            if i == 0 or spans[i - 1][1] <= t0:
                outside = max(outside, late)
        return {
            "loop_gc_passes": [sum(1 for p in self.passes if p[1] == g) for g in (0, 1, 2)],
            "loop_gc_max_ms": max((p[2] for p in self.passes), default=0.0) * 1000.0,
            "loop_stall_outside_gc_ms": outside * 1000.0,
        }


async def _view(client: Any, session: str, path: str, tally: _Tally) -> dict[str, int] | None:
    try:
        r = await client.read(session, path, limit=READ_ALL_LINES)
    except CoordinatorError as exc:
        tally.refused["read:" + str(exc.code)] += 1
        return None
    return parse_counters(r.content)


async def _editor(
    client: Any, session: str, slot: str, files: tuple[str, ...], seed: int, stop_at: float, tally: _Tally
) -> None:
    rng = random.Random(seed)
    views: dict[str, dict[str, int]] = {}
    while time.monotonic() < stop_at:
        path = files[rng.randrange(len(files))]
        values = views.get(path) or await _view(client, session, path, tally)
        if values is None:
            continue
        views[path] = values
        v = values[slot]
        tally.attempts += 1
        t0 = time.perf_counter()
        try:
            res = await client.edit(session, path, f"\n{slot} = {v}\n", f"\n{slot} = {v + 1}\n")
        except CoordinatorError as exc:
            tally.latencies.append(time.perf_counter() - t0)
            tally.refused[str(exc.code)] += 1
            views.pop(path, None)
            continue
        except asyncio.CancelledError:
            tally.in_flight[(path, slot)] += 1
            raise
        tally.latencies.append(time.perf_counter() - t0)
        tally.acked[(path, slot)] += 1
        values[slot] = v + 1
        timings = getattr(res, "timings", None) or {}
        if timings.get("lock_wait_s") is not None:
            tally.waits.append(timings["lock_wait_s"])
        if timings.get("lock_hold_s") is not None:
            tally.holds.append(timings["lock_hold_s"])


async def _run(
    spec: Any,
    files: tuple[str, ...],
    coroutines: int,
    duration_s: float,
    tally: _Tally,
    after_start: Callable[[], None] | None = None,
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The ticker alone first (the machine's own noise, for reference), then beside the editors."""
    client = open_async_client(spec)
    if after_start is not None:  # start-up is over: the client is open
        after_start()
    sessions = max(1, coroutines // 2)
    busy: Any = []
    try:
        idle = await _ticker(time.monotonic() + IDLE_S)
        stop_at = time.monotonic() + duration_s
        editors = [
            _editor(client, f"async-{j % sessions}", slot_label(j), files, 7919 * j + 1, stop_at, tally)
            for j in range(coroutines)
        ]
        busy, *results = await asyncio.gather(_ticker(stop_at), *editors, return_exceptions=True)
        for res in [busy, *results]:
            if isinstance(res, BaseException):
                tally.errors.append(f"{type(res).__name__}: {res}")
    finally:
        close = getattr(client, "aclose", None) or client.close
        await _maybe_await(close())
    return idle, busy if isinstance(busy, list) else []


def run_async_cell(spec: Any, root: Path, corpus: Corpus, row: Row, duration_s: float) -> CellOutcome:
    """One repetition of the asyncio scenario, in a fresh interpreter; its record has the loop's largest
    stall in ms. The oracle judges the final files here, from the increments the child acknowledged."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        args = (spec, tuple(corpus.files), row.sessions, duration_s, row.gc_freeze)
        r, acked, in_flight = pool.apply(_measure, args)
    final = {rel: (root / rel).read_bytes() for rel in corpus.files}
    oracle = judge_counts(acked, final, in_flight)
    for err in r["errors"]:
        oracle.fail("coroutine error: " + err)
    r["oracle"] = oracle.to_dict()
    return loop_outcome(r, workers=row.sessions)


def _measure(
    spec: Any, files: tuple[str, ...], coroutines: int, duration_s: float, freeze: bool = False
) -> tuple[dict[str, Any], Counter[tuple[str, str]], Counter[tuple[str, str]]]:
    """The child's part: the loop, the ticker and the editors; the figures and what was acknowledged.
    `freeze`: what a host following docs/embedding.md does once it has started (everything allocated so
    far is left out of the collector's passes)."""
    tally = _Tally()
    passes = _GcPasses()
    gc.callbacks.append(passes)
    try:
        before = resource.getrusage(resource.RUSAGE_SELF)
        heap = len(gc.get_objects())
        t0 = time.perf_counter()
        idle, ticks = asyncio.run(_run(spec, files, coroutines, duration_s, tally, passes.freeze if freeze else None))
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        gc.callbacks.remove(passes)
    late = [x for _, x in ticks]
    r = {
        "wall_s": wall,
        "attempts": tally.attempts,
        "acknowledged": sum(tally.acked.values()),
        "refused": dict(tally.refused),
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "latencies": tally.latencies,
        "lock_waits": tally.waits,
        "lock_holds": tally.holds,
        "errors": tally.errors[:3],
        "loop_stall_ms": max(late, default=0.0) * 1000.0,
        "loop_stall_p99_ms": (percentile(late, 99) or 0.0) * 1000.0,
        "loop_stall_idle_ms": max((x for _, x in idle), default=0.0) * 1000.0,
        "loop_ticks": len(late),
        "loop_heap_objects": heap,
        **passes.figures(ticks),
    }
    return r, tally.acked, tally.in_flight
