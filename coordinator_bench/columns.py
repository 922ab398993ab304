"""The columns of every table: the baselines and each variant of the coordinator that this build has.

A column is one way of doing the same edits: `unsafe` (no lock, no check), `naive-lock` (a redis-py Lock
per file plus an mtime check, see `coordinator_bench.naive`), the coordinator in-process with each policy it
offers and durability `none` or `fsync`, the coordinator over HTTP (`edit-coordinator serve`, one worker)
through the project's `HttpClient` (over TCP, or a unix socket: `serve --uds`) or a plain httpx client
(`coordinator_bench.plainhttp`), the coordinator on
other Redis deployments (one redis-server, Sentinel, a 3-primary cluster: `coordinator_bench.deployments`), and
`AsyncClient` in-process (the asyncio scenario). Which of them exist is found out at run time, so the suite
runs on any build; the ones missing are reported with the reason.

`BenchClientSpec` extends the fleet's `ClientSpec` with what the fleet does not pass on (the policy, the
baselines, the plain HTTP client); `make_bench_client` builds the client in the worker process.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from worker.client import FileClient
from worker.fleet import ClientSpec, make_client

if TYPE_CHECKING:
    from coordinator.client.aio import AsyncClient

KIND_UNSAFE = "unsafe"
KIND_NAIVE = "naive-lock"
KIND_COORDINATOR = "coordinator"
KIND_HTTP = "http"
KIND_ASYNC = "async"


@dataclass(frozen=True)
class Column:
    """One variant measured side by side with the others."""

    name: str
    kind: str  # unsafe | naive-lock | coordinator | http | async
    policy: str | None = None
    durability: str | None = None
    deployment: str | None = None  # Redis: None (the suite's embedded server) | server | sentinel | cluster
    http_client: str | None = None  # http: "project" (HttpClient) | "plain" (httpx)
    listener: str | None = None  # http: None (TCP on 127.0.0.1) | "uds" (`serve --uds`, a unix socket)

    @property
    def is_coordinator(self) -> bool:
        """True for every column that goes through the coordinator (in-process, over HTTP, asyncio)."""
        return self.kind in (KIND_COORDINATOR, KIND_HTTP, KIND_ASYNC)

    @property
    def is_baseline(self) -> bool:
        return not self.is_coordinator

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "policy": self.policy,
            "durability": self.durability,
            "deployment": self.deployment,
            "http_client": self.http_client,
            "listener": self.listener,
        }


UNSAFE = Column("unsafe", KIND_UNSAFE)
NAIVE = Column("naive-lock", KIND_NAIVE)
HTTP_PROJECT = Column("http-strict-none", KIND_HTTP, "strict", "none", http_client="project")
HTTP_PLAIN = Column("http-plain", KIND_HTTP, "strict", "none", http_client="plain")
HTTP_UDS = Column("http-uds", KIND_HTTP, "strict", "none", http_client="project", listener="uds")
ASYNC = Column("async", KIND_ASYNC, "strict", "none")
DEPLOYMENTS = ("server", "sentinel", "cluster")


def coordinator_column(policy: str, durability: str) -> Column:
    return Column(f"{policy}-{durability}", KIND_COORDINATOR, policy, durability)


def deployment_column(deployment: str) -> Column:
    return Column(f"redis-{deployment}", KIND_COORDINATOR, "strict", "none", deployment=deployment)


@dataclass(frozen=True)
class BenchClientSpec(ClientSpec):
    """The fleet's `ClientSpec` plus the coordinator's policy and the naive-lock baseline."""

    policy: str = "strict"
    http_client: str = "project"

    @property
    def local(self) -> bool:
        # Every client of a benchmark works on a local root (the HTTP service serves a local folder too),
        # so the fleet's observer may sample the files' bytes for torn reads in every column.
        return True


def spec_for(
    column: Column, root: str, redis_url: str, url: str | None = None, token: str | None = None
) -> BenchClientSpec:
    """The client spec of `column` on `root`."""
    return BenchClientSpec(
        kind=column.kind,
        root=root,
        redis_url=redis_url,
        url=url,
        token=token,
        durability=column.durability or "none",
        policy=column.policy or "strict",
        http_client=column.http_client or "project",
    )


def make_bench_client(spec: ClientSpec) -> FileClient:
    """The client a worker uses (in the worker process): the file operations and `close` that the fleet's
    agents and the raw loop call (`worker.client.FileClient`), which the baselines implement too."""
    policy = getattr(spec, "policy", "strict")
    if spec.kind == KIND_COORDINATOR:
        from coordinator.client import LocalClient

        assert spec.root is not None
        options: dict[str, Any] = {"durability": spec.durability, "lock_timeout": spec.lock_timeout}
        if policy != "strict":
            options["policy"] = policy
        return LocalClient.open(spec.root, spec.redis_url, **options)
    if spec.kind == KIND_HTTP and getattr(spec, "http_client", "project") == "plain":
        from coordinator_bench.plainhttp import PlainHttpClient

        assert spec.url is not None and spec.token is not None
        return PlainHttpClient(spec.url, spec.token)
    if spec.kind == KIND_NAIVE:
        from coordinator_bench.naive import NaiveLockClient

        assert spec.root is not None and spec.redis_url is not None
        return NaiveLockClient(spec.root, spec.redis_url)
    return make_client(spec)


# ---------------------------------------------------------------------------------------------------------
# What this build offers
# ---------------------------------------------------------------------------------------------------------
CANDIDATE_POLICIES = ("strict", "rebase")


def available_policies(redis_url: str) -> list[str]:
    """The coordinator's policies that this build accepts (tried on a scratch root, not assumed)."""
    from coordinator import Coordinator, CoordinatorError

    found = []
    with tempfile.TemporaryDirectory(prefix="ec-bench-probe-") as tmp:
        for policy in CANDIDATE_POLICIES:
            try:
                Coordinator(tmp, redis_url, durability="none", policy=policy).close()  # type: ignore[arg-type]
            except (CoordinatorError, TypeError, ValueError):
                continue
            found.append(policy)
    return found


