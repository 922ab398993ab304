"""The hooks `edit-coordinator init` writes, exercised by the real agent CLIs (pinned in
worker/agents/versions.py) through their own tools, each driven by a scripted model on loopback.

Run with `python3 -m pytest -m agents tests/worker/agents` (docs/agents/real-agents.md). Each test says what
the model asked for, and checks what reached the file, what the coordinator recorded and what the model was
told (the tool result the agent sent back to the model server)."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from worker.agents.modelserver import Call, Conversation, Step
from worker.agents.race import RACE_FILE, RACE_START, race
from worker.agents.runner import AgentRun, Sandbox, add_handlers, coordinator_cli, git, run_agent
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
    history = _history(box, RACE_FILE)
    shown = [(v["session"], v["operation"], v["call"], v["added"], v["removed"]) for v in history]
    assert len(history) == result.landed, "\n".join(map(str, shown))
    assert {v["session"] for v in history} <= sessions, shown


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _break(box: Sandbox, how: str) -> dict[str, str]:
    """Break the installation the hooks use: the interpreter their command names is gone (a venv recreated
    elsewhere), or the service they are pointed at does not answer. Returns the agent's extra environment."""
    if how == "dead-server":
        return {"EDIT_COORDINATOR_SERVER": f"http://127.0.0.1:{_dead_port()}"}
    settings = box.repo / box.kind.settings
    text = settings.read_text()
    assert sys.executable in text
    settings.write_text(text.replace(sys.executable, str(box.base / "moved-away" / "bin" / "python3")))
    return {}


HEALTHY_REQUESTS = 2  # the script below: one read, then the final answer


@pytest.mark.parametrize("how", ["moved-interpreter", "dead-server"])
@pytest.mark.parametrize("agent", AGENTS)
def test_a_broken_install_costs_at_most_two_extra_model_requests(agent: str, how: str, sandbox: Make) -> None:
    """The after-read and end-of-turn hooks fail on the broken installation; they must let the agent go on and
    stop (an end-of-turn hook's exit 2 means "keep going" to all three agents). The model is capped at 12
    requests so that an agent that will not stop is ended."""
    box = sandbox(agent, {"a.txt": "one\n"})
    tools = Tools(agent, box.repo)
    env = _break(box, how)
    run = run_agent(box, sequence([tools.read("a.txt")]), env=env, limit=12, timeout=120)
    assert not run.timed_out
    assert run.main_requests <= HEALTHY_REQUESTS + 2, f"{run.main_requests} model requests"


def _deny_while(flag: Path) -> dict[str, object]:
    """A second PreToolUse handler, beside ours: it denies every call while `flag` exists (exit 2)."""
    f = shlex.quote(str(flag))
    return {"type": "command", "command": f"if [ -e {f} ]; then echo 'denied by another hook' >&2; exit 2; fi"}


@pytest.mark.parametrize("agent", AGENTS)
def test_a_call_that_ends_without_post_tool_use_does_not_hold_the_file(agent: str, sandbox: Make) -> None:
    """Session A's write is allowed by our PreToolUse, then never happens and never reports back (Claude Code,
    Gemini CLI: another before-tool hook denies it; Codex: the patch does not apply). While A is still
    running, session B reads and edits the same file: the edit lands."""
    box = sandbox(agent, {"a.txt": "one\n"})
    tools = Tools(agent, box.repo)
    flag = box.base / "deny"
    if agent in ("claude-code", "gemini"):
        flag.touch()
        event = "PreToolUse" if agent == "claude-code" else "BeforeTool"
        add_handlers(box.repo / box.kind.settings, [_deny_while(flag)], {event})
        lost_write = tools.edit("a.txt", "one", "uno")
    else:
        lost_write = tools.edit("a.txt", "a line that is not there", "uno")
    second: list[AgentRun] = []

    def session_b(conv: Conversation) -> Step:
        flag.unlink(missing_ok=True)
        second.append(run_agent(box, sequence([tools.read("a.txt"), tools.edit("a.txt", "one", "two")])))
        return tools.read("a.txt")

    first = run_agent(box, sequence([tools.read("a.txt"), lost_write, session_b]))
    _ok(first)
    assert not tools.succeeded(_last_calls(first)[1])
    (b,) = second
    after, tool = {"claude-code": ("PostToolUse", "Edit"), "codex": ("PostToolUse", "apply_patch"),
                   "gemini": ("AfterTool", "replace")}[agent]  # fmt: skip
    own = [p for p in first.events(after, tool)
           if p.get("session_id") not in b.sessions]  # fmt: skip  # B's edit runs within A's run
    assert own == []
    _ok(b)
    edit = _last_calls(b)[1]
    assert tools.succeeded(edit), edit
    assert (box.repo / "a.txt").read_text() == "two\n"


