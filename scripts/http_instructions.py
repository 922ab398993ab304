"""Instructions per edit of the HTTP service, over TCP and on a unix socket, beside the engine's own in-process.

    python3 scripts/http_instructions.py [--edits 400] [--listeners tcp,uds] [--keys] [--client]

Timed figures of an HTTP edit move with the machine's load (on the shared 2-core machine the p50 of one edit
doubles from one minute to the next); the number of user-space instructions a process executes does not. So
the service's cost is counted here as scripts/engine_ab.py counts the engine's: `edit-coordinator serve
--workers 1` (one process: uvicorn, the app and the engine) runs under valgrind's callgrind; after its
first calls its counters are zeroed, it serves `--edits` consecutive edits of a 200-line counters file, and
the count is dumped (`callgrind_control`); then the same wall time with no request is counted and
subtracted (a service does a little work while idle, uvicorn's tick every 0.1 s, and under callgrind an
edit takes long enough for that to matter). What is left, divided by the edits, is the service's
instructions per edit. The client is the project's `HttpClient` (without idempotency keys unless `--keys`), in
this process, outside valgrind. The engine's own figure is engine_ab's in-process loop (`count_side`: a
process of `--edits` edits and one of a quarter of them, the difference divided by the difference of edits; a
tight loop, so nothing idles there), so "the service beyond the engine" is the difference of the two: routing,
the token, the body, validation, the JSON answer, uvicorn and its protocol.

`--client` also counts the client: the same loop run in a child process under callgrind against a service
outside valgrind (`HttpClient` per edit: building the request, the one send, parsing the answer).

Not counted: the kernel's work (system calls, the TCP or unix socket itself: what a unix socket saves is
mostly there, so compare listeners by CPU time too, `scripts/http_latency.py`), and the Redis server's.
Every run checks that the file holds every edit it made. A command, not a test: a few minutes per listener
under callgrind on the 2-core machine (one service start each), a minute or two for the engine and for
--client.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SLOTS = 200
SESSION = "bench"
COLLECTED = re.compile(r"Collected : (\d+)")
TOTALS = re.compile(r"^(?:totals|summary): (\d+)", re.MULTILINE)
_START_TIMEOUT_S = 600.0  # an interpreter under callgrind runs some 50 times slower


def counters(values: list[int]) -> str:
    return "".join(f"s{i:03d} = {v}\n" for i, v in enumerate(values))


class Service:
    """`edit-coordinator serve --workers 1` on `root`, under callgrind or not; the admin token."""

    def __init__(
        self, root: Path, redis_url: str, work: Path, uds: bool, valgrind: bool, out_file: Path | None = None
    ) -> None:
        from coordinator.tokens import mint_token

        work.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_urlsafe(48)
        (work / "secret").write_text(secret + "\n")
        os.chmod(work / "secret", 0o600)
        url_file = work / "url"
        listener = ["--uds", str(work / "s.sock")] if uds else ["--port", "0"]
        cmd = [sys.executable, "-m", "coordinator.cli", "serve", "--root", str(root), "--redis-url", redis_url,
               "--workers", "1", "--durability", "none", "--secret-file", str(work / "secret"), "--url-file",
               str(url_file), "--log-level", "error", "--graceful-timeout", "5", *listener]  # fmt: skip
        if valgrind:
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file or '/dev/null'}", *cmd]
        env = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
        env["PYTHONHASHSEED"] = "0"
        self.log = work / "serve.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not url_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"serve did not start: {self.log.read_text(errors='replace')[-1500:]}")
            time.sleep(0.1)
        self.url = url_file.read_text().strip()
        self.token = mint_token(secret.encode(), admin=True, ttl_s=3600)

    def stop(self) -> str:
        """SIGTERM, wait; its output (valgrind's summary included)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.log.read_text(errors="replace")


def edit_loop(url: str, token: str, root: Path, path: str, edits: int, keys: bool) -> None:
    """`edits` consecutive edits through HttpClient; checks that the file holds them all."""
    from coordinator import HttpClient

    values = [0] * SLOTS
    (root / path).write_text(counters(values))
    with HttpClient(url, token=token, idempotency_keys=keys, timeout=600, connect_timeout=600) as client:
        client.read(SESSION, path)
        for k in range(edits):
            i = k % SLOTS
            client.edit(SESSION, path, f"s{i:03d} = {values[i]}\n", f"s{i:03d} = {values[i] + 1}\n")
            values[i] += 1
    if (root / path).read_text() != counters(values):
        raise RuntimeError(f"{path} does not hold the {edits} edits acknowledged")


def collected(output: str, what: str) -> int:
    found = COLLECTED.search(output)
    if found is None:
        raise RuntimeError(f"valgrind reported no instruction count for {what}: {output[-1500:]}")
    return int(found.group(1))


def service_per_edit(root: Path, redis_url: str, work: Path, uds: bool, edits: int, keys: bool) -> float:
    """The service's instructions per edit (module docstring): one service under callgrind; its counters
    zeroed, `edits` edits, a dump; zeroed again, as long a wait with no request, a dump. The service does
    some work while idle (uvicorn's tick every 0.1 s, timers), which under callgrind's slowness would
    otherwise be counted as the edits' own; the same wall time of idleness is subtracted."""
    tag = "uds" if uds else "tcp"
    out = work / f"callgrind-{tag}.out"
    service = Service(root, redis_url, work / tag, uds, valgrind=True, out_file=out)
    try:
        edit_loop(service.url, service.token, root, f"{tag}-warm.txt", 4, keys)  # first calls: not counted
        busy, took = window(service.proc.pid, out, lambda: edit_loop(service.url, service.token, root,
                                                                      f"{tag}.txt", edits, keys))  # fmt: skip
        idle, _ = window(service.proc.pid, out, lambda: time.sleep(took))
    finally:
        service.stop()
    return (busy - idle) / edits


def window(pid: int, out: Path, work: Callable[[], None]) -> tuple[int, float]:
    """Instructions the process `pid` executes while `work` runs (callgrind_control: zero, then dump);
    and how long `work` took."""
    subprocess.run(["callgrind_control", "--zero", str(pid)], check=True, capture_output=True, timeout=600)
    started = time.monotonic()
    work()
    took = time.monotonic() - started
    before = set(out.parent.glob(out.name + "*"))
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True, timeout=600)
    deadline = time.monotonic() + 600
    while True:
        dumps = sorted(set(out.parent.glob(out.name + "*")) - before, key=lambda p: p.stat().st_mtime)
        text = dumps[-1].read_text(errors="replace") if dumps else ""
        found = TOTALS.search(text)
        if found is not None:
            return int(found.group(1)), took
        if time.monotonic() > deadline:
            raise RuntimeError(f"callgrind wrote no dump with totals for {pid}")
        time.sleep(0.2)


