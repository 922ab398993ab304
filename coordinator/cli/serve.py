"""Command line: `edit-coordinator serve` (the HTTP service) and `edit-coordinator token`."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shlex
import signal
import socket
import ssl
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.cli import common as cmd_common
from coordinator.disk.fsio import MAX_PATH_CHARS
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.server.auth import load_secret
from coordinator.server.common import CONFIG_ENV, SECRET_ENV, MiB
from coordinator.tokens import mint_token

if TYPE_CHECKING:
    from coordinator.server.listener import UnixListener
    from coordinator.server.models import ServerConfig

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the HTTP service",
        description="Serve the coordinator over HTTP/JSON (OpenAPI document at /openapi.json). Binds "
        "127.0.0.1 unless told otherwise; on any other address give --tls-cert and --tls-key (HTTPS), since "
        "tokens travel in every request. With --uds PATH it listens on a unix socket instead, for clients on "
        "this host (--server unix:///ABS/PATH). Every call but /v1/health needs a bearer token: see "
        "`edit-coordinator token`. The dashboard, a live page of the fleet, is at /dashboard: open it with a "
        "read-only token from `edit-coordinator token --viewer` (docs/dashboard.md).",
        formatter_class=cmd_common.DefaultsFormatter,
    )
    cmd_common.add_root(p)
    cmd_common.add_redis(p)
    cmd_common.add_tls(p)
    _add_listener(p)
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument("--secret-file", default=None, help=f"file holding the coordinator secret (or ${SECRET_ENV})")
    cmd_common.add_durability(p)
    cmd_common.add_policy_match(p)
    _add_engine_and_limits(p)
    _add_operation(p)
    p.set_defaults(func=_cmd_serve)
    _register_token(subparsers)


def _add_listener(p: argparse.ArgumentParser) -> None:
    """Where serve listens: TCP (--host, --port) or a unix socket (--uds)."""
    p.add_argument(
        "--host", default=None, help=f"address to bind (another than loopback: with TLS) (default: {DEFAULT_HOST})"
    )
    p.add_argument("--port", type=int, default=None, help=f"port (0 picks a free one) (default: {DEFAULT_PORT})")
    p.add_argument(
        "--uds",
        default=None,
        metavar="PATH",
        help="listen on this unix socket instead of TCP (created 0600; clients use the URL unix:///ABS/PATH; "
        "tokens still needed; no TLS, no --host/--port)",
    )


def _add_engine_and_limits(p: argparse.ArgumentParser) -> None:
    """The engine's options under serve, and the limits of a request."""
    p.add_argument("--lock-timeout", type=float, default=10.0, help="seconds to wait for a file lock")
    p.add_argument(
        "--state-check",
        choices=("always", "cached"),
        default=None,
        help="always: fetch a session's view from Redis before every write; cached: trust a view this process "
        "holds (one Redis round trip less per edit; see Coordinator's state_check). Default: the engine's",
    )
    p.add_argument("--max-body-bytes", type=int, default=16 * MiB, help="largest request body, in bytes")
    p.add_argument("--max-path-chars", type=int, default=MAX_PATH_CHARS, help="longest path")
    p.add_argument("--max-string-chars", type=int, default=16 * MiB, help="longest content / old_string / new_string")
    p.add_argument("--max-edits", type=int, default=1000, help="most edits in one multi_edit")
    p.add_argument("--max-concurrency", type=int, default=64, help="requests in progress per worker")
    p.add_argument("--idempotency-ttl", type=int, default=24 * 3600, help="seconds answers are kept")
    p.add_argument("--max-poll-wait", type=float, default=30.0, help="longest wait of a long poll for events, s")
    p.add_argument(
        "--max-polls",
        type=int,
        default=256,
        help="change-event long polls (dashboards, `watch`) waiting at once per worker; they have threads of their "
        "own and do not count against --max-concurrency, so watchers never crowd out the calls that change files",
    )
    p.add_argument("--graceful-timeout", type=float, default=30.0, help="seconds to let calls finish")


def _add_operation(p: argparse.ArgumentParser) -> None:
    """How the service runs and reports: inline calls, tracing, its URL file, logs."""
    p.add_argument(
        "--no-inline",
        action="store_true",
        help="run every engine call in the thread pool (default: on the event loop unless it must wait for a lock)",
    )
    p.add_argument(
        "--otel",
        action="store_true",
        help="an OpenTelemetry span per call, with the session id as an attribute (needs the otel extra and a "
        "tracer provider, e.g. run under opentelemetry-instrument; see docs/http.md)",
    )
    p.add_argument(
        "--idle-exit",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="stop after this long without a request, or once the root folder is gone (0: never; --workers 1)",
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help="record every change to the tree (whatever made it) as a version with its author, within ~100 ms "
        "(inotify; --workers 1; the hook service runs with it: docs/agents/agent-writes.md)",
    )
    p.add_argument(
        "--hook-http",
        default=None,
        metavar="FILE",
        help="also listen on 127.0.0.1 for Claude Code's http hooks: the hook route alone, at the port and with "
        "the key of FILE (the http.json `init claude-code` writes; --workers 1)",
    )
    p.add_argument("--url-file", default=None, help="write the service's URL to this file once listening")
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.add_argument(
        "--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"), help="log level"
    )