def test_a_note_left_for_a_claude_code_session_reaches_its_model_with_the_next_prompt(sandbox: Make) -> None:
    """A note that no answer could show when it was due (at a turn's end) is kept for the session and told
    with its next prompt, as UserPromptSubmit's additionalContext: the real Claude Code hands it to its model
    (the session's id set with --session-id, so that the note can be left before the turn)."""
    import uuid

    from coordinator import Coordinator
    from coordinator.state.embedded import stop_embedded_redis

    box = sandbox("claude-code", {"a.txt": "one\n"})
    session = str(uuid.uuid4())
    note = "Your change to a.txt was overwritten by a late write of session bob (note 7731)."
    try:
        with Coordinator(box.repo) as coord:
            coord.agent_port().calls.tell(session, note)
        run = run_agent(box, sequence([Tools("claude-code", box.repo).read("a.txt")]), args=("--session-id", session))
        _ok(run)
        assert run.sessions == {session}
        told = [r for r in run.server.requests if r.main and note in json.dumps(r.body)]
        assert told, "the note reached no model request"
        with Coordinator(box.repo) as coord:  # told once: nothing left for the session
            assert coord.agent_port().calls.at_event(session)[1] == []
    finally:
        stop_embedded_redis(box.repo / ".edit-coordinator")


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_started_in_a_subfolder_the_agent_finds_the_repositorys_hooks(agent: str, sandbox: Make) -> None:
    """Claude Code and Codex look for their project settings above the folder they start in: started in a
    subfolder they run the repository's hooks (a whole write of a file never read is refused). Gemini CLI
    does not (below)."""
    box = sandbox(agent, {"sub/b.txt": "one\ntwo\n"})
    tools = Tools(agent, box.repo / "sub")  # Codex's paths are relative to its working folder
    run = run_agent(box, sequence([tools.write("b.txt", "replaced\n")]), cwd=box.repo / "sub")
    _ok(run)
    (denied,) = _last_calls(run)
    assert not tools.succeeded(denied) and NOT_READ.search(denied.output or ""), denied
    assert (box.repo / "sub" / "b.txt").read_text() == "one\ntwo\n"


def test_gemini_started_in_a_subfolder_is_refused_its_writes_by_the_subfolder_guard(sandbox: Make) -> None:
    """Gemini CLI reads .gemini/settings.json of its start folder only: started in a subfolder it runs none
    of the repository's hooks, and a write of a file it never read lands (at 0effb2a, and without the guard,
    nothing says so). With `init gemini --subfolders` the guard in the user's settings refuses the write and
    says where to start Gemini CLI."""
    import subprocess

    box = sandbox("gemini", {"sub/b.txt": "one\n"})
    sub = box.repo / "sub"
    tools = Tools("gemini", box.repo)
    script = [tools.write("sub/b.txt", "two\n")]
    bare = run_agent(box, sequence(script), cwd=sub)
    _ok(bare)
    assert tools.succeeded(_last_calls(bare)[0]) and bare.payloads == []  # no hook of the repository ran
    assert (sub / "b.txt").read_text() == "two\n"
    (sub / "b.txt").write_text("one\n")

    def guard(home: Path, env: dict[str, str]) -> None:
        argv = [sys.executable, "-m", "coordinator.cli", "init", "gemini", "--subfolders", "--root", str(box.repo)]
        subprocess.run(argv, env=env, check=True, capture_output=True, timeout=60)
        assert "edit-coordinator-subfolders" in (home / ".gemini" / "settings.json").read_text()

    guarded = run_agent(box, sequence(script), cwd=sub, prepare=guard)
    _ok(guarded)
    (denied,) = _last_calls(guarded)
    assert not tools.succeeded(denied), denied
    assert f"start Gemini CLI in {box.repo}" in (denied.output or ""), denied
    assert (sub / "b.txt").read_text() == "one\n"
    # started at the top, the repository's hooks guard the write and the guard says nothing
    top = run_agent(box, sequence([tools.read("sub/b.txt"), *script]), prepare=guard)
    _ok(top)
    assert [tools.succeeded(c) for c in _last_calls(top)] == [True, True]
    assert (sub / "b.txt").read_text() == "two\n"
    assert [v["session"] for v in _history(box, "sub/b.txt")] == [next(iter(top.sessions))]


@pytest.mark.parametrize("own", [None, "0"], ids=["config-decides", "session-says-0"])
@pytest.mark.parametrize("agent", AGENTS)
def test_auto_commit_by_the_config_key_unless_the_session_says_otherwise(agent: str, own: str | None,
                                                                         sandbox: Make) -> None:  # fmt: skip
    """`auto-commit = true` in .edit-coordinator.toml commits a session's hooked writes at its end; a session
    whose own environment says EDIT_COORDINATOR_AUTO_COMMIT=0 is not committed (its setting travels with its
    events). Claude Code's http hooks sent the unset variable as an empty header, read as "off": with the
    config key alone nothing was committed."""
    box = sandbox(agent, {"a.txt": "total = 1\n", ".edit-coordinator.toml": "auto-commit = true\n"})
    git(box.repo, "config", "user.name", "scripted")  # the run's home has no git identity
    git(box.repo, "config", "user.email", "scripted@example.invalid")
    head = git(box.repo, "rev-parse", "HEAD").strip()
    tools = Tools(agent, box.repo)
    env = {"EDIT_COORDINATOR_AUTO_COMMIT": own} if own is not None else {}
    run = run_agent(box, sequence([tools.read("a.txt"), tools.edit("a.txt", "total = 1", "total = 2")]), env=env)
    _ok(run)
    assert (box.repo / "a.txt").read_text() == "total = 2\n"
    now = git(box.repo, "rev-parse", "HEAD").strip()
    if own == "0":
        assert now == head
    else:
        assert now != head, (box.repo / ".edit-coordinator" / "hook-service" / "log").read_text()[-2000:]
        assert git(box.repo, "show", "HEAD:a.txt") == "total = 2\n"
        assert "Coordinator-Session:" in git(box.repo, "log", "-1", "--format=%B")
