"""Prometheus metrics of one service worker process, served at ``GET /metrics`` (docs/http.md, "Metrics").

A thin adapter: the App reports each answered call (its route name, its outcome, how long it took); the
gauges are read from the coordinator at scrape time. Invariant: every label value is bounded, a route name
or a stable error code from `coordinator.errors.CODES`, never a path, a session or a message.

The registry is this object's own (not prometheus_client's global one), so that two apps in one process
(tests) never share or clash over counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_LATEST
_PREFIX = "edit_coordinator"
# Edit latency spans a cached in-memory edit (well under a millisecond) to a wait for a file lock (seconds).
_DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

GaugeReader = Callable[[], Mapping[str, float]]
GAUGES: dict[str, str] = {
    "sessions": "Sessions seen recently (the coordinator's session list)",
    "leases_held": "Live leases, all sessions",
}


class _ScrapeGauges(Collector):
    """Gauges read from the coordinator when Prometheus scrapes, so they never go stale between calls."""

    def __init__(self, read: GaugeReader) -> None:
        self._read = read

    def describe(self) -> Iterable[Metric]:
        """The names, without reading the coordinator (the registry asks at registration)."""
        return [GaugeMetricFamily(f"{_PREFIX}_{name}", doc) for name, doc in GAUGES.items()]

    def collect(self) -> Iterable[Metric]:
        values = self._read()
        for name, doc in GAUGES.items():
            if name in values:
                yield GaugeMetricFamily(f"{_PREFIX}_{name}", doc, value=values[name])


class ServiceMetrics:
    """The counters and histograms of one worker process, and the scrape-time gauges."""

    def __init__(self, read_gauges: GaugeReader) -> None:
        self.registry = CollectorRegistry()
        self.operations = Counter(
            f"{_PREFIX}_operations",
            "Calls answered, by operation (route name) and outcome (ok, or the refusal's error code)",
            ("operation", "outcome"),
            registry=self.registry,
        )
        self.duration = Histogram(
            f"{_PREFIX}_operation_duration_seconds",
            "Time from a call's arrival to its answer, by operation",
            ("operation",),
            buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.refusals = Counter(
            f"{_PREFIX}_refusals",
            "Calls refused, by the stable error code (stale, conflict, lease_held, ...)",
            ("code",),
            registry=self.registry,
        )
        self.registry.register(_ScrapeGauges(read_gauges))

    def observe(self, operation: str, code: str | None, seconds: float) -> None:
        """Count one answered call: `code` None for success, else the refusal's error code."""
        self.operations.labels(operation, code or "ok").inc()
        self.duration.labels(operation).observe(seconds)
        if code is not None:
            self.refusals.labels(code).inc()

    def exposition(self) -> bytes:
        """The text exposition format (reads the gauges: may call Redis, so not on the event loop)."""
        return generate_latest(self.registry)
