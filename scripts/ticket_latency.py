"""What an Edit's PreToolUse costs, before and after write tickets stopped waiting out the lease snapshot.

    python3 scripts/ticket_latency.py [--before REV] [--events 50] [--json OUT]

Two hook services side by side, each `serve --workers 1 --durability none --watch` (as the hook service
runs, on TCP) on a repository of its own (each with its embedded Redis): `before` runs the package as it was
at git revision REV (extracted with `git archive` into a scratch folder, run from there), `after` runs this
checkout. A third column,
`noop`, is an endpoint that reads the body and answers `{}` (the floor of an HTTP hook). Each event is one
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
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hook_latency as hl  # a script beside this one

REPO = Path(__file__).resolve().parents[1]
# The last revision whose ticket grant waited `LEASE_SNAPSHOT_S` (0.2 s) before it returned.
DEFAULT_BEFORE = "c86ca67"


def _tree_of(rev: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _serve(root: Path, source: Path, port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    (root / ".git").mkdir(parents=True)
    found = subprocess.run(
        [sys.executable, "-c", "import coordinator; print(coordinator.__file__)"],
        env={**env, "PYTHONPATH": str(source)}, cwd=source, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not found.startswith(str(source)):
        raise SystemExit(f"PYTHONPATH={source} does not decide which coordinator is imported ({found})")
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "coordinator.cli", "serve", "--root", str(root), "--host", "127.0.0.1",
             "--port", str(port), "--workers", "1", "--durability", "none", "--watch"],
            env={**env, "PYTHONPATH": str(source)}, cwd=source, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def measure(base: Path, before: str, events: int) -> dict[str, dict[str, float]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    env.update(EDIT_COORDINATOR_SECRET=hl.SECRET)
    sources = {"before": _tree_of(before, base / "before-src"), "after": REPO}
    ports = {name: hl._free_port() for name in ("before", "after", "noop")}
    procs: list[subprocess.Popen[bytes]] = []
    roots = {name: base / name / "repo" for name in sources}
    try:
        for name, source in sources.items():
            procs.append(_serve(roots[name], source, ports[name], env, base / f"{name}.log"))
        (base / "noop_app.py").write_text(hl.NOOP_APP)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "noop_app:app", "--port", str(ports["noop"])],
                env={**env, "PYTHONPATH": str(base)},
                cwd=base,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        for name in ("before", "after"):
            hl._wait_http(ports[name], "/v1/health")
        hl._wait_http(ports["noop"], "/")
        from coordinator.tokens import mint_token

        token = mint_token(hl.SECRET.encode(), admin=True, ttl_s=3600)
        sends = {name: hl.http_sender(ports[name], "/v1/hooks/claude-code", token) for name in sources}
        sends["noop"] = hl.http_sender(ports["noop"], "/hooks", token)
        (base / "noop" / "repo").mkdir(parents=True)
        cycles = {name: hl.Cycle(base / name / "repo", f"{name}.py", f"s_{name}") for name in sends}
        for name, send in sends.items():  # warm-up: connections, the embedded Redis, caches
            cycles[name].run(send, [])
        timings: dict[str, list[list[float]]] = {name: [] for name in sends}
        names = list(sends)
        for i in range(events):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                cycles[name].run(sends[name], timings[name])
        for cycle in cycles.values():
            cycle.check()
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        from coordinator.state.embedded import stop_embedded_redis

        for root in roots.values():
            with contextlib.suppress(Exception):
                stop_embedded_redis(root / ".edit-coordinator")
    out: dict[str, dict[str, float]] = {}
    for name, cycles_ in timings.items():
        pre = [times[1] for times in cycles_]  # (post_read, pre_edit, post_edit)
        out[name] = {"events": len(pre), "p50_ms": hl._ms(pre, 0.5), "p95_ms": hl._ms(pre, 0.95)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", default=DEFAULT_BEFORE, help="the git revision of the `before` column")
    p.add_argument("--events", type=int, default=50, help="timed PreToolUse events per column")
    p.add_argument("--json", default=None, help="write the figures here too")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ticket-latency-") as tmp:
        figures = measure(Path(tmp), args.before, args.events)
    for name, f in figures.items():
        print(f"{name:7} {int(f['events']):4} Edit PreToolUse  p50 {f['p50_ms']:8.2f} ms  p95 {f['p95_ms']:8.2f} ms")
    print("every guarded edit is in its file")
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
