"""Figures measured with the real agent CLIs (worker/agents/): what a hook event costs in the real Claude Code,
and what a race of sessions loses with and without the hooks.

    python3 scripts/real_agent_bench.py hook-cost [--python PY] [--before PY] [--edits N] [--rounds R] [--json OUT]
    python3 scripts/real_agent_bench.py race [AGENT ...] [--sessions 4] [--rounds 5] [--json OUT]
    python3 scripts/real_agent_bench.py lines [AGENT ...] [--sessions 3] [--rounds 4] [--json OUT]

hook-cost: one repository, one Claude Code session per round and column, each a Read then N Edits of one line
(every Edit is 2 hook events: PreToolUse and PostToolUse). Four columns, their rounds interleaved:
- ``noop``: the settings `init` writes with every handler replaced by the command `true` (the same events and
  matchers, a process per event that does nothing);
- ``noop-http``: the http handlers post to a server of the script's that answers 200 with nothing (Claude
  Code's own cost of an http hook), the command handlers run `true`;
- ``command``: the settings of `init --hook-type command` (a process per event: the fast client to the
  repository's hook service);
- ``hooked``: the settings as `init` writes them (Claude Code's http hooks into the hook service).
A tool call's time is what the model server sees: from the request that asked for the Edit to the request
that carries its result (the agent's own work, its hooks, and its next request). Printed per column: p50 and
p95 per Edit; then each hooked column's cost per event, (column - noop) / 2, at p50 and at p95. The first session of
each column is a warm-up and not counted (the first hook event of a repository starts its hook service).
`--python` is the interpreter of the installation whose `init` writes the hooks (another worktree's venv,
say): the same measure for any checkout. `--before PY` adds a fifth column, ``before``: the hooks the
installation of PY writes with its default `init` (an earlier checkout's venv), interleaved with the others,
so that before and after are measured side by side in one run. Wall time on a shared machine is noisy;
compare runs made side by side.

race: N sessions of each agent increment one shared line (`total = N`) at once, with the hooks and without;
printed per agent: increments reported done, what the counter gained, lost updates.

lines: N hooked sessions of each agent each increment a line of their own in one shared file at once
(worker.agents.race.lines_race), under policy "strict" and then "rebase" (the project config's `policy`);
printed per agent and policy: edits landed, write calls refused (and how many of those the agent refused
itself), refusals per landed edit, lost updates.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from coordinator_bench.harness import empty_service, ms  # noqa: E402
from worker.agents.modelserver import Use  # noqa: E402
from worker.agents.race import LINES_FILE, RACE_FILE, RACE_START, lines_race, lines_start, race  # noqa: E402
from worker.agents.runner import AgentRun, Sandbox, coordinator_cli, run_agent  # noqa: E402
from worker.agents.scripts import Tools, sequence  # noqa: E402

# The columns, side by side in one run: no-op hooks; the command hooks (`init --hook-type command`: a process
# per event, the fast client to the hook service); the hooks `init` writes by default (Claude Code's http
# hooks into the hook service, SessionStart and UserPromptSubmit as command hooks).
COLUMNS = ("noop", "noop-http", "command", "hooked")
INIT_ARGS = {"noop": (), "noop-http": (), "command": ("--hook-type", "command"), "hooked": ()}
EVENTS_PER_EDIT = 2  # PreToolUse and PostToolUse


def noop_settings(settings: Path) -> None:
    """Every handler of the hooks file (command or http) becomes the command `true`: the same events and
    matchers, each a process that does nothing (the no-op hook the cost is measured against)."""
    data = json.loads(settings.read_text())
    for groups in data.get("hooks", {}).values():
        for group in groups:
            handlers = group.get("hooks", [])
            for i, handler in enumerate(handlers):
                timeout = {"timeout": handler["timeout"]} if "timeout" in handler else {}
                handlers[i] = {"type": "command", "command": "true", **timeout}
    settings.write_text(json.dumps(data, indent=2) + "\n")


def noop_http_settings(settings: Path, url: str) -> None:
    """Every http handler of the hooks file posts to `url` instead (a server that answers 200 with nothing:
    Claude Code's own cost of an http hook), every command handler runs `true`."""
    data = json.loads(settings.read_text())
    for groups in data.get("hooks", {}).values():
        for group in groups:
            handlers = group.get("hooks", [])
            for i, handler in enumerate(handlers):
                if handler.get("type") == "http":
                    handlers[i] = {"type": "http", "url": url, "timeout": handler.get("timeout", 60)}
                else:
                    handlers[i] = {"type": "command", "command": "true", "timeout": handler.get("timeout", 60)}
    settings.write_text(json.dumps(data, indent=2) + "\n")


def edit_times(run: AgentRun) -> list[float]:
    """Seconds from each request that asked for an Edit to the next request (which carries its result)."""
    main = [r for r in run.server.recorded() if r.main]
    out = []
    for asked, answered in itertools.pairwise(main):
        step = asked.answer
        if isinstance(step, Use) and step.name == "Edit":
            out.append(answered.at - asked.at)
    return out


def _session(box: Sandbox, edits: int) -> list[float]:
    tools = Tools("claude-code", box.repo)
    steps = [tools.read("a.py")]
    for i in range(edits):
        steps.append(tools.edit("a.py", f"value = {i % 2}", f"value = {(i + 1) % 2}"))
    run = run_agent(box, sequence(steps), timeout=300)
    if run.returncode != 0:
        raise RuntimeError(f"claude exited {run.returncode}: {run.stderr[-1500:]}")
    times = edit_times(run)
    if len(times) != edits:
        raise RuntimeError(f"{len(times)} of {edits} edits were answered: {run.stderr[-1500:]}")
    if (box.repo / "a.py").read_text() != f"value = {edits % 2}\n":
        refused = [c.output for c in run.server.conversations()[-1].calls if not tools.succeeded(c)]
        history = coordinator_cli("history", "--root", str(box.repo), "a.py", "--limit", "12").stdout
        raise RuntimeError(f"the edits are not all in the file ({box.repo}): {refused[:3]}\n{history}")
    return times


def summarize(times: dict[str, list[float]]) -> dict[str, Any]:
    """p50/p95 per Edit call of each column (ms), and the hooks' cost per event over the no-op hooks."""
    out: dict[str, Any] = {}
    for col, values in times.items():
        out[col] = {
            "calls": len(values),
            "p50_ms": ms(values, 50),
            "p95_ms": ms(values, 95),
        }
    for col in ("command", "hooked", "before"):
        if "noop" not in out or col not in out:
            continue
        prefix = "added_per_event" if col == "hooked" else f"{col}_added_per_event"
        for q in ("p50", "p95"):
            out[f"{prefix}_{q}_ms"] = (out[col][f"{q}_ms"] - out["noop"][f"{q}_ms"]) / EVENTS_PER_EDIT
            if col == "hooked" and "noop-http" in out:  # over a no-op hook of its own type
                out[f"over_noop_http_{q}_ms"] = (out[col][f"{q}_ms"] - out["noop-http"][f"{q}_ms"]) / EVENTS_PER_EDIT
    return out


def hook_cost(python: str | None, edits: int, rounds: int, before: str | None = None) -> dict[str, Any]:
    columns = (*COLUMNS, "before") if before else COLUMNS
    times: dict[str, list[float]] = {col: [] for col in columns}
    with tempfile.TemporaryDirectory(prefix="ec-hookcost-") as tmp, empty_service(Path(tmp), b"") as (nothing, _):
        boxes = {}
        try:
            for col in columns:
                box = Sandbox.create(
                    "claude-code",
                    Path(tmp) / col,
                    {"a.py": "value = 0\n"},
                    capture=False,
                    python=before if col == "before" else python,
                    init_args=INIT_ARGS.get(col, ()),
                )
                if col == "noop":
                    noop_settings(box.repo / box.kind.settings)
                elif col == "noop-http":
                    noop_http_settings(box.repo / box.kind.settings, nothing + "/")
                boxes[col] = box
            for col in columns:  # warm-up: the hook service starts, the binary is in the page cache
                (boxes[col].repo / "a.py").write_text("value = 0\n")
                _session(boxes[col], 2)
            for r in range(rounds):
                for col in columns if r % 2 == 0 else reversed(columns):
                    (boxes[col].repo / "a.py").write_text("value = 0\n")
                    times[col].extend(_session(boxes[col], edits))
        finally:
            for box in boxes.values():
                box.close()
    load = os.getloadavg()[0]
    return {"edits": edits, "rounds": rounds, "python": python or sys.executable, "before": before, "load1": load,
            **summarize(times)}  # fmt: skip


def races(agents: list[str], sessions: int, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ec-race-") as tmp:
        for agent in agents:
            for hooked in (True, False):
                name = f"{agent}-{'hooked' if hooked else 'unhooked'}"
                box = Sandbox.create(agent, Path(tmp) / name, {RACE_FILE: RACE_START}, hooked=hooked, capture=False)
                try:
                    result = race(box, sessions=sessions, rounds=rounds)
                finally:
                    box.close()
                out[name] = {"sessions": sessions, "rounds": rounds, "reported": result.reported,
                             "landed": result.landed, "lost": result.lost}  # fmt: skip
    return out


def lines(agents: list[str], sessions: int, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ec-lines-") as tmp:
        for agent in agents:
            for policy in ("strict", "rebase"):
                name = f"{agent}-{policy}"
                files = {LINES_FILE: lines_start(sessions), ".edit-coordinator.toml": f'policy = "{policy}"\n'}
                box = Sandbox.create(agent, Path(tmp) / name, files, capture=False)
                try:
                    result = lines_race(box, sessions=sessions, rounds=rounds)
                finally:
                    box.close()
                out[name] = {"sessions": sessions, "rounds": rounds, "landed": result.landed,
                             "reported": result.reported, "refused": result.refused,
                             "refused_by_agent": result.refused_by_agent, "lost": result.lost,
                             "refusals_per_landed": round(result.refusals_per_landed, 2)}  # fmt: skip
                if result.lost:  # what to look at: the file, and what the history recorded
                    history = coordinator_cli("history", "--root", str(box.repo), LINES_FILE, "--json", check=False)
                    calls = [(c.name, str(c.arguments)[:200], (c.output or "")[:300])
                             for r in result.runs for c in r.server.conversations()[-1].calls]  # fmt: skip
                    out[name].update(file=result.text, history=history.stdout[-20000:], calls=calls)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    cost = sub.add_parser("hook-cost", help="per hook event over a no-op hook, in the real Claude Code")
    cost.add_argument("--python", default=None, help="the interpreter of the installation whose init writes the hooks")
    cost.add_argument("--before", default=None, help="a fifth column: the hooks this interpreter's installation writes")
    cost.add_argument("--edits", type=int, default=20, help="Edits per session")
    cost.add_argument("--rounds", type=int, default=4, help="sessions per column (after one warm-up each)")
    cost.add_argument("--json", type=Path, default=None, help="also write the figures here")
    rc = sub.add_parser("race", help="lost updates of N racing sessions, hooked and unhooked")
    rc.add_argument("agents", nargs="*", default=["claude-code", "codex", "gemini"])
    rc.add_argument("--sessions", type=int, default=4)
    rc.add_argument("--rounds", type=int, default=5, help="increments each session is asked for")
    rc.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ln = sub.add_parser("lines", help="refusals per landed edit of N sessions on different lines, strict and rebase")
    ln.add_argument("agents", nargs="*", default=["claude-code", "codex", "gemini"])
    ln.add_argument("--sessions", type=int, default=3)
    ln.add_argument("--rounds", type=int, default=4, help="increments each session is asked for")
    ln.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.what == "hook-cost":
        figures = hook_cost(args.python, args.edits, args.rounds, args.before)
        for col in (*COLUMNS, "before") if args.before else COLUMNS:
            f = figures[col]
            print(f"{col:>9}: {f['calls']} Edit calls, p50 {f['p50_ms']:.1f} ms, p95 {f['p95_ms']:.1f} ms")
        print(
            f"command hooks over no-op hooks, per event: p50 {figures['command_added_per_event_p50_ms']:+.1f} ms, "
            f"p95 {figures['command_added_per_event_p95_ms']:+.1f} ms"
        )
        print(
            f"the hooks init writes over no-op hooks, per event: p50 {figures['added_per_event_p50_ms']:+.1f} ms, "
            f"p95 {figures['added_per_event_p95_ms']:+.1f} ms ({figures['python']}; load {figures['load1']:.1f})"
        )
        print(
            f"the hooks init writes over no-op http hooks, per event: p50 {figures['over_noop_http_p50_ms']:+.1f} "
            f"ms, p95 {figures['over_noop_http_p95_ms']:+.1f} ms"
        )
        if args.before:
            print(
                f"before ({args.before}) over no-op hooks, per event: p50 "
                f"{figures['before_added_per_event_p50_ms']:+.1f} ms, "
                f"p95 {figures['before_added_per_event_p95_ms']:+.1f} ms"
            )
    elif args.what == "lines":
        figures = lines(args.agents, args.sessions, args.rounds)
        for name, f in figures.items():
            print(f"{name:>20}: {f['landed']} edits landed, {f['refused']} refused ({f['refused_by_agent']} by the "
                  f"agent itself), {f['refusals_per_landed']} refusals per landed edit, {f['lost']} lost")  # fmt: skip
    else:
        figures = races(args.agents, args.sessions, args.rounds)
        for name, f in figures.items():
            print(f"{name:>22}: {f['reported']} increments reported, counter +{f['landed']}, {f['lost']} lost")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
