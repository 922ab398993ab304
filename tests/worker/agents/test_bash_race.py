"""The shell channel with the real Claude Code (issue 46): sessions that read and write only through Bash,
`cat` then a here-document of the whole file, a `sed -i`, or a `python3 -` script that reads, increments
and writes the file, racing on one shared line. Run with `python3 -m pytest -m agents
tests/worker/agents -k bash` (docs/agents/real-agents.md)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest

from worker.agents.modelserver import Call, Conversation, Policy, Say, Step
from worker.agents.race import RACE_FILE, RACE_START
from worker.agents.runner import AgentRun, Sandbox, coordinator_cli, run_agent
from worker.agents.scripts import COUNTER, Tools

pytestmark = pytest.mark.agents

Make = Callable[..., Sandbox]
# How each variant writes `total = N+1`, N being what the model last saw with `cat`.
HEREDOC = "cat > {rel} <<'EOF'\ntotal = {n1}\nEOF"
SED = "sed -i 's/^total = {n}$/total = {n1}/' {rel}"
# A script that reads the file, increments what it finds and writes it back (the parser sees no target
# in a script; the names its string literals give are taken as files it may write).
PYTHON = (
    "python3 - <<'EOF'\nimport re\npath = '{rel}'\ntext = open(path).read()\n"
    "n = int(re.search(r'total = (\\d+)', text).group(1))\n"
    "open(path, 'w').write(f'total = {{n + 1}}\\n')\nprint(f'total = {{n + 1}}')\nEOF"
)
# A script that writes the value the model computed from its `cat` (a stale one overwrites a newer file).
PYTHON_SEEN = "python3 - <<'EOF'\nopen('{rel}', 'w').write('total = {n1}\\n')\nEOF"
VARIANTS = {"heredoc": HEREDOC, "sed": SED, "python": PYTHON, "python-seen": PYTHON_SEEN}


def _command(call: Call | None) -> str:
    args = call.arguments if call is not None else None
    return str(args.get("command", "")) if isinstance(args, dict) else ""


def _is_write(call: Call) -> bool:
    command = _command(call)
    return "<<'EOF'" in command or command.startswith("sed -i")


def _landed(tools: Tools, call: Call) -> bool:
    """Did the write call do its increment, as far as the model can tell? It succeeded, and nothing it was
    told says otherwise (a `sed` that matched nothing exits 0: only the hook's note says so)."""
    told = (call.output or "") + call.context
    return tools.succeeded(call) and "unchanged" not in told and "ticket had ended" not in told


def _bash_incrementer(tools: Tools, rel: str, write: str, rounds: int, max_calls: int) -> Policy:
    """`cat` the file, then write `total = N+1` with the variant's command; after a denial (the Bash call
    comes back as an error) or a note that it changed nothing, `cat` again. An increment is done when its
    write call succeeded and was not said to have changed nothing."""

    def policy(conv: Conversation) -> Step:
        done = sum(1 for c in conv.calls if _is_write(c) and _landed(tools, c))
        if done >= rounds or len(conv.calls) >= max_calls:
            return Say(f"done: {done} increments")
        last = conv.last
        found = COUNTER.search(last.output or "") if last is not None and _command(last) == f"cat {rel}" else None
        if last is None or found is None or not tools.succeeded(last):
            return tools.shell(f"cat {rel}")
        n = int(found.group(1))
        return tools.shell(write.format(rel=rel, n=n, n1=n + 1))

    return policy


def _race(box: Sandbox, write: str, sessions: int, rounds: int) -> tuple[int, int, list[AgentRun]]:
    tools = Tools(box.agent, box.repo)
    runs: list[AgentRun | None] = [None] * sessions

    def one(i: int) -> None:
        runs[i] = run_agent(box, _bash_incrementer(tools, RACE_FILE, write, rounds, rounds * 8), timeout=300)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [r for r in runs if r is not None]
    reported = 0
    for r in done:
        convs = r.server.conversations()
        if convs:
            calls = convs[-1].calls
            reported += sum(1 for c in calls if _is_write(c) and _landed(tools, c))
    found = COUNTER.search((box.repo / RACE_FILE).read_text())
    return reported, int(found.group(1)) if found else 0, done


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("hooked", [True, False], ids=["hooked", "unhooked"])
def test_a_bash_only_race_of_four_claude_code_sessions(hooked: bool, variant: str, sandbox: Make) -> None:
    """Hooked: every increment reported done is in the file (a stale here-document overwrite is denied and
    retried after a new `cat`; a `sed -i` that matched nothing is said, and retried; a script's file is
    held by its ticket), and every Bash write is in the history with its session. Unhooked: the same race,
    for comparison (its losses are printed, not asserted: they depend on timing)."""
    box = sandbox("claude-code", {RACE_FILE: RACE_START}, hooked=hooked)
    reported, landed, runs = _race(box, VARIANTS[variant], sessions=4, rounds=3)
    for run in runs:
        assert not run.timed_out, run.stderr[-2000:]
    print(f"bash race {variant} ({'hooked' if hooked else 'unhooked'}): {reported} reported, {landed} landed")
    if not hooked:
        return
    assert reported > 0 and reported == landed
    history = json.loads(coordinator_cli("history", "--root", str(box.repo), RACE_FILE, "--json").stdout)["entries"]
    sessions = set().union(*(r.sessions for r in runs))
    # Every landed write is in the history, once, as its session's (a write in two steps, truncate then write,
    # was recorded half-way as an empty version, then its content as outside's, before the waiter's and the
    # watcher's looks judged an empty file as a write half-way).
    outside = [v for v in history if v["session"] not in sessions]
    print(f"  history: {len(history)} versions, {len(outside)} not a session's")
    assert len(history) == landed and not outside, json.dumps(history, indent=1)