def http_available() -> bool:
    """True when the HTTP service and its client are installed."""
    for module in ("coordinator.server", "coordinator.client.http", "uvicorn", "httpx"):
        try:
            if importlib.util.find_spec(module) is None:
                return False
        except (ImportError, ValueError):
            return False
    return os.name == "posix"


def async_client_class() -> type[AsyncClient] | None:
    """`coordinator.AsyncClient` (or `coordinator.client.aio.AsyncClient` before it is exported), or None."""
    try:
        from coordinator import AsyncClient
    except ImportError:
        try:
            from coordinator.client.aio import AsyncClient
        except ImportError:
            return None
    return AsyncClient


def async_available() -> str | None:
    """None when `AsyncClient` exists, else why the asyncio column cannot run."""
    if async_client_class() is None:
        return "this build has no `coordinator.AsyncClient` yet (issue 16): the asyncio scenario is skipped"
    return None


def all_columns(redis_url: str, with_http: bool = True) -> tuple[list[Column], list[dict[str, str]]]:
    """Every column this build can run (baselines first, then the coordinator variants), and the ones it
    cannot, each with the reason."""
    from coordinator_bench.deployments import deployments_available

    cols = [UNSAFE, NAIVE]
    absent: list[dict[str, str]] = []
    policies = available_policies(redis_url)
    for policy in policies:
        for durability in ("none", "fsync"):
            cols.append(coordinator_column(policy, durability))
    if "rebase" not in policies:
        absent.append({"column": "rebase-*", "why": "this build's Coordinator does not accept policy='rebase'"})
    if with_http and http_available():
        cols += [HTTP_PROJECT, HTTP_PLAIN, HTTP_UDS]
    else:
        why = "not asked for (--no-http)" if not with_http else "the HTTP service or its client is not installed"
        absent.append({"column": "http-*", "why": why})
    for dep in DEPLOYMENTS:
        missing = deployments_available(dep)
        if missing is None:
            cols.append(deployment_column(dep))
        else:
            absent.append({"column": f"redis-{dep}", "why": missing})
    missing = async_available()
    if missing is None:
        cols.append(ASYNC)
    else:
        absent.append({"column": ASYNC.name, "why": missing})
    return cols, absent
