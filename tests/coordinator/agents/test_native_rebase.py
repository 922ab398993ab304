"""Policy "rebase" for the agents' own writes (docs/agents/agent-writes.md, "Policy rebase"): a hooked Edit made
on an older view goes on when its change commutes with the changes since and its tool, replacing the old text
in the file as it is now, lands as the rebase would; a hooked whole-file Write on an older view is merged 3-way
and handed back to the agent as its new input where the agent's hook answer can rewrite it (Claude Code,
Gemini CLI), refused where it cannot (Codex). Under "strict" both stay refused, as before."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from coordinator import Coordinator
from coordinator.agents import claude_code, codex, gemini
from coordinator.agents.adapter import HookAdapter
from coordinator.agents.core import Decision, HookAnswer
from coordinator.text import rebase

DATA = Path(__file__).resolve().parents[2] / "data" / "hooks"
FRONT = {"claude-code": claude_code, "codex": codex, "gemini": gemini}
FIXTURES = {  # agent -> (before, after) payload examples
    "claude-code": ("pre_edit", "post_edit"),
    "codex": ("pre_apply_patch", "post_apply_patch"),
    "gemini": ("before_replace", "after_replace"),
}
START = "a = 1\nb = 2\nc = 3\nd = 4\ne = 5\n"
AGENTS = ("claude-code", "codex", "gemini")


@pytest.fixture
def hooks(coord: Coordinator) -> HookAdapter:
    return HookAdapter(coord, session_end=lambda root, session: None)


@pytest.fixture
def app(root: Path) -> Path:
    f = root / "app.py"
    f.write_text(START)
    return f


def _policy(hooks: HookAdapter, policy: str) -> None:
    """The coordinator's policy, as its maker sets it from the project config (HookAdapter.policy)."""
    hooks.coord.policy = policy  # type: ignore[assignment]


def _tool_input(agent: str, root: Path, *, old: str = "", new: str = "", content: str | None = None) -> tuple[str, Any]:
    """(tool name, tool_input) of an edit (`old` -> `new`) or a whole write (`content`) of app.py."""
    path = str(root / "app.py")
    if agent == "claude-code":
        if content is not None:
            return "Write", {"file_path": path, "content": content}
        return "Edit", {"file_path": path, "old_string": old, "new_string": new, "replace_all": False}
    if agent == "gemini":
        if content is not None:
            return "write_file", {"file_path": path, "content": content}
        return "replace", {"file_path": path, "old_string": old, "new_string": new, "instruction": "edit"}
    if content is not None:
        added = "".join(f"+{line}\n" for line in content.splitlines())
        return "apply_patch", {"command": f"*** Begin Patch\n*** Add File: app.py\n{added}*** End Patch\n"}
    minus = "".join(f"-{line}\n" for line in old.split("\n"))
    plus = "".join(f"+{line}\n" for line in new.split("\n"))
    return "apply_patch", {"command": f"*** Begin Patch\n*** Update File: app.py\n@@\n{minus}{plus}*** End Patch\n"}


def _event(agent: str, phase: int, root: Path, session: str, call: str, tool: str, tool_input: Any, **more: Any):
    name = FIXTURES[agent][phase]
    data: dict[str, Any] = json.loads((DATA / agent / f"{name}.json").read_text().replace("__ROOT__", str(root)))
    data.update(session_id=session, tool_use_id=call, tool_name=tool, tool_input=tool_input, **more)
    if agent == "gemini":
        del data["tool_use_id"]  # Gemini CLI sends none: its front end pairs the events by their input
    return data


