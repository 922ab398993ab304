"""Policy "rebase" for the real agents' own writes (docs/agents/agent-writes.md, "Policy rebase"): between the
session's read and its write, another session changes another line of the file through the coordinator. An
Edit then lands under "rebase" (it commutes) and is refused under "strict"; a whole-file Write is merged and
handed to the agent as its new input (Claude Code's updatedInput, Gemini CLI's tool_input), and refused for
Codex, whose hooks cannot rewrite a tool's input.

Run with `python3 -m pytest -m agents tests/worker/agents -k rebase` (docs/agents/real-agents.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest

from worker.agents.modelserver import Call, Conversation, Step
from worker.agents.runner import AgentRun, Sandbox, coordinator_cli, run_agent
from worker.agents.scripts import Tools, sequence

pytestmark = pytest.mark.agents

AGENTS = ("claude-code", "codex", "gemini")
START = "total = 1\nother = 1\n"
Make = Callable[..., Sandbox]


def _files(policy: str) -> dict[str, str]:
    return {"a.txt": START, ".edit-coordinator.toml": f'policy = "{policy}"\n'}


def _another_session_changes_line_2_then(box: Sandbox, step: Step) -> Callable[[Conversation], Step]:
    """Between the agent's read and its next call, session `other` edits line 2 through the coordinator (read,
    then edit: a recorded version), and the file's mtime is put back, so that only the coordinator can tell
    (Claude Code's own check compares times)."""

    def change(conv: Conversation) -> Step:
        path = box.repo / "a.txt"
        st = path.stat()
        root = ("--root", str(box.repo), "--session", "other")
        coordinator_cli("read", "a.txt", *root)
        coordinator_cli("edit", "a.txt", "--old", "other = 1", "--new", "other = 2", *root)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        return step

    return change


def _calls(run: AgentRun) -> list[Call]:
    conversations = run.server.conversations()
    assert conversations, f"the agent sent no model request: {run.stderr[-2000:]}"
    return list(conversations[-1].calls)


def _history(box: Sandbox) -> list[dict[str, object]]:
    out = coordinator_cli("history", "--root", str(box.repo), "a.txt", "--json").stdout
    entries = json.loads(out)["entries"]
    assert isinstance(entries, list)
    return list(reversed(entries))  # oldest first


@pytest.mark.parametrize("policy", ["strict", "rebase"])
@pytest.mark.parametrize("agent", AGENTS)
def test_rebase_an_edit_on_an_older_view_that_commutes(agent: str, policy: str, sandbox: Make) -> None:
    box = sandbox(agent, _files(policy))
    tools = Tools(agent, box.repo)
    edit = tools.edit("a.txt", "total = 1", "total = 2")
    run = run_agent(box, sequence([tools.read("a.txt"), _another_session_changes_line_2_then(box, edit)]))
    assert run.returncode == 0, run.stderr[-3000:]
    read, edited = _calls(run)
    assert tools.succeeded(read)
    writers = [(e["session"], e["operation"]) for e in _history(box)]
    if policy == "strict":
        assert not tools.succeeded(edited), edited
        assert "again" in (edited.output or ""), edited
        assert (box.repo / "a.txt").read_text() == "total = 1\nother = 2\n"
        assert writers == [("other", "edit")]
        return
    assert tools.succeeded(edited), edited
    assert (box.repo / "a.txt").read_text() == "total = 2\nother = 2\n"  # both changes
    assert writers == [("other", "edit"), (next(iter(run.sessions)), "edit")]


@pytest.mark.parametrize("agent", AGENTS)
def test_rebase_a_write_on_an_older_view(agent: str, sandbox: Make) -> None:
    """Claude Code and Gemini CLI write the merge the hook handed them; Codex is refused (no rewrite)."""
    box = sandbox(agent, _files("rebase"))
    tools = Tools(agent, box.repo)
    write = tools.write("a.txt", "total = 2\nother = 1\n")  # made from the version it read
    run = run_agent(box, sequence([tools.read("a.txt"), _another_session_changes_line_2_then(box, write)]))
    assert run.returncode == 0, run.stderr[-3000:]
    _read, written = _calls(run)
    writers = [(e["session"], e["operation"]) for e in _history(box)]
    if agent == "codex":
        assert not tools.succeeded(written), written
        assert "again" in (written.output or ""), written
        assert (box.repo / "a.txt").read_text() == "total = 1\nother = 2\n"
        assert writers == [("other", "edit")]
        return
    assert tools.succeeded(written), written
    assert (box.repo / "a.txt").read_text() == "total = 2\nother = 2\n"  # the merge, not the agent's content
    assert writers == [("other", "edit"), (next(iter(run.sessions)), "write")]
