"""Python opcodes per HTTP edit, in the service and in the client, by function and by package.

    python3 scripts/http_opcount.py [--edits 30] [--uds] [--keys] [--top 40]

One process: `edit-coordinator serve`'s stack (uvicorn with the service's options, the App, the engine,
durability none, the embedded Redis) runs on this process's main thread; the project's `HttpClient` runs
consecutive edits of a 200-line counters file from a second thread. Each thread is traced on its own
(`sys.settrace` with opcode events), so the two counts do not mix: the service's per edit (uvicorn's
protocol, the App, the engine) and the client's per edit. Opcodes are deterministic and load does not move
them; they count the Python-level work only (pydantic, httptools, JSON and the socket calls are C: see
scripts/http_instructions.py for the instructions). The engine's share is the inclusive count of the
operation's `apply`, so "the service beyond the engine" is the rest. A command, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import secrets
import socket
import sys
import threading
from types import FrameType
from typing import Any

from coordinator_bench.harness import Scratch, SlotEditor, scratch

SLOTS = 200
SESSION = "bench"


class Tracer:
    """Opcodes per function (self and inclusive) of the thread that installs it."""

    def __init__(self) -> None:
        self.self_count: collections.Counter[str] = collections.Counter()
        self.incl: collections.Counter[str] = collections.Counter()
        self.stack: list[str] = []
        self._names: dict[Any, str] = {}

    def _key(self, frame: FrameType) -> str:
        code = frame.f_code
        key = self._names.get(code)
        if key is None:
            name = code.co_filename
            for mark in ("/site-packages/", "/coordinator/", "/lib/python3"):
                if mark in name:
                    name = name.split(mark, 1)[1]
                    if mark == "/coordinator/":
                        name = "coordinator/" + name
                    break
            key = self._names[code] = f"{name}:{code.co_firstlineno}:{code.co_name}"
        return key

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            frame.f_trace_opcodes = True
            self.stack.append(self._key(frame))
        elif event == "opcode":
            if self.stack:
                self.self_count[self.stack[-1]] += 1
                for k in set(self.stack):
                    self.incl[k] += 1
        elif event == "return" and self.stack:
            self.stack.pop()
        return self


def package_of(key: str) -> str:
    path = key.split(":", 1)[0]
    parts = path.split("/")
    if parts[0] == "coordinator" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else "stdlib:" + parts[0]


def report(title: str, tracer: Tracer, n: int, top: int) -> None:
    total = sum(tracer.self_count.values())
    print(f"== {title}: {total / n:,.0f} opcodes per edit")
    by_pkg: collections.Counter[str] = collections.Counter()
    for key, v in tracer.self_count.items():
        by_pkg[package_of(key)] += v
    for pkg, v in by_pkg.most_common():
        print(f"{v / n:9,.0f}  {pkg}")
    print("-- self")
    for key, v in tracer.self_count.most_common(top):
        print(f"{v / n:9,.0f}  {key}")
    print("-- inclusive")
    for key, v in tracer.incl.most_common(top):
        print(f"{v / n:9,.0f}  {key}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edits", type=int, default=30)
    ap.add_argument("--uds", action="store_true", help="a unix socket instead of TCP")
    ap.add_argument("--keys", action="store_true", help="an Idempotency-Key with every edit")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    with scratch("ec-ho-", short=True) as sc:
        service_tracer, client_tracer = Tracer(), Tracer()
        run_traced(args, sc, service_tracer, client_tracer)
    n = args.edits
    report("service (uvicorn, the App, the engine)", service_tracer, n, args.top)
    engine = max((v for k, v in service_tracer.incl.items() if k.endswith(":apply")), default=0)
    total = sum(service_tracer.self_count.values())
    beyond = (total - engine) / n
    print(f"== the operation's apply (the engine): {engine / n:,.0f}; the service beyond it: {beyond:,.0f}")
    report("client (HttpClient)", client_tracer, n, args.top)
    return 0


def run_traced(args: argparse.Namespace, sc: Scratch, service_tracer: Tracer, client_tracer: Tracer) -> None:
    """The service on this thread, the client's edits on a second one, each thread traced on its own."""
    import uvicorn

    from coordinator import HttpClient
    from coordinator.server import ServerConfig, create_app
    from coordinator.tokens import mint_token

    work, root, redis_url = sc.work, sc.root, sc.redis_url()
    secret = secrets.token_urlsafe(48).encode()
    app = create_app(ServerConfig(root=str(root), redis_url=redis_url, durability="none"), secret)
    if args.uds:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(work / "s.sock"))
        url = f"unix://{work / 's.sock'}"
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.listen(16)
    options: dict[str, Any] = {"lifespan": "on", "loop": "uvloop", "http": "httptools", "access_log": False,
                               "log_level": "error", "timeout_keep_alive": 30, "server_header": False,
                               "proxy_headers": False}  # fmt: skip  # as `serve` (cli/serve.py)
    server = uvicorn.Server(uvicorn.Config(app, **options))
    loop_box: list[asyncio.AbstractEventLoop] = []

    def in_loop(fn: Any) -> None:
        done = threading.Event()

        def run() -> None:
            fn()
            done.set()

        loop_box[0].call_soon_threadsafe(run)
        done.wait()

    def client_side() -> None:
        while not server.started:
            threading.Event().wait(0.05)
        token = mint_token(secret, admin=True, ttl_s=3600)
        try:
            with HttpClient(url, token=token, idempotency_keys=args.keys) as client:
                editor = SlotEditor("c.txt", functools.partial(client.edit, SESSION))
                editor.write_file(root)
                client.read(SESSION, "c.txt")
                for _ in range(50):
                    editor.step()
                in_loop(lambda: sys.settrace(service_tracer))
                sys.settrace(client_tracer)
                for _ in range(args.edits):
                    editor.step()
                sys.settrace(None)
                in_loop(lambda: sys.settrace(None))
        finally:
            server.should_exit = True

    async def serve() -> None:
        loop_box.append(asyncio.get_running_loop())
        await server.serve(sockets=[sock])

    thread = threading.Thread(target=client_side)
    thread.start()
    import uvloop

    uvloop.run(serve())
    thread.join()


if __name__ == "__main__":
    raise SystemExit(main())
