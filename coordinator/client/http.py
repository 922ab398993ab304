"""`HttpClient`: the `Client` interface over the coordinator's HTTP service (`edit-coordinator serve`).

Same calls, same result types, same refusals (`CoordinatorError` with the library's codes) as
`LocalClient`, so a program runs unchanged against a remote service.

Each operation is declared once (`coordinator.client.operations`); `coordinator.client.calls.Calls.run`
makes its `Call` from the declaration (the request, whether a retry is safe, how the answer becomes the
result); the rules below are pure code there (`RetryRule`,
`headers_for`, `error_from`). This class is the blocking driver of those calls; `AsyncHttpDriver`
(`coordinator.client.async_http`, used by `AsyncClient.remote`) is the async one over the same rules.

Retries are safe: every write, edit, multi_edit and undo carries an `Idempotency-Key` that stays the same
across the retries of one call, so a call whose answer was lost (timeout, dropped connection) is applied
once and its first answer is returned. Retried: connection failures, timeouts, and the answers that
`coordinator.errors.CODES` marks retryable (nothing was done and the same call may succeed shortly:
`lock_timeout`, `state_unavailable`, `overloaded`, ...), after their Retry-After. Never retried: refusals
about the content or the view, which need a different call.

`policy` ("strict" / "rebase") and `match` ("exact" / "flexible"): sent with every write (`match` with
every edit and multi_edit); None leaves the service's default.

`idempotency_keys=False` sends no key (saves the service its Redis round trip per write) and then retries
no write, edit, multi_edit or undo that may have reached the service.

Tokens: pass `token` (one token for every call: a session token, or the admin token to act as any
session), `tokens` (a mapping or a function from session id to token), or `secret` (the coordinator
secret: tokens are made here, as `edit-coordinator token` would; calls that name no session use an admin
token).

A unix socket (`edit-coordinator serve --uds PATH`): `HttpClient("unix:///abs/path.sock", token=...)`, the
same calls in plain HTTP on that socket (`coordinator.endpoint` reads every URL form).

TLS: an https:// URL is checked against the system's trusted CAs, or, with `ca_file`, against the CA
certificate(s) of that PEM file only (a private CA: `edit-coordinator serve --tls-cert/--tls-key`). A
certificate that is not trusted (or not for the URL's host) is the refusal `invalid_argument` with
`details["service_code"] == "tls_untrusted"`, never retried;
an http:// URL to a TLS port, or https:// to a plain one, is `invalid_argument` naming the scheme to use.

Service refusals that have no library code are raised with the library code their row names
(`coordinator.errors.CODES[code].library`), and the service's own code in `details["service_code"]`.
"""

from __future__ import annotations

import os
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import httpx

from coordinator import arguments
from coordinator.client.base import Client
from coordinator.client.calls import (
    Call,
    Calls,
    RetryRule,
    error_from,
    headers_for,
    loads,
    payload_for,
    timeout_for,
)
from coordinator.client.operations import Operation, build
from coordinator.client.transport import PlainHttpTransport, Reply
from coordinator.endpoint import UNIX_HOST, ServiceEndpoint, parse_service_url
from coordinator.errors import CoordinatorError, ErrorCode

T = TypeVar("T")
TokenSource = str | Mapping[str, str] | Callable[[str], str]
_USER_AGENT = "edit-coordinator-http-client"

__all__ = ["HttpClient", "TokenSource", "build", "error_from"]


