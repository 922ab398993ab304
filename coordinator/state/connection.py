"""Redis connections: one URL grammar, one client factory, one error translator.

URLs (docs/engine.md, "Redis deployments and hosts"):
    redis://[user:pass@]host:port[/db]      one server (TCP); rediss:// the same over TLS
    unix:///path/to/redis.sock[?db=N]       one server (unix socket)
    redis+sentinel://[user:pass@]h:p[,h:p...]/SERVICE[/db]   the primary that Sentinel names for SERVICE
    redis+cluster://[user:pass@]h:p[,h:p...]                  a Redis Cluster (any reachable nodes seed it)
    rediss+sentinel://..., rediss+cluster://...               the same over TLS
TLS options ride in the query string: `ssl_ca_certs=FILE`, `ssl_certfile=FILE`, `ssl_keyfile=FILE`,
`ssl_cert_reqs=none|optional|required`. A Sentinel's own password (when it differs from the data nodes')
is `sentinel_password=...`.

Timeouts and retries (decided here, for every deployment): every socket operation times out after
`timeout` seconds (connects after at most 1 s); a failed call is retried a bounded number of times with a
short exponential back-off (one server: once, at once, so a restarted server is found again; Sentinel and
Cluster: up to 3 times within ~0.35 s, enough to follow a MOVED after a failover or a new primary named by
Sentinel, and short enough that a shard in failover gives a prompt `state_unavailable` instead of a hung
call). The failover itself takes seconds; the engine refuses (fails closed) during it, never waits it out.

Observing (`observe_redis`, for the HTTP service's metrics): every connection made by `connect` counts
its sends, one per command or pipeline written to the socket, that is one per round trip (one server and
Sentinel-managed primaries; not a Redis Cluster, whose per-node clients redis-py makes with no say over
their connection class); and the translator counts each failure it translates, by the client exception's
class name, whatever the deployment.

The translator (`translate`, `redis_call`) is the only place where a Redis client's exception becomes a
`CoordinatorError`. It catches every exception a client raises: `RedisError`, `RedisClusterException`
(which is not a `RedisError`), and the socket-level `OSError`s that slip through. Every such failure is
`state_unavailable`: Redis holds only coordination state, so whatever went wrong, the caller fails closed.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs, unquote

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import Sentinel

from coordinator.errors import CoordinatorError, ErrorCode

T = TypeVar("T")

#: Everything a Redis client may raise. `RedisClusterException` is not a `RedisError`.
CLIENT_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, RedisClusterException, OSError)

#: The environment variable naming the default Redis URL of the library and of every command.
REDIS_URL_ENV = "EDIT_COORDINATOR_REDIS_URL"
SINGLE_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SCHEMES = SINGLE_SCHEMES + SENTINEL_SCHEMES + CLUSTER_SCHEMES
_DISTRIBUTED_RETRIES = 3
_CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True)
class RedisTarget:
    """A parsed Redis URL. kind: "single" | "sentinel" | "cluster"."""

    kind: str
    url: str
    tls: bool = False
    nodes: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    def redacted(self) -> str:
        """The URL without its password (for messages and logs)."""
        scheme, sep, rest = self.url.partition("://")
        netloc, slash, tail = rest.partition("/")
        if "@" not in netloc:
            return self.url
        user = netloc.rsplit("@", 1)[0].partition(":")[0]
        return f"{scheme}{sep}{user}:***@{netloc.rsplit('@', 1)[1]}{slash}{tail}"


def _bad_url(url: str, why: str) -> CoordinatorError:
    return CoordinatorError(
        ErrorCode.INVALID_ARGUMENT,
        f"Cannot use the Redis URL {url!r}: {why}. Use redis://host:port[/db], rediss://..., unix:///path, "
        "redis+sentinel://host:port[,host:port]/SERVICE or redis+cluster://host:port[,host:port] "
        "(TLS: rediss+sentinel://, rediss+cluster://).",
    )


def parse_url(url: object) -> RedisTarget:
    """Parse any supported Redis URL; a malformed one is `invalid_argument` (nothing is connected)."""
    if not isinstance(url, str) or "://" not in url:
        raise _bad_url(str(url), "it is not a URL")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise _bad_url(url, f"unknown scheme {scheme!r}")
    if scheme in SINGLE_SCHEMES:
        return RedisTarget("single", url, tls=scheme == "rediss")
    rest, _, query = rest.partition("?")
    options = {k: v[-1] for k, v in parse_qs(query).items()}
    netloc, _, path = rest.partition("/")
    username = password = None
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, sep, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if sep else None
    nodes = tuple(_parse_node(url, part) for part in netloc.split(",") if part.strip())
    if not nodes:
        raise _bad_url(url, "no host:port given")
    parts = [p for p in path.split("/") if p]
    kind = "sentinel" if scheme in SENTINEL_SCHEMES else "cluster"
    service, db = "", 0
    if kind == "sentinel":
        if not parts:
            raise _bad_url(url, "a Sentinel URL names the service after the hosts: redis+sentinel://h:p/SERVICE")
        service = unquote(parts[0])
        parts = parts[1:]
    if parts:
        if kind == "cluster":
            raise _bad_url(url, "a Redis Cluster has only database 0; give no path")
        if not parts[0].isdigit() or len(parts) > 1:
            raise _bad_url(url, f"{'/'.join(parts)!r} is not a database number")
        db = int(parts[0])
    return RedisTarget(kind, url, scheme.startswith("rediss"), nodes, service, db, username, password, options)


def _parse_node(url: str, part: str) -> tuple[str, int]:
    part = part.strip()
    if part.startswith("["):  # [ipv6]:port
        host, _, port = part[1:].partition("]:")
    else:
        host, _, port = part.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _bad_url(url, f"{part!r} is not host:port")
    return host, int(port)


def _tls_kwargs(t: RedisTarget) -> dict[str, Any]:
    if not t.tls:
        return {}
    kw: dict[str, Any] = {"ssl": True}
    for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        if t.options.get(name):
            kw[name] = t.options[name]
    reqs = t.options.get("ssl_cert_reqs")
    if reqs:
        if reqs.lower() not in _CERT_REQS:
            raise _bad_url(t.url, "ssl_cert_reqs must be none, optional or required")
        kw["ssl_cert_reqs"] = _CERT_REQS[reqs.lower()]
    return kw


class RedisObserver(Protocol):
    """Told about this process's Redis traffic (see the module docstring); must be cheap and not raise."""

    def round_trip(self) -> None:
        """A command or a pipeline was sent."""

    def error(self, kind: str) -> None:
        """A client exception (its class name, `kind`) was translated into `state_unavailable`."""


