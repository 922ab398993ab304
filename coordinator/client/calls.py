"""The HTTP service's operations, each described once, and the pure rules of sending one (no I/O here).

`Calls.run(op)` makes the `Call` of one declared operation (coordinator/client/operations.py): the request
(method, endpoint, the session whose token it carries, JSON body, query parameters, read timeout), whether
a retry is safe (`idempotent`, `key`: the Idempotency-Key kept across retries) and `decode`, which turns the
answer's JSON into the result type; its other methods are the service's own routes (health, tokens, ...).
Two drivers run a `Call`: `HttpClient._run` (blocking, over the plain-http fast path or httpx's transport)
and `AsyncHttpDriver.run` (coroutines over httpx's async transport). What both decide the same way lives here, once:

- `RetryRule`: after a transport error or an error answer, the delay before the next attempt, or the
  refusal to raise (TLS mismatches, `unreachable` / `state_unavailable`, the service's own refusal);
- `headers_for` / `payload_for`: the token check and the headers of one call;
- `build` / `error_from`: JSON to result types, error answers to `CoordinatorError`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import ssl
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import httpx
import pydantic_core

from coordinator import errors
from coordinator.client import operations as ops
from coordinator.client.operations import Operation
from coordinator.errors import CoordinatorError, ErrorCode

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
_R = TypeVar("_R", bound="DataclassInstance")  # a result type: a dataclass

_TOKEN_RE = re.compile(r"^[\x21-\x7e]{1,4096}$")
_LIBRARY_CODES = frozenset(c.value for c in ErrorCode)
_MAX_RETRY_AFTER_S = 5.0
DASHBOARD_PATH = "/v1/dashboard"  # the service's fleet view (admin or viewer token); its diffs at .../diff


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request to the service and how to read its answer. `idempotent`: a retry after the request may
    have reached the service is safe (a read, or a write carrying `key`)."""

    method: str
    endpoint: str
    session: str | None  # whose token the call carries; None: the admin token
    body: dict[str, Any] | None
    idempotent: bool
    decode: Callable[[dict[str, Any]], T]
    key: str | None = None  # the Idempotency-Key, the same on every retry of this call
    params: dict[str, str] | None = None
    read_timeout: float | None = None  # at least this read timeout (long polls)
    auth: bool = True  # False: no token (the health check)

    def keyed(self, key: str) -> Call[T]:
        """The same call with the caller's own Idempotency-Key (so it may be retried, and asked again)."""
        return dataclasses.replace(self, key=key, idempotent=True)


class Reply(Protocol):
    """An answer as the drivers see it (`transport.Reply` or `httpx.Response`)."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def text(self) -> str: ...
    def json(self) -> Any: ...


def _same(data: dict[str, Any]) -> dict[str, Any]:
    return data


class Calls:
    """The operations of `HttpClient`, as `Call`s (see the module docstring), each made from its declaration
    (coordinator/client/operations.py) by `run` (named as the clients' `run(op)`, like every method here).
    `policy`, `match` and `idempotency_keys` are the client's options: sent with every write that takes them,
    and whether writes carry a fresh Idempotency-Key (without one, a write that may have reached the service
    is never retried)."""

    def __init__(self, policy: str | None = None, match: str | None = None, idempotency_keys: bool = True) -> None:
        self.policy = policy
        self.match = match
        self.idempotency_keys = idempotency_keys

    def run(self, op: Operation[T]) -> Call[T]:
        """The request of one declared operation: its route, its body (the client's write options filled in
        where the operation takes them and leaves them unset), the token of its acting session, whether a
        retry is safe."""
        op = self._with_options(op)
        route = op.route
        key = op.key() if self.idempotency_keys else None
        idempotent = key is not None if op.mutates else op.retry_safe
        timeout = op.read_timeout if isinstance(op, ops.PollEvents) else None
        return Call(
            route.method, route.path, op.acting(), op.body(), idempotent, op.decode, key=key, params=op.params(),
            read_timeout=timeout,
        )  # fmt: skip

    def _with_options(self, op: Operation[T]) -> Operation[T]:
        given = {
            name: value
            for name, value in (("policy", self.policy), ("match", self.match))
            if value is not None and hasattr(op, name) and getattr(op, name) is None and op.mutates
        }
        return dataclasses.replace(op, **given) if given else op  # type: ignore[type-var]

    # -- the service's own routes (no Client operation behind them) -------------------------------------------
    def session_status(self, session: str | None = None) -> Call[dict[str, Any]]:
        params = {"session": session} if session is not None else None
        return Call("GET", ops.Status.route.path, session, None, True, _same, params=params)

    def sessions(self) -> Call[dict[str, Any]]:
        return Call("GET", ops.SESSIONS_ROUTE.path, None, None, True, _same)

    def health(self) -> Call[dict[str, Any]]:
        return Call("GET", ops.HEALTH_ROUTE.path, None, None, True, _same, auth=False)

    def dashboard(self) -> Call[dict[str, Any]]:
        return Call("GET", DASHBOARD_PATH, None, None, True, _same)

    def version_diff(self, path: str, version: int, context: int = 3) -> Call[dict[str, Any]]:
        body = {"path": path, "version": version, "context": context}
        return Call("POST", f"{DASHBOARD_PATH}/diff", None, body, True, _same)

    def issue_token(self, session: str, ttl_s: int = 24 * 3600) -> Call[str]:
        return Call("POST", ops.TOKENS_ROUTE.path, None, {"session": session, "ttl_s": ttl_s}, True, _token)

    def shutdown(self) -> Call[dict[str, Any]]:
        return Call("POST", ops.SHUTDOWN_ROUTE.path, None, None, False, _same)


def _token(data: dict[str, Any]) -> str:
    return str(data["token"])


def error_from(r: Reply) -> CoordinatorError:
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


# -- one call's request --------------------------------------------------------------------------------------
def headers_for(call: Call[Any], token: str | None) -> dict[str, str]:
    """The authorization and Idempotency-Key headers of `call` (token None: a call without auth)."""
    headers: dict[str, str] = {}
    if token is not None:
        if not _TOKEN_RE.fullmatch(token):
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "The token is not a single word of visible ASCII.")
        headers["authorization"] = f"Bearer {token}"
    if call.key is not None:
        headers["idempotency-key"] = call.key
    return headers


def payload_for(call: Call[Any]) -> bytes | None:
    """The JSON body of `call`, in one C call (pydantic_core, NaN and infinities written as `json.dumps` writes
    them); a body it cannot write as UTF-8 (a lone surrogate) goes to `json.dumps`, which escapes it, and the
    service refuses it as before."""
    if call.body is None:
        return None
    try:
        return pydantic_core.to_json(call.body, inf_nan_mode="constants")
    except pydantic_core.PydanticSerializationError:
        return json.dumps(call.body).encode()


def loads(content: bytes) -> Any:
    """An answer's JSON (pydantic_core's parser: the same values as `json.loads`, in one C call; raises
    ValueError on anything that is not JSON)."""
    return pydantic_core.from_json(content)


def timeout_for(base: dict[str, float | None], call: Call[Any]) -> dict[str, float | None]:
    """The client's timeouts, with the read timeout raised to what a long poll needs."""
    if call.read_timeout is not None and (base.get("read") or 0) < call.read_timeout:
        return {**base, "read": call.read_timeout}
    return base


