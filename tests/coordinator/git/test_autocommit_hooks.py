"""The auto-commit trigger: a Claude Code session's Stop / SessionEnd hook commits exactly that session's
writes, made with its own tools through the hooks, when the switch is on; nothing when it is off."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import Coordinator
from coordinator.agents.adapter import HookAdapter
from coordinator.git.autocommit import AUTO_COMMIT_ENV
from tests.coordinator.agents.hooking import Agent, payload, run
from tests.coordinator.git.conftest import git


def end(hooks: HookAdapter, data: dict) -> bool:
    """The end event as the hook command hands it over: with the session's forwarded settings (its
    environment's EDIT_COORDINATOR_AUTO_COMMIT), never read from the deciding process's own environment."""
    import os

    from coordinator.agents import claude_code
    from coordinator.agents.core import forwarded

    call = claude_code.parse(data)
    assert call is not None
    return hooks.handle(call._replace(settings=forwarded(os.environ))).allow


def _two_sessions_edit(repo: Path, gcoord: Coordinator) -> HookAdapter:
    hooks = HookAdapter(gcoord)
    mine, theirs = Agent(hooks, repo, "mine"), Agent(hooks, repo, "theirs")
    mine.read("a.py")
    theirs.read("b.py")
    assert mine.edit("a.py", "a1\n", "A1\n").allow
    assert theirs.edit("b.py", "b1\n", "B1\n").allow
    return hooks


@pytest.mark.parametrize("event", ["session_end", "stop"])
def test_session_end_commits_only_that_sessions_hooked_writes(repo, gcoord, monkeypatch, event):
    monkeypatch.setenv(AUTO_COMMIT_ENV, "1")
    hooks = _two_sessions_edit(repo, gcoord)
    head = git(repo, "rev-parse", "HEAD")
    assert end(hooks, payload(event, repo, session_id="mine"))
    assert git(repo, "rev-parse", "HEAD") != head
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["a.py"]
    assert git(repo, "show", "HEAD:a.py").startswith("A1\n")
    assert "b.py" in git(repo, "status", "--porcelain")  # the other session's write stays uncommitted


def test_off_by_default_nothing_is_committed(repo, gcoord, monkeypatch):
    monkeypatch.delenv(AUTO_COMMIT_ENV, raising=False)
    hooks = _two_sessions_edit(repo, gcoord)
    head = git(repo, "rev-parse", "HEAD")
    assert end(hooks, payload("session_end", repo, session_id="mine"))
    assert git(repo, "rev-parse", "HEAD") == head


def test_a_commit_of_hooked_writes_names_their_tool_calls_in_its_trailers(repo, gcoord, monkeypatch):
    """Each hooked write's history entry keeps the agent's tool-call id, and the commit of the session's
    writes carries one Coordinator-Tool-Call trailer per call, after the session's trailer."""
    monkeypatch.setenv(AUTO_COMMIT_ENV, "1")
    hooks = HookAdapter(gcoord)
    mine = Agent(hooks, repo, "mine")
    mine.read("a.py")
    assert mine.edit("a.py", "a1\n", "A1\n").allow
    mine.read("a.py")
    assert mine.edit("a.py", "a2\n", "A2\n").allow
    calls = [e.call for e in gcoord.history("a.py") if e.session == "mine"][::-1]  # oldest first
    assert len(calls) == 2 and all(c and c.startswith("toolu_mine_") for c in calls) and calls[0] != calls[1]
    assert end(hooks, payload("session_end", repo, session_id="mine"))
    trailers = git(repo, "log", "-1", "--format=%(trailers:only,unfold)").strip().splitlines()
    assert trailers == ["Coordinator-Session: mine", *(f"Coordinator-Tool-Call: {c}" for c in calls)]


FORGED = "toolu_1\nCoordinator-Session: victim\nSigned-off-by: Mallory <m@example.com>"


def test_a_forged_tool_use_id_is_refused_before_it_reaches_history(repo, gcoord):
    """A tool-use id with newlines used to be recorded as given and written into the commit's trailers."""
    from coordinator.errors import CoordinatorError, ErrorCode

    hooks = HookAdapter(gcoord)
    mine = Agent(hooks, repo, "mine")
    mine.read("a.py")
    with pytest.raises(CoordinatorError) as exc:
        run(
            hooks,
            payload("pre_edit", repo, session_id="mine", tool_use_id=FORGED, tool_input__file_path=str(repo / "a.py")),
        )
    assert exc.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(CoordinatorError):
        run(hooks, payload("session_end", repo, session_id="mine\nSigned-off-by: x"))
    assert all(e.call != FORGED for e in gcoord.history("a.py"))


def test_trailers_hold_only_ids_of_the_rule():
    from coordinator.git.commit import _message

    message = _message("fix", "mine", ["toolu_ok", FORGED])
    assert message.splitlines()[-2:] == ["Coordinator-Session: mine", "Coordinator-Tool-Call: toolu_ok"]
    assert "victim" not in message and "Signed-off-by" not in message