_observer: RedisObserver | None = None


def observe_redis(observer: RedisObserver | None) -> None:
    """Tell `observer` about every Redis round trip and error of this process from now on (None: stop).
    Process-wide, since connections are made by every part of the package; the last one set wins."""
    global _observer
    _observer = observer


def count_round_trip() -> None:
    """Tell the observer of a round trip sent without a counted connection's `send_packed_command`
    (the lane's direct send, coordinator/state/lane.py)."""
    observer = _observer
    if observer is not None:
        observer.round_trip()


_COUNTED: dict[type, type] = {}


def _counted_class(base: type[redis.connection.AbstractConnection]) -> type:
    """`base` (a redis-py connection class) with its sends counted; one subclass per base, made once."""
    made = _COUNTED.get(base)
    if made is None:

        def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
            observer = _observer
            if observer is not None:
                observer.round_trip()
            base.send_packed_command(self, command, check_health)

        made = _COUNTED[base] = type(f"Counted{base.__name__}", (base,), {"send_packed_command": send_packed_command})
    return made


def _count_sends(client: Any) -> Any:
    """The client, its pool's connections made with their sends counted (none are made yet)."""
    pool = client.connection_pool
    pool.connection_class = _counted_class(pool.connection_class)
    return client


def connect(url: str, timeout: float = 2.0) -> Any:
    """A client for `url` with explicit timeouts and a bounded retry policy (see the module docstring).

    Returns a `redis.Redis` (one server, or the Sentinel-managed primary) or a `redis.cluster.RedisCluster`.
    Nothing is sent yet: an unreachable deployment is reported by the first call, as `state_unavailable`.
    """
    t = parse_url(url)
    common: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": min(timeout, 1.0)}
    if t.kind == "single":
        return _count_sends(redis.Redis.from_url(url, retry=Retry(NoBackoff(), 1), health_check_interval=0, **common))
    retry = Retry(ExponentialBackoff(cap=0.2, base=0.05), _DISTRIBUTED_RETRIES)
    auth: dict[str, Any] = {"username": t.username, "password": t.password}
    tls = _tls_kwargs(t)
    if t.kind == "sentinel":
        # Each sentinel is asked once per lookup (the Sentinel client goes on to the next one itself):
        # redis-py's default retry (3 times, back-off up to 10 s) would make a lookup take seconds.
        sentinel_kwargs = dict(common, retry=Retry(NoBackoff(), 0), **tls)
        if t.options.get("sentinel_password"):
            sentinel_kwargs["password"] = t.options["sentinel_password"]
        sentinel = Sentinel(list(t.nodes), sentinel_kwargs=sentinel_kwargs, **common)
        return _count_sends(sentinel.master_for(t.service, db=t.db, retry=retry, **auth, **tls, **common))
    return _translated(
        lambda: RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in t.nodes],
            retry=retry,
            require_full_coverage=False,
            **auth,
            **tls,
            **common,
        ),
        t,
    )


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


def _translated(fn: Callable[[], T], target: RedisTarget) -> T:
    try:
        return fn()
    except CLIENT_ERRORS as exc:
        raise translate(exc, where=target.redacted()) from exc


