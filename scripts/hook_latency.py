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
import http.client
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PAYLOADS = REPO / "tests" / "data" / "hooks" / "claude-code"
SECRET = "hook-latency-secret-0123456789abcdef0123456789"
NOOP_APP = """
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})
"""
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
Send = Callable[[bytes], dict[str, Any]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(port: int, path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            conn.getresponse().read()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing answered on port {port}")


def http_sender(port: int, path: str, token: str) -> Send:
    def send(raw: bytes) -> dict[str, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("POST", path, raw, {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            raise SystemExit(f"{path} answered {resp.status}: {body[:300]!r}")
        return dict(json.loads(body or b"{}"))

    return send


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command_sender(argv: list[str], env: dict[str, str], cwd: Path, cpu: list[float] | None = None) -> Send:
    """A process per event; `cpu` gets each process's own CPU time (user + system), which load moves far
    less than its wall time."""

    def send(raw: bytes) -> dict[str, Any]:
        before = _children_cpu()
        r = subprocess.run(argv, input=raw, capture_output=True, env=env, cwd=cwd, timeout=120)
        if cpu is not None:
            cpu.append(_children_cpu() - before)
        if r.returncode != 0:
            raise SystemExit(f"{argv[:4]} exited {r.returncode}: {r.stderr.decode()[-500:]}")
        return dict(json.loads(r.stdout or b"{}"))

    return send


class Cycle:
    """One session's guarded Edit tool calls on its own line of one file (the events as Claude Code sends
    them). `checks`: whether the decisions must allow (a no-op allows everything anyway)."""

    def __init__(self, root: Path, name: str, session: str) -> None:
        self.file = root / name
        self.session = session
        self.n = 0
        self.file.write_text(f"{session} = 0\n")

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = json.loads((PAYLOADS / f"{kind}.json").read_text().replace("__ROOT__", str(self.file.parent)))
        data.update(session_id=self.session, tool_use_id=f"toolu_{self.session}_{self.n}")
        data["tool_input"]["file_path"] = str(self.file)
        for key, value in fields.items():
            data["tool_input"][key] = value
        if kind == "post_read":
            text = self.file.read_text()
            data["tool_response"]["file"].update(filePath=str(self.file), content=text, numLines=1, totalLines=1)
        return json.dumps(data).encode()

    def run(self, send: Send, timings: list[list[float]]) -> None:
        old, new = f"{self.session} = {self.n}", f"{self.session} = {self.n + 1}"
        self.n += 1
        times: list[float] = []
        for kind, fields in (("post_read", {}), ("pre_edit", {"old_string": old, "new_string": new})):
            raw = self._event(kind, **fields)
            start = time.perf_counter()
            answer = send(raw)
            times.append(time.perf_counter() - start)
            if answer:
                raise SystemExit(f"{self.session}: {kind} was not allowed: {answer}")
        self.file.write_text(self.file.read_text().replace(old, new))
        raw = self._event("post_edit", old_string=old, new_string=new)
        start = time.perf_counter()
        send(raw)
        times.append(time.perf_counter() - start)
        timings.append(times)

    def check(self) -> None:
        if self.file.read_text() != f"{self.session} = {self.n}\n":
            raise SystemExit(f"{self.file.name} does not hold its {self.n} edits")


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(
    timings: dict[str, list[list[float]]], cpu: dict[str, list[float]] | None = None
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for column, cycles in timings.items():
        events = [t for cycle in cycles for t in cycle]
        calls = [sum(cycle) for cycle in cycles]
        if not events:
            continue
        out[column] = {
            "events": len(events),
            "event_p50_ms": _ms(events, 0.5),
            "event_p99_ms": _ms(events, 0.99),
            "call_p50_ms": _ms(calls, 0.5),
            "call_p99_ms": _ms(calls, 0.99),
            "event_mean_ms": 1000 * statistics.fmean(events),
        }
        if cpu and cpu.get(column):
            out[column]["cpu_p50_ms"] = _ms(cpu[column], 0.5)
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
        with tempfile.TemporaryDirectory(prefix="hook-latency-") as tmp:
            root = Path(tmp) / "repo"
            (root / ".git").mkdir(parents=True)
            figures = measure(root, args)
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
    print("every guarded edit is in its file")
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
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
    ports: tuple[int, int],
    token: str,
    cpu: dict[str, list[float]],
) -> dict[str, tuple[Send, int]]:
    """Each column's way of sending one event, and its cycles per round."""
    sport, nport = ports
    url = f"http://127.0.0.1:{sport}"
    hook = [sys.executable, "-m", "coordinator.cli", "hook", "claude-code"]
    found = [sys.executable, "-c", "import coordinator.cli.fasthook as m; print(m.__file__)"]
    fasthook = subprocess.run(found, env=env, capture_output=True, text=True, check=True).stdout.strip()
    client = str(Path(fasthook).with_name("hookclient.py"))  # the script init writes
    fast = [sys.executable, "-I", "-S", client, "claude-code", "--root", os.path.realpath(root)]
    return {
        "http-noop": (http_sender(nport, "/hooks", token), args.cycles),
        "http-hook": (http_sender(sport, "/v1/hooks/claude-code", token), args.cycles),
        "command-empty": (
            command_sender([sys.executable, "-c", "pass"], env, root, cpu["command-empty"]),
            args.command_cycles,
        ),
        "command-noop": (
            command_sender(
                [sys.executable, "-c", "import json, sys; json.load(sys.stdin)"], env, root, cpu["command-noop"]
            ),
            args.command_cycles,
        ),
        "command-fast": (command_sender(fast, env, root, cpu["command-fast"]), args.command_cycles),
        "command-hook": (
            command_sender([*hook, "--server", url, "--token", token], env, root, cpu["command-hook"]),
            args.command_cycles,
        ),
        "command-service": (
            command_sender(hook, {**env, "EDIT_COORDINATOR_HOOK_SERVICE": "1"}, root, cpu["command-service"]),
            args.command_cycles,
        ),
        "command-embedded": (
            command_sender(hook, {**env, "EDIT_COORDINATOR_HOOK_SERVICE": "0"}, root, cpu["command-embedded"]),
            max(args.command_cycles // 2, 1),
        ),
    }


def measure(root: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    env.update(EDIT_COORDINATOR_SECRET=SECRET)
    if not args.installed:
        env.update(PYTHONPATH=str(REPO))
    sport, nport = _free_port(), _free_port()
    logs = root.parent
    with open(logs / "serve.log", "wb") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "coordinator.cli", "serve", "--root", str(root), "--host", "127.0.0.1", "--port",
             str(sport), "--workers", "1", "--durability", "none"],
            env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    (logs / "noop_app.py").write_text(NOOP_APP)
    noop = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "noop_app:app", "--port", str(nport), "--log-level", "warning"],
        env={**env, "PYTHONPATH": str(logs)}, cwd=logs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_http(sport, "/v1/health")
        _wait_http(nport, "/")
        sys.path.insert(0, str(REPO))
        from coordinator.tokens import mint_token

        token = mint_token(SECRET.encode(), admin=True, ttl_s=3600)
        cpu: dict[str, list[float]] = {name: [] for name in COLUMNS if name.startswith("command")}
        senders = _senders(args, env, root, (sport, nport), token, cpu)
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
        pid = root / ".edit-coordinator" / "hook-service" / "pid"
        if pid.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid.read_text()), signal.SIGTERM)
        for proc in (serve, noop):
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        from coordinator.state.embedded import stop_embedded_redis

        stop_embedded_redis(root / ".edit-coordinator")


if __name__ == "__main__":
    sys.exit(main())
