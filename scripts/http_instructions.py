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
import functools
import importlib.util
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator_bench.harness import (
    COLLECTED,
    Scratch,
    SlotEditor,
    instructions_of,
    instructions_per_edit,
    scratch,
)
from coordinator_bench.httpserver import HttpService
from coordinator_bench.measure import REPO

SESSION = "bench"
TOTALS = re.compile(r"^(?:totals|summary): (\d+)", re.MULTILINE)
_START_TIMEOUT_S = 600.0  # an interpreter under callgrind runs some 50 times slower


def service(sc: Scratch, tag: str, uds: bool, out_file: Path | None) -> HttpService:
    """`edit-coordinator serve --workers 1` on the scratch repository, under callgrind (`out_file`: where its
    dumps go) or not."""
    wrapper = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}") if out_file else ()
    return HttpService(
        sc.root, sc.redis_url(), sc.work / tag, workers=1, uds=uds, wrapper=wrapper, start_timeout_s=_START_TIMEOUT_S
    ).start()


def edit_loop(url: str, token: str, root: Path, path: str, edits: int, keys: bool) -> None:
    """`edits` consecutive edits through HttpClient; checks that the file holds them all."""
    from coordinator import HttpClient

    with HttpClient(url, token=token, idempotency_keys=keys, timeout=600, connect_timeout=600) as client:
        editor = SlotEditor(path, functools.partial(client.edit, SESSION))
        editor.write_file(root)
        client.read(SESSION, path)
        for _ in range(edits):
            editor.step()
    if not editor.landed(root):
        raise RuntimeError(f"{path} does not hold the {edits} edits acknowledged")


def collected(output: str, what: str) -> int:
    found = COLLECTED.search(output)
    if found is None:
        raise RuntimeError(f"valgrind reported no instruction count for {what}: {output[-1500:]}")
    return int(found.group(1))


def service_per_edit(sc: Scratch, uds: bool, edits: int, keys: bool) -> float:
    """The service's instructions per edit (module docstring): one service under callgrind; its counters
    zeroed, `edits` edits, a dump; zeroed again, as long a wait with no request, a dump. The service does
    some work while idle (uvicorn's tick every 0.1 s, timers), which under callgrind's slowness would
    otherwise be counted as the edits' own; the same wall time of idleness is subtracted."""
    tag = "uds" if uds else "tcp"
    out = sc.work / f"callgrind-{tag}.out"
    served = service(sc, tag, uds, out)
    root = sc.root
    try:
        assert served.proc is not None
        pid = served.proc.pid
        edit_loop(served.url, served.token, root, f"{tag}-warm.txt", 4, keys)  # first calls: not counted
        busy, took = window(pid, out, lambda: edit_loop(served.url, served.token, root, f"{tag}.txt", edits, keys))
        idle, _ = window(pid, out, lambda: time.sleep(took))
    finally:
        served.stop()
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


def client_per_edit(sc: Scratch, edits: int, keys: bool) -> float:
    """The client's instructions per edit: the loop in a child under callgrind, the service outside it."""
    served = service(sc, "client-service", uds=False, out_file=None)
    env = {**os.environ, "PYTHONHASHSEED": "0"}

    def count(n: int) -> int:
        argv = [sys.executable, __file__, "--child", served.url, served.token, str(sc.root), f"client-{n}.txt", str(n)]
        return instructions_of([*argv, "--keys"] if keys else argv, env, f"the client ({n} edits)")[0]

    try:
        return instructions_per_edit(count, edits)
    finally:
        served.stop()


def engine_per_edit(edits: int) -> float:
    """engine_ab's in-process count of this checkout (the same loop, one session, durability none)."""
    spec = importlib.util.spec_from_file_location("engine_ab", REPO / "scripts" / "engine_ab.py")
    assert spec is not None and spec.loader is not None
    engine_ab = importlib.util.module_from_spec(spec)
    sys.modules["engine_ab"] = engine_ab
    spec.loader.exec_module(engine_ab)
    return float(engine_ab.count_side(REPO, edits))


def run(args: argparse.Namespace) -> int:
    figures: dict[str, Any] = {}
    with scratch("ec-hi-", short=True) as sc:
        engine = engine_per_edit(args.edits)
        print(f"engine in-process:  {engine:>10,.0f} instructions per edit", flush=True)
        for listener in args.listeners.split(","):
            ir = service_per_edit(sc, listener == "uds", args.edits, args.keys)
            figures[listener] = ir
            print(f"service over {listener}:  {ir:>10,.0f} instructions per edit, {ir - engine:+,.0f} beyond the "
                  f"engine ({ir / engine:.2f}x)", flush=True)  # fmt: skip
        if args.client:
            ir = client_per_edit(sc, args.edits, args.keys)
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
