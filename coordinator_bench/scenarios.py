"""The scenarios: each named, parameterised and seeded; each row of a scenario is one workload point.

Every row runs in every column of the scenario (the baselines and the coordinator variants it names), in
the same run, repetitions interleaved. A row is a fleet of simulated agent sessions (`worker.fleet`, one
process per session) for a fixed duration; a `raw` row is the bare in-process loop of `coordinator_bench.raw` (one
session, edit after edit, nothing around the client), an `async` row the asyncio harness of
`coordinator_bench.asyncrun` (coroutines on one event loop through `AsyncClient`).

Counters files have 200 slot lines (`s00 = 17`), so that solo, disjoint and hot work on the same 200-line
files; each session increments its own slot line. Think time is 0 unless a row says otherwise: the rows
measure the coordinator, not the sleep (zipf is the scenario where think time is the parameter).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

SEED = 20_240_601
COUNTER_LINES = 200
DEFAULT_DURATION_S = 3.0
QUICK_DURATION_S = 1.0


@dataclass(frozen=True)
class Row:
    """One workload point of a scenario."""

    key: str  # unique in its scenario, e.g. "N=16"
    workload: str  # counters | hot-line | markers | mixed
    sessions: int
    files: int
    x: float  # the value on a plot's x axis (sessions, think time, ...)
    slots: int = COUNTER_LINES
    think_ms: float = 0.0
    skew: float = 0.0
    disjoint: bool = False
    mode: str = "fleet"  # fleet | raw | async
    preload_sessions: int = 0  # read state already in Redis: sessions x preload_files entries
    preload_files: int = 0
    duration_factor: float = 1.0
    gc_freeze: bool = False  # async rows: the process calls gc.freeze() after start-up (docs/embedding.md)

    @property
    def sessions_per_file(self) -> float:
        if self.disjoint:
            return 1.0
        return float(self.sessions) if self.files == 1 else self.sessions / self.files

    @property
    def contended(self) -> bool:
        """More than one session may change the same file (lost updates are possible without a lock)."""
        return not self.disjoint and self.sessions > 1 and self.mode != "raw"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["contended"] = self.contended
        return d


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    description: str
    rows: tuple[Row, ...]
    columns: tuple[str, ...] | None = None  # None: every column this build has; else these names only
    coordinator_only: bool = False  # no baselines (they keep no read state to scale)
    durability: tuple[str, ...] = ("none", "fsync")
    seed: int = SEED
    x_label: str = "sessions"
    # More repetitions than asked for: scenarios whose targets compare two rows of one column (run apart
    # in time, so noise hits them less alike than the columns of one row) get two more.
    extra_reps: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "rows": [r.to_dict() for r in self.rows],
            "coordinator_only": self.coordinator_only,
            "durability": list(self.durability),
            "seed": self.seed,
            "x_label": self.x_label,
        }


def _counters(key: str, sessions: int, files: int, x: float, **kw: Any) -> Row:
    return Row(key, "counters", sessions, files, x, **kw)


IN_PROCESS = ("strict-none", "strict-fsync")
POLICIES = ("strict-none", "rebase-none")
CONTENDED = ("unsafe", "naive-lock", "strict-none", "rebase-none")


def full_scenarios() -> list[Scenario]:
    """The full suite, in the order it runs."""
    return [
        Scenario(
            "solo",
            "solo: one session, consecutive edits on one 200-line file",
            "One session increments the slot lines of a 200-line counters file in turn, edit after edit. `raw` "
            "is the bare loop in one process (read once, then edit after edit: the clients' own cost); "
            "`fleet` runs it as a simulated agent (a worker process that records every call for the oracle, "
            "like every other scenario).",
            (Row("raw", "counters", 1, 1, 1, mode="raw"), _counters("fleet", 1, 1, 1)),
            columns=("unsafe", *IN_PROCESS),
        ),
        Scenario(
            "http",
            "http: the same bare loop over HTTP and in-process",
            "The solo bare loop (one session, consecutive edits of a 200-line file) in-process and through "
            "`edit-coordinator serve` with one worker: `http-plain` is a plain httpx client with keep-alive "
            "and no idempotency key, `http-strict-none` the project's `HttpClient` over TCP, `http-uds` the "
            "same client on a unix socket (`serve --uds`). Durability none. The service's CPU counts in the "
            "CPU per edit.",
            (Row("raw", "counters", 1, 1, 1, mode="raw"),),
            columns=("strict-none", "http-plain", "http-strict-none", "http-uds"),
            durability=("none",),
        ),
        Scenario(
            "disjoint",
            "disjoint: N processes, each on its own file",
            "N sessions, one process each, each incrementing its slot line of its own 200-line file: no "
            "contention, so throughput should grow with N up to the number of cores.",
            tuple(_counters(f"N={n}", n, n, n, disjoint=True) for n in (1, 2, 4, 8)),
            columns=("unsafe", *IN_PROCESS),
            x_label="processes",
            extra_reps=2,
        ),
        Scenario(
            "hot",
            "hot: N sessions on one file, each on its own line",
            "N sessions increment their own slot lines of one shared 200-line file. Under the strict policy "
            "every write by another session makes a session's view stale: it reads again and retries. CPU "
            "per acknowledged edit counts the workers and Redis.",
            tuple(_counters(f"N={n}", n, 1, n) for n in (2, 4, 8, 16, 32)),
            columns=CONTENDED,
            x_label="sessions on one file",
        ),
        Scenario(
            "hot-line",
            "hot-line: N sessions on the very same line",
            "N sessions increment the same line of one file (`value = 17 (by s03)`): the worst contention.",
            tuple(Row(f"N={n}", "hot-line", n, 1, n) for n in (2, 4, 8, 16, 32)),
            columns=CONTENDED,
            x_label="sessions on one line",
        ),
        Scenario(
            "conflicts",
            "conflicts: 16 sessions, 200 ms think time, strict vs rebase",
            "16 sessions think 200 ms (uniform in 100-300 ms) before each edit. `counters`: each increments "
            "its own line of 4 shared 200-line files (the 16 lines are consecutive: every session's line is "
            "adjacent to two others'); `markers`: each inserts marker lines into 8 shared copies of real "
            "source files. The conflict rate is the share of edit calls refused as `stale`.",
            (
                _counters("counters", 16, 4, 16, think_ms=200.0, duration_factor=3.0),
                Row("markers", "markers", 16, 8, 16, think_ms=200.0, duration_factor=3.0),
            ),
            columns=POLICIES,
            coordinator_only=True,
            durability=("none",),
            x_label="workload",
        ),
        Scenario(
            "zipf",
            "zipf: 16 sessions, 64 files, Zipf(1.1) file choice, think time per edit",
            "16 sessions each pick a file among 64 with Zipf(1.1) weights (the hottest file gets a quarter of "
            "the edits) and increment their slot line there, after a think time drawn per edit "
            "(uniform in 0.5x-1.5x the mean).",
            tuple(
                _counters(
                    f"think={t}ms", 16, 64, t, think_ms=float(t), skew=1.1, duration_factor=1.5 if t >= 100 else 1.0
                )
                for t in (0, 10, 100)
            ),
            columns=CONTENDED,
            x_label="mean think time (ms)",
        ),
        Scenario(
            "corpus",
            "corpus: 16 sessions, mixed edits on a copy of real source files",
            "16 sessions make mixed changes (insert a marker line 40 %, tag a line 25 %, delete a line 15 %, "
            "rewrite the whole file 10 %, create a new file 10 %) on 32 files copied from this interpreter's "
            "standard library, file chosen uniformly.",
            (Row("mixed", "mixed", 16, 32, 16),),
            columns=("unsafe", *POLICIES),
        ),
        Scenario(
            "scale",
            "scale: read state of 10,000 sessions x 100 files in Redis, then zipf",
            "Read state for P sessions x 100 files is written to Redis first (as the engine writes it), then "
            "the zipf scenario runs (16 sessions, 64 of those files, Zipf(1.1), no think time). The ratio "
            "of P = 10,000 to P = 10 shows whether a large keyspace slows the edit path; the Redis memory "
            "taken by the preloaded entries, divided by their number, is the cost of one read-state entry.",
            tuple(
                _counters(f"P={p}", 16, 64, p, skew=1.1, preload_sessions=p, preload_files=100) for p in (10, 10_000)
            ),
            columns=("strict-none",),
            coordinator_only=True,
            durability=("none",),
            x_label="sessions with read state in Redis",
            extra_reps=2,
        ),
        Scenario(
            "distributed",
            "distributed: one Redis server, Sentinel, a 3-primary cluster",
            "The zipf workload without think time (16 sessions, 64 files, Zipf(1.1)) with the read state on "
            "the embedded server (unix socket, `strict-none`), on one redis-server over TCP, behind Sentinel "
            "(a primary, a replica, 3 sentinels) and on a Redis Cluster of 3 primaries with a replica each. "
            "CPU per edit counts the workers and every process of the deployment.",
            (_counters("zipf", 16, 64, 16, skew=1.1),),
            columns=("strict-none", "redis-server", "redis-sentinel", "redis-cluster"),
            coordinator_only=True,
            durability=("none",),
            x_label="deployment",
        ),
        Scenario(
            "asyncio",
            "asyncio: 16 coroutines over 8 sessions through AsyncClient, one event loop",
            "16 coroutines on one event loop, two per session (8 sessions), each incrementing its own slot "
            "line of 4 shared 200-line files through `AsyncClient` in-process, with no think time, so that "
            "edits wait for contended locks. A ticker coroutine sleeps 1 ms in a loop and records how late "
            "it wakes: the largest lateness is the loop's largest stall. Row `16x8 frozen`: the same, in a "
            "process that called `gc.freeze()` after start-up, as docs/embedding.md suggests to a host whose "
            "heap makes the collector's full passes long.",
            (
                Row("16x8", "counters", 16, 4, 16, mode="async"),
                Row("16x8 frozen", "counters", 16, 4, 16, mode="async", gc_freeze=True),
            ),
            columns=("async",),
            coordinator_only=True,
            durability=("none",),
            x_label="coroutines",
        ),
    ]


def quick_scenarios() -> list[Scenario]:
    """`bench --quick`: a smoke test of the whole machinery in well under a minute (figures, no verdicts)."""
    full = {s.name: s for s in full_scenarios()}
    return [
        replace(full["solo"], durability=("none",)),
        full["http"],
        replace(full["hot"], rows=(_counters("N=4", 4, 1, 4),), durability=("none",)),
        replace(
            full["conflicts"],
            rows=tuple(replace(r, sessions=4, x=4, duration_factor=1.0) for r in full["conflicts"].rows),
        ),
        full["asyncio"],
    ]


def scenario_names() -> list[str]:
    return [s.name for s in full_scenarios()]


def select(names: list[str] | None, quick: bool) -> list[Scenario]:
    """The scenarios to run, in suite order; unknown names raise ValueError."""
    pool = quick_scenarios() if quick else full_scenarios()
    if not names:
        return pool
    known = {s.name for s in full_scenarios()}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(sorted(known))}")
    if quick:
        # A scenario that the quick suite leaves out runs with its full rows, but short.
        have = {s.name: s for s in pool}
        full = {s.name: s for s in full_scenarios()}
        return [have.get(n, full[n]) for n in scenario_names() if n in names]
    return [s for s in pool if s.name in names]


def only_rows(scenarios: list[Scenario], picks: list[str] | None) -> list[Scenario]:
    """`scenarios` with the rows of `picks` only ("hot:N=16": scenario hot, row N=16; repeatable); a scenario
    no pick names keeps all its rows. An unknown scenario or row raises ValueError."""
    wanted: dict[str, list[str]] = {}
    for pick in picks or []:
        name, sep, key = pick.partition(":")
        if not sep or not key:
            raise ValueError(f"--row takes SCENARIO:ROW (for example hot:N=16), not {pick!r}")
        wanted.setdefault(name, []).append(key)
    by_name = {s.name: s for s in scenarios}
    out = []
    for name, keys in wanted.items():
        if name not in by_name:
            raise ValueError(f"--row {name}:...: scenario {name} is not in this run")
        have = [r.key for r in by_name[name].rows]
        missing = [k for k in keys if k not in have]
        if missing:
            raise ValueError(f"--row: {name} has no row {', '.join(missing)}; its rows: {', '.join(have)}")
    for sc in scenarios:
        picked = wanted.get(sc.name)
        out.append(sc if picked is None else replace(sc, rows=tuple(r for r in sc.rows if r.key in picked)))
    return out
