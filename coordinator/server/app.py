"""The ASGI application: authenticate, validate, limit, call the `Client` interface, encode the answer.

An adapter: it decides nothing about files. Every route comes from `routes.ROUTES`; every error code's
status and Retry-After from `coordinator.errors.CODES`.

Engine calls run in a thread pool, so a call waiting for a file lock never stalls the event loop; long
polls for change events have a pool and a bound of their own (`max_polls`, apart from `max_concurrency`),
so that waiting watchers never hold up edits nor make them answer `overloaded`.

Idempotency: a write, edit, multi_edit or undo that carries an ``Idempotency-Key`` header is recorded in
Redis under (session, key) with the request's fingerprint. A repeat gets the first answer (header
``Idempotent-Replayed: true``); a concurrent duplicate waits for the first to finish and gets its answer;
the same key with a different request is refused. Answers marked retryable in the code table (nothing was
done, try again) are not kept, so a retry runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import redis
import xxhash
from pydantic import ValidationError

from coordinator.client import operations as ops
from coordinator.client.local import LocalClient
from coordinator.client.operations import Engine, Operation, tokens_taken
from coordinator.engine import CallOptions, LockBusy
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.server import dashboard
from coordinator.server.auth import Principal, load_secret, verify_token
from coordinator.server.common import (
    CONFIG_ENV,
    IDEM_RE,
    OPENAPI_PATH,
    TRANSIENT_CODES,
    ServiceError,
    dumps,
    error_answer,
    refusal,
)
from coordinator.server.hooks import agents_alive, answer_hook, is_hook_path
from coordinator.server.idempotency import IdempotencyStore, WouldBlock
from coordinator.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from coordinator.server.metrics import MULTIPROC_ENV, ServiceMetrics, TimedCache
from coordinator.server.models import DiffRequest, ServerConfig, TokenRequest
from coordinator.server.requests import (
    Disconnected,
    check_limits,
    header_map,
    query_session,
    read_body,
    validation_message,
)
from coordinator.server.routes import ROUTE_BY_PATH, Answer, Route, openapi_document, request_adapter
from coordinator.server.tracing import CallTracer
from coordinator.state.connection import observe_redis
from coordinator.state.leases import MODES as LEASE_MODES
from coordinator.tokens import mint_token
from coordinator.version import __version__

if TYPE_CHECKING:
    from coordinator.agents.adapter import HookAdapter
    from coordinator.engine import Coordinator
    from coordinator.engine.watcher import TreeWatcher
    from coordinator.history.footprint import FootprintMeter

log = logging.getLogger("edit_coordinator.server")

_T = TypeVar("_T")
_JSON = (b"content-type", b"application/json")
_NO_STORE = (b"cache-control", b"no-store")
METRICS_PATH = "/metrics"
_LIBRARY_CODES = frozenset(code.value for code in ErrorCode)
# The paths the App answers outside the route table, which it looks at first: none may be a route's path.
_SPECIAL_PATHS = (OPENAPI_PATH, METRICS_PATH, dashboard.DASHBOARD_PATH)
if set(_SPECIAL_PATHS) & ROUTE_BY_PATH.keys() or any(is_hook_path(p) for p in ROUTE_BY_PATH):
    raise RuntimeError("a route's path is one the App answers outside the route table")
# The options of an engine call run inline, and in the pool: made once.
_INLINE = CallOptions(wait_for_lock=False)
_WAITING = CallOptions()
_INTERNAL = (
    "The coordinator failed while handling this call (the error is in the server's log). Read the file again "
    "to see whether the change was applied before you retry."
)


class App:
    """The ASGI application for one root. Create with `create_app`; one instance per worker process."""

    def __init__(self, config: ServerConfig, secret: bytes) -> None:
        config.validate()
        self.config = config
        self._secret = secret
        self._tokens: dict[str, Principal] = {}
        self.coord: Coordinator | None = None  # opened at start-up (lifespan) or on first use
        # One client for every request: policy and match are fields of the write operations.
        self.client: LocalClient | None = None  # made with the coordinator
        self._shaped: dict[CallOptions, tuple[Any, Engine]] = {}  # (client, its engine shaped), made once
        self.idem: IdempotencyStore | None = None
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.max_concurrency, thread_name_prefix="ec-http"
        )
        # Long polls wait (seconds) for events: one thread each, from a pool of their own sized to their own
        # bound, so that waiting watchers never hold a thread or a place that a call changing files needs.
        self.poll_executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.max_polls, thread_name_prefix="ec-poll"
        )
        self.in_flight = 0  # calls in progress, long polls apart (bounded by max_concurrency)
        self.polls = 0  # long polls waiting (bounded by max_polls)
        self.draining = False
        self.last_request = time.monotonic()  # idle_exit_s counts from here
        self._openapi: bytes | None = None
        self._open_lock = threading.Lock()
        self._stopping: asyncio.Task[None] | None = None
        self.metrics = ServiceMetrics(self._scrape_gauges, os.environ.get(MULTIPROC_ENV) or None)
        self._history_size: TimedCache | None = None
        self.hooks: HookAdapter | None = None  # the agents' hook adapter (server/hooks.py), made on first use
        self.watcher: TreeWatcher | None = None  # the tree watcher (config.watch; engine/watcher.py)
        self.tracer = CallTracer() if config.otel else None  # OpenTelemetry spans (tracing.py), off by default

    # -- lifecycle ----------------------------------------------------------------------------------------
    def open(self) -> None:
        """Open the coordinator (once; from any thread)."""
        with self._open_lock:
            if self.coord is not None:
                return
            from coordinator.engine import Coordinator

            observe_redis(self.metrics)  # before the first connection is made
            chosen = {"state_check": self.config.state_check, "policy": self.config.policy, "match": self.config.match}
            options: dict[str, Any] = {key: value for key, value in chosen.items() if value}
            coord = Coordinator(
                self.config.root,
                self.config.redis_url,
                durability=self.config.durability,  # type: ignore[arg-type]  # a str, checked by ServerConfig
                lock_timeout=self.config.lock_timeout,
                **options,
            )
            self.client = LocalClient(coord)
            self.idem = IdempotencyStore(
                *coord.keyspace(), ttl_s=self.config.idempotency_ttl_s, wait_s=self.config.lock_timeout + 5
            )
            coord.observe(self.metrics)
            meter = coord.footprint_meter()
            self._history_size = TimedCache(lambda: _footprint(meter))
            self.coord = coord
            if self.config.watch:
                from coordinator.engine.watcher import TreeWatcher

                self.watcher = TreeWatcher(coord.root, coord.agent_port().observed)
                self.watcher.start()

    def opened(self) -> tuple[Coordinator, LocalClient]:
        """The coordinator and the client over it; the service opens them before it runs any route (at
        start-up, or on the first request), so a route's handler always finds them."""
        coord, client = self.coord, self.client
        if coord is None or client is None:
            raise CoordinatorError(ErrorCode.STATE_UNAVAILABLE, "The service has not opened its coordinator yet.")
        return coord, client

    def close(self) -> None:
        """Refuse new work, let running engine calls finish, then close the coordinator."""
        self.draining = True
        if self.watcher is not None:
            self.watcher.stop()
        self.poll_executor.shutdown(wait=True, cancel_futures=True)
        self.executor.shutdown(wait=True)
        if self.idem is not None:
            self.idem.close()
        if self.coord is not None:
            self.coord.close()
            observe_redis(None)

    async def _lifespan(self, receive: Callable[[], Awaitable[dict[str, Any]]], send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await asyncio.get_running_loop().run_in_executor(self.executor, self.open)
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
                if self.config.idle_exit_s > 0:
                    self._stopping = asyncio.get_running_loop().create_task(self._exit_when_unused())
            elif message["type"] == "lifespan.shutdown":
                self.draining = True
                await asyncio.get_running_loop().run_in_executor(None, self.close)
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- ASGI entry ---------------------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind != "http":
            if kind == "lifespan":
                await self._lifespan(receive, send)
            return  # websockets are not served
        self.last_request = time.monotonic()
        try:
            status, body, headers = await self._dispatch(scope, receive)
        except Disconnected:
            return
        length = (b"content-length", b"%d" % len(body))
        if headers:
            typed = any(name == b"content-type" for name, _ in headers)
            head = [*(() if typed else (_JSON,)), _NO_STORE, length, *headers]
        else:
            head = [_JSON, _NO_STORE, length]
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": body})

    async def _dispatch(self, scope: dict[str, Any], receive: Any) -> Answer:
        path: str = scope["path"]
        method: str = scope["method"]
        if self.on_hook_port(scope) and not is_hook_path(path):
            # Claude Code's http hook listener (--hook-http) answers its route alone, whatever else is asked.
            message = f"This port answers {path[:1]}v1/hooks/claude-code alone (Claude Code's http hooks)."
            return self._error(ServiceError("not_found", message))
        by_method = ROUTE_BY_PATH.get(path)
        if by_method is None:
            return await self._unrouted(path, method, scope, receive)
        route = by_method.get(method)
        if route is None:
            allow = ", ".join(sorted(by_method))
            status, body, headers = self._error(
                ServiceError("method_not_allowed", f"{path} accepts {allow}, not {method[:20]}.")
            )
            return status, body, [*headers, (b"allow", allow.encode())]
        if route.auth == "none":
            return await self.op_health(route, scope)
        if route.mutating and self.draining:
            return self._error(_shutting_down())
        refusal = self._over_limit(route)
        if refusal is not None:
            return self._error(refusal)
        started = time.perf_counter()
        if route.long_poll:
            self.polls += 1
        else:
            self.in_flight += 1
        try:
            if self.tracer is None:
                try:
                    answer = await self._handle(route, scope, receive)
                except (ServiceError, CoordinatorError) as exc:
                    answer = self._error(exc)
                code = None if answer[0] < 400 else _code_of(answer[0], answer[1])
            else:
                with self.tracer.call(route.name) as span:
                    answer = await self._answer(route, scope, receive)
                    code = _code_of(answer[0], answer[1])
                    self.tracer.answered(span, answer[0], code)
        finally:
            if route.long_poll:
                self.polls -= 1
            else:
                self.in_flight -= 1
        self.metrics.observe(route.name, code, time.perf_counter() - started)
        return answer

    def _over_limit(self, route: Route) -> ServiceError | None:
        """`overloaded` when the route's own bound is reached: long polls have theirs (max_polls), every other
        limited call max_concurrency, so that any number of waiting watchers leaves the writers their room."""
        if route.long_poll:
            if self.polls < self.config.max_polls:
                return None
            return ServiceError(
                "overloaded",
                f"{self.polls} change-event long polls are waiting, this worker's limit (--max-polls); nothing "
                "was done. Retry in a moment; calls that read or change files are not affected.",
            )
        if not route.limited or self.in_flight < self.config.max_concurrency:
            return None
        return ServiceError(
            "overloaded",
            f"The coordinator is handling {self.in_flight} requests, its limit per worker; nothing was done. "
            "Retry in a moment.",
        )

    async def _unrouted(self, path: str, method: str, scope: dict[str, Any], receive: Any) -> Answer:
        """The paths outside the route table (none of them is in it: `_SPECIAL_PATHS`), else not_found."""
        if path == OPENAPI_PATH and method in ("GET", "HEAD"):
            if self._openapi is None:
                self._openapi = dumps(openapi_document(self.config))
            return 200, self._openapi, []
        if path == METRICS_PATH and method in ("GET", "HEAD"):
            return await self._scrape(scope)
        if is_hook_path(path):
            return await self._hook(scope, receive)
        if path == dashboard.DASHBOARD_PATH and method in ("GET", "HEAD"):
            body, headers = dashboard.page()  # no token: the page holds no data, it asks with the user's token
            return 200, body, headers
        message = f"There is no endpoint {path[:200]!r}. The API is described at {OPENAPI_PATH}."
        return self._error(ServiceError("not_found", message))

    async def _answer(self, route: Route, scope: dict[str, Any], receive: Any) -> Answer:
        try:
            return await self._handle(route, scope, receive)
        except (ServiceError, CoordinatorError) as exc:
            return self._error(exc)

    async def _hook(self, scope: dict[str, Any], receive: Any) -> Answer:
        """An agent's hook event (server/hooks.py), counted in the metrics like a route."""
        started = time.perf_counter()
        self.in_flight += 1
        try:
            answer = await answer_hook(self, scope, receive)
        finally:
            self.in_flight -= 1
        self.metrics.observe("hook", _code_of(answer[0], answer[1]), time.perf_counter() - started)
        return answer

    async def _handle(self, route: Route, scope: dict[str, Any], receive: Any) -> Answer:
        headers = header_map(scope)
        # Authentication first: an unauthenticated request is answered before its body is even read.
        principal = self.authenticate(headers.get("authorization"))
        _authorize(route, principal)
        if route.mutating and self.draining:
            raise _shutting_down()
        model: Any = None
        if route.request is not None:
            body = await read_body(headers, receive, self.config.max_body_bytes)
            try:
                model = request_adapter(route).validate_json(body)
            except ValidationError as exc:
                message, problems = validation_message(exc, route.path)
                raise refusal(ErrorCode.INVALID_ARGUMENT, message, problems=problems) from None
            check_limits(self.config, model)
        if self.coord is None:
            await asyncio.get_running_loop().run_in_executor(self.executor, self.open)
        handler: Callable[..., Awaitable[Answer]] = getattr(self, route.handler)
        answer = await handler(route, principal, model, scope, headers)
        if answer[0] >= 400 and "files" in route.tags and model is not None:
            self._count_refusal(route, principal, model, answer)
        return answer

    # -- helpers ------------------------------------------------------------------------------------------
    def _error(self, exc: ServiceError | CoordinatorError) -> Answer:
        return error_answer(exc, self.config.root)

    def on_hook_port(self, scope: dict[str, Any]) -> bool:
        """Whether the request came in on the loopback port of Claude Code's http hooks (--hook-http)."""
        server = scope.get("server")
        return bool(self.config.hook_port) and server is not None and server[1] == self.config.hook_port

    def authenticate(self, header: str | None) -> Principal:
        """Who the Authorization header's bearer token is (verified once per token, then cached until it
        expires); `unauthorized` when it is missing, malformed, forged or expired."""
        if not header:
            raise ServiceError(
                "unauthorized",
                "This endpoint needs a bearer token (header 'Authorization: Bearer <token>'); nothing was done.",
                reason="missing",
            )
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > 4096:
            raise ServiceError(
                "unauthorized",
                "The Authorization header must be 'Bearer <token>'; nothing was done.",
                reason="malformed",
            )
        cached = self._tokens.get(token)
        if cached is not None and cached.expires_at > time.time():
            return cached
        principal = verify_token(self._secret, token)
        if len(self._tokens) >= 4096:
            self._tokens.clear()
        self._tokens[token] = principal
        return principal

    def _count_refusal(self, route: Route, principal: Principal, model: Any, answer: Answer) -> None:
        """Count a refused file call by file and code, for the dashboard (coordinator.state.refusals), in the
        background: the answer does not wait for it, and losing the count loses nothing else."""
        code = _code_of(answer[0], answer[1])
        path = getattr(model, "path", None)
        if code not in _LIBRARY_CODES or not isinstance(path, str):
            return
        session = principal.session or getattr(model, "session", None) or "admin"
        coord, _ = self.opened()

        def record() -> None:
            with contextlib.suppress(CoordinatorError):
                coord.count_refusal(code, path, session, route.name)

        with contextlib.suppress(RuntimeError):  # the pool is shut down: the service is stopping
            self.executor.submit(record)

    def _acting_session(self, principal: Principal, requested: str | None) -> str:
        """The session a call acts as. Invariant: a session token acts only as its own session."""
        if principal.is_admin:
            session = requested or "admin"
        else:
            assert principal.session is not None
            if requested is not None and requested != principal.session:
                raise ServiceError(
                    "forbidden",
                    f"This token belongs to session {principal.session!r}; it cannot act as {requested!r}. "
                    "Omit 'session' or use that session's own token.",
                )
            session = principal.session
        if self.tracer is not None:
            self.tracer.acting_as(session)
        return session

    async def _run(self, fn: Callable[[], _T], long_poll: bool = False) -> _T:
        """Run a call that may wait (a long poll, a call with no inline attempt) in a worker thread."""
        pool = self.poll_executor if long_poll else self.executor
        return await asyncio.get_running_loop().run_in_executor(pool, fn)

    def _shaped_client(self, options: CallOptions) -> Engine:
        """The engine the declarations run against, its calls shaped by `options` (`_INLINE`, `_WAITING`),
        made once per options."""
        _, client = self.opened()
        found = self._shaped.get(options)
        if found is None or found[0] is not client:
            found = self._shaped[options] = (client, client.engine.shaped(options))
        return found[1]

    async def _engine(self, fn: Callable[[CallOptions], Any]) -> Answer:
        """Run an engine call, `fn(options)` (it makes its calls with those options, `LocalClient.with_options`):
        inline on the event loop while it need not wait (the engine raises LockBusy, before anything is
        read under the lock, where the file's lock is taken), else resumed in the thread pool. Why: handing
        every call to a thread costs two context switches, more than the engine's own work (BENCHMARKS.md,
        "Figures behind design choices"), while most calls find their lock free."""
        if not self.config.inline:
            return await self._run(lambda: self._call_engine(fn, _WAITING))
        try:
            return self._call_engine(fn, _INLINE)  # no lambda: one frame fewer on every HTTP edit
        except LockBusy as busy:
            resume = busy.resume
        return await self._run(lambda: self._call_engine(resume))

    def _call_engine(self, fn: Callable[..., Any], *args: Any) -> Answer:
        """Run an engine call, `fn(*args)`, and turn its outcome (result or refusal) into an answer."""
        try:
            return 200, dumps(_plain(fn(*args))), []
        except (CoordinatorError, ServiceError) as exc:
            return self._error(exc)
        except LockBusy:
            raise
        except Exception:
            log.exception("internal error in an engine call")
            return self._error(ServiceError("internal_error", _INTERNAL))

    async def _mutate(
        self,
        route: Route,
        session: str,
        model: Operation,
        headers: dict[str, str],
        fn: Callable[[CallOptions], Any],
    ) -> Answer:
        """Run a mutating engine call, once per (session, Idempotency-Key) when the header is given."""
        idem_key = headers.get("idempotency-key")
        if idem_key is None:
            return await self._engine(fn)
        if not IDEM_RE.fullmatch(idem_key):
            raise refusal(
                ErrorCode.INVALID_ARGUMENT,
                "Idempotency-Key must be 1-255 visible ASCII characters (for example a UUID).",
            )
        store = self.idem
        assert store is not None
        fingerprint = xxhash.xxh3_128_digest(
            f"{route.path}\x00{session}\x00".encode() + request_adapter(route).dump_json(model)
        )
        k = store.key(session, idem_key)
        try:
            # On the loop: a duplicate still running would make begin wait, so that case goes to the pool.
            replay = store.begin(k, fingerprint, may_wait=not self.config.inline)
        except WouldBlock:
            replay = await self._run(lambda: store.begin(k, fingerprint))
        if replay is not None:
            status, body = replay
            return status, body, [(b"idempotent-replayed", b"true")]
        try:
            answer = await self._engine(fn)
        except RuntimeError:
            # The thread pool refused the call (it is shut down): nothing ran, so the claim is given back.
            store.release(k, fingerprint)
            raise _shutting_down() from None
        if not self.config.inline:
            await self._run(lambda: _settle(store, k, fingerprint, answer, idem_key))
        elif _code_of(answer[0], answer[1]) in TRANSIENT_CODES:
            store.release(k, fingerprint)  # nothing was done: the retry runs
        else:
            # Kept on the store's lane, its reply read once this answer is on its way (the next loop turn).
            asyncio.get_running_loop().call_soon(store.finish_soon(k, fingerprint, answer[0], answer[1]))
        return answer

    # -- handlers -----------------------------------------------------------------------------------------
    async def op_call(self, route: Route, p: Principal, m: Operation, scope: Any, h: dict[str, str]) -> Answer:
        """A route of one declared operation (`m`, validated from the body), run with its `apply` as the
        session the request names (a viewer acts as none: its routes are inspection calls that take no
        session)."""
        session = None if p.is_viewer else self._acting_session(p, getattr(m, "session", None))
        engine, shaped = self.opened()[1].engine, self._shaped_client
        if route.long_poll and m.wait_s > self.config.max_poll_wait_s:  # type: ignore[attr-defined]
            m = dataclasses.replace(m, wait_s=self.config.max_poll_wait_s)  # type: ignore[type-var]
        if route.mutating:
            assert session is not None  # no viewer route mutates (Route.viewer, checked by _authorize)
            fn = lambda o: m.answer(engine, m.apply(shaped(o), session))  # noqa: E731
            if "idempotency-key" not in h:
                return await self._engine(fn)  # what `_mutate` does without the header, one frame fewer
            return await self._mutate(route, session, m, h, fn)
        if route.long_poll:
            return await self._run(
                lambda: self._call_engine(lambda: m.answer(engine, m.apply(engine, session))), long_poll=True
            )
        return await self._engine(lambda o: m.answer(engine, m.apply(shaped(o), session)))

    async def op_undo(self, route: Route, p: Principal, m: ops.Undo, scope: Any, h: dict[str, str]) -> Answer:
        session = self._acting_session(p, m.session)

        def undo(options: CallOptions) -> Any:
            if not p.is_admin:
                self._check_undo_own(session, m.path, m.version)
            return m.apply(self._shaped_client(options), session)

        return await self._mutate(route, session, m, h, undo)

    def _check_undo_own(self, session: str, path: str, version: int | None) -> None:
        """A session token may undo only its own writes. An undo reverts one write's change and keeps every
        later write (undoing.py), so only the target matters: without a version it is the session's own
        newest write; a version written by another session needs the admin token."""
        if version is None:
            return
        target = next((e for e in self.opened()[0].history(path) if e.version == version), None)
        if target is not None and target.session != session:
            raise ServiceError(
                "forbidden",
                f"Version {version} of {path} was written by another session ({target.session}); undoing it "
                "needs the admin token. Make the change with an edit instead.",
            )

    async def op_leases(self, route: Route, p: Principal, m: None, scope: Any, h: Any) -> Answer:
        op = ops.Leases(session=query_session(scope))
        engine = self.opened()[1].engine
        return await self._engine(lambda _: op.answer(engine, op.apply(engine, op.session)))

    async def op_session(self, route: Route, p: Principal, m: None, scope: Any, h: Any) -> Answer:
        session = self._acting_session(p, query_session(scope))
        op, engine = ops.Status(session=session), self.opened()[1].engine

        def status(_: CallOptions) -> dict[str, Any]:
            found = op.apply(engine, session)
            return {**found.to_dict(), "role": p.role, "token_expires_at": p.expires_at}

        return await self._engine(status)

    async def op_sessions(self, route: Route, p: Principal, m: None, scope: Any, h: Any) -> Answer:
        coord, _ = self.opened()
        return await self._run(
            lambda: self._call_engine(
                lambda: {"sessions": [{"session": s, "last_seen": t} for s, t in coord.sessions()]}
            )
        )

    async def op_token(self, route: Route, p: Principal, m: TokenRequest, scope: Any, h: Any) -> Answer:
        viewer = m.role == "viewer"
        token = mint_token(self._secret, session=None if viewer else m.session, viewer=viewer, ttl_s=m.ttl_s)
        principal = verify_token(self._secret, token)
        expires_at = principal.expires_at
        return (
            200,
            dumps({"token": token, "role": principal.role, "session": principal.session, "expires_at": expires_at}),
            [],
        )

    async def op_dashboard(self, route: Route, p: Principal, m: None, scope: Any, h: Any) -> Answer:
        coord, client = self.opened()

        def snapshot() -> dict[str, Any]:
            found = dashboard.snapshot(coord, client, p.role, p.expires_at)
            size = self._history_size.get() if self._history_size is not None else {}  # from disk, cached
            if size:
                found["history"] = {"entries": int(size["history_entries"]), "bytes": int(size["history_bytes"])}
            return found

        return await self._run(lambda: self._call_engine(snapshot))

    async def op_version_diff(self, route: Route, p: Principal, m: DiffRequest, scope: Any, h: Any) -> Answer:
        # In the thread pool: a diff of a large file takes a while, and must not stall the event loop.
        coord, _ = self.opened()
        return await self._run(
            lambda: self._call_engine(lambda: dashboard.version_diff(coord, m.path, m.version, m.context))
        )

    async def op_shutdown(self, route: Route, p: Principal, m: None, scope: Any, h: Any) -> Answer:
        self.draining = True
        self._stopping = asyncio.get_running_loop().create_task(self._stop_when_idle())
        body = {
            "status": "shutting_down",
            "message": "The service refuses new writes and stops once running calls have finished.",
        }
        return 202, dumps(body), []

    async def _exit_when_unused(self) -> None:
        """`idle_exit_s`: stop the service (gracefully, as a shutdown does) once no request has come for that
        long, or once its repository's folder is gone, so that a service started on demand (the repository's
        hook service) does not outlive its use; never while an agent process its hooks named still runs
        (`agents_alive`: Claude Code's http hooks cannot start it again). One worker only (serve refuses more):
        a worker sees only its own requests."""
        idle = self.config.idle_exit_s
        while True:
            await asyncio.sleep(min(idle / 4, 5.0))
            gone = not os.path.isdir(self.config.root)
            unused = self.in_flight + self.polls == 0 and time.monotonic() - self.last_request >= idle
            if gone or (unused and not agents_alive()):
                self.draining = True
                _signal_quietly(self.config.supervisor_pid or os.getpid(), signal.SIGTERM)
                return

    async def _stop_when_idle(self) -> None:
        """Once this worker's running calls have ended (new writes are refused meanwhile, on an open
        listener), ask the supervisor to stop every worker gracefully."""
        deadline = time.monotonic() + 3600.0
        await asyncio.sleep(0.05)  # the shutdown's own answer goes out first
        while self.in_flight + self.polls > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        _signal_quietly(self.config.supervisor_pid or os.getpid(), signal.SIGTERM)

    async def _scrape(self, scope: dict[str, Any]) -> Answer:
        """GET /metrics: the admin or the viewer token (the figures describe the whole fleet; a session
        token acts for one session). The text exposition format is made in a thread: its gauges read Redis."""
        try:
            principal = self.authenticate(header_map(scope).get("authorization"))
            if not (principal.is_admin or principal.is_viewer):
                message = f"{METRICS_PATH} needs the admin token or a viewer token; a session token cannot read it."
                raise ServiceError("forbidden", message)
            if self.coord is None:
                await self._run(self.open)
            body = await self._run(self.metrics.exposition)
        except (ServiceError, CoordinatorError) as exc:
            return self._error(exc)
        return 200, body, [(b"content-type", METRICS_CONTENT_TYPE.encode())]

    def _scrape_gauges(self) -> dict[str, float | dict[str, float]]:
        """The gauges read at scrape time: the history's size (from disk, cached), and the sessions and
        leases (from Redis; left out when Redis cannot answer: the scrape still succeeds)."""
        found: dict[str, float | dict[str, float]] = {}
        if self._history_size is not None:
            found.update(self._history_size.get())
        try:
            coord, client = self.opened()
            found["sessions"] = float(len(coord.sessions()))
            by_mode = dict.fromkeys(LEASE_MODES, 0.0)
            for lease in client.leases(None):
                by_mode[lease.mode] = by_mode.get(lease.mode, 0.0) + 1
            found["leases_held"] = by_mode
        except (redis.RedisError, CoordinatorError):
            pass
        return found

    async def op_health(self, route: Route, scope: Any) -> Answer:
        def ping() -> bool:
            if self.coord is None:
                self.open()
            try:
                return self.opened()[0].ping()
            except (redis.RedisError, CoordinatorError):
                return False

        try:
            ok = await asyncio.get_running_loop().run_in_executor(self.executor, ping)
        except (CoordinatorError, RuntimeError):
            ok = False
        status = "draining" if self.draining else ("ok" if ok else "degraded")
        body = {"status": status, "version": __version__, "redis": ok, "draining": self.draining, "pid": os.getpid()}
        return (200 if status == "ok" else 503), dumps(body), []


def _footprint(meter: FootprintMeter) -> dict[str, float]:
    """The history's size as gauges; none when its folder cannot be read (the scrape still succeeds)."""
    try:
        size = meter.measure()
    except (OSError, CoordinatorError):
        log.warning("the history's size could not be measured", exc_info=True)
        return {}
    return {"history_entries": float(size.entries), "history_bytes": float(size.bytes)}


def roles_that_work(route: Route) -> str:
    """The tokens `route` takes, in words: what a "which token" refusal tells the caller to use."""
    return tokens_taken(route.auth, route.viewer)


def _authorize(route: Route, principal: Principal) -> None:
    """Invariant: a viewer token reaches only the routes declared open to it (`Route.viewer`), and an
    admin route only the admin token (or a viewer, where declared). A refusal names the tokens that work."""
    if principal.is_viewer:
        if not route.viewer:
            raise ServiceError(
                "forbidden",
                f"{route.path} does not take a viewer token (read-only: inspection routes only); nothing was done. "
                f"It takes {roles_that_work(route)}.",
            )
        return
    if route.auth == "admin" and not principal.is_admin:
        raise ServiceError(
            "forbidden",
            f"{route.path} does not take a session token; nothing was done. It takes {roles_that_work(route)}.",
        )


def _shutting_down() -> ServiceError:
    return ServiceError(
        "shutting_down",
        "The coordinator is shutting down and accepts no new writes; nothing was done. Retry against the "
        "restarted service.",
    )


def _settle(store: IdempotencyStore, k: str, fingerprint: bytes, answer: Answer, idem_key: str) -> None:
    """Keep the answer for replays, or give the claim back when it says "nothing was done, try again"."""
    status, body, _ = answer
    if _code_of(status, body) in TRANSIENT_CODES:
        store.release(k, fingerprint)
        return
    try:
        store.finish(k, fingerprint, status, body)
    except CoordinatorError:
        # The change stands; a retry with this key waits for the pending claim to expire.
        log.warning("could not record the answer of idempotency key %r", idem_key)


def _plain(result: Any) -> Any:
    """A result as JSON-ready data: dataclasses shallow (dataclasses.asdict deep-copies, a cost BENCHMARKS.md
    gives), lists of results with `to_dict`, dicts of them."""
    if isinstance(result, dict):
        return {k: _plain(v) if isinstance(v, list) else v for k, v in result.items()}
    if isinstance(result, list):
        return [x.to_dict() if hasattr(x, "to_dict") else x for x in result]
    names = _FIELD_NAMES.get(type(result))
    if names is None:
        names = _FIELD_NAMES[type(result)] = tuple(f.name for f in dataclasses.fields(result))
    own = getattr(result, "__dict__", None)
    if own is not None and tuple(own) == names:
        return own  # exactly the fields, in their order (as __init__ and `results.evolve` set them): read only
    return {n: getattr(result, n) for n in names}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _code_of(status: int, body: bytes) -> str | None:
    if status < 400:
        return None
    try:
        return str(json.loads(body).get("code"))
    except (ValueError, AttributeError):
        return None


def _signal_quietly(pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, sig)


def create_app(config: ServerConfig, secret: bytes | None = None) -> App:
    """The ASGI app. Without `secret`, it is loaded as `load_secret` describes (never created here)."""
    if secret is None:
        secret, _ = load_secret(config.root, config.secret_file, create=False)
    return App(config, secret)


def app_from_env() -> App:
    """Factory for uvicorn worker processes: the configuration comes from $EDIT_COORDINATOR_SERVER_CONFIG."""
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        raise RuntimeError(f"${CONFIG_ENV} is not set; start the service with `edit-coordinator serve`.")
    return create_app(ServerConfig.from_json(raw))
