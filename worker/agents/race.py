"""N sessions of one agent increment one shared line at once (`total = N`), each by its own read-modify-write
through the agent's own tools; an increment the agent reported done that is not in the file is lost.
`lines_race`: N sessions each increment a line of their own in one shared file (`line0 = N`, `line1 = N`,
...): no two edits conflict, so every refusal is one a merge rule could have spared (policy "rebase")."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from worker.agents.modelserver import Policy
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
    done = _run_all(box, [incrementer(tools, RACE_FILE, rounds, rounds * 6)] * sessions, timeout)
    reported = sum(increments_done(tools, r.server.conversations()[-1]) for r in done)
    found = COUNTER.search((box.repo / RACE_FILE).read_text())
    landed = int(found.group(1)) if found else 0
    return RaceResult(box.agent, box.hooked, sessions, rounds, reported, landed, done)


LINES_FILE = "lines.txt"


def lines_start(sessions: int) -> str:
    """The shared file of `lines_race`: one counter line per session, each at 0."""
    return "".join(f"line{i} = 0\n" for i in range(sessions))


@dataclass(frozen=True)
class LinesResult:
    agent: str
    sessions: int
    rounds: int
    reported: int  # increments the agents reported done
    landed: int  # what the file's counters gained, all lines together
    refused: int  # write calls that did not succeed (refused by a hook or by the agent itself, or failed)
    refused_by_agent: int  # of those, the agent's own refusals (Claude Code: "modified since read")
    runs: tuple[AgentRun, ...]
    text: str = ""  # the file at the end

    @property
    def lost(self) -> int:
        return self.reported - self.landed

    @property
    def refusals_per_landed(self) -> float:
        return self.refused / self.landed if self.landed else float("inf")


# The agents' own refusal of a write on a file changed since their read (Claude Code's Edit and Write).
_AGENT_OWN = re.compile(r"modified since read|unexpectedly modified")


def lines_race(box: Sandbox, sessions: int = 4, rounds: int = 5, timeout: float = 300.0) -> LinesResult:
    """`sessions` agents at once in the sandbox (made with {LINES_FILE: lines_start(sessions)}), session i
    incrementing `line{i}` `rounds` times (read, edit; after a refusal or failure, read again)."""
    tools = Tools(box.agent, box.repo)
    done = _run_all(box, [incrementer(tools, LINES_FILE, rounds, rounds * 6, f"line{i}") for i in range(sessions)],
                    timeout)  # fmt: skip
    writes = [c for r in done for c in r.server.conversations()[-1].calls if tools.is_write(c)]
    failed = [c for c in writes if not tools.succeeded(c)]
    text = (box.repo / LINES_FILE).read_text()
    landed = sum(int(n) for n in re.findall(r"^line\d+ = (\d+)$", text, re.MULTILINE))
    own = sum(1 for c in failed if _AGENT_OWN.search(c.output or ""))
    return LinesResult(box.agent, sessions, rounds, len(writes) - len(failed), landed, len(failed), own, done, text)


def _run_all(box: Sandbox, policies: list[Policy], timeout: float) -> tuple[AgentRun, ...]:
    """One agent run per policy, all at once; every run must have reached the model."""
    runs: list[AgentRun | None] = [None] * len(policies)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            runs[i] = run_agent(box, policies[i], timeout=timeout)
        except BaseException as exc:  # re-raised below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(policies))]
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
    return done
