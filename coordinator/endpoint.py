"""Where a coordinator service listens, read from its URL, and a plain standard-library connection to it.

The service URLs every client takes (`HttpClient`, `AsyncClient.remote`, `--server` of every command, the hook
client), read here once so that the forms and their refusals have one owner:

- `http://host:port` and `https://host:port`: the service over TCP (`edit-coordinator serve`);
- `unix:///absolute/path.sock`: the service on a unix socket (`edit-coordinator serve --uds PATH`), for
  clients on the same host. Everything after `unix://` is the socket's absolute path, taken literally (no
  percent-decoding); the request paths (`/v1/read`, ...) are sent in the HTTP request, not in the URL.

A unix socket's path may hold at most 107 bytes (the kernel's `sun_path` is 108 with its closing NUL):
`check_socket_path` refuses longer ones, for the service and for its clients alike.

Standard library only, and a ground module (it imports nothing of the package but `errors` and `http1`): a
short-lived process such as a command hook sends its one request with `request_once` (a bare socket: neither
http.client, nor dataclasses, nor httpx, pydantic or the engine are loaded on that path; https goes through
http.client).
Its answer is read by the package's one HTTP/1.1 answer parser (coordinator/http1.py), as the clients'
keep-alive transports read theirs.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from coordinator.http1 import RECV_BYTES, AnswerParser

if TYPE_CHECKING:
    import http.client

    from coordinator.errors import CoordinatorError

UNIX_PREFIX = "unix://"
MAX_UNIX_PATH_BYTES = 107
UNIX_HOST = "localhost"  # the Host header of a request on a unix socket (HTTP/1.1 requires one)
HOOK_PATH = "/v1/hooks/{agent}"  # an agent's hook events (coordinator/server/hooks.py); the route table's entry

__all__ = [
    "MAX_UNIX_PATH_BYTES",
    "UNIX_PREFIX",
    "ServiceEndpoint",
    "check_socket_path",
    "parse_service_url",
    "request_once",
    "unix_url",
]


class ServiceEndpoint(NamedTuple):
    """A service's address: `scheme` is "http", "https" or "unix"; `socket_path` is set for "unix" only
    (then `host` is "localhost", the Host header, and `port` is 0)."""

    url: str
    scheme: str
    host: str
    port: int
    socket_path: str | None = None

    @property
    def is_unix(self) -> bool:
        return self.socket_path is not None

    @property
    def pool_key(self) -> tuple[str, int] | str:
        """What a connection pool keys its connections by: (host, port), or the socket's path."""
        return self.socket_path if self.socket_path is not None else (self.host, self.port)

    def describe(self) -> str:
        """The address in words, for messages: "127.0.0.1:8765" or "the unix socket /run/x.sock"."""
        return describe(self.pool_key)

    def connect(self, timeout: float | None) -> socket.socket:
        """A connected stream socket (TCP_NODELAY on TCP). OSError (TimeoutError included) when it fails."""
        return connect(self.pool_key, timeout)

    def http_connection(self, timeout: float | None = 10.0) -> http.client.HTTPConnection:
        """A standard-library HTTP connection to the service (not yet connected): on the unix socket, or
        TCP, or TLS with the system's trusted CAs. Requests on it are answered like any other client's."""
        import http.client

        if self.socket_path is not None:
            conn = http.client.HTTPConnection(UNIX_HOST, timeout=timeout)
            path = self.socket_path
            conn.connect = lambda: setattr(conn, "sock", connect(path, conn.timeout))  # type: ignore[method-assign]
            return conn
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


