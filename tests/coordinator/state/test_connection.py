"""Redis URLs, the client factory and the one error translator (coordinator.state.connection)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.exceptions import RedisClusterException

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.state.connection import connect, observe_redis, parse_url, redis_call, translate
from worker.deployments import LocalCluster, LocalSentinel


def test_urls_of_every_deployment_parse() -> None:
    t = parse_url("redis+sentinel://u:p%40w@10.0.0.1:26379,10.0.0.2:26380/mymaster/2?sentinel_password=s")
    assert (t.kind, t.nodes, t.service, t.db, t.username, t.password) == (
        "sentinel",
        (("10.0.0.1", 26379), ("10.0.0.2", 26380)),
        "mymaster",
        2,
        "u",
        "p@w",
    )
    assert t.options == {"sentinel_password": "s"} and not t.tls
    assert t.redacted() == "redis+sentinel://u:***@10.0.0.1:26379,10.0.0.2:26380/mymaster/2?sentinel_password=s"
    c = parse_url("rediss+cluster://h1:7000,[::1]:7001?ssl_ca_certs=/ca.pem")
    assert (c.kind, c.tls, c.nodes) == ("cluster", True, (("h1", 7000), ("::1", 7001)))
    assert c.options["ssl_ca_certs"] == "/ca.pem"
    assert parse_url("redis://localhost:6379/0").kind == "single"
    assert parse_url("unix:///tmp/x.sock").kind == "single"
    assert parse_url("rediss+sentinel://h:1/svc").tls


@pytest.mark.parametrize(
    "url",
    [
        "http://h:1",
        "redis+sentinel://h:1",  # no service
        "redis+cluster://h:1/3",  # a cluster has db 0 only
        "redis+cluster://",
        "redis+cluster://h:notaport",
        "no url at all",
        "rediss+cluster://h:1?ssl_cert_reqs=sometimes",
    ],
)
def test_bad_urls_are_invalid_argument_naming_the_forms(url: str) -> None:
    with pytest.raises(CoordinatorError) as ei:
        connect(url)
    assert ei.value.code is ErrorCode.INVALID_ARGUMENT
    assert "redis+cluster://" in ei.value.message and "redis+sentinel://" in ei.value.message


@pytest.mark.parametrize(
    "exc",
    [
        RedisClusterException("evalsha is blocked when running redis in cluster mode"),
        redis.ConnectionError("refused"),
        redis.TimeoutError("timed out"),
        redis.ResponseError("CLUSTERDOWN The cluster is down"),
        ConnectionResetError(104, "reset by peer"),
    ],
)
def test_every_client_exception_is_state_unavailable(exc: BaseException) -> None:
    def boom() -> None:
        raise exc

    with pytest.raises(CoordinatorError) as ei:
        redis_call(boom)
    assert ei.value.code is ErrorCode.STATE_UNAVAILABLE
    assert type(exc).__name__ in ei.value.message and "changed nothing" in ei.value.message
    assert ei.value.__cause__ is exc


def test_moved_names_the_cluster_scheme() -> None:
    err = translate(redis.exceptions.MovedError("3999 127.0.0.1:7001"))
    assert err.code is ErrorCode.STATE_UNAVAILABLE and "redis+cluster://" in err.message
    assert "redis+cluster://" not in translate(redis.ConnectionError("x")).message


def test_unreachable_deployments_refuse_promptly_as_state_unavailable(root: Path) -> None:
    (root / "f.txt").write_text("a\n")
    for url in ("redis://127.0.0.1:1/0", "redis+cluster://127.0.0.1:1", "redis+sentinel://127.0.0.1:1/ec"):
        with pytest.raises(CoordinatorError) as ei, Coordinator(root, redis_url=url, redis_timeout=0.3) as c:
            c.session("s").read("f.txt")
        assert ei.value.code is ErrorCode.STATE_UNAVAILABLE, url
    assert (root / "f.txt").read_text() == "a\n"


def test_plain_url_to_a_cluster_node_says_to_use_the_cluster_scheme(
    root: Path, cluster_deployment: LocalCluster
) -> None:
    """Every node owns a third of the slots: some paths would work, others answer MOVED. Each refusal says
    which scheme to use, and nothing is written."""
    node = cluster_deployment.ports[0]
    files = [f"f{i}.txt" for i in range(12)]
    for name in files:
        (root / name).write_text("a\n")
    refused: list[CoordinatorError] = []
    with Coordinator(root, redis_url=f"redis://127.0.0.1:{node}") as c:
        s = c.session("s")
        for name in files:
            try:
                s.read(name)
            except CoordinatorError as exc:
                refused.append(exc)
    assert refused, "some of these paths hash to slots of other nodes"
    for exc in refused:
        assert exc.code is ErrorCode.STATE_UNAVAILABLE and "redis+cluster://" in exc.message


def test_cluster_url_to_a_plain_server_says_so(root: Path, sentinel_deployment: LocalSentinel) -> None:
    (root / "f.txt").write_text("a\n")
    plain = sentinel_deployment.primary_port()
    url = f"redis+cluster://127.0.0.1:{plain}"
    with pytest.raises(CoordinatorError) as ei, Coordinator(root, redis_url=url) as c:
        c.session("s").read("f.txt")
    assert ei.value.code is ErrorCode.STATE_UNAVAILABLE
    assert "not part of a Redis Cluster" in ei.value.message and "redis://host:port" in ei.value.message


class _Traffic:
    def __init__(self) -> None:
        self.round_trips = 0
        self.errors: list[str] = []

    def round_trip(self) -> None:
        self.round_trips += 1

    def error(self, kind: str) -> None:
        self.errors.append(kind)


@pytest.fixture
def traffic() -> Iterator[_Traffic]:
    seen = _Traffic()
    observe_redis(seen)
    yield seen
    observe_redis(None)


def test_round_trips_are_counted_per_command_and_per_pipeline(real_redis_root: Path, traffic: _Traffic) -> None:
    with Coordinator(real_redis_root) as c:
        url = c.redis_url
    assert url is not None
    client = connect(url)
    try:
        client.ping()  # the first command also makes the connection (its handshake is a round trip of its own)
        before = traffic.round_trips
        client.set("ec-test-k", "1")
        pipe = client.pipeline(transaction=False)
        for i in range(5):
            pipe.incr("ec-test-k", i)
        pipe.execute()
        assert traffic.round_trips - before == 2  # one command, one pipeline of five
        observe_redis(None)
        client.get("ec-test-k")
        assert traffic.round_trips - before == 2  # no observer: nothing told
    finally:
        client.close()


def test_errors_are_counted_by_kind_where_they_are_translated(traffic: _Traffic, tmp_path: Path) -> None:
    client = connect(f"unix://{tmp_path}/no-such.sock", timeout=0.5)
    with pytest.raises(CoordinatorError) as refused:
        redis_call(client.ping)
    assert refused.value.code == ErrorCode.STATE_UNAVAILABLE
    assert traffic.errors == ["ConnectionError"]
    translate(redis.TimeoutError("slow"))
    assert traffic.errors == ["ConnectionError", "TimeoutError"]