def _register_token(subparsers: Any) -> None:
    t = subparsers.add_parser(
        "token",
        help="print a bearer token for the HTTP service",
        description="Print a token signed with the coordinator secret of --root (the same one `serve` uses).",
        formatter_class=cmd_common.DefaultsFormatter,
    )
    cmd_common.add_root(t)
    t.add_argument("--secret-file", default=None, help=f"file holding the coordinator secret (or ${SECRET_ENV})")
    who = t.add_mutually_exclusive_group(required=True)
    who.add_argument("--session", help="a session token for this session id")
    who.add_argument("--admin", action="store_true", help="an admin token")
    who.add_argument(
        "--viewer",
        action="store_true",
        help="a read-only token: the dashboard (/dashboard) and the inspection routes, nothing that changes state",
    )
    t.add_argument("--ttl", type=int, default=24 * 3600, help="seconds until it expires")
    t.set_defaults(func=cmd_common.guarded(_cmd_token))


def _cmd_token(args: argparse.Namespace) -> int:
    if args.ttl < 1:
        return cmd_common.usage_error(f"--ttl must be at least 1 second (got {args.ttl}): a token's lifetime.")
    secret, _ = load_secret(args.root, args.secret_file, create=True)
    print(mint_token(secret, session=args.session, admin=args.admin, viewer=args.viewer, ttl_s=args.ttl))
    return 0


def tls_options(cert: str | None, key: str | None) -> dict[str, str]:
    """uvicorn's TLS options (`ssl_certfile`, `ssl_keyfile`, absolute paths) for a certificate and its key;
    {} for neither. Refused before anything starts (`invalid_argument`): one without the other, a file that
    cannot be read, a certificate and key that do not load together (not PEM, not a pair, an encrypted key).
    The workers load the same files again; checking here keeps a bad file from becoming workers that die at
    start."""
    if cert is None and key is None:
        return {}
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        env = cmd_common.TLS_KEY_ENV if key is None else cmd_common.TLS_CERT_ENV
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"{given} needs {missing} (or ${env}): HTTPS takes a certificate and its private key.",
        )
    paths = {"certificate": os.path.abspath(cert), "key": os.path.abspath(key)}
    for what, path in paths.items():
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as exc:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                f"The TLS {what} file {path!r} cannot be read ({exc.strerror or exc}): give a readable PEM file.",
            ) from None
    _load_pair(paths["certificate"], paths["key"])
    return {"ssl_certfile": paths["certificate"], "ssl_keyfile": paths["key"]}


def _load_pair(cert: str, key: str) -> None:
    def no_password() -> bytes:
        raise ValueError("the key is encrypted")

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key, password=no_password)
    except (ssl.SSLError, ValueError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"The TLS certificate {cert!r} and key {key!r} cannot be used together ({reason}): give the PEM "
            "certificate (chain) and its unencrypted PEM private key (decrypt one with `openssl pkey -in KEY "
            "-out PLAIN`).",
        ) from None


def _bind(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)  # connections queue from now on, before the workers are up
    sock.set_inheritable(True)
    return sock


def _config(args: argparse.Namespace, root: str) -> tuple[ServerConfig, str | None]:
    from coordinator.engine import Coordinator
    from coordinator.server.models import ServerConfig  # here: the other commands start without pydantic's models

    # Start (or find) the embedded Redis once, here, so that the workers share it from the start.
    with Coordinator(root, args.redis_url, durability=args.durability) as coord:
        redis_url = coord.redis_url
        coord.ping()
    _, secret_source = load_secret(root, args.secret_file, create=True)
    config = ServerConfig(
        root=root,
        redis_url=redis_url,
        durability=args.durability,
        policy=args.policy,
        match=args.match,
        lock_timeout=args.lock_timeout,
        secret_file=secret_source,
        max_body_bytes=args.max_body_bytes,
        max_path_chars=args.max_path_chars,
        max_string_chars=args.max_string_chars,
        max_edits=args.max_edits,
        max_concurrency=args.max_concurrency,
        idempotency_ttl_s=args.idempotency_ttl,
        max_poll_wait_s=args.max_poll_wait,
        max_polls=args.max_polls,
        inline=not args.no_inline,
        state_check=args.state_check,
        supervisor_pid=os.getpid(),
        otel=args.otel,
        idle_exit_s=args.idle_exit,
        watch=args.watch,
        **_hook_http(args),
    )
    try:
        config.validate()
    except ValueError as exc:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, str(exc)) from None
    return config, secret_source


