"""`AsyncClient.remote`: the async HTTP driver, against real `edit-coordinator serve` processes.

Properties guarded: each `HttpClient` operation is described once (`Calls`) and both drivers run the same
description (signatures match); one script gives the same results and codes through `HttpClient` and
`AsyncClient.remote`; 16 coroutines over 8 sessions lose nothing and start no thread; a retry after a
dropped connection carries the same Idempotency-Key and is applied once; https with a CA file works and an
untrusted certificate is `tls_untrusted`; a cancelled remote call either wrote nothing (not sent) or is
finished by the service and answered again by its key, here and from another client.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from coordinator import AsyncClient, Client, CoordinatorError, ErrorCode, HttpClient, LocalClient
from coordinator.client.async_http import AsyncHttpDriver
from coordinator.client.base import plain
from coordinator.client.calls import Calls
from coordinator.disk.locks import LockManager
from coordinator.state.embedded import stop_embedded_redis
from tests import coroutines
from tests.coordinator.server.test_server import SECRET, ServerProcess, _wait_for_claim, versions
from tests.coordinator.server.test_tls import TlsServer, pki, tls_served  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("aio-served") / "repo"
    root.mkdir()
    server = ServerProcess(root, "--lock-timeout", "20", "--max-edits", "5", workers=1)
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


def _prefix() -> str:
    return f"p{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------------------------------------
# One description per operation
# ---------------------------------------------------------------------------------------------------------
_PLUMBING = {"run", "close", "session", "events"}  # not operations; `events` differs by design (a generator)
NAMED = [n for n, fn in vars(Client).items() if inspect.isfunction(fn) and not n.startswith("_") and n not in _PLUMBING]


def test_every_operation_is_written_once_per_client_with_one_signature() -> None:
    """The named methods live in `Client` (sync) and `AsyncClient` only: the transports and `Calls` add none,
    and the async ones take the sync ones' parameters (plus a keyword-only idempotency_key on writes)."""
    assert {"read", "edit", "poll_events", "restore", "break_lease", "history"} <= set(NAMED)
    for transport in (HttpClient, LocalClient, Calls):
        own = {name for name in vars(transport) if name in NAMED}
        assert own == set(), (transport.__name__, own)
    for name in NAMED:
        sync = inspect.signature(getattr(Client, name)).parameters
        extra = [p for p in inspect.signature(getattr(AsyncClient, name)).parameters if p not in sync]
        assert extra in ([], ["idempotency_key"]), (name, extra)
        shared = [inspect.signature(getattr(AsyncClient, name)).parameters[p] for p in sync]
        assert shared == list(sync.values()), name  # names, kinds, defaults


