"""The Redis deployments of the `distributed` scenario: one redis-server, Sentinel, a 3-primary cluster.

All three run the system's redis-server (Debian's package, `apt-get install -y redis-server`) on 127.0.0.1,
started for the scenario and stopped after it. Sentinel (a primary, a replica, three sentinels) and the
cluster (3 primaries, 3 replicas) come from `worker.deployments`, the project's launcher of local
deployments; the single server is started here. Between two cells every data node is flushed, as the
embedded server is for the other scenarios. The CPU of a cell counts every process of the deployment.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from coordinator_bench.measure import cpu_seconds

_START_TIMEOUT_S = 30.0


def _system_redis_server() -> str | None:
    if importlib.util.find_spec("worker.deployments") is not None:
        from worker.deployments import system_redis_server

        return system_redis_server()
    for candidate in ("/usr/bin/redis-server", "/usr/local/bin/redis-server"):
        if Path(candidate).is_file():
            return candidate
    return None


def deployments_available(kind: str) -> str | None:
    """None when deployment `kind` can be started here, else why not."""
    if _system_redis_server() is None:
        return "Debian's redis-server is not installed (apt-get install -y redis-server)"
    if kind != "server" and importlib.util.find_spec("worker.deployments") is None:
        return "this build has no launcher of local Sentinel and Cluster deployments (worker.deployments)"
    return None


@dataclass
class Deployment:
    """A running deployment: its URL, the processes to count and the data nodes to flush."""

    kind: str
    url: str
    pids: list[int]
    data_ports: list[int]
    handle: Any = None  # what stops it
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def flush(self) -> None:
        """FLUSHALL on every data node that takes writes (replicas refuse it and follow their primary)."""
        for port in self.data_ports:
            c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
            try:
                with contextlib.suppress(redis.ResponseError, redis.ReadOnlyError):
                    c.flushall()
            finally:
                c.close()
        time.sleep(0.05)  # let replicas catch up before the cell starts

    def cpu_s(self) -> float:
        return cpu_seconds(self.pids)

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.stop()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(folder: Path) -> Deployment:
    binary = _system_redis_server()
    assert binary is not None
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder), "--save", ""]
    args += ["--appendonly", "no", "--daemonize", "no", "--logfile", str(folder / "redis.log")]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dep = Deployment("server", f"redis://127.0.0.1:{port}/0", [proc.pid], [port], procs=[proc])
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        try:
            c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5)
            c.ping()
            c.close()
            return dep
        except redis.RedisError:
            if proc.poll() is not None or time.monotonic() > deadline:
                dep.stop()
                raise RuntimeError(f"redis-server did not start on port {port}") from None
            time.sleep(0.05)


def _from_local(kind: str, handle: Any) -> Deployment:
    servers = handle.servers
    pids = [srv.proc.pid for srv in servers.values()]
    if kind == "cluster":
        data = list(handle.primaries())
    else:
        data = [handle.primary_port()]
    return Deployment(kind, handle.url, pids, data, handle=handle)


@contextlib.contextmanager
def started(kind: str, folder: Path) -> Iterator[Deployment]:
    """`with started("server" | "sentinel" | "cluster", folder) as d:` — running, stopped afterwards."""
    if kind == "server":
        dep = _start_server(folder)
    else:
        from worker.deployments import start_cluster, start_sentinel

        start = start_cluster if kind == "cluster" else start_sentinel
        dep = _from_local(kind, start(folder))
    try:
        yield dep
    finally:
        dep.stop()
