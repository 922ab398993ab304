"""`HttpClient`: the `Client` interface over the coordinator's HTTP service (`edit-coordinator serve`).

Same calls, same result types, same refusals (`CoordinatorError` with the library's codes) as
`LocalClient`, so a program runs unchanged against a remote service.

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

TLS: an https:// URL is checked against the system's trusted CAs, or, with `ca_file`, against the CA
certificate(s) of that PEM file only (a private CA: `edit-coordinator serve --tls-cert/--tls-key`). A
certificate that is not trusted (or not for the URL's host) is the refusal `invalid_argument` with
`details["service_code"] == "tls_untrusted"`, never retried;
an http:// URL to a TLS port, or https:// to a plain one, is `invalid_argument` naming the scheme to use.

Service refusals that have no library code are raised with the library code their row names
(`coordinator.errors.CODES[code].library`), and the service's own code in `details["service_code"]`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from .. import arguments, errors
from ..engine import ReadResult, WriteResult
from ..errors import CoordinatorError, ErrorCode
from ..events import ChangeEvent, Notice
from ..history import HistoryEntry
from ..leases import Lease
from .base import BoundSession, EventPage, SessionStatus, follow
from .transport import PlainHttpTransport, Reply

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_R = TypeVar("_R", bound="DataclassInstance")  # a result type: a dataclass

TokenSource = str | Mapping[str, str] | Callable[[str], str]
_USER_AGENT = "edit-coordinator-http-client"
_TOKEN_RE = re.compile(r"^[\x21-\x7e]{1,4096}$")
_LIBRARY_CODES = frozenset(c.value for c in ErrorCode)
_MAX_RETRY_AFTER_S = 5.0
_POLL_SLACK_S = 10.0  # a long poll's read timeout: its wait plus this


class HttpClient:
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
        self.policy = policy
        self.match = match
        if sum(x is not None for x in (token, tokens, secret)) != 1:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT, "Give exactly one of token, tokens or secret to HttpClient."
            )
        self.url = url.rstrip("/")
        base = httpx.URL(self.url)
        if base.scheme not in ("http", "https") or not base.host:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{url!r} is not an http:// or https:// URL.")
        self._token = token
        self._tokens = tokens
        self._secret = secret.encode() if isinstance(secret, str) else secret
        self._minted: dict[str | None, tuple[str, float]] = {}
        self.retries = max(0, retries)
        self.idempotency_keys = idempotency_keys
        self.backoff_s = backoff_s
        # Requests go straight to the transport (httpx's transport interface): the httpx.Client layer's
        # per-call work (URL merging, auth and redirect flows, cookies) is not needed here.
        if transport is not None and ca_file is not None:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT, "Give ca_file or transport to HttpClient, not both: a transport makes "
                "its own TLS settings (httpx.HTTPTransport(verify=...)).",
            )  # fmt: skip
        self._transport = transport if transport is not None else _default_transport(base, max_connections, ca_file)
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout).as_dict()
        self._urls: dict[str, httpx.URL] = {}
        self._fast = self._transport if type(self._transport) is PlainHttpTransport else None
        self._host_key = (base.host, base.port or 80)
        self._host_line = f"host: {base.netloc.decode('ascii')}\r\nuser-agent: {_USER_AGENT}\r\n"

    def session(self, session_id: str) -> BoundSession:
        return BoundSession(self, session_id)

    # -- files --------------------------------------------------------------------------------------------
    def read(self, session: str, path: str, offset: int | None = None, limit: int | None = None) -> ReadResult:
        body = _without_none({"path": path, "session": session, "offset": offset, "limit": limit})
        return build(ReadResult, self._call("POST", "/v1/read", session, body, idempotent=True))

    def write(self, session: str, path: str, content: str) -> WriteResult:
        return self._mutate("/v1/write", session, {"path": path, "content": content})

    def edit(self, session: str, path: str, old_string: str, new_string: str, replace_all: bool = False) -> WriteResult:
        body = {"path": path, "old_string": old_string, "new_string": new_string, "replace_all": replace_all}
        return self._mutate("/v1/edit", session, self._matching(body))

    def multi_edit(self, session: str, path: str, edits: Sequence[dict[str, Any]]) -> WriteResult:
        return self._mutate("/v1/multi_edit", session, self._matching({"path": path, "edits": list(edits)}))

    def undo(self, session: str, path: str, version: int | None = None) -> WriteResult:
        return self._mutate("/v1/undo", session, _without_none({"path": path, "version": version}))

    def redo(self, session: str, path: str) -> WriteResult:
        return self._mutate("/v1/redo", session, {"path": path})

    def restore(
        self, path: str, to_version: int | None = None, *, before_version: int | None = None, session: str | None = None
    ) -> WriteResult:
        """For people: the whole file back as it was, discarding every later version (needs the admin
        token; the result's `discarded` lists them). Runs as `session` (default "operator")."""
        body = _without_none(
            {"path": path, "to_version": to_version, "before_version": before_version, "session": session}
        )
        key = uuid.uuid4().hex if self.idempotency_keys else None
        data = self._call("POST", "/v1/admin/restore", None, body, idempotent=key is not None, key=key)
        return build(WriteResult, data)

    def history(self, path: str, limit: int = 100) -> list[HistoryEntry]:
        """Versions of `path`, newest first (needs the admin token)."""
        data = self._call("POST", "/v1/history", None, {"path": path, "limit": limit}, idempotent=True)
        return [build(HistoryEntry, e) for e in data["entries"]]

    # -- leases -------------------------------------------------------------------------------------------
    def lease(
        self, session: str, paths: str | Sequence[str], mode: str = "exclusive", ttl_s: float = 300.0
    ) -> list[Lease]:
        body: dict[str, Any] = {"session": session, "mode": mode, "ttl_s": ttl_s}
        body["paths"] = [paths] if isinstance(paths, str) else list(paths)
        return _leases(self._call("POST", "/v1/leases", session, body, idempotent=False))

    def renew(self, session: str, lease_id: str | None = None, ttl_s: float = 300.0) -> list[Lease]:
        body = _without_none({"session": session, "lease_id": lease_id, "ttl_s": ttl_s})
        return _leases(self._call("POST", "/v1/leases/renew", session, body, idempotent=True))

    def release(self, session: str, lease_id: str | None = None, pattern: str | None = None) -> int:
        body = _without_none({"session": session, "lease_id": lease_id, "pattern": pattern})
        return int(self._call("POST", "/v1/leases/release", session, body, idempotent=True)["released"])

    def leases(self, session: str | None = None) -> list[Lease]:
        params = {"session": session} if session is not None else None
        return _leases(self._call("GET", "/v1/leases", session, None, idempotent=True, params=params))

    def break_lease(self, lease_id: str | None = None, session: str | None = None) -> list[Lease]:
        """End a lease by id, or every lease of a session, whoever holds it (needs the admin token)."""
        body = _without_none({"lease_id": lease_id, "session": session})
        return _leases(self._call("POST", "/v1/admin/leases/break", None, body, idempotent=True))

    # -- events, notices, status --------------------------------------------------------------------------
    def poll_events(
        self, since: str | None = None, paths: Sequence[str] | None = None, wait_s: float = 0.0, limit: int = 200
    ) -> EventPage:
        body = _without_none({"since": since, "paths": list(paths) if paths else None, "wait_s": wait_s})
        body["limit"] = limit
        data = self._call("POST", "/v1/events", None, body, idempotent=True, read_timeout=wait_s + _POLL_SLACK_S)
        return EventPage(tuple(build(ChangeEvent, e) for e in data["events"]), str(data["cursor"]))

    def events(
        self, since: str | None = None, paths: Sequence[str] | None = None, timeout_s: float | None = None
    ) -> Iterator[ChangeEvent]:
        return follow(self, since, paths, timeout_s)

    def recent_events(self, count: int = 50) -> list[ChangeEvent]:
        data = self._call("POST", "/v1/events/recent", None, {"count": count}, idempotent=True)
        return [build(ChangeEvent, e) for e in data["events"]]

    def notices(self, session: str) -> Notice | None:
        data = self._call("POST", "/v1/notices", session, {"session": session}, idempotent=True)
        found = data.get("notice")
        return None if found is None else Notice(tuple(found["paths"]), tuple(found["writers"]))

    def status(self, session: str) -> SessionStatus:
        data = self._call("GET", "/v1/session", session, None, idempotent=True, params={"session": session})
        leases = tuple(build(Lease, x) for x in data.get("leases", ()))
        return SessionStatus(str(data["session"]), data.get("last_seen"), leases)

    # -- the service ----------------------------------------------------------------------------------------
    def session_status(self, session: str | None = None) -> dict[str, Any]:
        """The raw answer of GET /v1/session (role and token expiry included)."""
        params = {"session": session} if session is not None else None
        return self._call("GET", "/v1/session", session, None, idempotent=True, params=params)

    def health(self) -> dict[str, Any]:
        return dict(self._send("GET", "/v1/health", None, {}).json())

    def issue_token(self, session: str, ttl_s: int = 24 * 3600) -> str:
        """A session token for `session` (needs the admin token)."""
        data = self._call("POST", "/v1/tokens", None, {"session": session, "ttl_s": ttl_s}, idempotent=True)
        return str(data["token"])

    def shutdown(self) -> dict[str, Any]:
        """Ask the service to stop gracefully (needs the admin token)."""
        return self._call("POST", "/v1/admin/shutdown", None, None, idempotent=False)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------------------------------------
    def _send(
        self,
        method: str,
        endpoint: str,
        payload: bytes | None,
        headers: dict[str, str],
        params: dict[str, str] | None = None,
        read_timeout: float | None = None,
    ) -> Reply | httpx.Response:
        url = self._urls.get(endpoint)
        if url is None:
            url = self._urls[endpoint] = httpx.URL(self.url + endpoint)
        if params:
            url = url.copy_merge_params(params)
        timeout = self._timeout
        if read_timeout is not None and (timeout.get("read") or 0) < read_timeout:
            timeout = {**timeout, "read": read_timeout}
        if self._fast is not None and url.scheme == "http":
            # Straight to the socket: no request or response objects (the calls are made here, all ASCII).
            lines = [self._host_line, *(f"{k}: {v}\r\n" for k, v in headers.items())]
            if payload is not None:
                lines.append(f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n")
            target = url.raw_path.decode("ascii")
            head = "".join(lines).encode("latin-1")
            return self._fast.roundtrip(self._host_key, method, target, head, payload or b"", timeout)
        headers = {"user-agent": _USER_AGENT, **headers}
        if payload is not None:
            headers["content-type"] = "application/json"
        request = httpx.Request(method, url, content=payload, headers=headers, extensions={"timeout": timeout})
        response = self._transport.handle_request(request)
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
        from ..server.auth import mint_token

        assert self._secret is not None
        cached = self._minted.get(session)
        now = time.time()
        if cached is None or cached[1] - now < 60:
            ttl = 3600
            token = mint_token(self._secret, session=session, admin=session is None, ttl_s=ttl)
            cached = self._minted[session] = (token, now + ttl)
        return cached[0]

    def _matching(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.match is not None:
            body["match"] = self.match
        return body

    def _mutate(self, endpoint: str, session: str, body: dict[str, Any]) -> WriteResult:
        body["session"] = session
        if self.policy is not None:
            body["policy"] = self.policy
        if self.idempotency_keys:
            data = self._call("POST", endpoint, session, body, idempotent=True, key=uuid.uuid4().hex)
        else:  # no key: a write whose answer was lost cannot be retried safely
            data = self._call("POST", endpoint, session, body, idempotent=False)
        return build(WriteResult, data)

    def _call(
        self,
        method: str,
        endpoint: str,
        session: str | None,
        body: dict[str, Any] | None,
        *,
        idempotent: bool,
        key: str | None = None,
        params: dict[str, str] | None = None,
        read_timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one call, retrying (same Idempotency-Key) while that is safe. Bounded by `retries`."""
        tok = self._token_for(session)
        if not _TOKEN_RE.match(tok):
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "The token is not a single word of visible ASCII.")
        headers = {"authorization": f"Bearer {tok}"}
        if key is not None:
            headers["idempotency-key"] = key
        payload = None if body is None else json.dumps(body).encode()
        attempt = 0
        while True:
            try:
                r = self._send(method, endpoint, payload, headers, params, read_timeout)
            except httpx.TransportError as exc:
                refusal = self._tls_refusal(exc)
                if refusal is not None:  # a handshake that failed: nothing was sent, and a retry fails alike
                    raise refusal from exc
                unsent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)  # never reached the service
                if attempt < self.retries and (unsent or (idempotent and _retryable_transport(exc))):
                    attempt += 1
                    time.sleep(self.backoff_s * 2 ** (attempt - 1))
                    continue
                raise self._unreachable(exc, unsent) from exc
            if r.status_code < 300:
                return dict(r.json())
            err = error_from(r)
            row = errors.info(err.details.get("service_code", err.code.value))
            if not (idempotent and row.retryable and attempt < self.retries):
                raise err
            attempt += 1
            time.sleep(_retry_delay(self.backoff_s * 2 ** (attempt - 1), r.headers.get("retry-after", "")))

    def _tls_refusal(self, exc: httpx.TransportError) -> CoordinatorError | None:
        """The refusal for a TLS mismatch: an untrusted certificate, or the two ends not speaking the same
        protocol (http:// to a TLS port, https:// to a plain one). None for any other transport error."""
        https = self.url.startswith("https:")
        for cause in _causes(exc):
            if isinstance(cause, ssl.SSLCertVerificationError):
                return CoordinatorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"The coordinator service at {self.url} presented a TLS certificate this client does not "
                    f"trust ({cause.verify_message or cause}). Nothing was sent. Pass the CA file that signed "
                    "the service's certificate (HttpClient(..., ca_file=FILE), --ca-file FILE or "
                    "$EDIT_COORDINATOR_CA_FILE), and use a host name the certificate covers.",
                    service_code="tls_untrusted",
                )
            if https and isinstance(cause, ssl.SSLError) and not isinstance(cause, _CUT_OFF):
                return CoordinatorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"The TLS handshake with {self.url} failed ({cause.reason or cause}): the service may not "
                    "serve TLS there. Nothing was sent. Use an http:// URL if it serves plain HTTP.",
                )
        if not https and isinstance(exc, httpx.RemoteProtocolError) and self._serves_tls():
            return CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                f"The coordinator service at {self.url} serves TLS, not plain HTTP: use the https:// URL "
                "(with --ca-file / ca_file if its certificate is signed by a private CA). Nothing was done.",
            )
        return None

    def _serves_tls(self) -> bool:
        return _serves_tls(self._host_key[0], self._host_key[1], self._timeout.get("connect"))

    def _unreachable(self, exc: httpx.TransportError, unsent: bool) -> CoordinatorError:
        outcome = (
            "The call was not sent, so nothing was done."
            if unsent
            else "Whether the call was applied is unknown: read the file again before retrying."
        )
        return CoordinatorError(
            ErrorCode.STATE_UNAVAILABLE,
            f"The coordinator service at {self.url} could not be reached ({type(exc).__name__}: {exc}). " + outcome,
            service_code="unreachable",
        )


def _default_transport(base: httpx.URL, max_connections: int, ca_file: Any) -> httpx.BaseTransport:
    """Plain http://: the one-write transport (transport.py). https://: httpx's own, verifying the service's
    certificate against the system's CAs, or against `ca_file` only."""
    if base.scheme == "http":
        if ca_file is not None:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                f"ca_file is given but {str(base)!r} is plain http://: use the https:// URL of a service that "
                "serves TLS, or leave out the CA file.",
            )
        return PlainHttpTransport(max_connections)
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.HTTPTransport(verify=True if ca_file is None else _trusting(ca_file), limits=limits)


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


# A handshake cut off (the service stopping, a dropped connection): transient, handled as any transport error.
_CUT_OFF = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


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


def _retry_delay(backoff: float, retry_after: str) -> float:
    if retry_after.isdigit():
        return max(backoff, min(float(retry_after), _MAX_RETRY_AFTER_S))
    return backoff


def _without_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


def _leases(data: dict[str, Any]) -> list[Lease]:
    return [build(Lease, x) for x in data["leases"]]


def _tupled(value: Any) -> Any:
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def build(cls: type[_R], data: dict[str, Any]) -> _R:
    """A result type (a frozen dataclass) from its JSON form: JSON arrays back to the tuples the dataclass
    holds; fields this version does not know are left out (a newer service may send more)."""
    spec = _FIELDS.get(cls)
    if spec is None:
        spec = _FIELDS[cls] = tuple((f.name, "tuple" in str(f.type)) for f in fields(cls))
    values = {name: (_tupled(data[name]) if tup else data[name]) for name, tup in spec if name in data}
    return cls(**values)


def _retryable_transport(exc: httpx.TransportError) -> bool:
    # A request that may have reached the service is retried only with its idempotency key (all calls
    # here are either reads or carry one); protocol errors of a broken proxy are not retried.
    return isinstance(exc, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError)


def error_from(r: Reply | httpx.Response) -> CoordinatorError:
    """The CoordinatorError for an error answer: the library's code and message as the service sent them."""
    try:
        data = r.json()
        code = str(data["code"])
        message = str(data["message"])
        details = dict(data.get("details") or {})
    except (ValueError, KeyError, TypeError):
        text = r.text[:300].strip()
        return CoordinatorError(
            ErrorCode.STATE_UNAVAILABLE if r.status_code >= 500 else ErrorCode.INVALID_ARGUMENT,
            f"The coordinator service answered HTTP {r.status_code} without a coordinator error body: {text!r}",
            http_status=r.status_code,
        )
    details["http_status"] = r.status_code
    if code in _LIBRARY_CODES:
        return CoordinatorError(ErrorCode(code), message, **details)
    details["service_code"] = code
    return CoordinatorError(errors.library_code(code), message, **details)
