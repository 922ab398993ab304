"""Optional OpenTelemetry spans, one per answered call (`serve --otel`; off by default).

Off, nothing of OpenTelemetry is imported and no call is made. On, every call the App answers through a
route is one span, `edit_coordinator <operation>` (kind SERVER), with the attributes
`edit_coordinator.operation` (the route name), `edit_coordinator.session` (the session the call acted as,
once it is known: the token's, or the one an admin token named), `edit_coordinator.outcome` (`ok` or the
refusal's error code) and `http.response.status_code`; a 5xx answer marks the span as an error.

Only the OpenTelemetry API is used (the `otel` extra: `pip install 'edit-coordinator[otel]'`): where the
spans go is the process's tracer provider, set up the way OpenTelemetry is for any Python service, such as
running `serve` under `opentelemetry-instrument` with the OTEL_* variables (worker processes inherit
them). Without a provider the API's spans are no-ops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from coordinator.version import __version__

SESSION_ATTRIBUTE = "edit_coordinator.session"


def available() -> bool:
    """Whether the OpenTelemetry API can be imported (the `otel` extra)."""
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


class CallTracer:
    """Makes the spans of one App (see the module docstring)."""

    def __init__(self) -> None:
        from opentelemetry import trace

        self._trace = trace
        self._tracer = trace.get_tracer("edit_coordinator.server", __version__)

    @contextlib.contextmanager
    def call(self, operation: str) -> Iterator[Any]:
        """The span of one call, current while the call is handled (so `acting_as` finds it)."""
        kind = self._trace.SpanKind.SERVER
        with self._tracer.start_as_current_span(f"edit_coordinator {operation}", kind=kind) as span:
            span.set_attribute("edit_coordinator.operation", operation)
            yield span

    def acting_as(self, session: str) -> None:
        """Name the session of the call being handled on its span."""
        self._trace.get_current_span().set_attribute(SESSION_ATTRIBUTE, session)

    def answered(self, span: Any, status: int, code: str | None) -> None:
        span.set_attribute("edit_coordinator.outcome", code or "ok")
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, code or str(status)))
