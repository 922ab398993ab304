"""Prometheus metrics of the service, served at ``GET /metrics`` (docs/http.md, "Metrics").

A thin adapter. The App reports each answered call (its route name, its outcome, how long it took); the
engine reports its lock waits and holds, each write's outcome and the change events it published, through
its observer hook (engine/observer.py); the Redis connections report their round trips and errors
(state/connection.py, `observe_redis`). The gauges are read at scrape time: sessions and leases from
Redis, the history's size from disk (cached for `HISTORY_TTL_S`: a scrape never walks a large history).

Invariant: every label value is bounded: a route name, an operation name, a stable error code from
`coordinator.errors.CODES`, an engine outcome, a lease mode or a Redis client exception's class name;
never a path, a session or a message.

One process or several. With one worker, the registry is this object's own (not prometheus_client's
global one), so that two apps in one process (tests) never share or clash over counts. With several
workers (`serve --workers N`), the supervisor gives every worker `PROMETHEUS_MULTIPROC_DIR`, a private
folder of its own under the state folder, new at start (`prepare_multiprocess_dir`): prometheus-client's
multiprocess mode then keeps each process's counts in a file of its own there, and a scrape, whichever
worker answers it, adds up the files of every worker, those of workers that exited included, so the
totals never go back when a worker is restarted.
"""

from __future__ import annotations

import bisect
import functools
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from coordinator.disk.fsio import pid_alive

CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
HISTORY_TTL_S = 15.0
_PREFIX = "edit_coordinator"
# Edit latency spans a cached in-memory edit (well under a millisecond) to a wait for a file lock (seconds).
_DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A free lock is taken in a few microseconds and held for a write's local disk work (tens of microseconds
# to milliseconds); a contended one waits for the holders before it, up to the lock timeout (10 s).
_LOCK_BUCKETS = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

GaugeReader = Callable[[], Mapping[str, float | Mapping[str, float]]]
#: Scrape-time gauges: name -> (help, label name or None). A labelled gauge is read as {label value: value}.
GAUGES: dict[str, tuple[str, str | None]] = {
    "sessions": ("Sessions seen recently (the coordinator's session list)", None),
    "leases_held": ("Live leases of all sessions, by mode (exclusive, shared)", "mode"),
    "history_entries": ("Versions recorded in the history, all paths (refreshed at most every 15 s)", None),
    "history_bytes": ("Bytes the history's files take on disk (refreshed at most every 15 s)", None),
}


class _ScrapeGauges(Collector):
    """Gauges read when Prometheus scrapes, so they never go stale between calls."""

    def __init__(self, read: GaugeReader) -> None:
        self._read = read

    def describe(self) -> Iterable[Metric]:
        """The names, without reading anything (the registry asks at registration)."""
        return [GaugeMetricFamily(f"{_PREFIX}_{name}", doc) for name, (doc, _) in GAUGES.items()]

    def collect(self) -> Iterable[Metric]:
        values = self._read()
        for name, (doc, label) in GAUGES.items():
            value = values.get(name)
            if value is None:
                continue
            if label is None:
                assert not isinstance(value, Mapping)
                yield GaugeMetricFamily(f"{_PREFIX}_{name}", doc, value=value)
                continue
            family = GaugeMetricFamily(f"{_PREFIX}_{name}", doc, labels=(label,))
            assert isinstance(value, Mapping)
            for label_value, v in sorted(value.items()):
                family.add_metric((label_value,), v)
            yield family


class TimedCache:
    """A value read at most once per `ttl_s` (the history's size: a walk of its folder)."""

    def __init__(self, read: Callable[[], Mapping[str, float]], ttl_s: float = HISTORY_TTL_S) -> None:
        self._read = read
        self._ttl_s = ttl_s
        self._value: Mapping[str, float] = {}
        self._at = -float("inf")
        self._lock = threading.Lock()

    def get(self) -> Mapping[str, float]:
        with self._lock:
            if time.monotonic() - self._at >= self._ttl_s:
                self._value = self._read()
                self._at = time.monotonic()
            return self._value


