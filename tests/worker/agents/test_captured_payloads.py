"""The payload fixtures of tests/data/hooks/<agent>/ still describe what the pinned release sends: a fresh
capture (scripts/capture_hook_payloads.py, the real CLI) finds every fixture's event, and each carries the
fields the stored fixture has, with values of the same types. After an upgrade (worker/agents/versions.py)
this is the test that says the fixtures, and the adapters that read them, must follow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import REPO_ROOT
from tests.scripts import load_tool
from tests.worker.agents.installed import need

pytestmark = pytest.mark.agents
capture = load_tool("capture_hook_payloads")
FIXTURES = REPO_ROOT / "tests" / "data" / "hooks"


def _shape(value: Any, depth: int = 0) -> Any:
    """The keys and value types of a payload (two levels deep): what a release may not change silently."""
    if isinstance(value, dict) and depth < 2:
        return {k: _shape(v, depth + 1) for k, v in value.items()}
    return type(value).__name__


@pytest.mark.parametrize("agent", sorted(capture.SCENARIOS))
def test_a_fresh_capture_has_every_fixture_and_its_fields(agent: str, tmp_path: Path) -> None:
    need(agent)
    report = capture.capture(agent, tmp_path)
    assert not [line for line in report if "not written" in line or "exited" in line], report
    stored = sorted(p.name for p in (FIXTURES / agent).glob("*.json"))
    assert sorted(p.name for p in tmp_path.glob("*.json")) == stored
    for name in stored:
        old = json.loads((FIXTURES / agent / name).read_text())
        new = json.loads((tmp_path / name).read_text())
        assert (new.get("hook_event_name"), new.get("tool_name")) == (old.get("hook_event_name"), old.get("tool_name"))
        assert _shape(new) == _shape(old), name