def client_per_edit(root: Path, redis_url: str, work: Path, edits: int, keys: bool) -> float:
    """The client's instructions per edit: the loop in a child under callgrind, the service outside it."""
    service = Service(root, redis_url, work / "client-service", uds=False, valgrind=False)
    counts = []
    short = max(1, edits // 4)
    try:
        for n in (short, edits):
            args = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
                    "--child", service.url, service.token, str(root), f"client-{n}.txt", str(n)]  # fmt: skip
            if keys:
                args.append("--keys")
            env = {**os.environ, "PYTHONHASHSEED": "0"}
            out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1800, check=False)
            if out.returncode != 0:
                raise RuntimeError(f"the client process failed: {out.stderr[-1500:]}")
            counts.append(collected(out.stderr, f"the client ({n} edits)"))
    finally:
        service.stop()
    return (counts[1] - counts[0]) / (edits - short)


def engine_per_edit(edits: int) -> float:
    """engine_ab's in-process count of this checkout (the same loop, one session, durability none)."""
    spec = importlib.util.spec_from_file_location("engine_ab", REPO / "scripts" / "engine_ab.py")
    assert spec is not None and spec.loader is not None
    engine_ab = importlib.util.module_from_spec(spec)
    sys.modules["engine_ab"] = engine_ab
    spec.loader.exec_module(engine_ab)
    return float(engine_ab.count_side(REPO, edits))


@contextlib.contextmanager
def scratch() -> Iterator[tuple[Path, str, Path]]:
    """A root with the embedded Redis (outside valgrind), and a short work folder for the sockets."""
    from coordinator.state.embedded import ensure_embedded_redis, stop_embedded_redis

    work = Path(tempfile.mkdtemp(prefix="ec-hi-", dir="/tmp"))
    root = work / "repo"
    root.mkdir()
    state = root / ".edit-coordinator"
    try:
        yield root, ensure_embedded_redis(state), work
    finally:
        stop_embedded_redis(state)
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    figures: dict[str, Any] = {}
    with scratch() as (root, redis_url, work):
        engine = engine_per_edit(args.edits)
        print(f"engine in-process:  {engine:>10,.0f} instructions per edit", flush=True)
        for listener in args.listeners.split(","):
            ir = service_per_edit(root, redis_url, work, listener == "uds", args.edits, args.keys)
            figures[listener] = ir
            print(f"service over {listener}:  {ir:>10,.0f} instructions per edit, {ir - engine:+,.0f} beyond the "
                  f"engine ({ir / engine:.2f}x)", flush=True)  # fmt: skip
        if args.client:
            ir = client_per_edit(root, redis_url, work, args.edits, args.keys)
            print(f"client (HttpClient): {ir:>9,.0f} instructions per edit ({ir / engine:.2f}x the engine's)")
    keys = "with" if args.keys else "without"
    print(f"({args.edits} and {max(1, args.edits // 4)} edits per run; HttpClient {keys} idempotency keys)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edits", type=int, default=400, help="edits of the longer run (the shorter: a quarter)")
    ap.add_argument("--listeners", default="tcp,uds", help="comma-separated: tcp, uds")
    ap.add_argument("--keys", action="store_true", help="an Idempotency-Key with every edit (HttpClient's default)")
    ap.add_argument("--client", action="store_true", help="count the client's instructions per edit too")
    ap.add_argument("--child", nargs=5, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        url, token, root, path, n = args.child
        edit_loop(url, token, Path(root), path, int(n), args.keys)
        return 0
    if args.edits < 8:
        ap.error("--edits must be at least 8")
    if set(args.listeners.split(",")) - {"tcp", "uds"}:
        ap.error("--listeners takes tcp and/or uds")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
