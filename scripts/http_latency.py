"""Added latency and CPU per edit of the HTTP service over the in-process engine.

    python3 scripts/http_latency.py [--edits N] [--rounds R] [--columns a,b,...]

One repository, one session, N consecutive edits per column of a 200-line counters file (the bench's solo
row: each edit increments the next slot line), durability none. Columns, run interleaved in R rounds
(the order rotates every round, so load drifts hit every column alike), after a warm-up of 50 edits each:

- ``inproc``:       LocalClient on a Coordinator in this process;
- ``inproc-paced``: the same, sleeping 0.3 ms (untimed) after each edit, as a service waits for its client's
                    next request between calls: what a process that sleeps between edits pays for cold
                    caches, on the same engine work;
- ``asgi``:         the service's ASGI app in this process, called directly with the request's messages (no
                    uvicorn, no socket; one ``run_until_complete`` per call): the app's own cost over ``inproc``;
- ``app-only``:     the same, with the engine replaced by a stub that returns a real edit's result: the
                    app's own CPU per call (routing, token, body, validation, limits, JSON answer);
- ``http-plain``:   a plain ``httpx.Client`` with keep-alive, no idempotency key (coordinator_bench/plainhttp.py,
                    the bench's column) against ``edit-coordinator serve --workers 1``;
- ``http-project``: the project's HttpClient without idempotency keys, same service;
- ``http-stdlib``:  ``http.client.HTTPConnection`` (keep-alive), same service;
- ``http-project-uds`` / ``http-stdlib-uds``: the same two clients against a second service, ``serve --workers 1
                    --uds PATH`` (a unix socket instead of TCP; http.client through ``coordinator.endpoint``);
- ``http-project-keys``: the project's HttpClient as it comes (an Idempotency-Key with every edit: one
                    Redis round trip more in the service), on TCP;
- ``floor-httpx`` / ``floor-stdlib``: the same requests (same body, an answer of the same size) to an ASGI
                    app that does nothing, under uvicorn with the service's options: the floor of any Python
                    service with that client.

Each column edits its own file (same session), so that no process's cached view is invalidated by another
column. Printed per column: p50 / p99 wall latency per edit, p50 added over ``inproc``, CPU per edit of
this (client) process, of the server process (utime + stime from /proc/PID/stat before and after each
column's turn) and of the Redis server; and the load average. For the floor and app-only columns,
"+p50" is their whole p50: what an empty service (the app alone) adds per call. Wall time on a shared
machine is noisy; CPU per edit is the reliable figure. A command, not a test: it takes tens of seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator import Coordinator, HttpClient
from coordinator.client.local import LocalClient
from coordinator.endpoint import parse_service_url
from coordinator.server import ServerConfig, create_app, mint_token
from coordinator_bench.harness import Edit, SlotEditor, counters_text, empty_service, ms, scratch
from coordinator_bench.httpserver import HttpService
from coordinator_bench.measure import cpu_seconds
from coordinator_bench.plainhttp import PlainHttpClient
from coordinator_bench.scenarios import COUNTER_LINES

SESSION = "bench"
PACED_S = 0.0003
COLUMNS = (
    "inproc", "inproc-paced", "asgi", "app-only", "http-plain", "http-project", "http-stdlib", "http-project-uds",
    "http-stdlib-uds", "http-project-keys", "floor-httpx", "floor-stdlib",
)  # fmt: skip


class StdlibClient:
    """http.client.HTTPConnection with keep-alive: the standard library's client, JSON in and out."""

    def __init__(self, url: str, token: str) -> None:
        self.conn = parse_service_url(url).http_connection(timeout=30)  # TCP, or the unix socket of unix://
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        self.conn.request("POST", route, json.dumps(body).encode(), self.headers)
        r = self.conn.getresponse()
        data = json.loads(r.read())
        if r.status != 200:
            raise RuntimeError(f"{route}: HTTP {r.status}: {data}")
        return data  # type: ignore[no-any-return]

    def edit(self, path: str, old: str, new: str) -> Any:
        return self.post("/v1/edit", {"session": SESSION, "path": path, "old_string": old, "new_string": new})


