"""`edit-coordinator demo`: the tour's collision, and its history in `history`'s words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coordinator.cli import main
from tests.conftest import leftover_processes


def test_the_demo_refuses_the_stale_edit_and_shows_the_history_as_history_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Its history said 'lines 1-1' where `history` says '+1 -1' (one changed line)."""
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "refused [stale]" in out and "Both edits are in the file; nothing was lost." in out
    history = out[out.index("History of app.py") :].splitlines()[1:]
    assert [line.split() for line in history] == [
        ["v2", "agent-b", "edit", "+1", "-1"],
        ["v1", "agent-a", "edit", "+1", "-1"],
    ]
    found = re.search(r"Repository: (\S+) ", out)
    assert found and not Path(found.group(1)).exists()  # the scratch copy is removed
    assert not leftover_processes(found.group(1))  # and its embedded Redis stopped
