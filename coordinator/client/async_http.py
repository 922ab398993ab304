"""`AsyncHttpDriver`: an `HttpClient`'s calls as coroutines, over httpx's async transport (no threads).

The operations are the client's own (`HttpClient.calls`, one `Call` per operation) and so are the rules:
the token, the Idempotency-Key (made once per call, the same on every retry), which failures are retried
and after how long, which become `tls_untrusted` / `unreachable` / the service's refusal
(`calls.RetryRule`). Only the I/O differs from `HttpClient._run`: `await`, `asyncio.sleep` between
attempts, and the TLS probe after a plain-http call was cut off is an asyncio connection.

Transports, as for the blocking client: plain http:// and unix:// (`serve --uds`) go straight to asyncio
streams (`AsyncPlainHttp`: TCP or unix streams, the request in one write, a small parser for the answer,
keep-alive connections pooled, idle ones dropped after 4 s, under the service's keep-alive), because httpx's
async transport costs about three times the client CPU per call, and the former thread pool over the blocking
fast path no less than these streams while it started 8 threads (BENCHMARKS.md, "Figures behind design
choices"). https:// goes to httpx's `AsyncHTTPTransport`, trusting the client's `ca_file` or the system's
CAs. Failures are raised as httpx's transport errors, so the rules are the same with either.

One driver belongs to one event loop (its connections do): make it, use it and close it (`aclose`) on the
same loop. `coordinator.AsyncClient.remote` makes one and owns it.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping
from typing import Any, TypeVar

import httpx

from coordinator.client.calls import Call, Calls, headers_for, loads, payload_for, timeout_for
from coordinator.client.http import HttpClient
from coordinator.client.transport import PoolKey, Reply
from coordinator.endpoint import describe
from coordinator.http1 import RECV_BYTES, Answer, AnswerParser

T = TypeVar("T")


class AsyncHttpDriver:
    """Runs `Call`s (`self.calls.read(...)`, ...) of `client` as coroutines; see the module docstring."""

    def __init__(self, client: HttpClient, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.client = client
        self.calls: Calls = client.calls
        self._owns_transport = transport is None
        self._plain: AsyncPlainHttp | None = None
        self._transport = transport if transport is not None else self._connections()

    def _connections(self) -> httpx.AsyncBaseTransport:
        """Fresh connection pools (plain http:// streams, httpx's transport for https://)."""
        n = self.client._max_connections
        self._plain = AsyncPlainHttp(n) if self.client._plain else None
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        uds = self.client.endpoint.socket_path
        return httpx.AsyncHTTPTransport(verify=self.client._verify, limits=limits, uds=uds)

    def rebind(self) -> None:
        """Forget the pooled connections of a loop that is gone (they belonged to it); the next call opens
        new ones on the running loop. A transport given to the client is kept."""
        if self._owns_transport:
            self._transport = self._connections()

    @classmethod
    def for_client(cls, client: HttpClient) -> AsyncHttpDriver | None:
        """A driver for `client`, or None when its transport is one the caller made and it has no async
        side (an `httpx.MockTransport` has one: it is used as is)."""
        if client._made_transport:
            return cls(client)
        given = client._transport
        return cls(client, given) if isinstance(given, httpx.AsyncBaseTransport) else None

    async def run(self, call: Call[T]) -> T:
        """Send `call`, retrying while that is safe (the rules of `HttpClient._run`, awaited)."""
        client = self.client
        headers = headers_for(call, client._token_for(call.session) if call.auth else None)
        payload = payload_for(call)
        rule = client._rule
        attempt = 0
        while True:
            try:
                r = await self._send(call, payload, headers)
            except httpx.TransportError as exc:
                probe = rule.needs_tls_probe(exc) and await self._serves_tls()
                delay = rule.after_transport_error(call, exc, attempt, probe)
            else:
                if r.status_code < 300:
                    return call.decode(loads(r.content))
                delay = rule.after_refusal(call, r, attempt)
            attempt += 1
            await asyncio.sleep(delay)

    async def _send(self, call: Call[Any], payload: bytes | None, headers: dict[str, str]) -> Reply | httpx.Response:
        if self._plain is not None:
            target, head = self.client._plain_head(call, payload, headers)
            timeout = timeout_for(self.client._timeout, call)
            return await self._plain.roundtrip(self.client._host_key, call.method, target, head, payload, timeout)
        response = await self._transport.handle_async_request(self.client._request(call, payload, headers))
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response

    async def _serves_tls(self) -> bool:
        """Whether a TLS handshake with the service's host:port completes (any certificate accepted)."""
        endpoint = self.client.endpoint
        if endpoint.is_unix:
            return False  # `serve --uds` never serves TLS
        host, port = endpoint.host, endpoint.port
        probe = ssl.create_default_context()
        probe.check_hostname = False
        probe.verify_mode = ssl.CERT_NONE
        try:
            connecting = asyncio.open_connection(host, port, ssl=probe)
            _, writer = await asyncio.wait_for(connecting, self.client._timeout.get("connect"))
        except (OSError, ValueError, TimeoutError):
            return False
        writer.close()
        return True

    async def aclose(self) -> None:
        """Close the connections (a transport given to the client is left to its maker)."""
        if self._plain is not None:
            self._plain.close()
        if self._owns_transport:
            await self._transport.aclose()


# -- plain http:// on asyncio streams ---------------------------------------------------------------------
_IDLE_EXPIRY_S = 4.0  # as transport.py: under uvicorn's default keep-alive (5 s), a pooled connection is fresh
_MAX_LINE = 65536


class _Conn:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def close(self) -> None:
        self.writer.close()


class AsyncPlainHttp:
    """HTTP/1.1 keep-alive for plain http:// on asyncio streams (the async twin of
    `transport.PlainHttpTransport`). One request per connection at a time; a connection whose exchange did
    not finish (an error, a timeout, a cancellation) is closed, never pooled again."""

    def __init__(self, max_idle: int = 16) -> None:
        self._idle: dict[PoolKey, list[_Conn]] = {}
        self._max_idle = max_idle

    async def roundtrip(
        self,
        key: PoolKey,
        method: str,
        target: str,
        head: bytes,
        body: bytes | None,
        timeout: Mapping[str, float | None],
    ) -> Reply:
        """One request on a pooled connection. `head`: header lines, each ending in CRLF (with Host)."""
        payload = f"{method} {target} HTTP/1.1\r\n".encode("ascii") + head + b"\r\n" + (body or b"")
        conn = await self._checkout(key, timeout.get("connect"))
        try:
            conn.writer.write(payload)  # one write: request line, headers and body together
            async with asyncio.timeout(timeout.get("write")):
                await conn.writer.drain()
            async with asyncio.timeout(timeout.get("read")):
                status, headers, content, will_close = await _receive(conn.reader, method)
        except TimeoutError as exc:
            conn.close()
            raise httpx.ReadTimeout(f"no answer within the read timeout: {exc}") from exc
        except (OSError, ValueError, EOFError) as exc:  # EOFError: asyncio.IncompleteReadError
            conn.close()
            raise httpx.RemoteProtocolError(f"connection failed: {exc!r}") from exc
        except BaseException:
            conn.close()  # cancelled mid-exchange: the connection's state is unknown
            raise
        if will_close:
            conn.close()
        else:
            conn.idle_since = time.monotonic()
            pool = self._idle.setdefault(key, [])
            if len(pool) < self._max_idle:
                pool.append(conn)
            else:
                conn.close()
        return Reply(status, headers, content)

    async def _checkout(self, key: PoolKey, connect_timeout: float | None) -> _Conn:
        now = time.monotonic()
        pool = self._idle.get(key)
        while pool:
            conn = pool.pop()
            if now - conn.idle_since < _IDLE_EXPIRY_S and not conn.reader.at_eof():
                return conn
            conn.close()
        if isinstance(key, str):  # a unix socket's path (`serve --uds`)
            connecting = asyncio.open_unix_connection(key, limit=_MAX_LINE)
        else:
            connecting = asyncio.open_connection(*key, limit=_MAX_LINE)
        try:
            reader, writer = await asyncio.wait_for(connecting, connect_timeout)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"could not connect to {describe(key)}: {exc}") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"could not connect to {describe(key)}: {exc}") from exc
        return _Conn(reader, writer)

    def close(self) -> None:
        pools, self._idle = self._idle, {}
        for pool in pools.values():
            for conn in pool:
                conn.close()


async def _receive(reader: asyncio.StreamReader, method: str) -> Answer:
    """The answer to the request just sent (coordinator/http1.py parses it). ValueError: malformed or cut."""
    parser = AnswerParser(method)
    while (answer := parser.feed(await reader.read(RECV_BYTES))) is None:
        pass
    return answer