class AsgiDriver:
    """Calls the service's App directly, as uvicorn would, with one request's ASGI messages."""

    def __init__(self, root: Path, redis_url: str, token: str, secret: bytes) -> None:
        import asyncio

        self.loop = asyncio.new_event_loop()
        config = ServerConfig(root=str(root), redis_url=redis_url, durability="none")
        self.app = create_app(config, secret)
        self.app.open()
        self.auth = f"Bearer {token}".encode()

    def post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        raw = json.dumps(body).encode()
        headers = [(b"host", b"x"), (b"authorization", self.auth), (b"content-type", b"application/json"),
                   (b"content-length", str(len(raw)).encode())]  # fmt: skip
        scope = {"type": "http", "method": "POST", "path": route, "headers": headers, "query_string": b""}
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": raw, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        self.loop.run_until_complete(self.app(scope, receive, send))
        if sent[0]["status"] != 200:
            raise RuntimeError(f"{route}: HTTP {sent[0]['status']}: {sent[1]['body'][:300]!r}")
        return json.loads(sent[1]["body"])  # type: ignore[no-any-return]

    def edit(self, path: str, old: str, new: str) -> Any:
        return self.post("/v1/edit", _body(path, old, new))

    def close(self) -> None:
        self.app.close()
        self.loop.close()


# -- the floor: the empty service answering a fixed JSON of an edit answer's size ---------------------------
FLOOR_ANSWER = json.dumps({"path": "x", "replacements": 1, "snippet": "x" * 700, "message": "ok"}).encode()


# -- the measurement -----------------------------------------------------------------------------------
class Column:
    def __init__(self, name: str, editor: SlotEditor, server_pid: int | None, pause_s: float = 0.0) -> None:
        self.name = name
        self.editor = editor
        self.pause_s = pause_s
        self.server_pid = server_pid
        self.lat: list[float] = []
        self.client_cpu = 0.0
        self.server_cpu = 0.0
        self.redis_cpu = 0.0

    def turn(self, n: int, redis_pid: int) -> None:
        step = self.editor.step
        c0, s0, r0 = time.process_time(), self._server(), cpu_seconds([redis_pid])
        lat = self.lat
        clock = time.perf_counter
        pause = self.pause_s
        for _ in range(n):
            t = clock()
            step()
            lat.append(clock() - t)
            if pause:
                time.sleep(pause)
        self.client_cpu += time.process_time() - c0
        self.server_cpu += self._server() - s0
        self.redis_cpu += cpu_seconds([redis_pid]) - r0

    def _server(self) -> float:
        return cpu_seconds([self.server_pid]) if self.server_pid else 0.0


def report(cols: dict[str, Column], load: tuple[float, float]) -> None:
    base = statistics.median(cols["inproc"].lat) if "inproc" in cols else None
    print(f"load average {load[0]:.2f} before, {load[1]:.2f} after (1 min); {os.cpu_count()} CPUs")
    head = f"{'column':<18}{'edits':>7}{'p50 ms':>9}{'p99 ms':>9}{'+p50 ms':>9}"
    print(head + f"{'client CPU ms':>15}{'server CPU ms':>15}{'redis CPU ms':>14}{'total CPU ms':>14}  (per edit)")
    for name, col in cols.items():
        n = len(col.lat)
        p50 = statistics.median(col.lat) * 1e3
        if name.startswith("floor") or name == "app-only":
            added = f"{p50:+.3f}"  # an empty service (or the app alone) adds its whole p50
        else:
            added = f"{p50 - base * 1e3:+.3f}" if base is not None and name != "inproc" else "-"
        cpu = [col.client_cpu / n * 1e3, col.server_cpu / n * 1e3, col.redis_cpu / n * 1e3]
        print(
            f"{name:<18}{n:>7}{p50:>9.3f}{ms(col.lat, 99):>9.3f}{added:>9}"
            f"{cpu[0]:>15.3f}{cpu[1]:>15.3f}{cpu[2]:>14.3f}{sum(cpu):>14.3f}"
        )


def build(
    names: list[str], root: Path, coord: Coordinator, services: dict[str, HttpService], floor: tuple[str, int] | None
) -> tuple[dict[str, Column], list[Callable[[], None]]]:
    """Each column's file (same session), client and the process whose CPU is its server's."""
    cols: dict[str, Column] = {}
    closers: list[Callable[[], None]] = []
    for name in names:
        path = f"{name}.txt"
        (root / path).write_text(counters_text([0] * COUNTER_LINES))
        pid: int | None = None
        pause = PACED_S if name == "inproc-paced" else 0.0
        if name.startswith("inproc"):
            local = LocalClient(coord)
            local.read(SESSION, path)
            edit: Edit = functools.partial(local.edit, SESSION)
        elif name == "asgi":
            secret = b"a" * 32
            driver = AsgiDriver(root, str(coord.redis_url), mint_token(secret, admin=True, ttl_s=3600), secret)
            driver.post("/v1/read", {"session": SESSION, "path": path})
            closers.append(driver.close)
            edit = driver.edit
        elif name == "app-only":
            edit = app_only(root, coord, path, closers)
        elif name.startswith("floor"):
            assert floor is not None
            pid = floor[1]
            edit = remote_client(name, floor[0], "x", path, closers)
        else:
            service = services["uds" if name.endswith("-uds") else "tcp"]
            assert service.proc is not None
            pid = service.proc.pid
            edit = remote_client(name.removesuffix("-uds"), service.url, service.token, path, closers)
        cols[name] = Column(name, SlotEditor(path, edit), pid, pause)
    return cols, closers