class HttpClient(Client):
    """A `coordinator.Client` that talks to `edit-coordinator serve` over HTTP (pooled keep-alive)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        tokens: Mapping[str, str] | Callable[[str], str] | None = None,
        secret: bytes | str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        retries: int = 3,
        backoff_s: float = 0.05,
        max_connections: int = 16,
        transport: httpx.BaseTransport | None = None,
        idempotency_keys: bool = True,
        policy: str | None = None,
        match: str | None = None,
        ca_file: str | os.PathLike[str] | None = None,
    ) -> None:
        if policy is not None:
            arguments.check_policy(policy)
        if match is not None:
            arguments.check_match(match)
        if sum(x is not None for x in (token, tokens, secret)) != 1:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT, "Give exactly one of token, tokens or secret to HttpClient."
            )
        self.endpoint = parse_service_url(url)  # http://, https:// or unix:///path.sock (coordinator.endpoint)
        self.url = self.endpoint.url
        # The URL the request paths are joined to; on a unix socket only its path and Host header count.
        self._join_to = f"http://{UNIX_HOST}" if self.endpoint.is_unix else self.url
        base = httpx.URL(self._join_to)
        self._token = token
        self._tokens = tokens
        self._secret = secret.encode() if isinstance(secret, str) else secret
        self._minted: dict[str | None, tuple[str, float]] = {}
        self.calls = Calls(policy, match, idempotency_keys)  # the operations, described once
        self._rule = RetryRule(self.url, retries, backoff_s)
        # Requests go straight to the transport (httpx's transport interface): the httpx.Client layer's
        # per-call work (URL merging, auth and redirect flows, cookies) is not needed here.
        if transport is not None and ca_file is not None:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT, "Give ca_file or transport to HttpClient, not both: a transport makes "
                "its own TLS settings (httpx.HTTPTransport(verify=...)).",
            )  # fmt: skip
        self._verify: bool | ssl.SSLContext = True if ca_file is None else _trusting(ca_file)
        self._max_connections = max_connections
        self._made_transport = transport is None  # (an async driver makes its own alike)
        if transport is None:
            transport = _default_transport(self.endpoint, max_connections, self._verify, ca_file is not None)
        self._transport = transport
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout).as_dict()
        self._urls: dict[str, httpx.URL] = {}
        self._targets: dict[str, str] = {}  # an endpoint's request target without query parameters
        self._fast = self._transport if type(self._transport) is PlainHttpTransport else None
        self._plain = self.endpoint.scheme != "https"  # plain HTTP: over TCP, or on a unix socket
        self._host_key = self.endpoint.pool_key  # (host, port), or the unix socket's path
        self._host_line = f"host: {base.netloc.decode('ascii')}\r\nuser-agent: {_USER_AGENT}\r\n"

    # The options (kept where the operations and the retry rule read them; settable as before).
    @property
    def policy(self) -> str | None:
        return self.calls.policy

    @policy.setter
    def policy(self, value: str | None) -> None:
        self.calls.policy = value

    @property
    def match(self) -> str | None:
        return self.calls.match

    @match.setter
    def match(self, value: str | None) -> None:
        self.calls.match = value

    @property
    def idempotency_keys(self) -> bool:
        return self.calls.idempotency_keys

    @idempotency_keys.setter
    def idempotency_keys(self, value: bool) -> None:
        self.calls.idempotency_keys = value

    @property
    def retries(self) -> int:
        return self._rule.retries

    @retries.setter
    def retries(self, value: int) -> None:
        self._rule.retries = max(0, value)

    @property
    def backoff_s(self) -> float:
        return self._rule.backoff_s

    @backoff_s.setter
    def backoff_s(self, value: float) -> None:
        self._rule.backoff_s = value

    def run(self, op: Operation[T]) -> T:
        """Send one declared operation (coordinator/client/operations.py) as the session it names."""
        return self._run(self.calls.run(op))

    # -- the service ----------------------------------------------------------------------------------------
    def session_status(self, session: str | None = None) -> dict[str, Any]:
        """The raw answer of GET /v1/session (role and token expiry included)."""
        return self._run(self.calls.session_status(session))

    def sessions(self) -> dict[str, Any]:
        """The sessions seen recently, `{"sessions": [{session, last_seen}, ...]}` (needs the admin token)."""
        return self._run(self.calls.sessions())

    def health(self) -> dict[str, Any]:
        return self._run(self.calls.health())

    def dashboard(self) -> dict[str, Any]:
        """The fleet view of GET /v1/dashboard: health, sessions, leases, change events, refusals by code,
        the history's size (needs the admin token or a viewer token)."""
        return self._run(self.calls.dashboard())

    def version_diff(self, path: str, version: int, context: int = 3) -> dict[str, Any]:
        """The unified diff of one recorded version of `path` (POST /v1/dashboard/diff; admin or viewer)."""
        return self._run(self.calls.version_diff(path, version, context))

    def issue_token(self, session: str, ttl_s: int = 24 * 3600) -> str:
        """A session token for `session` (needs the admin token)."""
        return self._run(self.calls.issue_token(session, ttl_s))

    def shutdown(self) -> dict[str, Any]:
        """Ask the service to stop gracefully (needs the admin token)."""
        return self._run(self.calls.shutdown())

    def close(self) -> None:
        self._transport.close()

    # -- plumbing -----------------------------------------------------------------------------------------
    def _run(self, call: Call[T]) -> T:
        """Send one call, retrying (same Idempotency-Key) while that is safe, bounded by `retries`
        (the rules: `calls.RetryRule`; `AsyncHttpDriver.run` is the same loop, awaited)."""
        headers = headers_for(call, self._token_for(call.session) if call.auth else None)
        payload = payload_for(call)
        rule = self._rule
        attempt = 0
        while True:
            try:
                r = self._send(call, payload, headers)
            except httpx.TransportError as exc:
                delay = rule.after_transport_error(call, exc, attempt, rule.needs_tls_probe(exc) and self._serves_tls())
            else:
                if r.status_code < 300:
                    return call.decode(loads(r.content))
                delay = rule.after_refusal(call, r, attempt)
            attempt += 1
            time.sleep(delay)

    def _url(self, endpoint: str, params: dict[str, str] | None) -> httpx.URL:
        url = self._urls.get(endpoint)
        if url is None:
            url = self._urls[endpoint] = httpx.URL(self._join_to + endpoint)
        return url.copy_merge_params(params) if params else url

    def _request(self, call: Call[Any], payload: bytes | None, headers: dict[str, str]) -> httpx.Request:
        """The httpx request of `call` (the TLS path and the async driver; plain http:// has a faster one)."""
        headers = {"user-agent": _USER_AGENT, **headers}
        if payload is not None:
            headers["content-type"] = "application/json"
        url = self._url(call.endpoint, call.params)
        timeout = timeout_for(self._timeout, call)
        return httpx.Request(call.method, url, content=payload, headers=headers, extensions={"timeout": timeout})

    def _plain_head(self, call: Call[Any], payload: bytes | None, headers: dict[str, str]) -> tuple[str, bytes]:
        """The target and header lines of `call` for the plain-http fast paths (this one and the async one)."""
        lines = [self._host_line, *(f"{k}: {v}\r\n" for k, v in headers.items())]
        if payload is not None:
            lines.append(f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n")
        target = None if call.params else self._targets.get(call.endpoint)
        if target is None:
            target = self._url(call.endpoint, call.params).raw_path.decode("ascii")
            if not call.params:
                self._targets[call.endpoint] = target
        return target, "".join(lines).encode("latin-1")

    def _send(self, call: Call[Any], payload: bytes | None, headers: dict[str, str]) -> Reply | httpx.Response:
        if self._fast is not None and self._plain:
            # Straight to the socket: no request or response objects (the calls are made here, all ASCII).
            target, head = self._plain_head(call, payload, headers)
            timeout = timeout_for(self._timeout, call)
            return self._fast.roundtrip(self._host_key, call.method, target, head, payload or b"", timeout)
        response = self._transport.handle_request(self._request(call, payload, headers))
        try:
            response.read()
        finally:
            response.close()
        return response

    def _token_for(self, session: str | None) -> str:
        if self._token is not None:
            return self._token
        if self._secret is not None:
            return self._mint(session)
        assert self._tokens is not None
        if session is None:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "This call needs the admin token.")
        if callable(self._tokens):
            return self._tokens(session)
        try:
            return self._tokens[session]
        except KeyError:
            raise CoordinatorError(
                ErrorCode.PERMISSION_DENIED, f"No token was given for session {session!r}."
            ) from None

    def _mint(self, session: str | None) -> str:
        """A token made from the secret: for `session`, or an admin token for calls that name none."""
        from coordinator.tokens import mint_token

        assert self._secret is not None
        cached = self._minted.get(session)
        now = time.time()
        if cached is None or cached[1] - now < 60:
            ttl = 3600
            token = mint_token(self._secret, session=session, admin=session is None, ttl_s=ttl)
            cached = self._minted[session] = (token, now + ttl)
        return cached[0]

    def _serves_tls(self) -> bool:
        if self.endpoint.is_unix:
            return False  # `serve --uds` never serves TLS (the socket's file mode guards it)
        return _serves_tls(self.endpoint.host, self.endpoint.port, self._timeout.get("connect"))