def _hook_http(args: argparse.Namespace) -> dict[str, Any]:
    """The config's hook port and key: those of --hook-http's file once its listener is bound (`_listen`)."""
    hook = getattr(args, "hook_listener", None)
    if hook is None:
        return {}
    return {"hook_port": hook[1].port, "hook_key": hook[1].key}


def _listen_for_hooks(args: argparse.Namespace) -> tuple[socket.socket, Any] | None:
    """The loopback listener of --hook-http; None without it. A file that is not one, or a port another
    program holds, is refused: the http hooks would then fail, and the agent's writes with them."""
    if not args.hook_http:
        return None
    from coordinator.cli.hookservice import LOOPBACK, read_http_file

    found = read_http_file(Path(args.hook_http))
    if found is None:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"--hook-http {args.hook_http}: no port and key there; run `edit-coordinator init claude-code` again.",
        )
    try:
        return _bind(LOOPBACK, found.port, backlog=2048), found
    except OSError as exc:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"Cannot listen on {LOOPBACK}:{found.port} for Claude Code's http hooks ({exc.strerror or exc}): another "
            "program holds the port. Run `edit-coordinator init claude-code` again: it chooses another.",
        ) from None


def _uvicorn_options(args: argparse.Namespace, tls: dict[str, str]) -> dict[str, Any]:
    return {
        **tls,
        "lifespan": "on",
        "loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        "http": "httptools" if importlib.util.find_spec("httptools") else "h11",
        "access_log": args.access_log,
        "log_level": args.log_level,
        "timeout_graceful_shutdown": args.graceful_timeout,
        "timeout_keep_alive": 30,
        "server_header": False,
        "proxy_headers": False,
    }


def _check_otel(args: argparse.Namespace) -> None:
    """--otel needs the OpenTelemetry API: refused before anything starts when it cannot be imported."""
    if args.otel and importlib.util.find_spec("opentelemetry") is None:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "--otel needs the OpenTelemetry API, which is not installed: pip install 'edit-coordinator[otel]' "
            "(or leave --otel out).",
        )


def _check_listener_options(args: argparse.Namespace) -> None:
    """--uds replaces the TCP listener (one listener, one URL): it takes neither --host/--port nor TLS."""
    if args.workers < 1:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "--workers must be at least 1.")
    if args.watch and args.workers != 1:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "--watch needs --workers 1: one watcher per repository.")
    if args.hook_http and args.workers != 1:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "--hook-http needs --workers 1.")
    if args.idle_exit and args.workers != 1:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            "--idle-exit needs --workers 1: each worker sees only its own requests, so one idle worker would "
            "stop a service another is still answering.",
        )
    if args.uds is not None:
        clashing = [name for name, value in (("--host", args.host), ("--port", args.port)) if value is not None]
        if args.tls_cert or args.tls_key:
            clashing.append("--tls-cert/--tls-key")
        if clashing:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                f"--uds listens on a unix socket instead of TCP, so {' and '.join(clashing)} cannot go with it "
                "(the socket's file mode 0600 keeps other users out; no TLS is needed on the host). For both, "
                "run a second `edit-coordinator serve` with TCP on the same root: they share Redis and the locks.",
            )
        return
    args.host = DEFAULT_HOST if args.host is None else args.host
    args.port = DEFAULT_PORT if args.port is None else args.port
    if not 0 <= args.port <= 65535:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"--port must be 0-65535 (got {args.port}); 0 picks a free port."
        )


def _listen(args: argparse.Namespace, tls: dict[str, str]) -> tuple[socket.socket, str, UnixListener | None]:
    """The listening socket, the service's URL and (with --uds) the socket file to remove at the end."""
    if args.uds is not None:
        from coordinator.endpoint import unix_url
        from coordinator.server.listener import bind_unix

        unix = bind_unix(args.uds, backlog=2048)
        return unix.sock, unix_url(unix.path), unix
    try:
        sock = _bind(args.host, args.port, backlog=2048)
    except OSError as exc:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"Cannot listen on {args.host}:{args.port}: {exc.strerror or exc}."
        ) from None
    host, port = sock.getsockname()[:2]
    return sock, f"{'https' if tls else 'http'}://{host if ':' not in host else f'[{host}]'}:{port}", None