def test_the_async_driver_retries_a_lost_answer_with_the_same_key() -> None:
    """Fast, without a service: the same rule as HttpClient (a ReadError on an idempotent call is retried
    after a backoff, with the key it was sent with), then the answer decoded into the result type."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["idempotency-key"])
        if len(seen) == 1:
            raise httpx.ReadError("connection lost", request=request)
        body = {"path": "a.txt", "operation": "edit", "created": False, "version": 3, "hash": None, "message": "ok"}
        return httpx.Response(200, json=body)

    async def main() -> Any:
        async with AsyncClient(HttpClient("http://svc", token="t", transport=httpx.MockTransport(handler))) as c:
            assert c._remote is not None  # the mock has an async side: driven without the pool
            return await c.edit("s", "a.txt", "x", "y")

    res = asyncio.run(main())
    assert res.version == 3 and len(seen) == 2 and seen[0] == seen[1]


def test_a_transport_without_an_async_side_keeps_the_pool() -> None:
    class SyncOnly(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, json={"session": "s", "last_seen": None, "leases": []})

    client = HttpClient("http://svc", token="t", transport=SyncOnly())
    assert AsyncHttpDriver.for_client(client) is None

    async def main() -> str:
        async with AsyncClient(client) as c:
            return (await c.status("s")).session

    assert asyncio.run(main()) == "s"


# ---------------------------------------------------------------------------------------------------------
# The same script, both ways
# ---------------------------------------------------------------------------------------------------------
_CLOCK = re.compile(r"\b\d\d:\d\d:\d\d\b")
_VOLATILE = {"id", "time", "timings", "token", "granted_at", "ends_at", "cursor", "lease_token", "last_seen"}


def _normal(value: Any, prefix: str) -> Any:
    if isinstance(value, dict):
        return {k: _normal(v, prefix) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list | tuple):
        return [_normal(v, prefix) for v in value]
    if isinstance(value, str):
        return _CLOCK.sub("HH:MM:SS", value.replace(prefix, "P"))  # lease ends, in messages
    return value


def _script(p: str) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """(operation, args, kwargs): successes and refusals of every kind the service gives."""
    a, b, s1, s2 = f"{p}_a.txt", f"{p}_b.txt", f"{p}-1", f"{p}-2"
    return [
        ("write", (s1, a, "one\ntwo\nthree\n"), {}),
        ("read", (s1, a), {}),
        ("edit", (s1, a, "two", "TWO"), {}),
        ("edit", (s2, a, "one", "1"), {}),  # not_read
        ("read", (s2, a), {}),
        ("edit", (s2, a, "zzz", "y"), {}),  # no_match
        ("edit", (s1, a, "TWO", "TWO"), {}),  # no_change
        ("write", (s1, b, "x\nx\n"), {}),
        ("edit", (s1, b, "x", "y"), {}),  # ambiguous
        (
            "multi_edit",
            (s1, a, [{"old_string": "one", "new_string": "ONE"}, {"old_string": "three", "new_string": "3"}]),
            {},
        ),
        ("multi_edit", (s1, a, [{"old_string": "ONE", "new_string": str(i)} for i in range(6)]), {}),  # over the limit
        ("edit", (s2, a, "TWO", "2"), {}),  # stale
        ("notices", (s2,), {}),
        ("lease", (s2, a), {}),
        ("edit", (s1, a, "TWO", "two"), {}),  # leased
        ("leases", (s2,), {}),
        ("release", (s2,), {}),
        ("lease", (s2, [a, b], "shared", 60.0), {}),
        ("break_lease", (), {"session": s2}),
        ("undo", (s1, a), {}),
        ("redo", (s1, a), {}),
        ("undo", (s2, a), {}),  # nothing of s2's to undo
        ("read", (s1, a, 2, 1), {}),
        ("read", (s1, f"{p}_missing.txt"), {}),  # file_not_found
        ("read", (s1, "../outside.txt"), {}),  # outside_root
        ("history", (a,), {}),
        ("restore", (a, 1), {}),
        ("status", (s1,), {}),
        ("poll_events", ("0", [a]), {}),
    ]


def _outcome(name: str, result: Any, p: str) -> Any:
    value = _normal(plain(result), p)
    if name == "break_lease":  # the leases a break ended come in no particular order
        value = sorted(value, key=repr)
    return ["ok", value]


def _refusal(exc: CoordinatorError, p: str) -> Any:
    return ["refused", exc.code.value, exc.details.get("service_code"), _normal(exc.message, p)]


def _run_sync(served: ServerProcess) -> list[Any]:
    p = _prefix()
    out: list[Any] = []
    with HttpClient(served.url, secret=SECRET) as client:
        for name, args, kwargs in _script(p):
            try:
                out.append(_outcome(name, getattr(client, name)(*args, **kwargs), p))
            except CoordinatorError as exc:
                out.append(_refusal(exc, p))
    return out


async def _run_async(served: ServerProcess) -> list[Any]:
    p = _prefix()
    out: list[Any] = []
    async with AsyncClient.remote(served.url, secret=SECRET) as client:
        assert client._remote is not None
        for name, args, kwargs in _script(p):
            try:
                out.append(_outcome(name, await getattr(client, name)(*args, **kwargs), p))
            except CoordinatorError as exc:
                out.append(_refusal(exc, p))
    return out


def test_the_same_script_gives_the_same_results_and_codes(served: ServerProcess) -> None:
    sync = _run_sync(served)
    remote = asyncio.run(_run_async(served))
    assert len(sync) == len(remote) == len(_script("x"))
    for step, (a, b) in enumerate(zip(sync, remote, strict=True)):
        assert a == b, (step, _script("x")[step][0], a, b)
    codes = [r[1] for r in remote if r[0] == "refused"]
    assert codes == ["not_read", "no_match", "no_change", "ambiguous", "invalid_argument", "stale", "leased",
                     "invalid_argument", "file_not_found", "outside_root"], codes  # fmt: skip
    assert remote[-1][1]["events"], "the file's events since the start"


# ---------------------------------------------------------------------------------------------------------
# Many coroutines, no threads
# ---------------------------------------------------------------------------------------------------------
def test_sixteen_coroutines_over_eight_sessions_lose_nothing_and_start_no_thread(served: ServerProcess) -> None:
    p = _prefix()
    files = coroutines.prepare(served.root, f"{p}_")
    rounds = 5

    async def main() -> tuple[list[int], int, int, int]:
        before = threading.active_count()
        most = before
        async with AsyncClient.remote(served.url, secret=SECRET, policy="rebase", max_workers=8) as client:
            jobs = asyncio.gather(
                *(
                    coroutines.increment_own_line(client, f"{p}-s{i % 8}", files[i % 4], f"s{i % 8} = ", rounds)
                    for i in range(coroutines.COROUTINES)
                )
            )
            while not jobs.done():
                most = max(most, threading.active_count())
                await asyncio.sleep(0.001)
            during = threading.active_count()
            return await jobs, before, most, during

    acked, before, most, during = asyncio.run(main())
    assert acked == [rounds] * coroutines.COROUTINES
    assert most == before and during == before, (before, most, during)  # no worker thread, none per call
    coroutines.assert_every_increment_landed(served.root, files, rounds)


def test_events_are_awaited_long_polls(served: ServerProcess) -> None:
    p = _prefix()
    name = f"{p}_ev.txt"

    async def main() -> list[str]:
        async with AsyncClient.remote(served.url, secret=SECRET) as client:
            seen: list[str] = []
            before = threading.active_count()

            async def follow() -> None:
                async for event in client.events(paths=[name], wait_s=5.0):
                    seen.append(event.operation)
                    if len(seen) == 2:
                        return

            follower = asyncio.ensure_future(follow())
            await asyncio.sleep(0.2)  # the follower is in its long poll
            await client.write(f"{p}-w", name, "a\n")
            await client.read(f"{p}-w", name)
            await client.edit(f"{p}-w", name, "a", "b")
            await asyncio.wait_for(follower, 30)
            assert threading.active_count() == before
            return seen

    assert asyncio.run(main()) == ["write", "edit"]


# ---------------------------------------------------------------------------------------------------------
# A dropped connection
# ---------------------------------------------------------------------------------------------------------
TLS_HANDSHAKE = b"\x16"  # the first byte of a TLS record carrying a ClientHello


class DropFirstAnswer:
    """A TCP proxy in front of the service: forwards each request, but for the first request to `path`
    reads the service's answer and closes the client's connection instead of passing it on."""

    def __init__(self, upstream: str, path: str) -> None:
        url = httpx.URL(upstream)
        self.upstream = (url.host, url.port)
        self.path = path.encode()
        self.keys: list[str] = []
        self.dropped = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        if conn.recv(1, socket.MSG_PEEK) == TLS_HANDSHAKE:
            # The client's probe after the dropped answer (does this port speak TLS?): a plain-HTTP service
            # answers a ClientHello with an error and closes at once, and so does the proxy, instead of
            # waiting for a request line that never comes until the probe's connect timeout runs out.
            conn.close()
            return
        with conn, socket.create_connection(self.upstream) as up:
            rfile, ufile = conn.makefile("rb"), up.makefile("rb")
            while True:
                request = _read_message(rfile, request=True)
                if request is None:
                    return
                head, _ = request
                up.sendall(b"".join(request))
                answer = _read_message(ufile, request=False)
                assert answer is not None
                if head.split(b" ")[1] == self.path:
                    key = next(x for x in head.split(b"\r\n") if x.lower().startswith(b"idempotency-key:"))
                    self.keys.append(key.split(b":", 1)[1].strip().decode())
                    if self.dropped == 0:
                        self.dropped += 1
                        return  # the answer is lost with the connection
                conn.sendall(b"".join(answer))

    def close(self) -> None:
        self.listener.close()


def _read_message(f: Any, request: bool) -> tuple[bytes, bytes] | None:
    lines = []
    while True:
        line = f.readline()
        if not line:
            return None
        lines.append(line)
        if line == b"\r\n":
            break
    head = b"".join(lines)
    length = 0
    for h in lines[1:]:
        if h.lower().startswith(b"content-length:"):
            length = int(h.split(b":", 1)[1])
    return head, f.read(length) if length else b""


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_retry_after_a_dropped_connection_keeps_the_key(served: ServerProcess, kind: str) -> None:
    p = _prefix()
    name = f"{p}_drop.txt"
    (served.root / name).write_text("alpha\nbeta\n")
    proxy = DropFirstAnswer(served.url, "/v1/edit")
    try:
        if kind == "sync":
            with HttpClient(proxy.url, secret=SECRET, backoff_s=0.01) as c:
                c.read(p, name)
                res = c.edit(p, name, "alpha", "ALPHA")
        else:

            async def main() -> Any:
                async with AsyncClient.remote(proxy.url, secret=SECRET, backoff_s=0.01) as c:
                    await c.read(p, name)
                    return await c.edit(p, name, "alpha", "ALPHA")

            res = asyncio.run(main())
    finally:
        proxy.close()
    assert proxy.dropped == 1 and len(proxy.keys) == 2 and proxy.keys[0] == proxy.keys[1], proxy.keys
    assert res.replacements == 1 and res.version == 1  # the first (kept) answer, replayed
    assert (served.root / name).read_text() == "ALPHA\nbeta\n" and versions(served, name) == 1


def test_unreachable_is_state_unavailable_through_the_async_driver() -> None:
    async def main() -> CoordinatorError:
        async with AsyncClient.remote("http://127.0.0.1:9", secret=SECRET, retries=1, backoff_s=0.01) as c:
            with pytest.raises(CoordinatorError) as ei:
                await c.read("s", "a.txt")
            return ei.value

    err = asyncio.run(main())
    assert err.code is ErrorCode.STATE_UNAVAILABLE and err.details["service_code"] == "unreachable"
    assert "not sent" in err.message


# ---------------------------------------------------------------------------------------------------------
# TLS
# ---------------------------------------------------------------------------------------------------------
def test_tls_with_the_ca_file_and_the_same_refusals(tls_served: TlsServer, pki: Any) -> None:  # noqa: F811
    p = _prefix()
    name = f"{p}_tls.txt"
    (tls_served.root / name).write_text("alpha\n")

    async def main() -> tuple[str, CoordinatorError, CoordinatorError, CoordinatorError]:
        async with AsyncClient.remote(tls_served.url, secret=SECRET, ca_file=pki.ca) as c:
            await c.read(p, name)
            done = (await c.edit(p, name, "alpha", "omega")).message
        refusals = []
        for url, options in (
            (tls_served.url, {}),  # the system's CAs do not know the private CA
            (tls_served.url, {"ca_file": pki.other_ca}),
            (tls_served.url.replace("https://", "http://"), {}),  # plain http to the TLS port
        ):
            async with AsyncClient.remote(url, secret=SECRET, retries=0, **options) as c:
                with pytest.raises(CoordinatorError) as ei:
                    await c.read(p, name)
                refusals.append(ei.value)
        return done, refusals[0], refusals[1], refusals[2]

    done, untrusted, other_ca, plain_http = anyio.run(main)
    assert "omega" in (tls_served.root / name).read_text() and done
    for err in (untrusted, other_ca):
        assert err.code is ErrorCode.INVALID_ARGUMENT and err.details["service_code"] == "tls_untrusted", err
        assert "CA file" in err.message
    assert plain_http.code is ErrorCode.INVALID_ARGUMENT and "serves TLS" in plain_http.message, plain_http


# ---------------------------------------------------------------------------------------------------------
# Cancellation
# ---------------------------------------------------------------------------------------------------------
async def _ticks(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0.001)


def test_a_cancelled_sent_call_is_finished_by_the_service_and_answered_by_its_key(served: ServerProcess) -> None:
    p = _prefix()
    name, other = f"{p}_c.txt", f"{p}_queued.txt"
    (served.root / name).write_text("count = 0\n")
    key, queued_key = f"k-{p}", f"q-{p}"

    async def main() -> None:
        async with AsyncClient.remote(served.url, secret=SECRET, max_workers=1) as client:
            s = client.session(p)
            await s.read(name)
            held = LockManager(served.root / ".edit-coordinator" / "locks").acquire(name)
            try:
                first = asyncio.ensure_future(s.edit(name, "count = 0", "count = 1", idempotency_key=key))
                await asyncio.to_thread(_wait_for_claim, served, p, key)  # the service is running it
                # The one turn is taken: this write waits for it, unsent.
                queued = asyncio.ensure_future(s.write(other, "new\n", idempotency_key=queued_key))
                await _ticks(10)
                queued.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await queued
                assert client.outcome(queued_key) == "not_run"
                first.cancel()  # sent: the service finishes it
                with pytest.raises(asyncio.CancelledError):
                    await first
                assert client.outcome(key) == "running"
            finally:
                held.release()
            again = await s.edit(name, "count = 0", "count = 1", idempotency_key=key)
            assert client.outcome(key) == "done" and again.version == 1
            assert not (served.root / other).exists()
            assert (await s.write(other, "new\n", idempotency_key=queued_key)).created
        # Another client (as another process would): the service answers the key with the first answer.
        async with AsyncClient.remote(served.url, secret=SECRET) as fresh:
            assert fresh.outcome(key) == "unknown"
            replay = await fresh.edit(p, name, "count = 0", "count = 1", idempotency_key=key)
            assert replay.version == 1 and replay.message == again.message

    asyncio.run(main())
    assert (served.root / name).read_text() == "count = 1\n" and versions(served, name) == 1


def test_a_keyed_call_that_found_the_service_unreachable_is_sent_again() -> None:
    """Asked again with its key after `unreachable` (retryable), the call is sent again with that key, not
    answered with the old failure; a refusal that is not retryable is answered from memory."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["idempotency-key"])
        if len(seen) == 1:
            raise httpx.ConnectError("refused", request=request)
        if request.url.path == "/v1/edit":
            return httpx.Response(409, json={"code": "stale", "message": "read it again"})
        body = {"path": "a.txt", "operation": "write", "created": True, "version": 1, "hash": None, "message": "ok"}
        return httpx.Response(200, json=body)

    async def main() -> tuple[CoordinatorError, bool, int]:
        transport = httpx.MockTransport(handler)
        async with AsyncClient(HttpClient("http://svc", token="t", retries=0, transport=transport)) as c:
            with pytest.raises(CoordinatorError) as first:
                await c.write("s", "a.txt", "x\n", idempotency_key="k")
            assert c.outcome("k") == "done"
            created = (await c.write("s", "a.txt", "x\n", idempotency_key="k")).created
            for _ in range(2):
                with pytest.raises(CoordinatorError) as stale:
                    await c.edit("s", "a.txt", "x", "y", idempotency_key="e")
                assert stale.value.code is ErrorCode.STALE
            return first.value, created, len(seen)

    err, created, sent = asyncio.run(main())
    assert err.details["service_code"] == "unreachable" and created
    assert sent == 3 and seen[:2] == ["k", "k"] and seen[2] == "e"  # the stale edit was sent once


