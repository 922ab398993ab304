"""`AsyncHttpDriver`: an `HttpClient`'s calls as coroutines, over httpx's async transport (no threads).

The operations are the client's own (`HttpClient.calls`, one `Call` per operation) and so are the rules:
the token, the Idempotency-Key (made once per call, the same on every retry), which failures are retried
and after how long, which become `tls_untrusted` / `unreachable` / the service's refusal
(`calls.RetryRule`). Only the I/O differs from `HttpClient._run`: `await` on httpx's `AsyncHTTPTransport`
(the client's `ca_file` trusted, or the system's CAs), `asyncio.sleep` between attempts, and the TLS probe
after a plain-http call was cut off is an asyncio connection.

One driver belongs to one event loop (its connections do): make it, use it and close it (`aclose`) on the
same loop. `coordinator.AsyncClient.remote` makes one and owns it.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, TypeVar

import httpx

from .calls import Call, Calls, headers_for, payload_for
from .http import HttpClient

T = TypeVar("T")


class AsyncHttpDriver:
    """Runs `Call`s (`self.calls.read(...)`, ...) of `client` as coroutines; see the module docstring."""

    def __init__(self, client: HttpClient, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.client = client
        self.calls: Calls = client.calls
        self._owns_transport = transport is None
        if transport is None:
            n = client._max_connections
            limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
            transport = httpx.AsyncHTTPTransport(verify=client._verify, limits=limits)
        self._transport = transport

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
                    return call.decode(r.json())
                delay = rule.after_refusal(call, r, attempt)
            attempt += 1
            await asyncio.sleep(delay)

    async def _send(self, call: Call[Any], payload: bytes | None, headers: dict[str, str]) -> httpx.Response:
        response = await self._transport.handle_async_request(self.client._request(call, payload, headers))
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response

    async def _serves_tls(self) -> bool:
        """Whether a TLS handshake with the service's host:port completes (any certificate accepted)."""
        host, port = self.client._host_key
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
        if self._owns_transport:
            await self._transport.aclose()