class ServiceMetrics:
    """The counters and histograms of the service, and the scrape-time gauges.

    Also the observer of the engine (`lock_released`, `write_finished`, `event_published`) and of the
    Redis connections (`round_trip`, `error`): cheap calls (a counter's increment, a histogram's observe)
    that never raise.
    """

    def __init__(self, read_gauges: GaugeReader, multiprocess_dir: str | None = None) -> None:
        self.multiprocess_dir = multiprocess_dir
        self.registry = CollectorRegistry()
        # In multiprocess mode the values live in the folder's files, which the scrape reads back: the
        # metrics themselves are registered nowhere (registering them too would count them twice).
        own = None if multiprocess_dir else self.registry
        self.operations = Counter(
            f"{_PREFIX}_operations",
            "Calls answered, by operation (route name) and outcome (ok, or the refusal's error code)",
            ("operation", "outcome"),
            registry=own,
        )
        self.duration = Histogram(
            f"{_PREFIX}_operation_duration_seconds",
            "Time from a call's arrival to its answer, by operation",
            ("operation",),
            buckets=_DURATION_BUCKETS,
            registry=own,
        )
        self.refusals = Counter(
            f"{_PREFIX}_refusals",
            "Calls refused, by the stable error code (stale, not_read, leased, ...)",
            ("code",),
            registry=own,
        )
        self._engine_metrics(own)
        # Each labelled series' recording functions, made on its first use (keys: bounded label values).
        self._calls: dict[tuple[str, str | None], tuple[Callable[[], None], Callable[[float], None]]] = {}
        self._writes: dict[tuple[str, str], Callable[[], None]] = {}
        self._refused: dict[str, Callable[[], None]] = {}
        self._lock_observed = (_observer(self.lock_wait), _observer(self.lock_hold))
        self._event_inc = _incrementer(self.events)
        self._round_trip_inc = _incrementer(self.redis_round_trips)
        if multiprocess_dir:
            from prometheus_client import multiprocess

            multiprocess.MultiProcessCollector(self.registry, path=multiprocess_dir)
        self.registry.register(_ScrapeGauges(read_gauges))

    def _engine_metrics(self, own: CollectorRegistry | None) -> None:
        self.lock_wait = Histogram(
            f"{_PREFIX}_lock_wait_seconds",
            "Time a write waited for its file's lock",
            buckets=_LOCK_BUCKETS,
            registry=own,
        )
        self.lock_hold = Histogram(
            f"{_PREFIX}_lock_hold_seconds",
            "Time a file's lock was held (the check-then-write's local disk work)",
            buckets=_LOCK_BUCKETS,
            registry=own,
        )
        self.writes = Counter(
            f"{_PREFIX}_writes",
            "Writes ended in the engine, by operation and outcome: applied, rebased (carried over onto changes "
            "made since the view), conflict (a rebase refused), or the refusal's error code (stale, ...)",
            ("operation", "outcome"),
            registry=own,
        )
        self.events = Counter(
            f"{_PREFIX}_change_events_published", "Change events published with writes' records", registry=own
        )
        self.redis_round_trips = Counter(
            f"{_PREFIX}_redis_round_trips", "Commands or pipelines sent to Redis by the service", registry=own
        )
        self.redis_errors = Counter(
            f"{_PREFIX}_redis_errors",
            "Redis failures (each one refused with state_unavailable), by the client exception's class",
            ("kind",),
            registry=own,
        )

    def observe(self, operation: str, code: str | None, seconds: float) -> None:
        """Count one answered call: `code` None for success, else the refusal's error code."""
        found = self._calls.get((operation, code))
        if found is None:
            counted = _incrementer(self.operations.labels(operation, code or "ok"))
            found = self._calls[(operation, code)] = (counted, _observer(self.duration.labels(operation)))
        found[0]()
        found[1](seconds)
        if code is not None:
            refused = self._refused.get(code)
            if refused is None:
                refused = self._refused[code] = _incrementer(self.refusals.labels(code))
            refused()

    # -- the engine's observer (engine/observer.py) --------------------------------------------------------
    def lock_released(self, wait_s: float, hold_s: float) -> None:
        wait, hold = self._lock_observed
        wait(wait_s)
        hold(hold_s)

    def write_finished(self, operation: str, outcome: str) -> None:
        counted = self._writes.get((operation, outcome))
        if counted is None:
            counted = self._writes[(operation, outcome)] = _incrementer(self.writes.labels(operation, outcome))
        counted()

    def event_published(self) -> None:
        self._event_inc()

    # -- the Redis connections' observer (state/connection.py) ---------------------------------------------
    def round_trip(self) -> None:
        self._round_trip_inc()

    def error(self, kind: str) -> None:
        self.redis_errors.labels(kind).inc()

    def exposition(self) -> bytes:
        """The text exposition format (reads the gauges: may call Redis, so not on the event loop)."""
        return generate_latest(self.registry)