# ---------------------------------------------------------------------------------------------------------
# The translator
# ---------------------------------------------------------------------------------------------------------
def _hint(exc: BaseException) -> str:
    """What to do about this particular failure, beyond waiting (empty: nothing specific)."""
    text = str(exc)
    if isinstance(exc, redis.exceptions.MovedError | redis.exceptions.AskError) or text.startswith(("MOVED", "ASK ")):
        return (
            " This URL reaches a node of a Redis Cluster, which answers only for its own slots: use "
            "redis+cluster://host:port[,host:port] (rediss+cluster:// for TLS) instead of redis://."
        )
    if "cluster support disabled" in text or "Cluster mode is not enabled" in text:
        return (
            " The server is not part of a Redis Cluster: use redis://host:port (or redis+sentinel://... for a "
            "Sentinel-managed primary) instead of redis+cluster://."
        )
    if isinstance(exc, redis.AuthenticationError | redis.exceptions.AuthorizationError) or "NOAUTH" in text:
        return " Check the user name and password in the Redis URL."
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return " A replica answered (a failover is under way or the URL names a replica)."
    if "No master found" in text or isinstance(exc, redis.sentinel.MasterNotFoundError):
        return " Sentinel names no primary for this service yet (a failover is under way, or the name is wrong)."
    return ""


def translate(exc: BaseException, where: str | None = None) -> CoordinatorError:
    """The `state_unavailable` refusal for any exception a Redis client raised (the one message)."""
    observer = _observer
    if observer is not None:
        observer.error(type(exc).__name__)
    at = f" at {where}" if where else ""
    text = str(exc)
    if isinstance(exc, redis.sentinel.MasterNotFoundError):
        text = text.split(" : ", 1)[0]  # the rest is the repr of every sentinel client
    if len(text) > 300:
        text = text[:300] + "..."
    return CoordinatorError(
        ErrorCode.STATE_UNAVAILABLE,
        f"The coordination state (Redis{at}) could not be used ({type(exc).__name__}: {text}), so this "
        f"request changed nothing.{_hint(exc)} Wait a moment and try again; once Redis answers again, read "
        "the file again before editing it.",
        cause=type(exc).__name__,
    )


def redis_call(fn: Callable[[], T]) -> T:
    """Run one Redis interaction; any client exception becomes `state_unavailable` (see `translate`)."""
    try:
        return fn()
    except CLIENT_ERRORS as exc:
        raise translate(exc) from exc


# ---------------------------------------------------------------------------------------------------------
# Per-node load (stress runs and benchmarks report it per shard)
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeLoad:
    """Counters of one Redis primary: commands processed and CPU seconds used (server + user)."""

    node: str
    commands: int
    cpu_s: float
    keys: int


def node_loads(client: Any) -> list[NodeLoad]:
    """The load counters of every primary behind `client` (one entry for a single server or Sentinel
    primary). Subtract two snapshots to get the load of a run (`load_delta`)."""

    def one(name: str, r: Any) -> NodeLoad:
        info = r.info()
        keys = sum(int(v.get("keys", 0)) for k, v in info.items() if k.startswith("db") and isinstance(v, dict))
        cpu = float(info.get("used_cpu_sys", 0.0)) + float(info.get("used_cpu_user", 0.0))
        return NodeLoad(name, int(info.get("total_commands_processed", 0)), cpu, keys)

    def go() -> list[NodeLoad]:
        if is_cluster(client):
            return [one(n.name, client.get_redis_connection(n)) for n in client.get_primaries()]
        pool = client.connection_pool
        if hasattr(pool, "get_master_address"):  # Sentinel: the primary it names now
            host, port = pool.get_master_address()
            return [one(f"{host}:{port}", client)]
        kw = pool.connection_kwargs
        name = kw.get("path") or f"{kw.get('host', '?')}:{kw.get('port', '?')}"
        return [one(str(name), client)]

    return redis_call(go)


def load_delta(before: list[NodeLoad], after: list[NodeLoad]) -> list[NodeLoad]:
    """Per node: what `after` adds to `before` (nodes new in `after` count from zero)."""
    base = {n.node: n for n in before}
    out = []
    for n in after:
        b = base.get(n.node, NodeLoad(n.node, 0, 0.0, 0))
        out.append(NodeLoad(n.node, n.commands - b.commands, round(n.cpu_s - b.cpu_s, 3), n.keys))
    return out


def shard_report(before: list[NodeLoad], after: list[NodeLoad], edits: int = 0) -> list[dict[str, Any]]:
    """Per primary, what a run cost it: commands, their share of all, CPU seconds, and per acknowledged
    edit (when `edits` is given). `before`/`after` are `node_loads` snapshots taken around the run."""
    delta = load_delta(before, after)
    total = sum(max(0, n.commands) for n in delta) or 1
    rows = []
    for n in sorted(delta, key=lambda x: x.node):
        row: dict[str, Any] = {
            "node": n.node,
            "commands": n.commands,
            "share": round(n.commands / total, 3),
            "cpu_s": n.cpu_s,
            "keys": n.keys,
        }
        if edits:
            row["commands_per_edit"] = round(n.commands / edits, 2)
            row["cpu_us_per_edit"] = round(n.cpu_s / edits * 1e6, 1)
        rows.append(row)
    return rows