def test_the_async_plain_transport_reads_chunked_interim_and_closing_answers() -> None:
    """Against a stub service: a 100 Continue before the answer, a chunked body, keep-alive reuse, then an
    answer delimited by the connection's end; a connection cut mid-answer is a retryable transport error."""
    from coordinator.client.async_http import AsyncPlainHttp

    answers = [
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b'3\r\n{"a\r\n5\r\n": 1}\r\n0\r\n\r\n',
        b"HTTP/1.1 409 Conflict\r\ncontent-length: 2\r\n\r\n{}",
        b"HTTP/1.0 200 OK\r\n\r\n[1, 2]",
    ]
    connections = 0

    async def main() -> tuple[list[Any], str]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            while answers:
                if not await reader.readuntil(b"\r\n\r\n"):
                    return
                answer = answers.pop(0)
                writer.write(answer)
                await writer.drain()
                if answer.startswith(b"HTTP/1.0"):
                    break
            if not answers and connections > 1:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort")  # cut short
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        key = ("127.0.0.1", server.sockets[0].getsockname()[1])
        plain = AsyncPlainHttp()
        head = f"host: {key[0]}\r\n".encode()
        got = []
        for _ in range(3):
            r = await plain.roundtrip(key, "GET", "/", head, None, {"read": 5.0})
            got.append((r.status_code, r.json()))
        with pytest.raises(httpx.RemoteProtocolError) as cut:
            await plain.roundtrip(key, "GET", "/", head, None, {"read": 5.0})
        plain.close()
        server.close()
        return got, repr(cut.value)

    got, cut = asyncio.run(main())
    assert got == [(200, {"a": 1}), (409, {}), (200, [1, 2])], got
    assert connections == 2 and "connection failed" in cut  # the three answers came on one kept-alive connection


def test_one_remote_client_on_two_loops_one_after_the_other(served: ServerProcess) -> None:
    """`asyncio.run` twice with the same client: the second loop gets connections of its own."""
    p = _prefix()
    name = f"{p}_loops.txt"
    (served.root / name).write_text("one\n")
    client = AsyncClient.remote(served.url, secret=SECRET, max_workers=2)

    async def first() -> None:
        await client.read(p, name)
        await asyncio.gather(*(client.read(p, name) for _ in range(4)))  # the turns are contended

    async def second() -> int:
        await asyncio.gather(*(client.read(p, name) for _ in range(4)))
        res = await client.edit(p, name, "one", "two")
        await client.aclose()
        return res.version

    asyncio.run(first())
    assert asyncio.run(second()) == 1
    assert (served.root / name).read_text() == "two\n"
