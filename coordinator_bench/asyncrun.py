"""The asyncio scenario's harness: coroutines on one event loop editing shared files through `AsyncClient`.

`row.sessions` coroutines share `row.sessions // 2` sessions (two coroutines per session) and each
increments its own slot line of the row's counters files, chosen at random, with no think time: edits
wait for contended file locks, which `AsyncClient` must do off the loop. Beside them a ticker coroutine
sleeps 1 ms in a loop and records how late it wakes up; the largest lateness is the loop's largest stall
(the issue's bound: under 20 ms); its p99 lateness, and the largest lateness of the ticker alone for
0.5 s before the editors start (what the machine's other load costs anyway), are recorded beside it. A
coroutine re-reads after a refusal, as an agent would. At the end the oracle
(`worker.oracle.judge_counts`) checks every slot line against the increments acknowledged for it.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import resource
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.errors import CoordinatorError
from worker.agent import READ_ALL_LINES, Corpus, parse_counters, slot_label
from worker.oracle import judge_counts
from worker.stats import percentile

from .cells import CellOutcome, loop_outcome
from .scenarios import Row

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
    from .columns import async_client_class

    cls = async_client_class()
    assert cls is not None, "the asyncio column runs only where AsyncClient exists"
    options: dict[str, Any] = {"durability": spec.durability, "lock_timeout": spec.lock_timeout}
    return cls.local(spec.root, spec.redis_url, **options)


async def _maybe_await(x: Any) -> Any:
    return await x if inspect.isawaitable(x) else x


async def _ticker(stop_at: float) -> list[float]:
    """How late each 1 ms sleep woke up, until `stop_at`."""
    late = []
    while time.monotonic() < stop_at:
        t0 = time.perf_counter()
        await asyncio.sleep(TICK_S)
        late.append(max(time.perf_counter() - t0 - TICK_S, 0.0))
    return late


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
    spec: Any, files: tuple[str, ...], coroutines: int, duration_s: float, tally: _Tally
) -> tuple[list[float], list[float]]:
    """The ticker alone first (the machine's own noise, for reference), then beside the editors."""
    client = open_async_client(spec)
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
    """One repetition of the asyncio scenario; its record has the loop's largest stall in ms."""
    tally = _Tally()
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    idle, late = asyncio.run(_run(spec, corpus.files, row.sessions, duration_s, tally))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    final = {rel: (root / rel).read_bytes() for rel in corpus.files}
    oracle = judge_counts(tally.acked, final, tally.in_flight)
    for err in tally.errors:
        oracle.fail("coroutine error: " + err)
    r = {
        "wall_s": wall,
        "attempts": tally.attempts,
        "acknowledged": sum(tally.acked.values()),
        "refused": dict(tally.refused),
        "oracle": oracle.to_dict(),
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "latencies": tally.latencies,
        "lock_waits": tally.waits,
        "lock_holds": tally.holds,
        "errors": tally.errors[:3],
        "loop_stall_ms": max(late, default=0.0) * 1000.0,
        "loop_stall_p99_ms": (percentile(late, 99) or 0.0) * 1000.0,
        "loop_stall_idle_ms": max(idle, default=0.0) * 1000.0,
        "loop_ticks": len(late),
    }
    return loop_outcome(r, workers=row.sessions)