# -- retries and refusals --------------------------------------------------------------------------------------
# A handshake cut off (the service stopping, a dropped connection): transient, handled as any transport error.
_CUT_OFF = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


class RetryRule:
    """What to do after one attempt of a call failed: the delay before the next attempt, or the refusal.

    Retried (at most `retries` times, backoff doubling from `backoff_s`): a call that never reached the
    service (connect errors); an idempotent call after a timeout, network or protocol error; an idempotent
    call whose refusal `coordinator.errors.CODES` marks retryable, after its Retry-After (at most 5 s).
    Never retried: TLS mismatches (a retry fails alike) and refusals about the content or the view.
    """

    def __init__(self, url: str, retries: int, backoff_s: float) -> None:
        self.url = url
        self.https = url.startswith("https:")
        self.retries = max(0, retries)
        self.backoff_s = backoff_s

    def needs_tls_probe(self, exc: httpx.TransportError) -> bool:
        """Whether a plain-http call cut off without an answer should ask if the port serves TLS."""
        return not self.https and isinstance(exc, httpx.RemoteProtocolError) and self.tls_refusal(exc) is None

    def after_transport_error(
        self, call: Call[Any], exc: httpx.TransportError, attempt: int, serves_tls: bool = False
    ) -> float:
        """The delay before the next attempt; raises the refusal when there is none."""
        refusal = self.tls_refusal(exc)
        if refusal is None and serves_tls:
            refusal = self._plain_to_tls()
        if refusal is not None:  # a handshake that failed: nothing was sent, and a retry fails alike
            raise refusal from exc
        unsent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)  # never reached the service
        if attempt < self.retries and (unsent or (call.idempotent and _retryable_transport(exc))):
            return self._backoff(attempt)
        raise self._unreachable(exc, unsent) from exc

    def after_refusal(self, call: Call[Any], r: Reply, attempt: int) -> float:
        """The delay before the next attempt after an error answer; raises the refusal when there is none."""
        err = error_from(r)
        row = errors.info(err.details.get("service_code", err.code.value))
        if not (call.idempotent and row.retryable and attempt < self.retries):
            raise err
        return _retry_delay(self._backoff(attempt), r.headers.get("retry-after", ""))

    def _backoff(self, attempt: int) -> float:
        return float(self.backoff_s * 2**attempt)

    def tls_refusal(self, exc: httpx.TransportError) -> CoordinatorError | None:
        """The refusal for a TLS mismatch seen in `exc`: an untrusted certificate, or a handshake an https://
        URL could not make. None for any other transport error."""
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
            if self.https and isinstance(cause, ssl.SSLError) and not isinstance(cause, _CUT_OFF):
                return CoordinatorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"The TLS handshake with {self.url} failed ({cause.reason or cause}): the service may not "
                    "serve TLS there. Nothing was sent. Use an http:// URL if it serves plain HTTP.",
                )
        return None

    def _plain_to_tls(self) -> CoordinatorError:
        return CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"The coordinator service at {self.url} serves TLS, not plain HTTP: use the https:// URL "
            "(with --ca-file / ca_file if its certificate is signed by a private CA). Nothing was done.",
        )

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


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def _retry_delay(backoff: float, retry_after: str) -> float:
    if retry_after.isdigit():
        return max(backoff, min(float(retry_after), _MAX_RETRY_AFTER_S))
    return backoff


def _retryable_transport(exc: httpx.TransportError) -> bool:
    # A request that may have reached the service is retried only with its idempotency key (all calls
    # here are either reads or carry one); protocol errors of a broken proxy are not retried.
    return isinstance(exc, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError)
