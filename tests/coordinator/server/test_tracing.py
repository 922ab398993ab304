"""serve --otel (server/tracing.py): one span per answered call, named after the operation, with the session
the call acted as and its outcome; none without --otel. An App in this process, called through httpx's ASGI
transport, its spans kept by the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coordinator.server import ServerConfig, create_app
from coordinator.state.embedded import stop_embedded_redis
from coordinator.tokens import mint_token

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
export = pytest.importorskip("opentelemetry.sdk.trace.export")
SECRET = b"t" * 32


@pytest.fixture(scope="module")
def spans() -> Any:
    from opentelemetry import trace

    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # once per process: the API keeps the first provider it is given
    return exporter


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    r = tmp_path / "repo"
    r.mkdir()
    (r / "a.txt").write_text("one\ntwo\n")
    yield r
    stop_embedded_redis(r / ".edit-coordinator")


def _calls(root: Path, otel: bool, requests: list[tuple[str, dict[str, Any], str]]) -> list[int]:
    app = create_app(ServerConfig(root=str(root), durability="none", otel=otel), secret=SECRET)

    async def main() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
            statuses = []
            for path, body, tok in requests:
                r = await client.post(path, json=body, headers={"authorization": f"Bearer {tok}"})
                statuses.append(r.status_code)
            return statuses

    try:
        return asyncio.run(main())
    finally:
        app.close()


def test_a_span_per_call_with_the_session_and_outcome(root: Path, spans: Any) -> None:
    spans.clear()
    agent = mint_token(SECRET, session="agent-7")
    admin = mint_token(SECRET, admin=True)
    statuses = _calls(
        root,
        True,
        [
            ("/v1/read", {"path": "a.txt"}, agent),
            ("/v1/edit", {"path": "a.txt", "old_string": "one", "new_string": "ONE"}, agent),
            ("/v1/edit", {"path": "a.txt", "old_string": "absent", "new_string": "x"}, agent),
            ("/v1/read", {"path": "a.txt", "session": "ops-2"}, admin),
        ],
    )
    assert statuses == [200, 200, 422, 200]
    got = [
        (s.name, s.attributes.get("edit_coordinator.session"), s.attributes["edit_coordinator.outcome"])
        for s in spans.get_finished_spans()
    ]
    assert got == [
        ("edit_coordinator read", "agent-7", "ok"),
        ("edit_coordinator edit", "agent-7", "ok"),
        ("edit_coordinator edit", "agent-7", "no_match"),
        ("edit_coordinator read", "ops-2", "ok"),
    ]
    assert all(s.attributes["http.response.status_code"] in (200, 422) for s in spans.get_finished_spans())


def test_no_span_without_otel(root: Path, spans: Any) -> None:
    spans.clear()
    statuses = _calls(root, False, [("/v1/read", {"path": "a.txt"}, mint_token(SECRET, session="quiet"))])
    assert statuses == [200]
    assert spans.get_finished_spans() == ()
