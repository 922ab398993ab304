"""What an Edit's PreToolUse costs, before and after write tickets stopped waiting out the lease snapshot.

    python3 scripts/ticket_latency.py [--before REV] [--events 50] [--json OUT]

Two hook services side by side, each `serve --workers 1 --durability none --watch` (as the hook service
runs, on TCP) on a repository of its own (each with its embedded Redis): `before` runs the package as it was
at git revision REV (a temporary worktree of it, run from there), `after` runs this checkout. A third
column, `noop`, is an endpoint that reads the body and answers `{}` (the floor of an HTTP hook). Each event is one
guarded Edit as Claude Code makes it (tests/data/hooks/claude-code/: PostToolUse of a Read of the file, the
PreToolUse of an Edit of it, the edit itself, its PostToolUse), a new connection per POST as a hook client
opens one; only the PreToolUse is timed. The columns take turns event by event (the order rotating), so
that load on the machine falls on all of them alike. Printed: p50 and p95 of the PreToolUse per column.
Every edit is checked to be in its file at the end. Everything is made in a scratch folder that is removed
at the end; the services and the embedded Redis servers are stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from pathlib import Path

from coordinator_bench.harness import Scratch, empty_service, ms, revision_tree, scratch
from coordinator_bench.hookcycle import Cycle, Send, conclude, http_sender
from coordinator_bench.httpserver import HttpService
from coordinator_bench.measure import REPO

# The last revision whose ticket grant waited `LEASE_SNAPSHOT_S` (0.2 s) before it returned.
DEFAULT_BEFORE = "c86ca67"


def _imports_from(source: Path) -> None:
    """Refuse a tree whose `coordinator` PYTHONPATH does not decide (an installed copy would win)."""
    found = subprocess.run(
        [sys.executable, "-c", "import coordinator; print(coordinator.__file__)"],
        env={**os.environ, "PYTHONPATH": str(source)}, cwd=source, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not found.startswith(str(source)):
        raise SystemExit(f"PYTHONPATH={source} does not decide which coordinator is imported ({found})")


def measure(sc: Scratch, before_tree: Path, events: int) -> dict[str, dict[str, float]]:
    sources = {"before": before_tree, "after": REPO}
    with contextlib.ExitStack() as stack:
        sends: dict[str, Send] = {}
        roots: dict[str, Path] = {}
        for name, source in sources.items():
            _imports_from(source)
            roots[name] = sc.repo(f"{name}/repo", git=True)
            service = HttpService(
                roots[name], None, sc.work / f"{name}-service", workers=1, extra_args=("--watch",), pythonpath=source
            )
            stack.enter_context(service)
            sends[name] = http_sender(service.url, "/v1/hooks/claude-code", service.token)
        noop_url, _ = stack.enter_context(empty_service(sc.work))
        sends["noop"] = http_sender(noop_url, "/hooks", "")
        roots["noop"] = sc.repo("noop/repo")
        cycles = {name: Cycle(roots[name], f"{name}.py", f"s_{name}") for name in sends}
        for name, send in sends.items():  # warm-up: connections, the embedded Redis, caches
            cycles[name].run(send, [])
        timings: dict[str, list[list[float]]] = {name: [] for name in sends}
        names = list(sends)
        for i in range(events):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                cycles[name].run(sends[name], timings[name])
        for cycle in cycles.values():
            cycle.check()
    out: dict[str, dict[str, float]] = {}
    for name, cycles_ in timings.items():
        pre = [times[1] for times in cycles_]  # (post_read, pre_edit, post_edit)
        out[name] = {"events": len(pre), "p50_ms": ms(pre, 50), "p95_ms": ms(pre, 95)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", default=DEFAULT_BEFORE, help="the git revision of the `before` column")
    p.add_argument("--events", type=int, default=50, help="timed PreToolUse events per column")
    p.add_argument("--json", default=None, help="write the figures here too")
    args = p.parse_args(argv)
    with scratch("ticket-latency-") as sc, revision_tree(args.before) as before_tree:
        figures = measure(sc, before_tree, args.events)
    for name, f in figures.items():
        print(f"{name:7} {int(f['events']):4} Edit PreToolUse  p50 {f['p50_ms']:8.2f} ms  p95 {f['p95_ms']:8.2f} ms")
    conclude(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
