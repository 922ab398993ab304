"""How deep an edit's call goes: the frames between a way in and the file's replace (issue 27's measure).

    python3 scripts/call_depth.py [--show]

One HTTP edit runs through the service's ASGI app in this process (a real engine on the embedded Redis in
a temporary repository; no socket, so the frames are the service's and the engine's own), and one edit
through `Session.edit` directly. The replace is caught where the engine hands the new file to the OS
(`fsio._exchange`, or `os.replace` with fsync durability). Printed: the frame count from `App.__call__`
and from `Session.edit` to that call, and with --show the frames themselves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _catch_replace(stacks: list[list[str]]) -> Callable[[], None]:
    """Record the stack at each replace; returns the function that undoes the patch."""
    from coordinator.disk import fsio

    exchange, replace = fsio._exchange, os.replace

    def stack() -> list[str]:
        return [f"{Path(f.filename).name}:{f.name}" for f in traceback.extract_stack()[:-2]]

    def spy_exchange(*a: Any) -> bool:
        stacks.append(stack())
        return exchange(*a)

    def spy_replace(*a: Any, **k: Any) -> None:
        stacks.append(stack())
        replace(*a, **k)

    fsio._exchange = spy_exchange  # type: ignore[assignment]
    os.replace = spy_replace

    def undo() -> None:
        fsio._exchange = exchange
        os.replace = replace

    return undo


async def _http_edit(app: Any, token: str) -> list[int]:
    statuses: list[int] = []
    for path, body in (
        ("/v1/read", {"session": "s", "path": "a.txt"}),
        ("/v1/edit", {"session": "s", "path": "a.txt", "old_string": "two", "new_string": "2"}),
    ):
        raw = json.dumps(body).encode()

        async def receive(raw: bytes = raw) -> dict[str, Any]:
            return {"type": "http.request", "body": raw, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        headers = [(b"authorization", f"Bearer {token}".encode()), (b"content-type", b"application/json")]
        scope = {"type": "http", "method": "POST", "path": path, "query_string": b"", "headers": headers}
        await app(scope, receive, send)
    return statuses


def _depth(stack: list[str], entry: str) -> int | None:
    """Frames from the first frame named `entry` (file:function) to the replace, both counted."""
    for i, name in enumerate(stack):
        if name == entry:
            return len(stack) - i
    return None


def measure() -> dict[str, Any]:
    from coordinator import Coordinator
    from coordinator.server.app import create_app
    from coordinator.server.models import ServerConfig
    from coordinator.tokens import mint_token
    from coordinator_bench.harness import scratch

    with scratch("ec-depth-") as sc:
        root = sc.root
        (root / "a.txt").write_text("one\ntwo\n")
        (root / "b.txt").write_text("one\ntwo\n")
        secret = os.urandom(32)
        stacks: list[list[str]] = []
        app = create_app(ServerConfig(root=str(root)), secret)
        app.open()
        undo = _catch_replace(stacks)
        try:
            statuses = asyncio.run(_http_edit(app, mint_token(secret, admin=True)))
            http_stack = stacks[-1] if stacks else []
            with Coordinator(root) as coord:
                s = coord.session("t")
                s.read("b.txt")
                s.edit("b.txt", "two", "2")
            lib_stack = stacks[-1] if len(stacks) > 1 else []
        finally:
            undo()
            app.close()
        edited = (root / "a.txt").read_text() == "one\n2\n" and (root / "b.txt").read_text() == "one\n2\n"
    return {
        "statuses": statuses,
        "edited": edited,
        "http_frames": _depth(http_stack, "app.py:__call__"),
        "session_frames": _depth(lib_stack, "session.py:edit"),
        "http_stack": http_stack[-(_depth(http_stack, "app.py:__call__") or 0) :],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--show", action="store_true", help="print the frames of the HTTP edit")
    args = p.parse_args(argv)
    out = measure()
    if out["statuses"] != [200, 200] or not out["edited"] or out["http_frames"] is None:
        print(f"the edits did not go through as expected: {out['statuses']}, edited={out['edited']}")
        return 1
    print(f"HTTP edit: {out['http_frames']} frames from App.__call__ to the replace")
    print(f"library edit: {out['session_frames']} frames from Session.edit to the replace")
    if args.show:
        for name in out["http_stack"]:
            print(f"  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