def request_once(
    endpoint: ServiceEndpoint, method: str, target: str, body: bytes | None, headers: dict[str, str], timeout: float
) -> tuple[int, bytes]:
    """One request on a connection of its own (closed after it): (status, body). For a process that makes
    one call and exits, such as a command hook: plain http and unix sockets on a bare socket, https through
    http.client. OSError when the service cannot be reached or the answer is cut short or malformed."""
    if endpoint.scheme == "https":
        conn = endpoint.http_connection(timeout)
        try:
            conn.request(method, target, body, headers)
            answer = conn.getresponse()
            return answer.status, answer.read()
        finally:
            conn.close()
    payload = body or b""
    head = f"{method} {target} HTTP/1.1\r\nHost: {endpoint.host}\r\nConnection: close\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    head += f"Content-Length: {len(payload)}\r\n\r\n"
    parser = AnswerParser(method)
    with endpoint.connect(timeout) as sock:
        sock.sendall(head.encode("latin-1") + payload)
        try:
            while (got := parser.feed(sock.recv(RECV_BYTES))) is None:
                pass
        except ValueError as exc:
            raise OSError(f"the answer of {endpoint.describe()} cannot be read: {exc}") from None
    return got[0], got[2]


def connect(key: tuple[str, int] | str, timeout: float | None) -> socket.socket:
    """A connected stream socket to a pool key (`ServiceEndpoint.pool_key`)."""
    if isinstance(key, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(key)
        except BaseException:
            sock.close()
            raise
        return sock
    sock = socket.create_connection(key, timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def describe(key: tuple[str, int] | str) -> str:
    return f"the unix socket {key}" if isinstance(key, str) else f"{key[0]}:{key[1]}"


def unix_url(socket_path: str) -> str:
    """The service URL of a unix socket (an absolute path)."""
    return UNIX_PREFIX + socket_path


def check_socket_path(path: str, what: str = "The unix socket path") -> str:
    """`path` if it fits a unix socket address (at most 107 bytes, no NUL); else `invalid_argument`."""
    if "\x00" in path:
        raise _invalid(f"{what} {path!r} holds a NUL byte: give a plain path.")
    size = len(os.fsencode(path))
    if size > MAX_UNIX_PATH_BYTES:
        raise _invalid(
            f"{what} {path!r} is {size} bytes long; a unix socket's path may hold at most {MAX_UNIX_PATH_BYTES} "
            "bytes (the kernel's limit). Choose a shorter path, e.g. in /tmp or $XDG_RUNTIME_DIR.",
        )
    return path


def parse_service_url(url: str) -> ServiceEndpoint:
    """The endpoint of a service URL (see the module docstring); `invalid_argument` for anything else."""
    if not isinstance(url, str):
        raise _invalid(f"The service URL must be a string (got {url!r}).")
    url = url.strip()
    if url[: len(UNIX_PREFIX)].lower() == UNIX_PREFIX:
        return _unix_endpoint(url)
    try:
        parts = urlsplit(url.rstrip("/"))
        port = parts.port
    except ValueError as exc:
        raise _not_a_service_url(url, str(exc)) from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise _not_a_service_url(url)
    default_port = 443 if scheme == "https" else 80
    return ServiceEndpoint(url.rstrip("/"), scheme, parts.hostname, port or default_port)


def _unix_endpoint(url: str) -> ServiceEndpoint:
    path = url[len(UNIX_PREFIX) :]
    if not path.startswith("/"):
        raise _not_a_service_url(
            url, "a unix:// URL names the socket's absolute path, with three slashes: unix:///run/ec/serve.sock"
        )
    check_socket_path(path, "The unix socket path of the service URL")
    return ServiceEndpoint(unix_url(path), "unix", UNIX_HOST, 0, path)


def _not_a_service_url(url: str, why: str | None = None) -> CoordinatorError:
    reason = f" ({why})" if why else ""
    return _invalid(
        f"{url!r} is not a service URL{reason}: give http://HOST:PORT, https://HOST:PORT or "
        "unix:///ABSOLUTE/PATH.sock (the socket of `edit-coordinator serve --uds PATH`).",
    )


def _invalid(message: str) -> CoordinatorError:
    """`invalid_argument`, imported only when raised: coordinator.errors loads dataclasses (and inspect),
    which a command hook's start does not need when its URL is good."""
    from coordinator.errors import CoordinatorError, ErrorCode

    return CoordinatorError(ErrorCode.INVALID_ARGUMENT, message)
