"""The HTTP service against the in-process engine, same scenarios, one run.

Scenarios (each a fresh repository, W client processes for D seconds, every client one session):
    solo   one client, one file: the per-call cost with no contention (the added latency of HTTP).
    hot    W clients, one file: every edit contends for one lock, most views go stale.
    zipf   W clients, F files chosen by a Zipf law (exponent s, rank 1 hottest).
Each client loops: pick a file; read it when it has no current view; increment one counter line with an
exact `edit` (old "slot_k = v" -> new "slot_k = v+1"); a `stale` / `not_read` / `no_match` refusal drops
the view (read again next time). Acknowledged edits/s is the throughput; at the end the counters on disk
must add up to the acknowledged edits exactly (no lost update, in either mode).

Modes: "inprocess" (each client process runs the engine, `InProcessClient`) and "http" (the same clients
through `HttpClient` to `edit-coordinator serve` on 127.0.0.1, N server workers), on the same machine,
interleaved scenario by scenario so that machine noise hits both alike.

Run: python -m coordinator_bench.http_bench [--quick]. Writes coordinator_bench/results/http.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coordinator.layout import redis_dir, state_dir_of

RESULTS = Path(__file__).parent / "results"
REPO = Path(__file__).resolve().parents[1]
SECRET = "http-bench-" + "s" * 40
SLOTS = 32
_LINE = re.compile(r"^slot_(\d+) = (\d+)$", re.M)


@dataclass(frozen=True)
class Scenario:
    name: str
    clients: int
    files: int
    zipf_s: float = 0.0


@dataclass(frozen=True)
class ClientJob:
    index: int
    mode: str
    root: str
    url: str | None
    durability: str
    files: tuple[str, ...]
    weights: tuple[float, ...]
    start_at: float
    duration_s: float
    seed: int


def _file_text() -> str:
    return "".join(f"slot_{k} = 0\n" for k in range(SLOTS))


def _parse(text: str) -> list[int]:
    vals = [0] * SLOTS
    for m in _LINE.finditer(text):
        vals[int(m.group(1))] = int(m.group(2))
    return vals


def _client_main(job: ClientJob) -> dict[str, Any]:
    """One session's load loop. Bounded by its duration; returns counts and per-call latencies."""
    from coordinator import CoordinatorError, ErrorCode

    client: Any
    if job.mode == "http":
        from worker.http_client import HttpClient

        assert job.url is not None
        client = HttpClient(job.url, secret=SECRET, max_connections=2)
    else:
        from worker.client import InProcessClient

        client = InProcessClient.open(job.root, durability=job.durability)
    session = f"bench-{job.mode}-{job.index}"
    rng = random.Random(job.seed)
    views: dict[str, list[int]] = {}
    edit_ok: list[float] = []
    edit_refused: list[float] = []
    reads: list[float] = []
    acked = 0
    other_errors: dict[str, int] = {}
    # Warm up outside the measured window (connection, imports, first Redis round trip).
    client.read(session, job.files[0])
    while time.time() < job.start_at:
        time.sleep(0.001)
    end = time.perf_counter() + job.duration_s
    cpu0 = time.process_time()
    perf = time.perf_counter
    while perf() < end:
        f = rng.choices(job.files, job.weights)[0] if len(job.files) > 1 else job.files[0]
        vals = views.get(f)
        if vals is None:
            t0 = perf()
            r = client.read(session, f)
            reads.append(perf() - t0)
            vals = views[f] = _parse(r.content)
        k = rng.randrange(SLOTS)
        t0 = perf()
        try:
            client.edit(session, f, f"slot_{k} = {vals[k]}\n", f"slot_{k} = {vals[k] + 1}\n")
        except CoordinatorError as exc:
            edit_refused.append(perf() - t0)
            views.pop(f, None)
            if exc.code not in (ErrorCode.STALE, ErrorCode.NOT_READ, ErrorCode.NO_MATCH):
                other_errors[exc.code.value] = other_errors.get(exc.code.value, 0) + 1
            continue
        edit_ok.append(perf() - t0)
        vals[k] += 1
        acked += 1
    cpu = time.process_time() - cpu0
    client.close()
    return {
        "cpu_s": cpu,
        "acked": acked,
        "edit_ok": edit_ok,
        "edit_refused": edit_refused,
        "reads": reads,
        "other_errors": other_errors,
    }


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 3)


