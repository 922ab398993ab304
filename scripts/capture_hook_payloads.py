"""Capture the hook payload fixtures of tests/data/hooks/<agent>/ from the real agent CLIs.

    python3 scripts/capture_hook_payloads.py [claude-code] [codex] [gemini] [--out DIR]

Each agent (the release pinned in worker/agents/versions.py) runs one scripted session in a scratch
repository holding src/app.py, with the hooks `edit-coordinator init` writes and a capture handler beside
each; the session reads, edits, writes and runs a shell command through the agent's own tools. Every fixture
is one event it sent, picked by event, tool and order, with the repository's path replaced by `__ROOT__`
and the scratch home by `/home/user` (the tests put their own root in its place). SOURCES.md in each folder
says which release and which call each file came from. A fixture whose event the release did not send is
reported and not written; files of the folder that no scenario names are listed (they describe events no
release was seen to send).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from worker.agents.modelserver import Conversation, Say, Step, Use  # noqa: E402
from worker.agents.runner import AgentRun, Sandbox, run_agent  # noqa: E402
from worker.agents.scripts import Tools  # noqa: E402
from worker.agents.versions import PINNED  # noqa: E402

APP = "def main():\n    return 1\n"
SUBAGENT_PROMPT = "SUBAGENT: change main's return value to 3."


@dataclass(frozen=True)
class Pick:
    """Fixture `name`: the `nth` event `event` (of tool `tool`, when given) of the session; `what` says it."""

    name: str
    event: str
    tool: str | None
    what: str
    nth: int = 0
    subagent: bool | None = None  # True: only events carrying agent_id; False: only without


def _claude(tools: Tools, box: Sandbox) -> tuple[list[Step | Callable[[Conversation], Step]], list[Pick]]:
    locked = box.repo / "src" / "locked.py"

    def lock_then_edit(conv: Conversation) -> Step:
        subprocess.run(["chattr", "+i", str(locked)], check=False, capture_output=True)
        return tools.edit("src/locked.py", "return 1", "return 2")

    steps: list[Step | Callable[[Conversation], Step]] = [
        tools.read("src/app.py"),
        tools.edit("src/app.py", "return 1", "return 2"),
        tools.write("src/app.py", "def main():\n    return 4\n"),
        tools.read("src/app.py", offset=2, limit=1),
        Use("Agent", {"description": "change main", "prompt": SUBAGENT_PROMPT, "subagent_type": "general-purpose"}),
        tools.read("src/locked.py"),
        lock_then_edit,
        tools.shell("git stash"),  # last: the guard lets a session stash its own writes
    ]
    picks = [
        Pick("post_read", "PostToolUse", "Read", "Read of the whole src/app.py"),
        Pick("pre_edit", "PreToolUse", "Edit", "Edit of src/app.py (return 1 -> return 2)", subagent=False),
        Pick("post_edit", "PostToolUse", "Edit", "the same Edit, after", subagent=False),
        Pick("pre_write", "PreToolUse", "Write", "Write of the whole src/app.py, after the Edit"),
        Pick("post_read_partial", "PostToolUse", "Read", "Read of src/app.py with offset 2, limit 1", nth=1),
        Pick("pre_bash", "PreToolUse", "Bash", "Bash `git stash`, the last call"),
        Pick("pre_edit_subagent", "PreToolUse", "Edit", "an Edit made by a subagent (the Agent tool)", subagent=True),
        Pick(
            "post_edit_failure",
            "PostToolUseFailure",
            "Edit",
            "an Edit whose write failed (src/locked.py made immutable, chattr +i, after it was read): the "
            "event of a tool that fails while running; its own validation failures fire no hook",
        ),
        Pick("user_prompt_submit", "UserPromptSubmit", None, "the prompt that starts the turn"),
        Pick("subagent_stop", "SubagentStop", None, "the end of the subagent's turn (the Agent tool)"),
        Pick("stop", "Stop", None, "the end of the turn"),
        Pick("session_end", "SessionEnd", None, "the end of the session"),
    ]
    return steps, picks


def _codex(tools: Tools, box: Sandbox) -> tuple[list[Step | Callable[[Conversation], Step]], list[Pick]]:
    update = (
        "*** Begin Patch\n*** Update File: src/app.py\n@@ def main():\n-    return 1\n+    return 2\n*** End Patch\n"
    )
    two = "*** Begin Patch\n*** Update File: src/app.py\n@@\n-    return 2\n+    return 3\n"
    two += "*** Update File: src/other.py\n@@\n-x = 1\n+x = 2\n*** End Patch\n"
    steps: list[Step | Callable[[Conversation], Step]] = [
        tools.shell("sed -n '1,200p' src/app.py"),
        Use("apply_patch", update),
        tools.write("src/new.py", "VALUE = 1\n"),
        Use("apply_patch", two),
        tools.shell("git stash"),
    ]
    picks = [
        Pick("post_bash_read", "PostToolUse", "Bash", "exec_command `sed -n '1,200p' src/app.py`, after"),
        Pick("pre_bash", "PreToolUse", "Bash", "exec_command `git stash`, the last call", nth=1),
        Pick("pre_apply_patch", "PreToolUse", "apply_patch", "apply_patch updating src/app.py"),
        Pick("post_apply_patch", "PostToolUse", "apply_patch", "the same patch, after"),
        Pick("pre_apply_patch_add", "PreToolUse", "apply_patch", "apply_patch adding src/new.py", nth=1),
        Pick("pre_apply_patch_two_files", "PreToolUse", "apply_patch", "apply_patch of two files (denied)", nth=2),
        Pick("user_prompt_submit", "UserPromptSubmit", None, "the prompt that starts the turn"),
        Pick("stop", "Stop", None, "the end of the turn"),
        Pick("session_end", "SessionEnd", None, "the end of the session"),
    ]
    return steps, picks


def _gemini(tools: Tools, box: Sandbox) -> tuple[list[Step | Callable[[Conversation], Step]], list[Pick]]:
    steps: list[Step | Callable[[Conversation], Step]] = [
        tools.read("src/app.py"),
        tools.read("src/app.py", offset=2, limit=1),
        tools.edit("src/app.py", "    return 1", "    return 2"),
        tools.edit("src/app.py", "a line that is not in the file", "    return 9"),
        tools.write("src/app.py", "def main():\n    return 3\n"),
        tools.shell("git stash"),
    ]
    picks = [
        Pick("after_read_file", "AfterTool", "read_file", "read_file of the whole src/app.py"),
        Pick("after_read_file_partial", "AfterTool", "read_file", "read_file of src/app.py, line 2 only", nth=1),
        Pick("before_replace", "BeforeTool", "replace", "replace in src/app.py (return 1 -> return 2)"),
        Pick("after_replace", "AfterTool", "replace", "the same replace, after"),
        Pick("after_replace_error", "AfterTool", "replace", "a replace whose old_string is not in the file", nth=1),
        Pick("before_write_file", "BeforeTool", "write_file", "write_file of the whole src/app.py, after the replace"),
        Pick("before_shell", "BeforeTool", "run_shell_command", "run_shell_command `git stash`, the last call"),
        Pick("before_agent", "BeforeAgent", None, "the prompt that starts the turn"),
        Pick("after_agent", "AfterAgent", None, "the end of the turn"),
        Pick("session_end", "SessionEnd", None, "the end of the session"),
    ]
    return steps, picks


SCENARIOS = {"claude-code": _claude, "codex": _codex, "gemini": _gemini}


def _policy(steps: list[Step | Callable[[Conversation], Step]], tools: Tools) -> Callable[[Conversation], Step]:
    sub = [tools.read("src/app.py"), tools.edit("src/app.py", "return 4", "return 5")]

    def policy(conv: Conversation) -> Step:
        script = sub if conv.prompt.startswith("SUBAGENT") else steps
        n = len(conv.calls)
        if n >= len(script):
            return Say("done")
        step = script[n]
        return step(conv) if callable(step) else step

    return policy


def pick(run: AgentRun, p: Pick) -> dict[str, Any] | None:
    found = [e for e in run.events(p.event, p.tool) if p.subagent is None or bool(e.get("agent_id")) == p.subagent]
    return found[p.nth] if len(found) > p.nth else None


def normalized(event: dict[str, Any], box: Sandbox) -> dict[str, Any]:
    """The event with the scratch repository as `__ROOT__`, a scratch home as /home/user."""
    text = json.dumps(event)
    text = re.sub(re.escape(str(box.base / "homes")) + r"/\d+", "/home/user", text)
    text = text.replace(re.sub(r"[^A-Za-z0-9]", "-", str(box.repo)), "-home-user-repo")  # Claude Code's project
    text = text.replace(str(box.repo), "__ROOT__").replace(str(box.base), "/tmp/scratch")
    data: dict[str, Any] = json.loads(text)
    return data


def capture(agent: str, out: Path) -> list[str]:
    """Run the agent's scenario and write its fixtures into `out`; returns what it reports."""
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ec-capture-") as tmp:
        files = {"src/app.py": APP, "src/locked.py": APP, "src/other.py": "x = 1\n"}
        box = Sandbox.create(agent, Path(tmp) / "box", files)
        try:
            tools = Tools(agent, box.repo)
            steps, picks = SCENARIOS[agent](tools, box)
            run = run_agent(box, _policy(steps, tools), timeout=300)
        finally:
            subprocess.run(["chattr", "-i", str(box.repo / "src" / "locked.py")], check=False, capture_output=True)
            box.close()
        if run.returncode != 0:
            lines.append(f"{agent}: exited {run.returncode}: {run.stderr[-500:]}")
        written = []
        for p in picks:
            event = pick(run, p)
            if event is None:
                lines.append(
                    f"{agent}: no {p.event} {p.tool or ''} event (#{p.nth}) was sent: {p.name}.json not written"
                )
                continue
            (out / f"{p.name}.json").write_text(json.dumps(normalized(event, box), indent=2) + "\n")
            written.append(p)
        others = sorted(f.name for f in out.glob("*.json") if f.stem not in {p.name for p in picks})
        if others:
            lines.append(f"{agent}: not captured (no scenario sends them): {', '.join(others)}")
        _sources(agent, out, written)
        lines.append(f"{agent}: wrote {len(written)} fixtures into {out}")
    return lines


