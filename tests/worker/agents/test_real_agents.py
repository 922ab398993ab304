"""The hooks `edit-coordinator init` writes, exercised by the real agent CLIs (pinned in
worker/agents/versions.py) through their own tools, each driven by a scripted model on loopback.

Run with `python3 -m pytest -m agents tests/worker/agents` (docs/agents/real-agents.md). Each test says what
the model asked for, and checks what reached the file, what the coordinator recorded and what the model was
told (the tool result the agent sent back to the model server)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable

import pytest

from worker.agents.modelserver import Call, Conversation, Step
from worker.agents.race import RACE_FILE, RACE_START, race
from worker.agents.runner import AgentRun, Sandbox, coordinator_cli, git, run_agent
from worker.agents.scripts import Tools, sequence

pytestmark = pytest.mark.agents

AGENTS = ("claude-code", "codex", "gemini")
READ_AGAIN = re.compile(r"(?i)read it again|read .* again")
NOT_READ = re.compile(r"(?i)not been read|read it first")

Make = Callable[..., Sandbox]


def _history(box: Sandbox, rel: str) -> list[dict[str, object]]:
    out = coordinator_cli("history", "--root", str(box.repo), rel, "--json").stdout
    versions = json.loads(out)["entries"]
    assert isinstance(versions, list)
    return versions


def _last_calls(run: AgentRun) -> list[Call]:
    conversations = run.server.conversations()
    assert conversations, f"the agent sent no model request: {run.stderr[-2000:]}"
    return list(conversations[-1].calls)


def _ok(run: AgentRun) -> None:
    assert run.returncode == 0, f"{run.agent} exited {run.returncode}: {run.stderr[-3000:]}"


@pytest.mark.parametrize("agent", AGENTS)
def test_read_then_edit_lands_and_history_names_the_session(agent: str, sandbox: Make) -> None:
    box = sandbox(agent, {"a.txt": "total = 1\nother = 1\n"})
    tools = Tools(agent, box.repo)
    run = run_agent(box, sequence([tools.read("a.txt"), tools.edit("a.txt", "total = 1", "total = 2")]))
    _ok(run)
    calls = _last_calls(run)
    assert [tools.succeeded(c) for c in calls] == [True, True]
    assert (box.repo / "a.txt").read_text() == "total = 2\nother = 1\n"
    assert len(run.sessions) == 1
    versions = _history(box, "a.txt")
    assert [v["session"] for v in versions] == [next(iter(run.sessions))]


def _outside_change_then(box: Sandbox, step: Step) -> Callable[[Conversation], Step]:
    """Between the session's read and its next call, another program changes a line the call does not touch,
    keeping the file's mtime (so that only the content tells, as the coordinator's rule says)."""

    def change(conv: Conversation) -> Step:
        path = box.repo / "a.txt"
        st = path.stat()
        path.write_text(path.read_text().replace("other = 1", "other = 2"))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        return step

    return change


@pytest.mark.parametrize("agent", AGENTS)
def test_stale_edit_is_denied_and_the_model_is_told_to_read_again(agent: str, sandbox: Make) -> None:
    box = sandbox(agent, {"a.txt": "total = 1\nother = 1\n"})
    tools = Tools(agent, box.repo)
    edit = tools.edit("a.txt", "total = 1", "total = 2")
    run = run_agent(box, sequence([tools.read("a.txt"), _outside_change_then(box, edit)]))
    _ok(run)
    read, denied = _last_calls(run)
    assert tools.succeeded(read)
    assert not tools.succeeded(denied)
    assert READ_AGAIN.search(denied.output or ""), denied
    assert (box.repo / "a.txt").read_text() == "total = 1\nother = 2\n"  # the other program's change kept
    assert not any(v["session"] in run.sessions for v in _history(box, "a.txt"))


@pytest.mark.parametrize("agent", AGENTS)
def test_unread_whole_file_write_is_denied(agent: str, sandbox: Make) -> None:
    """Claude Code: a Write after reading only one line (its own check lets that through); Codex: a patch that
    adds the file over one never read; Gemini CLI: write_file of a file never read."""
    box = sandbox(agent, {"a.txt": "one\ntwo\nthree\n"})
    tools = Tools(agent, box.repo)
    steps: list[Step] = [tools.write("a.txt", "replaced\n")]
    if agent == "claude-code":
        steps.insert(0, tools.read("a.txt", offset=2, limit=1))
    run = run_agent(box, sequence(steps))
    _ok(run)
    denied = _last_calls(run)[-1]
    assert not tools.succeeded(denied), denied
    assert re.search(r"(?i)read", denied.output or ""), denied
    assert (box.repo / "a.txt").read_text() == "one\ntwo\nthree\n"


@pytest.mark.parametrize("agent", AGENTS)
def test_git_stash_through_the_shell_is_denied(agent: str, sandbox: Make) -> None:
    box = sandbox(agent, {"a.txt": "one\n"})
    (box.repo / "a.txt").write_text("someone's uncommitted work\n")
    tools = Tools(agent, box.repo)
    run = run_agent(box, sequence([tools.shell("git stash")]))
    _ok(run)
    (denied,) = _last_calls(run)
    assert "git stash" in (denied.output or "") and "Refused" in (denied.output or ""), denied
    assert git(box.repo, "stash", "list") == ""
    assert (box.repo / "a.txt").read_text() == "someone's uncommitted work\n"


@pytest.mark.parametrize("agent", AGENTS)
def test_race_of_four_hooked_sessions_loses_nothing(agent: str, sandbox: Make) -> None:
    box = sandbox(agent, {RACE_FILE: RACE_START})
    result = race(box, sessions=4, rounds=3)
    for run in result.runs:
        assert not run.timed_out, run.stderr[-2000:]
    assert result.reported > 0
    assert result.lost == 0, f"{result.reported} increments reported, the counter gained {result.landed}"
    sessions = set().union(*(r.sessions for r in result.runs))
    writers = {v["session"] for v in _history(box, RACE_FILE)}
    assert len(_history(box, RACE_FILE)) == result.landed
    assert writers <= sessions
