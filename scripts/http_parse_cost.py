"""The client's HTTP/1.1 answer parsing: the project's own parser against h11, side by side (issue 27).

    python3 scripts/http_parse_cost.py [--calls N] [--rounds R]

One call's worth of HTTP work on the client, without a socket: the request head and body built, and an
edit's answer as the service sends it (uvicorn's headers, a WriteResult of the usual size) parsed to
status, headers and body. `ours` is the package's parser (`coordinator.http1.AnswerParser`, fed the
answer as one receive, as every transport feeds it; the request head as one string); `h11` is h11's client
state machine doing the same (send Request, Data, EndOfMessage; receive_data; next_event to EndOfMessage;
start_next_cycle). Rounds alternate the two so
that load hits both alike; printed: the CPU per call of each (process time, best round) and the
difference, to be set against an HTTP edit's CPU (`scripts/http_latency.py`, column http-project).
h11 is already installed with httpx (httpcore depends on it), so using it would add no dependency.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import h11

from coordinator.http1 import AnswerParser

_BODY = json.dumps(
    {
        "path": "src/app.py",
        "operation": "edit",
        "created": False,
        "version": 12,
        "hash": "ab" * 16,
        "message": "The file src/app.py has been updated (1 replacement). Here is the result of running "
        "`cat -n` on a snippet of the edited file:",
        "replacements": 1,
        "start_line": 3,
        "snippet": "\n".join(f"{i:6}\tline {i}" for i in range(1, 10)),
        "timings": {},
    }
).encode()
_ANSWER = (
    b"HTTP/1.1 200 OK\r\ndate: Thu, 03 Dec 2026 13:00:00 GMT\r\nserver: uvicorn\r\n"
    b"content-type: application/json\r\ncache-control: no-store\r\ncontent-length: %d\r\n\r\n" % len(_BODY)
) + _BODY
_REQUEST_BODY = b'{"session": "s", "path": "src/app.py", "old_string": "x = 1", "new_string": "x = 2"}'
_HEADERS = [
    ("host", "127.0.0.1:8765"),
    ("content-type", "application/json"),
    ("authorization", "Bearer " + "t" * 180),
    ("content-length", str(len(_REQUEST_BODY))),
]


def ours(calls: int) -> float:
    """Process seconds per call with the project's transport rules."""
    t = time.process_time()
    for _ in range(calls):
        head = "POST /v1/edit HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in _HEADERS) + "\r\n"
        _ = head.encode() + _REQUEST_BODY
        answer = AnswerParser("POST").feed(_ANSWER)
        assert answer is not None and answer[0] == 200 and answer[2] == _BODY
    return (time.process_time() - t) / calls


def with_h11(calls: int) -> float:
    """Process seconds per call with h11's client state machine."""
    conn = h11.Connection(h11.CLIENT)
    t = time.process_time()
    for _ in range(calls):
        conn.send(h11.Request(method="POST", target="/v1/edit", headers=_HEADERS))
        conn.send(h11.Data(data=_REQUEST_BODY))
        conn.send(h11.EndOfMessage())
        conn.receive_data(_ANSWER)
        body = b""
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.Response):
                assert event.status_code == 200
        assert body == _BODY
        conn.start_next_cycle()
    return (time.process_time() - t) / calls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--calls", type=int, default=3000, help="calls per round and side (default 3000)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, the sides alternating (default 5)")
    args = p.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        p.error("--calls and --rounds must be at least 1")
    sides: dict[str, Callable[[int], float]] = {"ours": ours, "h11": with_h11}
    best = {name: float("inf") for name in sides}
    for r in range(args.rounds):
        for name in sorted(sides, reverse=bool(r % 2)):
            best[name] = min(best[name], sides[name](args.calls))
    for name, seconds in best.items():
        print(f"{name:5} {seconds * 1e6:8.1f} us CPU per call")
    print(f"h11 costs {(best['h11'] - best['ours']) * 1e6:.1f} us more per call ({best['h11'] / best['ours']:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
