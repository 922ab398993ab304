"""A small HTTP/1.1 keep-alive transport for plain http:// and unix:// (httpx's transport interface), used by
`HttpClient`."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

import httpx
import pydantic_core

from coordinator.endpoint import connect, describe
from coordinator.http1 import RECV_BYTES, Answer, AnswerParser

PoolKey = tuple[str, int] | str  # (host, port), or a unix socket's path (`coordinator.endpoint`)
_IDLE_EXPIRY_S = 4.0  # under uvicorn's default keep-alive (5 s): a pooled connection is never stale


class Reply:
    """An answer as the client needs it: status, headers (lower-case names), body."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return pydantic_core.from_json(self.content)


class _Conn:
    __slots__ = ("idle_since", "sock", "timeout")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.idle_since = 0.0
        self.timeout = sock.gettimeout()

    def set_timeout(self, timeout: float | None) -> None:
        """`sock.settimeout`, only when it changes (each call is a system call, even with the same value)."""
        if timeout != self.timeout:
            self.sock.settimeout(timeout)
            self.timeout = timeout

    def close(self) -> None:
        self.sock.close()


class PlainHttpTransport(httpx.BaseTransport):
    """HTTP/1.1 keep-alive transport for plain http:// on bare sockets, its answers read by the package's one parser
    (coordinator/http1.py).

    Why not httpx's default transport here: it writes a request's headers and its body with two separate
    sends (so does `http.client`), and the service wakes up twice per call; this transport sends the request
    line, headers and body in one segment, and parses the answer without building header objects (the
    client's CPU per call fell to about a third (BENCHMARKS.md, "Figures behind design choices")). https:// URLs go to
    httpx's own transport. Errors are raised as httpx's transport errors, so retries work the same with
    either. Thread-safe: each request has a connection to itself while it runs.

    `uds`: every request goes to this unix socket (`serve --uds PATH`), whatever the URL's host says.
    """

    def __init__(self, max_connections: int = 16, uds: str | None = None) -> None:
        self._idle: dict[PoolKey, list[_Conn]] = {}
        self._lock = threading.Lock()
        self._max_idle = max_connections
        self._tls: httpx.HTTPTransport | None = None
        self._uds = uds

    # httpx's transport interface ------------------------------------------------------------------------
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            if self._tls is None:
                self._tls = httpx.HTTPTransport()
            return self._tls.handle_request(request)
        head = b"".join(name + b": " + value + b"\r\n" for name, value in request.headers.raw)
        reply = self.roundtrip(
            self._uds if self._uds is not None else (url.host, url.port or 80),
            request.method,
            url.raw_path.decode("ascii"),
            head,
            request.read(),
            request.extensions.get("timeout", {}),
            request=request,
        )
        return httpx.Response(reply.status_code, headers=reply.headers, content=reply.content, request=request)

    # the fast path ---------------------------------------------------------------------------------------
    def roundtrip(
        self,
        key: PoolKey,
        method: str,
        target: str,
        head: bytes,
        body: bytes,
        timeout: Mapping[str, float | None],
        request: httpx.Request | None = None,
    ) -> Reply:
        """One request on a pooled connection. `head`: header lines, each ending in CRLF (with Host)."""
        payload = f"{method} {target} HTTP/1.1\r\n".encode("ascii") + head + b"\r\n" + body
        conn = self._checkout(key, timeout.get("connect"), request)
        try:
            conn.set_timeout(timeout.get("write"))
            conn.sock.sendall(payload)  # one send: request line, headers and body together
            conn.set_timeout(timeout.get("read"))
            status, headers, content, will_close = _receive(conn.sock, method)
        except TimeoutError as exc:
            conn.close()
            raise httpx.ReadTimeout(f"no answer within the read timeout: {exc}", request=request) from exc
        except (OSError, ValueError) as exc:
            conn.close()
            raise httpx.RemoteProtocolError(f"connection failed: {exc!r}", request=request) from exc
        if will_close:
            conn.close()
        else:
            self._checkin(key, conn)
        return Reply(status, headers, content)

    def _checkout(self, key: PoolKey, connect_timeout: float | None, request: httpx.Request | None) -> _Conn:
        now = time.monotonic()
        with self._lock:
            pool = self._idle.get(key)
            while pool:
                conn = pool.pop()
                if now - conn.idle_since < _IDLE_EXPIRY_S:
                    return conn
                conn.close()
        try:
            sock = connect(key, connect_timeout)  # TCP_NODELAY on TCP
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"could not connect to {describe(key)}: {exc}", request=request) from exc
        except OSError as exc:
            raise httpx.ConnectError(f"could not connect to {describe(key)}: {exc}", request=request) from exc
        return _Conn(sock)

    def _checkin(self, key: PoolKey, conn: _Conn) -> None:
        conn.idle_since = time.monotonic()
        with self._lock:
            pool = self._idle.setdefault(key, [])
            if len(pool) < self._max_idle:
                pool.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            pools, self._idle = self._idle, {}
        for pool in pools.values():
            for conn in pool:
                conn.close()
        if self._tls is not None:
            self._tls.close()


def _receive(sock: socket.socket, method: str) -> Answer:
    """The answer to the request just sent (coordinator/http1.py parses it). ValueError: malformed or cut."""
    parser = AnswerParser(method)
    while (answer := parser.feed(sock.recv(RECV_BYTES))) is None:
        pass
    return answer
