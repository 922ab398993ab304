"""Latency an agent's hooks add per tool call, each way of running them beside a no-op hook of its type.

    python3 scripts/hook_latency.py [--cycles N] [--command-cycles M] [--rounds R] [--json OUT]

One repository, one file, one Claude Code session: a cycle is one guarded Edit as Claude Code makes it,
three hook events (PostToolUse Read of the file, PreToolUse Edit, the edit itself, PostToolUse Edit), with
the example payloads of tests/data/hooks/claude-code/. Columns, interleaved in R rounds:

- ``http-noop``:    each event POSTed (a new connection each, as a hook client opens one) to an endpoint
                    that reads the body and answers ``{}`` (uvicorn, the service's server, one worker);
- ``http-hook``:    the same POSTs to ``serve``'s ``/v1/hooks/claude-code`` (``--workers 1``);
- ``command-empty``: a process per event, ``python -c pass``: the empty interpreter's start;
- ``command-noop``: a process per event, ``python -c`` reading the JSON on stdin (the same interpreter,
                    ``sys.executable``: a pyenv shim in front would add its own ~150 ms to both);
- ``command-fast``: the command ``init`` writes: ``python -I -S .../coordinator/cli/hookclient.py
                    claude-code --root R``, the event's bytes forwarded to the repository's hook service;
- ``command-hook``: ``python -m coordinator.cli hook claude-code --server URL --token T`` per event,
                    against the same ``serve``;
- ``command-service``: the same with no service named: the repository's own hook service on a unix
                    socket in its state folder (started by the first hook, during the warm-up);
- ``command-embedded``: no service named and EDIT_COORDINATOR_HOOK_SERVICE=0: a coordinator opened in the
                    hook's own process on the root found from the event's cwd (the embedded Redis running).

Printed per column: p50 / p99 per hook event and per tool call (the three events of a cycle), and p50
added over the no-op of its type (and, for the command columns, over the empty interpreter). With
``--installed`` the package is the one the interpreter finds by itself (a ``pip install .`` into a venv),
not this checkout's. Every cycle's edit is checked to be in the file at the end (a hook that
let a lost update through would show). Wall time on a shared 2-core machine is noisy; run it when idle.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from coordinator.disk.layout import STATE_DIR_NAME
from coordinator_bench.harness import Scratch, empty_service, ms, scratch
from coordinator_bench.hookcycle import Cycle, Send, command_sender, conclude, cycle_figures, http_sender
from coordinator_bench.httpserver import HttpService
from coordinator_bench.measure import REPO

COLUMNS = (
    "http-noop",
    "http-hook",
    "command-empty",
    "command-noop",
    "command-fast",
    "command-hook",
    "command-service",
    "command-embedded",
)


def summarize(
    timings: dict[str, list[list[float]]], cpu: dict[str, list[float]] | None = None
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for column, cycles in timings.items():
        if not cycles:
            continue
        out[column] = cycle_figures(cycles)
        if cpu and cpu.get(column):
            out[column]["cpu_p50_ms"] = ms(cpu[column], 50)
    for column, noop in (
        ("http-hook", "http-noop"),
        ("command-fast", "command-noop"),
        ("command-hook", "command-noop"),
        ("command-service", "command-noop"),
        ("command-embedded", "command-noop"),
    ):
        if column in out and noop in out:
            out[column]["added_event_p50_ms"] = out[column]["event_p50_ms"] - out[noop]["event_p50_ms"]
            if "cpu_p50_ms" in out[column] and "cpu_p50_ms" in out[noop]:
                out[column]["added_cpu_p50_ms"] = out[column]["cpu_p50_ms"] - out[noop]["cpu_p50_ms"]
        if column.startswith("command") and column in out and "command-empty" in out:
            out[column]["over_empty_p50_ms"] = out[column]["event_p50_ms"] - out["command-empty"]["event_p50_ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cycles", type=int, default=40, help="guarded Edit calls per http column and round")
    p.add_argument("--command-cycles", type=int, default=8, help="per command column and round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", default=None, help="write the figures here too")
    p.add_argument("--plot", default=None, help="a PNG of the figures (p50 and p99 per hook event)")
    p.add_argument("--from-json", default=None, help="no measuring: plot or print the figures of an earlier --json")
    p.add_argument(
        "--installed", action="store_true", help="the package the interpreter finds itself, not this checkout's"
    )
    args = p.parse_args(argv)
    if args.from_json:
        figures = json.loads(Path(args.from_json).read_text())
    else:
        with scratch("hook-latency-", git=True) as sc:
            figures = measure(sc, args)
    for column, f in figures.items():
        added = f" {f['added_event_p50_ms']:+.2f} ms p50 over its no-op" if "added_event_p50_ms" in f else ""
        if "over_empty_p50_ms" in f:
            added += f", {f['over_empty_p50_ms']:+.2f} over the empty interpreter"
        if "cpu_p50_ms" in f:
            more = f" ({f['added_cpu_p50_ms']:+.1f})" if "added_cpu_p50_ms" in f else ""
            added += f"; process CPU p50 {f['cpu_p50_ms']:.1f} ms{more}"
        print(f"{column:17} {int(f['events']):4} events  per event p50 {f['event_p50_ms']:8.2f} ms  p99 "
              f"{f['event_p99_ms']:8.2f} ms  per tool call p50 {f['call_p50_ms']:8.2f} ms  p99 "
              f"{f['call_p99_ms']:8.2f} ms{added}")  # fmt: skip
    conclude(figures, args.json)
    if args.plot:
        plot(figures, Path(args.plot))
    return 0


def plot(figures: dict[str, dict[str, float]], out: Path) -> None:
    """Two panels (the http hooks, the command hooks): p50 and p99 per hook event, each beside its no-op."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [("http hook", ["http-noop", "http-hook"]),
              ("command hook", ["command-empty", "command-noop", "command-fast", "command-hook", "command-service",
                                "command-embedded"])]  # fmt: skip
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for ax, (title, names) in zip(axes, groups, strict=True):
        shown = [n for n in names if n in figures]
        xs = range(len(shown))
        ax.bar([x - 0.2 for x in xs], [figures[n]["event_p50_ms"] for n in shown], 0.4, label="p50")
        ax.bar([x + 0.2 for x in xs], [figures[n]["event_p99_ms"] for n in shown], 0.4, label="p99")
        ax.set_xticks(list(xs), shown, rotation=15)
        ax.set_ylabel("ms per hook event")
        ax.set_title(title)
        ax.legend()
    fig.suptitle("Latency per hook event, beside a no-op hook of the same type")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def _senders(
    args: argparse.Namespace,
    env: dict[str, str],
    root: Path,
    urls: tuple[str, str],
    token: str,
    cpu: dict[str, list[float]],
) -> dict[str, tuple[Send, int]]:
    """Each column's way of sending one event, and its cycles per round."""
    url, noop_url = urls
    hook = [sys.executable, "-m", "coordinator.cli", "hook", "claude-code"]
    found = [sys.executable, "-c", "import coordinator.cli.fasthook as m; print(m.__file__)"]
    fasthook = subprocess.run(found, env=env, capture_output=True, text=True, check=True).stdout.strip()
    client = str(Path(fasthook).with_name("hookclient.py"))  # the script init writes
    fast = [sys.executable, "-I", "-S", client, "claude-code", "--root", os.path.realpath(root)]
    noop = [sys.executable, "-c", "import json, sys; json.load(sys.stdin)"]

    def command(name: str, argv: list[str], more_env: dict[str, str] | None = None) -> Send:
        return command_sender(argv, {**env, **(more_env or {})}, root, cpu[name])

    http, few = args.cycles, args.command_cycles
    return {
        "http-noop": (http_sender(noop_url, "/hooks", token), http),
        "http-hook": (http_sender(url, "/v1/hooks/claude-code", token), http),
        "command-empty": (command("command-empty", [sys.executable, "-c", "pass"]), few),
        "command-noop": (command("command-noop", noop), few),
        "command-fast": (command("command-fast", fast), few),
        "command-hook": (command("command-hook", [*hook, "--server", url, "--token", token]), few),
        "command-service": (command("command-service", hook, {"EDIT_COORDINATOR_HOOK_SERVICE": "1"}), few),
        "command-embedded": (
            command("command-embedded", hook, {"EDIT_COORDINATOR_HOOK_SERVICE": "0"}),
            max(few // 2, 1),
        ),
    }


def measure(sc: Scratch, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    root = sc.root
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    if not args.installed:
        env.update(PYTHONPATH=str(REPO))
    pythonpath = None if args.installed else REPO
    try:
        with (
            HttpService(root, None, sc.work / "serve", workers=1, pythonpath=pythonpath) as service,
            empty_service(sc.work) as (noop_url, _),
        ):
            token = service.token
            cpu: dict[str, list[float]] = {name: [] for name in COLUMNS if name.startswith("command")}
            senders = _senders(args, env, root, (service.url, noop_url), token, cpu)
            cycles = {name: Cycle(root, f"{name}.py", f"s_{name.replace('-', '_')}") for name in senders}
            timings: dict[str, list[list[float]]] = {name: [] for name in senders}
            for name, (send, _) in senders.items():  # warm-up: connections, the embedded Redis, caches
                cycles[name].run(send, [])
            for values in cpu.values():
                values.clear()
            for r in range(args.rounds):
                order = list(senders)[r % len(senders) :] + list(senders)[: r % len(senders)]
                for name in order:
                    send, n = senders[name]
                    for _ in range(n):
                        cycles[name].run(send, timings[name])
            for cycle in cycles.values():
                cycle.check()
            return summarize(timings, cpu)
    finally:
        pid = root / STATE_DIR_NAME / "hook-service" / "pid"  # the repository's hook service, from the hooks
        if pid.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid.read_text()), signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main())