class Session:
    """One agent session's own tool loop on app.py, its hooks through `hooks`: the agent's tool makes the
    change itself between the before- and after-event (an Edit replaces the old text in the file as it is
    then; a write writes its content, or the content the hook answer gave it instead)."""

    def __init__(self, agent: str, hooks: HookAdapter, root: Path, session: str) -> None:
        self.agent, self.hooks, self.root, self.session = agent, hooks, root, session
        self.calls = 0
        self.answer: HookAnswer | None = None  # the last before-event's answer, as the agent reads it

    def read(self) -> None:
        text = (self.root / "app.py").read_text()
        self.hooks.coord.agent_port().after_read(self.session, "app.py", text, 1, None)

    def _run(self, tool: str, tool_input: Any, apply: Any, **more: Any) -> Decision:
        self.calls += 1
        call = f"call_{self.session}_{self.calls}"
        front = FRONT[self.agent]
        parsed = front.parse(_event(self.agent, 0, self.root, self.session, call, tool, tool_input, **more))
        assert parsed is not None
        decision = self.hooks.handle(parsed)
        self.answer = front.render(parsed, decision)
        if not decision.allow:
            return decision
        apply(decision)
        after = front.parse(_event(self.agent, 1, self.root, self.session, call, tool, tool_input))
        assert after is not None
        self.hooks.handle(after)
        return decision

    def edit(self, old: str, new: str) -> Decision:
        path = self.root / "app.py"

        def apply(decision: Decision) -> None:
            text = path.read_text()
            assert text.count(old) == 1  # the agent's own tool: one match in the file as it is now
            path.write_text(text.replace(old, new, 1))

        return self._run(*_tool_input(self.agent, self.root, old=old, new=new), apply)

    def write(self, content: str, **more: Any) -> Decision:
        path = self.root / "app.py"

        def apply(decision: Decision) -> None:
            path.write_text(decision.content if decision.content is not None else content)

        return self._run(*_tool_input(self.agent, self.root, content=content), apply, **more)


def _bob_edits_the_last_line(hooks: HookAdapter, root: Path) -> None:
    bob = Session("claude-code", hooks, root, "bob")
    bob.read()
    assert bob.edit("e = 5", "e = 50").allow
    assert (root / "app.py").read_text() == START.replace("e = 5", "e = 50")


def _history(coord: Coordinator) -> list[tuple[str, str]]:
    return [(e.session, e.operation) for e in reversed(coord.history("app.py"))]


def _view_is_current(coord: Coordinator, session: str) -> bool:
    return coord.agent_port().native.judge_write(session, "app.py", whole=True).refusal is None


# -- an Edit on an older view -----------------------------------------------------------------------------------
@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("policy", ["strict", "rebase"])
def test_an_edit_on_an_older_view_that_commutes_lands_under_rebase_only(
    agent: str, policy: str, hooks: HookAdapter, coord: Coordinator, root: Path, app: Path
) -> None:
    _policy(hooks, policy)
    alice = Session(agent, hooks, root, "alice")
    alice.read()
    _bob_edits_the_last_line(hooks, root)
    decision = alice.edit("a = 1", "a = 10")
    if policy == "strict":
        assert not decision.allow and decision.code == "stale"
        assert "read" in decision.reason.lower()
        assert app.read_text() == "a = 1\nb = 2\nc = 3\nd = 4\ne = 50\n"
        return
    assert decision.allow, decision
    assert app.read_text() == "a = 10\nb = 2\nc = 3\nd = 4\ne = 50\n"  # both changes
    assert _history(coord) == [("bob", "edit"), ("alice", "edit")]
    assert _view_is_current(coord, "alice")  # its view is the file's new version: no read needed
    if agent != "gemini":  # Gemini CLI's BeforeTool shows no context: the note waits for its next event
        assert "bob" in decision.reason and "line 5" in decision.reason


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize(
    ("old", "new", "bob_new"),
    [
        # it changes the line Bob changed (its tool would find "e = 5" in "e = 50" and write "e = 60")
        ("e = 5", "e = 6", "e = 50"),
        # Bob changed a line of its context: the rebase would carry it, but its tool finds no "d = 4\ne = 5"
        ("d = 4\ne = 5", "d = 40\ne = 5", "E = 5"),
        ("a = 1", "a = 10", "e = 5\na = 1"),  # Bob added a second `a = 1`: its tool's match is no longer unique
    ],
    ids=["overlap", "context_changed", "not_unique"],
)
def test_an_edit_on_an_older_view_that_does_not_commute_stays_refused_under_rebase(
    agent: str, old: str, new: str, bob_new: str, hooks: HookAdapter, root: Path, app: Path
) -> None:
    _policy(hooks, "rebase")
    alice = Session(agent, hooks, root, "alice")
    alice.read()
    bob = Session("claude-code", hooks, root, "bob")
    bob.read()
    assert bob.edit("e = 5", bob_new).allow
    after_bob = app.read_text()
    decision = alice.edit(old, new)
    assert not decision.allow and decision.code == "stale"
    assert "Read the file again" in decision.reason
    assert app.read_text() == after_bob