class _Server:
    """`edit-coordinator serve` on 127.0.0.1 (kernel-chosen port); always stopped by `stop()`."""

    def __init__(self, root: Path, workers: int, durability: str) -> None:
        url_file = root.parent / "url.txt"
        env = {**os.environ, "EDIT_COORDINATOR_SECRET": SECRET, "PYTHONPATH": str(REPO)}
        self.log = open(root.parent / "serve.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator.cli", "serve", "--root", str(root), "--host", "127.0.0.1",
             "--port", "0", "--workers", str(workers), "--durability", durability, "--url-file", str(url_file)],
            cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        import httpx

        deadline = time.monotonic() + 60
        while not url_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server did not start: {(root.parent / 'serve.log').read_text()}")
            time.sleep(0.02)
        self.url = url_file.read_text().strip()
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("server not healthy")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _service_pids(root: Path, server: _Server | None) -> list[int]:
    """The embedded Redis of `root`, and the service's process tree (supervisor, workers, their helpers)."""
    pids: list[int] = []
    try:
        pids.append(int((redis_dir(state_dir_of(root)) / "redis.pid").read_text().strip()))
    except (OSError, ValueError):
        pass
    if server is not None:
        todo = [server.proc.pid]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            todo += _children(pid)
    return pids


def _cpu_s(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def run_one(
    scenario: Scenario, mode: str, duration_s: float, durability: str, server_workers: int, seed: int
) -> dict[str, Any]:
    from coordinator.embedded import stop_embedded_redis

    base = Path(tempfile.mkdtemp(prefix="ec-http-bench-"))
    root = base / "repo"
    root.mkdir()
    files = tuple(f"f{i:03d}.py" for i in range(scenario.files))
    for f in files:
        (root / f).write_text(_file_text())
    weights = tuple(1.0 / (r + 1) ** scenario.zipf_s for r in range(scenario.files))
    server = None
    try:
        if mode == "http":
            server = _Server(root, server_workers, durability)
        start_at = time.time() + (3.0 if mode == "http" else 2.5)
        jobs = [
            ClientJob(i, mode, str(root), server.url if server else None, durability, files, weights, start_at,
                      duration_s, seed * 1000 + i)
            for i in range(scenario.clients)
        ]  # fmt: skip
        ctx = mp.get_context("forkserver")
        with ctx.Pool(scenario.clients) as pool:
            pending = pool.map_async(_client_main, jobs)
            # CPU of the service's processes and of Redis over the measured window (clients count their own).
            others = _service_pids(root, server)
            while time.time() < start_at:
                time.sleep(0.005)
            cpu0 = _cpu_s(others)
            time.sleep(duration_s)
            cpu1 = _cpu_s(others)
            outs = pending.get()
        total_on_disk = sum(sum(_parse((root / f).read_text())) for f in files)
    finally:
        if server is not None:
            server.stop()
        stop_embedded_redis(state_dir_of(root))
        shutil.rmtree(base, ignore_errors=True)
    acked = sum(o["acked"] for o in outs)
    cpu_clients = sum(o["cpu_s"] for o in outs)
    cpu_service = cpu1 - cpu0
    edit_ok = [x for o in outs for x in o["edit_ok"]]
    edit_all = edit_ok + [x for o in outs for x in o["edit_refused"]]
    reads = [x for o in outs for x in o["reads"]]
    errors: dict[str, int] = {}
    for o in outs:
        for k, v in o["other_errors"].items():
            errors[k] = errors.get(k, 0) + v
    return {
        "scenario": scenario.name,
        "mode": mode,
        "durability": durability,
        "server_workers": server_workers if mode == "http" else None,
        "clients": scenario.clients,
        "files": scenario.files,
        "zipf_s": scenario.zipf_s,
        "duration_s": duration_s,
        "acked": acked,
        "edits_per_s": acked / duration_s,
        "cpu_ms_per_edit": 1000 * (cpu_clients + cpu_service) / acked if acked else None,
        "cpu_s": {"clients": round(cpu_clients, 3), "server_and_redis": round(cpu_service, 3)},
        "refused_edits": len(edit_all) - len(edit_ok),
        "reads": len(reads),
        "calls_per_s": (len(edit_all) + len(reads)) / duration_s,
        "lost_updates": acked - total_on_disk,
        "other_errors": errors,
        "edit_ok_ms": {"p50": _ms(_pct(edit_ok, 0.5)), "p99": _ms(_pct(edit_ok, 0.99))},
        "edit_any_ms": {"p50": _ms(_pct(edit_all, 0.5)), "p99": _ms(_pct(edit_all, 0.99))},
        "read_ms": {"p50": _ms(_pct(reads, 0.5)), "p99": _ms(_pct(reads, 0.99))},
    }


def _med(runs: list[dict[str, Any]], key: str, q: str | None = None) -> float | None:
    vals = [r[key] if q is None else r[key][q] for r in runs]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def compare(inproc: list[dict[str, Any]], http: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the repetitions of each mode: throughput ratio, and per-call latency added by HTTP."""

    def added(key: str, q: str) -> float | None:
        a, b = _med(inproc, key, q), _med(http, key, q)
        return None if a is None or b is None else round(b - a, 3)

    eps_in, eps_http = _med(inproc, "edits_per_s"), _med(http, "edits_per_s")
    return {
        "scenario": inproc[0]["scenario"],
        "durability": inproc[0]["durability"],
        "edits_per_s": {"inprocess": eps_in, "http": eps_http},
        "ratio_edits_per_s": eps_http / eps_in if eps_in and eps_http is not None else None,
        "cpu_ms_per_edit": {"inprocess": _med(inproc, "cpu_ms_per_edit"), "http": _med(http, "cpu_ms_per_edit")},
        # The throughput ratio a saturated machine with no other load would show: in-process CPU per
        # acknowledged edit over HTTP's (all processes counted: clients, service, Redis).
        "cpu_ratio": (
            _med(inproc, "cpu_ms_per_edit") / _med(http, "cpu_ms_per_edit")  # type: ignore[operator]
            if _med(inproc, "cpu_ms_per_edit") and _med(http, "cpu_ms_per_edit")
            else None
        ),
        "edit_ms": {
            "inprocess": {"p50": _med(inproc, "edit_any_ms", "p50"), "p99": _med(inproc, "edit_any_ms", "p99")},
            "http": {"p50": _med(http, "edit_any_ms", "p50"), "p99": _med(http, "edit_any_ms", "p99")},
        },
        "added_edit_ms": {"p50": added("edit_any_ms", "p50"), "p99": added("edit_any_ms", "p99")},
        "added_read_ms": {"p50": added("read_ms", "p50"), "p99": added("read_ms", "p99")},
        "lost_updates": sum(r["lost_updates"] for r in inproc + http),
    }


def render_markdown(out: dict[str, Any]) -> str:
    """The results table for BENCHMARKS.md, from the JSON this script writes."""

    def f(x: float | None, nd: int = 2) -> str:
        return "-" if x is None else f"{x:,.{nd}f}"

    rows = [
        "| durability | scenario | server workers | edits/s in-process | edits/s HTTP | ratio "
        "| CPU ms per acknowledged edit (in-process / HTTP) | CPU ratio | edit p50 / p99 in-process (ms) "
        "| edit p50 / p99 HTTP (ms) "
        "| added per edit p50 / p99 (ms) | added per read p50 (ms) | lost updates |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in out["comparisons"]:
        e, cpu, ms = c["edits_per_s"], c["cpu_ms_per_edit"], c["edit_ms"]
        rows.append(
            f"| {c['durability']} | {c['scenario']} | {c.get('server_workers', '-')} "
            f"| {f(e['inprocess'], 0)} | {f(e['http'], 0)} "
            f"| **{f(c['ratio_edits_per_s'])}** | {f(cpu['inprocess'])} / {f(cpu['http'])} | {f(c['cpu_ratio'])} "
            f"| {f(ms['inprocess']['p50'])} / {f(ms['inprocess']['p99'], 1)} "
            f"| {f(ms['http']['p50'])} / {f(ms['http']['p99'], 1)} "
            f"| {f(c['added_edit_ms']['p50'])} / {f(c['added_edit_ms']['p99'], 1)} "
            f"| {f(c['added_read_ms']['p50'])} | {c['lost_updates']} |"
        )
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short runs (2 s each, one repetition)")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per run (default 5)")
    ap.add_argument("--clients", type=int, default=4, help="client processes in hot and zipf (default 4)")
    ap.add_argument("--zipf-files", type=int, default=32)
    ap.add_argument("--zipf-s", type=float, default=1.1)
    ap.add_argument("--durability", default="fsync,none", help="comma-separated (default fsync,none)")
    ap.add_argument("--server-workers", default="2", help="comma-separated worker counts for http (default 2)")
    ap.add_argument("--scenarios", default="solo,hot,zipf")
    ap.add_argument("--reps", type=int, default=3, help="repetitions, interleaved (medians are reported)")
    ap.add_argument("--out", default=str(RESULTS / "http.json"))
    ap.add_argument("--render", metavar="JSON", help="print the BENCHMARKS.md table of an earlier run and exit")
    args = ap.parse_args(argv)
    if args.render:
        print(render_markdown(json.loads(Path(args.render).read_text())), end="")
        return 0
    duration = 2.0 if args.quick else args.duration
    if args.quick:
        args.reps = 1
    all_scenarios = {
        "solo": Scenario("solo", 1, 1),
        "hot": Scenario("hot", args.clients, 1),
        "zipf": Scenario("zipf", args.clients, args.zipf_files, args.zipf_s),
    }
    scenarios = [all_scenarios[s] for s in args.scenarios.split(",")]
    workers = [int(w) for w in args.server_workers.split(",")]
    runs: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    seed = 1
    for durability in args.durability.split(","):
        for sc in scenarios:
            for sw in workers:
                pair: dict[str, list[dict[str, Any]]] = {"inprocess": [], "http": []}
                for _ in range(args.reps):
                    for mode in ("inprocess", "http"):
                        seed += 1
                        r = run_one(sc, mode, duration, durability, sw, seed)
                        pair[mode].append(r)
                        runs.append(r)
                        print(
                            f"{durability:5} {sc.name:5} {mode:9} sw={sw} {r['edits_per_s']:8.0f} edits/s  "
                            f"cpu {r['cpu_ms_per_edit'] or 0:.2f} ms/edit  "
                            f"edit p50 {r['edit_any_ms']['p50']} ms p99 {r['edit_any_ms']['p99']} ms  "
                            f"read p50 {r['read_ms']['p50']} ms  lost {r['lost_updates']}  "
                            f"errors {r['other_errors']}",
                            flush=True,
                        )
                c = compare(pair["inprocess"], pair["http"])
                c["server_workers"] = sw
                comparisons.append(c)
                print(f"      -> ratio {c['ratio_edits_per_s']:.2f} (cpu ratio {c['cpu_ratio']:.2f}), "
                      f"added edit latency {c['added_edit_ms']}", flush=True)  # fmt: skip
    out = {
        "benchmark": "http_vs_inprocess",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_at_end": os.getloadavg(),
        },
        "params": {
            "duration_s": duration,
            "clients": args.clients,
            "zipf_files": args.zipf_files,
            "zipf_s": args.zipf_s,
            "slots_per_file": SLOTS,
            "reps": args.reps,
            "scenarios": [asdict(s) for s in scenarios],
        },
        "comparisons": comparisons,
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(render_markdown(out), end="")
    print(f"wrote {args.out}")
    lost = sum(r["lost_updates"] for r in runs)
    return 0 if lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
