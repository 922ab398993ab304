"""N sessions of one agent increment one shared line at once (`total = N`), each by its own read-modify-write
through the agent's own tools; an increment the agent reported done that is not in the file is lost."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from worker.agents.runner import AgentRun, Sandbox, run_agent
from worker.agents.scripts import COUNTER, Tools, incrementer, increments_done

RACE_FILE = "counter.txt"
RACE_START = "total = 0\n"


@dataclass(frozen=True)
class RaceResult:
    agent: str
    hooked: bool
    sessions: int
    rounds: int
    reported: int  # increments the agents reported done
    landed: int  # what the file's counter gained
    runs: tuple[AgentRun, ...]

    @property
    def lost(self) -> int:
        return self.reported - self.landed


def race(box: Sandbox, sessions: int = 4, rounds: int = 5, timeout: float = 300.0) -> RaceResult:
    """Run `sessions` agents at once in the sandbox (made with {RACE_FILE: RACE_START}), each asked for
    `rounds` increments (after a refusal or failure it reads again, up to 6 calls per increment)."""
    tools = Tools(box.agent, box.repo)
    runs: list[AgentRun | None] = [None] * sessions
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            runs[i] = run_agent(box, incrementer(tools, RACE_FILE, rounds, rounds * 6), timeout=timeout)
        except BaseException as exc:  # re-raised below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    done = tuple(r for r in runs if r is not None)
    for r in done:
        if not r.server.conversations():
            raise RuntimeError(f"a {box.agent} session made no model request (exit {r.returncode}): {r.stderr[-2000:]}")
    reported = sum(increments_done(tools, r.server.conversations()[-1]) for r in done)
    found = COUNTER.search((box.repo / RACE_FILE).read_text())
    landed = int(found.group(1)) if found else 0
    return RaceResult(box.agent, box.hooked, sessions, rounds, reported, landed, done)
