"""The pinned agent releases of the real-agent tests, installed once per test run (or the test skipped with
the reason)."""

from __future__ import annotations

import pytest

from worker.agents.install import AgentUnavailable, ensure

_unavailable: dict[str, str] = {}


def need(agent: str) -> None:
    """Skip the test, saying why, when the pinned release of `agent` cannot be installed here."""
    if agent not in _unavailable:
        try:
            ensure(agent)
            _unavailable[agent] = ""
        except AgentUnavailable as exc:
            _unavailable[agent] = str(exc)
    if _unavailable[agent]:
        pytest.skip(_unavailable[agent])