def _default_transport(
    endpoint: ServiceEndpoint, max_connections: int, verify: bool | ssl.SSLContext, has_ca_file: bool
) -> httpx.BaseTransport:
    """Plain http:// and unix://: the one-write transport (transport.py). https://: httpx's own, verifying the
    service's certificate against the system's CAs, or against `ca_file` only."""
    if endpoint.scheme != "https":
        if has_ca_file:
            kind = "a unix socket (no TLS there)" if endpoint.is_unix else "plain http://"
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                f"ca_file is given but {endpoint.url!r} is {kind}: use the https:// URL of a service that "
                "serves TLS, or leave out the CA file.",
            )
        return PlainHttpTransport(max_connections, uds=endpoint.socket_path)
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.HTTPTransport(verify=verify, limits=limits)


def _trusting(ca_file: str | os.PathLike[str]) -> ssl.SSLContext:
    """A client TLS context that trusts exactly the CA certificate(s) of `ca_file` (checks host names too)."""
    try:
        return ssl.create_default_context(cafile=os.fspath(ca_file))
    except (OSError, ssl.SSLError, ValueError, TypeError) as exc:
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"The CA file {os.fspath(ca_file)!r} cannot be used ({reason}): give a readable PEM file holding "
            "the CA certificate that signed the service's certificate.",
        ) from None


def _serves_tls(host: str, port: int, timeout: float | None) -> bool:
    """Whether a TLS handshake with host:port completes (any certificate accepted: this only tells a TLS
    port from a plain one, after a plain-HTTP call was cut off without an answer)."""
    probe = ssl.create_default_context()
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, probe.wrap_socket(raw) as tls:
            return tls.version() is not None
    except (OSError, ValueError):
        return False