def app_only(root: Path, coord: Coordinator, path: str, closers: list[Callable[[], None]]) -> Edit:
    """The App with every client replaced by a stub that answers one real edit's result."""
    secret = b"a" * 32
    driver = AsgiDriver(root, str(coord.redis_url), mint_token(secret, admin=True, ttl_s=3600), secret)
    closers.append(driver.close)
    real = LocalClient(driver.app.opened()[0])
    real.read(SESSION, path)
    result = real.edit(SESSION, path, "\ns000 = 0\n", "\ns000 = 1\n")

    class Stub:  # the client, its engine and the engine session, as the service and the declaration use them
        @property
        def engine(self) -> Stub:
            return self

        def shaped(self, *args: Any) -> Stub:
            return self

        def session(self, *args: Any, **kwargs: Any) -> Stub:
            return self

        def edit(self, *args: Any, **kwargs: Any) -> Any:
            return result

    driver.app.client = Stub()  # type: ignore[assignment]  # stands in for the client
    return driver.edit


def remote_client(name: str, url: str, token: str, path: str, closers: list[Callable[[], None]]) -> Edit:
    """The edit call of an HTTP column (the session has read `path` first, except on the floor)."""
    if name in ("http-plain", "floor-httpx"):
        plain = PlainHttpClient(url, token)
        closers.append(plain.close)
        if name == "floor-httpx":
            return lambda p, a, b: plain.http.post("/v1/edit", json=_body(p, a, b)).json()
        plain.read(SESSION, path)
        return functools.partial(plain.edit, SESSION)
    if name in ("http-project", "http-project-keys"):
        project = HttpClient(url, token=token, idempotency_keys=name == "http-project-keys")
        closers.append(project.close)
        project.read(SESSION, path)
        return functools.partial(project.edit, SESSION)
    std = StdlibClient(url, token)
    if name == "http-stdlib":
        std.post("/v1/read", {"session": SESSION, "path": path})
    return std.edit


def _body(path: str, old: str, new: str) -> dict[str, Any]:
    return {"session": SESSION, "path": path, "old_string": old, "new_string": new}


def measure(names: list[str], edits: int, rounds: int) -> None:
    with scratch("http-latency-") as sc, contextlib.ExitStack() as stack:
        root = sc.root
        coord = stack.enter_context(Coordinator(root, durability="none"))
        redis_pid = sc.redis_pid()
        services: dict[str, HttpService] = {}
        for listener in ("tcp", "uds"):
            if any(n.startswith("http") and n.endswith("-uds") == (listener == "uds") for n in names):
                service = HttpService(root, str(coord.redis_url), sc.work / listener, workers=1, uds=listener == "uds")
                services[listener] = stack.enter_context(service)
        floor = None
        if any(n.startswith("floor") for n in names):
            floor = stack.enter_context(empty_service(sc.work, FLOOR_ANSWER))
        cols, closers = build(names, root, coord, services, floor)
        for close in reversed(closers):
            stack.callback(close)
        for col in cols.values():  # warm-up: connections, caches, scripts
            col.turn(50, redis_pid)
            col.lat.clear()
            col.client_cpu = col.server_cpu = col.redis_cpu = 0.0
        load0 = os.getloadavg()[0]
        order = list(cols.values())
        for r in range(rounds):
            for col in order[r % len(order) :] + order[: r % len(order)]:
                col.turn(max(1, edits // rounds), redis_pid)
        report(cols, (load0, os.getloadavg()[0]))
        check(root, cols)


def check(root: Path, cols: dict[str, Column]) -> None:
    """Every acknowledged edit is in its file (the floor's and the stub's are not edits): else the figures
    mean nothing."""
    for name, col in cols.items():
        if not name.startswith("floor") and name != "app-only":
            col.editor.check(root, name)
    print("every acknowledged edit is in its file")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edits", type=int, default=3000, help="edits per column (over all rounds)")
    ap.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    ap.add_argument("--columns", default=",".join(COLUMNS), help=f"comma-separated, of {', '.join(COLUMNS)}")
    args = ap.parse_args()
    names = [n for n in args.columns.split(",") if n]
    unknown = set(names) - set(COLUMNS)
    if unknown:
        ap.error(f"unknown columns {sorted(unknown)}; choose among {', '.join(COLUMNS)}")
    measure(names, args.edits, args.rounds)


if __name__ == "__main__":
    main()