def _cmd_serve(args: argparse.Namespace) -> int:
    root = os.path.realpath(args.root)
    try:
        cmd_common.real_root(root)  # a root that is no folder: said before anything starts
        _check_otel(args)
        _check_listener_options(args)
        tls = tls_options(args.tls_cert, args.tls_key)  # before anything starts (Redis, the secret)
        sock, url, unix = _listen(args, tls)  # before the state folder, the secret and Redis
    except CoordinatorError as exc:
        return cmd_common.fail(exc)
    try:
        args.hook_listener = _listen_for_hooks(args)
    except CoordinatorError as exc:
        sock.close()
        if unix is not None:
            unix.remove()
        return cmd_common.fail(exc)
    try:
        status = _serve_on(args, root, sock, url, tls)
    finally:
        sock.close()
        if args.hook_listener is not None:
            args.hook_listener[0].close()
        if unix is not None:
            unix.remove()
    from coordinator.server.hooks import restart_wanted

    if restart_wanted():  # the hook service of http hooks, stopped for a changed config: the same command again
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    if args.idle_exit:  # a service started on demand, stopped for good: its embedded Redis too, if unused
        from coordinator.cli.hookservice import stop_unused_redis

        with contextlib.suppress(CoordinatorError, OSError):
            stop_unused_redis(root)
    return status


def _serve_on(args: argparse.Namespace, root: str, sock: socket.socket, url: str, tls: dict[str, str]) -> int:
    state_existed = cmd_common.state_dir(root).exists()
    try:
        config, secret_source = _config(args, root)
    except BaseException as exc:
        if not state_existed:
            _remove_new_state(root)
        if isinstance(exc, CoordinatorError):
            return cmd_common.fail(cmd_common.configuration_refusal(args, exc))
        raise
    if args.uds is None and args.host not in ("127.0.0.1", "localhost", "::1") and not tls:
        print(
            f"warning: binding {args.host} without TLS: tokens travel in clear text over plain HTTP; give "
            "--tls-cert and --tls-key, or put a TLS proxy in front of the service.",
            file=sys.stderr,
        )
    os.environ[CONFIG_ENV] = config.to_json()
    print(f"edit-coordinator serving {root} on {url} ({args.workers} workers; secret: "
          f"{secret_source or '$' + SECRET_ENV})", flush=True)  # fmt: skip
    if not url.startswith("unix:"):
        print(dashboard_hint(url, root, args.secret_file), flush=True)
    if args.url_file:
        tmp = f"{args.url_file}.tmp"
        Path(tmp).write_text(url + "\n")
        os.replace(tmp, args.url_file)
    return _run(args, sock, tls)


def dashboard_hint(url: str, root: str, secret_file: str | None) -> str:
    """The line `serve` prints under its address: where the dashboard is and the command that gives the
    read-only token it asks for (signed with the secret this service uses)."""
    command = ["edit-coordinator", "token", "--viewer", "--root", root]
    if secret_file:
        command += ["--secret-file", secret_file]
    return (
        f"dashboard: {url}/dashboard (it asks for a token; a read-only one, valid 24 h: "
        f"{shlex.join(command)}; or open {url}/dashboard#token=TOKEN)"
    )


def _remove_new_state(root: str) -> None:
    """Undo what a `serve` that failed to start made in a root that had no state folder: its embedded Redis
    (if it started one) and the state folder with the secret in it."""
    import shutil

    from coordinator.state.embedded import stop_embedded_redis

    folder = cmd_common.state_dir(root)
    with contextlib.suppress(CoordinatorError, OSError):
        stop_embedded_redis(folder)
    shutil.rmtree(folder, ignore_errors=True)


def _run(args: argparse.Namespace, sock: socket.socket, tls: dict[str, str]) -> int:
    options = _uvicorn_options(args, tls)
    if args.workers > 1:
        from coordinator.disk.layout import metrics_dir as metrics_dir_of
        from coordinator.server.supervisor import supervise

        metrics_dir = metrics_dir_of(cmd_common.state_dir(args.root))
        return supervise(args.workers, sock, options, args.graceful_timeout, metrics_dir)
    import uvicorn

    # uvicorn re-raises the signal that stopped it once it has shut down gracefully; with this handler in
    # place that is a normal exit (status 0), not death by SIGTERM.
    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        sockets = [sock] if args.hook_listener is None else [sock, args.hook_listener[0]]
        uvicorn.Server(uvicorn.Config("coordinator.server:app_from_env", factory=True, **options)).run(sockets=sockets)
    except KeyboardInterrupt:
        pass
    return 0
