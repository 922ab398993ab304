"""`blame` agrees with the history for every line, with several sessions writing one file."""

from __future__ import annotations

import random
from pathlib import Path

from coordinator import Coordinator
from coordinator.git.blame import ORIGIN, OUTSIDE, agent_trace, blame_lines
from tests.coordinator.git.conftest import edit


def test_blame_agrees_with_the_history_for_every_line(repo: Path, gcoord: Coordinator) -> None:
    rng = random.Random(7)
    expected = {f"a{i}\n": (ORIGIN, 0) for i in range(1, 21)}
    for n in range(30):
        session = f"s{rng.randrange(4)}"
        current = (repo / "a.py").read_text().splitlines(keepends=True)
        old = rng.choice(current)
        new = f"line {n} by {session}\n"
        version = edit(gcoord, session, "a.py", old, new)
        expected.pop(old)
        expected[new] = (session, version)
    lines = blame_lines(str(repo), "a.py")
    assert [ln.text for ln in lines] == (repo / "a.py").read_text().splitlines(keepends=True)
    assert {ln.text: (ln.session, ln.version) for ln in lines} == expected
    assert any(ln.session == ORIGIN for ln in lines) and any(ln.session != ORIGIN for ln in lines)


def test_outside_changes_and_agent_trace(repo: Path, gcoord: Coordinator) -> None:
    edit(gcoord, "s1", "b.py", "b1\n", "B1\n")
    (repo / "b.py").write_text((repo / "b.py").read_text().replace("b5\n", "person\n"))
    lines = blame_lines(str(repo), "b.py")
    assert (lines[0].session, lines[0].version) == ("s1", 1)
    assert lines[4].session == OUTSIDE and lines[1].session == ORIGIN
    trace = agent_trace("b.py", lines)
    convs = {c["url"]: c for c in trace["files"][0]["conversations"]}
    assert convs["edit-coordinator:session/s1"]["ranges"] == [{"start_line": 1, "end_line": 1}]
    assert convs["edit-coordinator:session/s1"]["contributor"] == {"type": "ai"}