def _sources(agent: str, out: Path, written: list[Pick]) -> None:
    pin = PINNED[agent]
    head = (
        f"Each file is one hook event as {pin.spec} sent it (stdin of a command hook), captured by "
        f"`python3 scripts/capture_hook_payloads.py {agent}` on {datetime.date.today().isoformat()}: the real "
        "CLI, driven by the scripted model of worker/agents/ in a scratch repository with the hooks "
        "`edit-coordinator init` writes. `__ROOT__` stands for the repository root (the tests put theirs in its "
        "place), `/home/user` for the scratch home; session ids and times are as the agent made them, tool call "
        "ids (`call_N`) are the scripted model's, passed on by the agent."
    )
    tail = (
        "Run the script again after upgrading the agent (worker/agents/versions.py) and read the diff: a field "
        "that moved or went is what the adapter has to follow."
    )
    rows = [f"- `{p.name}.json`: {p.what} ({p.event}{', ' + p.tool if p.tool else ''})." for p in written]
    wrap = textwrap.TextWrapper(width=110, subsequent_indent="  ")
    body = "\n".join(wrap.fill(r) for r in rows)
    text = f"# {agent} hook payloads, captured\n\n{textwrap.fill(head, 110)}\n\n{body}\n\n{textwrap.fill(tail, 110)}\n"
    (out / "SOURCES.md").write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("agents", nargs="*", metavar="AGENT", help=f"of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "hooks", help="the fixtures folder")
    args = parser.parse_args(argv)
    unknown = [a for a in args.agents if a not in SCENARIOS]
    if unknown:
        parser.error(f"no scenario for {', '.join(unknown)}: choose among {', '.join(SCENARIOS)}")
    for agent in args.agents or list(SCENARIOS):
        folder = args.out / agent
        folder.mkdir(parents=True, exist_ok=True)
        for line in capture(agent, folder):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
