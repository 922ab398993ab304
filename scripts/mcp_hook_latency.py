"""Latency of Claude Code's mcp_tool hooks into the per-session MCP server, beside a no-op call of the same tool.

    python3 scripts/mcp_hook_latency.py [--cycles N] [--rounds R] [--json OUT]

One `edit-coordinator mcp --root R --hook-tool` process (the embedded Redis), driven by the MCP SDK's own
client over stdio, as Claude Code drives its MCP servers. Each call hands the `hook` tool the event's
fields as an mcp_tool hook substitutes them (the input `init claude-code --hook-type mcp_tool` writes).
Columns, interleaved in R rounds:

- ``mcp-noop``: the `hook` tool on an event the coordinator has nothing to do with (PostToolUse of Glob):
                the same round trip, thread hop, parse and answer, no engine call;
- ``mcp-hook``: one guarded Edit per cycle as hook_latency.py's cycles (PostToolUse Read, PreToolUse Edit,
                the edit, PostToolUse Edit), each event a `hook` call.

What Claude Code itself adds around the call (its own dispatch of the hook) is not in these figures:
both columns pay it alike. Printed: p50 / p99 per hook event, and mcp-hook's p50 over mcp-noop's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from coordinator_bench.harness import scratch
from coordinator_bench.hookcycle import Cycle, conclude, cycle_figures
from coordinator_bench.measure import REPO

NOOP_EVENT = {"session_id": "s_noop", "hook_event_name": "PostToolUse", "tool_name": "Glob", "cwd": "/"}


def substituted(raw: bytes) -> dict[str, str]:
    """The tool's input for one event, as the hook's `${path}` substitution of `init`'s input gives it."""
    from coordinator.agents.settings import mcp_tool_input

    event = json.loads(raw)

    def look(path: str) -> str:
        value: Any = event
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return "" if value is None else str(value)

    return {name: look(ref[2:-1]) for name, ref in mcp_tool_input().items()}


def measure(root: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    from anyio.from_thread import start_blocking_portal
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    if not args.installed:
        env["PYTHONPATH"] = str(REPO)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "coordinator.cli", "mcp", "--root", str(root), "--hook-tool", "--durability", "none"],
        env=env,
        cwd=str(root),
    )
    timings: dict[str, list[list[float]]] = {"mcp-noop": [], "mcp-hook": []}
    with (
        start_blocking_portal() as portal,
        open(root.parent / "mcp.log", "w") as errlog,
        portal.wrap_async_context_manager(stdio_client(params, errlog=errlog)) as (read, write),
        portal.wrap_async_context_manager(ClientSession(read, write)) as session,
    ):
        portal.call(session.initialize)

        def send(raw: bytes) -> dict[str, Any]:
            result = portal.call(session.call_tool, "hook", substituted(raw))
            text = getattr(result.content[0], "text", None)
            if result.is_error or not isinstance(text, str):
                raise SystemExit(f"the hook tool failed: {result.content}")
            return dict(json.loads(text))

        noop_raw = json.dumps(NOOP_EVENT).encode()
        cycle = Cycle(root, "mcp.py", "s_mcp")
        cycle.run(send, [])  # warm-up: the engine, Redis, the server's first calls
        for _ in range(args.rounds):
            for _ in range(args.cycles):
                times = []
                for _ in range(3):
                    start = time.perf_counter()
                    if send(noop_raw):
                        raise SystemExit("the no-op event was not allowed")
                    times.append(time.perf_counter() - start)
                timings["mcp-noop"].append(times)
            for _ in range(args.cycles):
                cycle.run(send, timings["mcp-hook"])
        cycle.check()
    out = {column: cycle_figures(cycles) for column, cycles in timings.items()}
    out["mcp-hook"]["added_event_p50_ms"] = out["mcp-hook"]["event_p50_ms"] - out["mcp-noop"]["event_p50_ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cycles", type=int, default=50, help="guarded Edit calls (and no-op triples) per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None, help="write the figures here too")
    p.add_argument("--installed", action="store_true", help="the package the interpreter finds, not this checkout's")
    args = p.parse_args(argv)
    with scratch("mcp-hook-latency-", git=True) as sc:
        figures = measure(sc.root, args)
    for column, f in figures.items():
        added = f" {f['added_event_p50_ms']:+.2f} ms p50 over mcp-noop" if "added_event_p50_ms" in f else ""
        print(f"{column:9} {int(f['events']):5} events  per event p50 {f['event_p50_ms']:7.2f} ms  p99 "
              f"{f['event_p99_ms']:7.2f} ms  per tool call p50 {f['call_p50_ms']:7.2f} ms{added}")  # fmt: skip
    conclude(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
