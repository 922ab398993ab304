"""Fixtures of the real-agent tests: the pinned CLIs (installed once into the cache, or the tests skipped
with the reason) and sandboxes whose hook services are stopped at the end."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.worker.agents.installed import need
from worker.agents.runner import Sandbox


@pytest.fixture(autouse=True)
def _agents_gate(request: pytest.FixtureRequest) -> None:
    """Tests marked `agents` run the real CLIs (a few minutes in all): only when selected with -m agents (or
    EC_AGENTS=1). .ci/run runs them as a step of their own."""
    if request.node.get_closest_marker("agents") is None:
        return
    if "agents" in (request.config.getoption("markexpr") or "") or os.environ.get("EC_AGENTS"):
        return
    pytest.skip("agents: run with `pytest -m agents` or EC_AGENTS=1 (the real agent CLIs)")


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Callable[..., Sandbox]]:
    """make(agent, files, hooked=True) -> a Sandbox under tmp_path (the agent installed first, or skipped);
    every sandbox made is closed at the end (its hook service and embedded Redis stopped)."""
    made: list[Sandbox] = []

    def make(agent: str, files: dict[str, str], *, hooked: bool = True, name: str = "") -> Sandbox:
        need(agent)
        box = Sandbox.create(agent, tmp_path / (name or f"box{len(made)}"), files, hooked=hooked)
        made.append(box)
        return box

    yield make
    for box in made:
        box.close()
