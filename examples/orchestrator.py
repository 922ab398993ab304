"""A small orchestration platform: 16 scripted agents on one event loop editing one repository.

Each "agent" stands in for a model conversation. It replays tool calls as a model would emit them (name
and JSON arguments, the tool list from `tools.definitions`), sees exactly the text `tools.adispatch`
returns, and behaves as a model told the rules does: when an edit is refused as stale or not read, it
reads the file again and redoes its change on what it now sees. Agents share four files (each increments
its own counter line), so refusals happen; at the end every counter must equal the number of rounds
(nothing lost), which the script checks.

    python examples/orchestrator.py                 # strict policy: stale refusals, then recoveries
    python examples/orchestrator.py --policy rebase # edits of other lines are carried over instead

No model and no Redis to install: the repository is a scratch folder and the embedded Redis is used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

from coordinator import AsyncClient, tools
from coordinator.state.embedded import stop_embedded_redis

AGENTS = 16
FILES = 4
COUNTER = re.compile(r"^\s*\d+\t(agent-\d+) = (\d+)$", re.MULTILINE)


class Agent:
    """One scripted conversation: its session, its file, what it saw."""

    def __init__(self, client: AsyncClient, index: int, rounds: int, verbose: bool) -> None:
        self.name = f"agent-{index:02d}"
        self.file = f"counters-{index % FILES}.txt"
        self.session = client.session(self.name)
        self.rounds = rounds
        self.verbose = verbose
        self.refusals: Counter[str] = Counter()
        self.calls = 0
        self.rng = random.Random(index)

    async def call(self, name: str, arguments: dict[str, object]) -> tools.ToolResult:
        """A tool call as a model API hands it over: the arguments arrive as JSON text."""
        self.calls += 1
        result = await tools.adispatch(self.session, name, json.dumps(arguments))
        if self.verbose:
            first = result.text.splitlines()[0] if result.text else ""
            shown = first if len(first) <= 110 else first[:107] + "..."
            print(f"{self.name} {name}({arguments.get('file_path')}) -> {shown}")
        if result.is_error and result.code:
            self.refusals[result.code] += 1
        return result

    async def run(self) -> None:
        seen = await self.call("read_file", {"file_path": self.file})
        done = 0
        while done < self.rounds:
            value = self.my_value(seen.text)
            await asyncio.sleep(self.rng.uniform(0.0, 0.02))  # the model thinks
            line = f"{self.name} = {value}"
            edit = {"file_path": self.file, "old_string": line, "new_string": f"{self.name} = {value + 1}"}
            result = await self.call("edit_file", edit)
            if result.is_error:
                if self.verbose:
                    print(f"{self.name} re-reads {self.file} after [{result.code}] and redoes its change")
                seen = await self.call("read_file", {"file_path": self.file})
                continue
            done += 1
            seen = await self.call("read_file", {"file_path": self.file})  # look at the file again

    def my_value(self, text: str) -> int:
        for who, value in COUNTER.findall(text):
            if who == self.name:
                return int(value)
        raise SystemExit(f"{self.name}: its line is missing from what it read:\n{text}")


def make_repository(root: Path) -> None:
    for f in range(FILES):
        lines = [f"agent-{i:02d} = 0\n" for i in range(AGENTS) if i % FILES == f]
        (root / f"counters-{f}.txt").write_text("".join(lines))


def lost_updates(root: Path, rounds: int) -> int:
    """How many acknowledged increments are missing from the files (must be 0)."""
    lost = 0
    for f in range(FILES):
        text = (root / f"counters-{f}.txt").read_text()
        for i in range(AGENTS):
            if i % FILES == f:
                match = re.search(rf"^agent-{i:02d} = (\d+)$", text, re.MULTILINE)
                lost += rounds - (int(match.group(1)) if match else 0)
    return lost


async def orchestrate(root: Path, rounds: int, policy: str, verbose: bool) -> int:
    definitions = tools.definitions("anthropic")  # what each conversation would be given
    print(f"{AGENTS} agents, {len(definitions)} tools each ({', '.join(d['name'] for d in definitions)})")
    async with AsyncClient.local(str(root), durability="none", policy=policy, max_workers=8) as client:
        agents = [Agent(client, i, rounds, verbose) for i in range(AGENTS)]
        await asyncio.gather(*(a.run() for a in agents))
    refusals = sum((a.refusals for a in agents), Counter())
    lost = lost_updates(root, rounds)
    by_code = ", ".join(f"{code} {n}" for code, n in refusals.most_common()) or "none"
    print(
        f"\n{AGENTS * rounds} edits acknowledged in {sum(a.calls for a in agents)} tool calls; "
        f"refusals (each followed by a re-read and a redone change): {by_code}; lost {lost}"
    )
    return 1 if lost else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="increments per agent (default: 3)")
    parser.add_argument("--policy", choices=("strict", "rebase"), default="strict", help="(default: strict)")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="orchestrator-") as tmp:
        root = Path(tmp)
        make_repository(root)
        try:
            return asyncio.run(orchestrate(root, args.rounds, args.policy, not args.quiet))
        finally:
            stop_embedded_redis(root / ".edit-coordinator")


if __name__ == "__main__":
    sys.exit(main())