def _incrementer(counter: Any) -> Callable[[], None]:
    """`counter.inc()` (an unlabelled counter, or a labelled one's series), as one call: the increment of
    its value itself (in memory, or the multiprocess file's), without the per-call checks of `inc` (the
    series is observable, the amount is 1, no exemplar). `counter.inc` where the value is not where
    prometheus-client 0.17-0.26 keeps it."""
    value = getattr(counter, "_value", None)
    inc = getattr(value, "inc", None)
    if inc is None or not counter._is_observable():
        return counter.inc  # type: ignore[no-any-return]
    return functools.partial(inc, 1)


def _observer(histogram: Any) -> Callable[[float], None]:
    """`histogram.observe` (unlabelled, or a labelled one's series), with the bucket found by bisection
    instead of a Python loop over the bounds: the same sum and the same bucket (the first bound the amount
    is at most; the last bound is +Inf). A NaN, which no bucket takes, goes to `observe` itself.
    `histogram.observe` where the parts are not where prometheus-client 0.17-0.26 keeps them."""
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if not bounds or not buckets or len(bounds) != len(buckets) or total is None or bounds[-1] != float("inf"):
        return histogram.observe  # type: ignore[no-any-return]
    if not histogram._is_observable():
        return histogram.observe  # type: ignore[no-any-return]
    add_sum = total.inc
    counts = [b.inc for b in buckets]
    where = functools.partial(bisect.bisect_left, list(bounds))
    slow = histogram.observe

    def observe(amount: float) -> None:
        if amount != amount:  # NaN
            slow(amount)
            return
        add_sum(amount)
        counts[where(amount)](1)

    return observe


def prepare_multiprocess_dir(metrics_dir: Path) -> str:
    """This service's multiprocess folder, `<metrics_dir>/<this process's pid>`: new and empty (counts of
    an earlier run are not this run's), private to the user, and named in this process's environment so
    that every worker started from now on inherits it (prometheus-client reads it when it is first
    imported). Folders of services that are no longer running are removed; those of a live one (a second
    `serve` on the same root, say over a unix socket beside TCP) are left alone. Returns its path."""
    metrics_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for old in metrics_dir.iterdir():
        if not old.name.isdigit() or not pid_alive(int(old.name)) or int(old.name) == os.getpid():
            shutil.rmtree(old, ignore_errors=True)
    folder = metrics_dir / str(os.getpid())
    folder.mkdir(mode=0o700)
    os.environ[MULTIPROC_ENV] = str(folder)
    return str(folder)


def worker_exited(folder: str, pid: int) -> None:
    """A worker's process ended: its live gauges go (its counters' files stay, so totals never go back)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, folder)