def test_an_edit_whose_change_is_already_in_the_file_is_refused_not_lost(
    hooks: HookAdapter, root: Path, app: Path
) -> None:
    """The same change made by another session: the agent's tool would find nothing to replace."""
    _policy(hooks, "rebase")
    alice = Session("claude-code", hooks, root, "alice")
    alice.read()
    _bob_edits_the_last_line(hooks, root)
    decision = alice.edit("e = 5", "e = 50")
    assert not decision.allow and decision.code == "stale"
    assert "already in the file" in decision.reason


def test_the_hook_commands_own_coordinator_takes_the_project_configs_policy(
    root: Path, app: Path, request: pytest.FixtureRequest
) -> None:
    """With no hook service (EDIT_COORDINATOR_HOOK_SERVICE=0) the hook command decides in its own process:
    its coordinator takes `policy` from the project config, as `serve --root` does for the service."""
    import subprocess
    import sys

    from coordinator.state.embedded import stop_embedded_redis

    request.addfinalizer(lambda: stop_embedded_redis(root / ".edit-coordinator"))  # the commands' embedded Redis

    (root / ".edit-coordinator.toml").write_text('policy = "rebase"\n')
    env = {**os.environ, "EDIT_COORDINATOR_HOOK_SERVICE": "0"}

    def hook(event: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "coordinator.cli", "hook", "claude-code", "--root", str(root)]
        return subprocess.run(argv, input=json.dumps(event), capture_output=True, text=True, env=env, timeout=60)

    alice = {"session_id": "alice", "cwd": str(root), "transcript_path": "", "tool_use_id": "t1"}
    shown = app.read_text()
    read = {
        "hook_event_name": "PostToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": str(app)},
        "tool_response": {
            "type": "text",
            "file": {
                "filePath": str(app),
                "content": shown,
                "numLines": shown.count("\n") + 1,
                "startLine": 1,
                "totalLines": shown.count("\n") + 1,
            },
        },
    }
    bob = alice | {"session_id": "bob"}
    assert hook(alice | read).returncode == 0 and hook(bob | read).returncode == 0
    bobs = {
        "hook_event_name": "PreToolUse",
        "tool_name": "Edit",
        "tool_input": {"file_path": str(app), "old_string": "e = 5", "new_string": "e = 50"},
    }
    assert "deny" not in hook(bob | bobs).stdout
    app.write_text(shown.replace("e = 5", "e = 50"))  # bob's own tool, after alice's read
    after = {"hook_event_name": "PostToolUse", "tool_response": {"filePath": str(app)}}
    assert hook(bob | bobs | after).returncode == 0
    edit = {
        "hook_event_name": "PreToolUse",
        "tool_name": "Edit",
        "tool_input": {"file_path": str(app), "old_string": "a = 1", "new_string": "a = 10"},
    }
    done = hook(alice | edit | {"tool_use_id": "t2"})
    assert done.returncode == 0 and "deny" not in done.stdout, done.stdout  # carried over under rebase
    (root / ".edit-coordinator.toml").write_text('policy = "strict"\n')
    refused = hook(alice | edit | {"tool_use_id": "t3"})
    assert '"deny"' in refused.stdout, refused.stdout


# -- a whole-file Write on an older view ------------------------------------------------------------------------
MERGED = "a = 10\nb = 2\nc = 3\nd = 4\ne = 50\n"


@pytest.mark.parametrize("agent", ["claude-code", "gemini"])
def test_a_write_on_an_older_view_is_merged_and_handed_to_the_agent(
    agent: str, hooks: HookAdapter, coord: Coordinator, root: Path, app: Path
) -> None:
    _policy(hooks, "rebase")
    alice = Session(agent, hooks, root, "alice")
    alice.read()
    _bob_edits_the_last_line(hooks, root)
    decision = alice.write(START.replace("a = 1", "a = 10"))
    assert decision.allow and decision.content == MERGED
    assert alice.answer is not None and alice.answer.exit_code == 0
    body = alice.answer.body or {}
    if agent == "claude-code":
        out = body["hookSpecificOutput"]
        assert out["permissionDecision"] == "allow"  # bypassPermissions: the agent's own flow allows it anyway
        assert out["updatedInput"] == {"file_path": str(app), "content": MERGED}
        assert "merged" in out["additionalContext"]
    else:
        assert body["hookSpecificOutput"]["tool_input"] == {"file_path": str(app), "content": MERGED}
    assert app.read_text() == MERGED
    assert _history(coord) == [("bob", "edit"), ("alice", "write")]
    assert _view_is_current(coord, "alice")


