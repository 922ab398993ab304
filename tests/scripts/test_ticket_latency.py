"""scripts/ticket_latency.py: the `before` revision's service, this checkout's and a no-op endpoint each
answer their events, and every guarded edit of the two services is in its file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts import run_tool


@pytest.mark.slow  # two services, each with its embedded Redis, and a no-op server: ~20 s on 2 cores
def test_both_services_and_the_noop_answer_and_every_edit_lands(tmp_path: Path) -> None:
    figures = tmp_path / "ticket.json"
    out = run_tool("ticket_latency.py", "--before", "HEAD", "--events", "3", "--json", str(figures))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "every guarded edit is in its file" in out.stdout
    data = json.loads(figures.read_text())
    assert set(data) == {"before", "after", "noop"}
    assert all(column["events"] == 3 for column in data.values())