def test_a_merged_write_asks_where_claude_codes_own_flow_would_ask(hooks: HookAdapter, root: Path, app: Path) -> None:
    """A hook never removes the agent's own refusals: outside bypassPermissions and acceptEdits the person is
    asked, and shown the merged input."""
    _policy(hooks, "rebase")
    alice = Session("claude-code", hooks, root, "alice")
    alice.read()
    _bob_edits_the_last_line(hooks, root)
    assert alice.write(START.replace("a = 1", "a = 10"), permission_mode="default").allow
    assert alice.answer is not None
    out = (alice.answer.body or {})["hookSpecificOutput"]
    assert out["permissionDecision"] == "ask" and out["updatedInput"]["content"] == MERGED


@pytest.mark.parametrize("policy", ["strict", "rebase"])
def test_codex_cannot_take_a_merged_write_so_it_stays_refused(policy: str, hooks: HookAdapter, root: Path, app: Path):
    _policy(hooks, policy)
    alice = Session("codex", hooks, root, "alice")
    alice.read()
    _bob_edits_the_last_line(hooks, root)
    decision = alice.write(START.replace("a = 1", "a = 10"))
    assert not decision.allow and decision.code == "stale" and "read" in decision.reason.lower()
    assert app.read_text() == START.replace("e = 5", "e = 50")


@pytest.mark.parametrize("agent", ["claude-code", "gemini"])
def test_a_write_on_an_older_view_that_conflicts_stays_refused(agent: str, hooks: HookAdapter, root: Path, app: Path):
    _policy(hooks, "rebase")
    alice = Session(agent, hooks, root, "alice")
    alice.read()
    _bob_edits_the_last_line(hooks, root)
    decision = alice.write(START.replace("e = 5", "e = 6"))
    assert not decision.allow and decision.code == "stale" and "Read the file again" in decision.reason
    assert app.read_text() == START.replace("e = 5", "e = 50")


def test_a_write_on_a_partial_view_needs_a_full_read_under_rebase_too(hooks: HookAdapter, root: Path, app: Path):
    _policy(hooks, "rebase")
    hooks.coord.agent_port().after_read("alice", "app.py", "a = 1\n", 1, 1)
    _bob_edits_the_last_line(hooks, root)
    decision = Session("claude-code", hooks, root, "alice").write(START.replace("a = 1", "a = 10"))  # would merge
    assert not decision.allow and decision.code == "stale"
    assert app.read_text() == START.replace("e = 5", "e = 50")


# -- the rules, on text ---------------------------------------------------------------------------------------
def test_replay_edits_and_merge_write_follow_the_rebase_rule() -> None:
    base, current = START, START.replace("e = 5", "e = 50")
    spec = rebase.EditSpec("a = 1", "a = 10")
    assert rebase.replay_edits(base, current, [spec]).outcome.text == MERGED
    assert rebase.merge_write(base, START.replace("a = 1", "a = 10"), current).text == MERGED
    with pytest.raises(rebase.CoordinatorError) as exc:
        rebase.merge_write(base, START.replace("e = 5", "e = 6"), current)
    assert exc.value.details["reason"] == "overlap"
    twice = current + "a = 1\n"
    with pytest.raises(rebase.CoordinatorError) as exc:
        rebase.replay_edits(base, twice, [spec])
    assert exc.value.details["reason"] in ("no_unique_match", "moved_match")


# -- a read whose after-hook comes after another write --------------------------------------------------------
@pytest.mark.parametrize("policy", ["strict", "rebase"])
def test_a_read_that_showed_an_earlier_version_is_that_view(policy: str, hooks: HookAdapter, root: Path, app: Path):
    """Alice's tool read the file, then Bob's write landed before Alice's after-read hook: what she was shown is
    the earlier version, which the history holds. It is her view (stale under strict, carried under rebase),
    where it used to be dropped (not_read under both)."""
    _policy(hooks, policy)
    _bob_edits_the_last_line(hooks, root)  # Bob's write keeps START in the history as its pre-image
    port = hooks.coord.agent_port()
    assert port.native.record_view("alice", "app.py", START)
    decision = Session("claude-code", hooks, root, "alice").edit("a = 1", "a = 10")
    if policy == "strict":
        assert not decision.allow and decision.code == "stale"
    else:
        assert decision.allow and app.read_text() == MERGED
    assert not port.native.record_view("carol", "app.py", "a = 1\nsomething never in the file\n")
    assert Session("claude-code", hooks, root, "carol").edit("b = 2", "b = 3").code == "not_read"
