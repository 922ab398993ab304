"""Shared fixtures.

Redis topologies: a test marked `@pytest.mark.topology` runs once per deployment:
    default    its ordinary setup (`coord` and the other fixtures made with `coordinator_for` on fakeredis;
               `real_redis_root` on the embedded server)
    sentinel   a primary + replica + 3 sentinels (redis+sentinel://), started once per test session
    cluster    a 6-node Redis Cluster (redis+cluster://), started once per test session
For sentinel and cluster, `EDIT_COORDINATOR_REDIS_URL` is set for the test, so every Coordinator it makes,
in this process or in the processes it starts, uses that deployment; `coord` is built on it too. Each test
has its own repository (its own namespace), so tests share a deployment without seeing each other's keys.
The deployments are started from the system's redis-server (Debian's package; CI installs it); without one
the sentinel and cluster variants are skipped, saying so. Tests that kill servers start their own
deployment (`worker.deployments`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from coordinator import Coordinator
from worker.deployments import LocalCluster, LocalSentinel, start_cluster, start_sentinel, system_redis_server

TOPOLOGIES = ("default", "sentinel", "cluster")
NO_SERVER = "redis-server is not installed (apt-get install -y redis-server; .ci/run installs it)"


# --- nothing left running -------------------------------------------------------------------------------
# A test stops what it starts: the embedded redis-server of each root it used (`stop_embedded_redis`), the
# services and hook services it ran. At the end of the run, any process still running that the run started
# is a leak: it is named, ended (so that leaks do not pile up on the machine), and the run fails. A process
# is the run's when its working folder or command line lies in the run's folders (its basetemp), or when it
# carries the run's own mark in its environment (RUN_MARK, set at the run's start and inherited by every
# process started from it, daemons included: this finds what was started for a root outside the basetemp,
# such as a scratch folder in /tmp).
LEFTOVER_GRACE_S = 5.0  # a process told to stop in the last test's teardown may take a moment to exit
RUN_MARK = "EC_TEST_RUN"
# multiprocessing's helpers when children of the run's own process: they end with it (they wait on its pipe);
# what the fork server forked is its child, and is judged as any other process.
_ENDS_WITH_THE_RUN = ("from multiprocessing.forkserver import main", "from multiprocessing.resource_tracker import")


def _own_ancestors() -> set[int]:
    pids: set[int] = set()
    pid: int | None = os.getpid()
    while pid is not None and pid > 1:
        pids.add(pid)
        pid = _parent(str(pid))
    return pids


def leftover_processes(base: str | None, mark: str | None = None) -> dict[int, str]:
    """{pid: command line} of the processes (other than this one and its ancestors) whose working folder or
    command line lies under `base`, or whose environment holds `RUN_MARK=mark` (multiprocessing's helpers
    aside)."""
    found: dict[int, str] = {}
    if not os.path.isdir("/proc"):
        return found
    mine = _own_ancestors()
    marked = f"{RUN_MARK}={mark}".encode() if mark else None
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in mine:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue  # gone, or not ours to look at
        in_base = base is not None and (cwd == base or cwd.startswith(base + "/") or base + "/" in cmdline)
        if in_base or _marked(name, marked, cmdline):
            found[int(name)] = cmdline
    return found


def _marked(pid: str, entry: bytes | None, cmdline: str) -> bool:
    if entry is None or not _carries(pid, entry):
        return False
    return not (any(h in cmdline for h in _ENDS_WITH_THE_RUN) and _parent(pid) == os.getpid())


def _parent(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _carries(pid: str, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry in f.read().split(b"\0")
    except OSError:
        return False  # gone, or not ours to look at


def _end(pids: list[int]) -> None:
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a process it started is still running (see `leftover_processes`)."""
    import time

    factory = getattr(session.config, "_tmp_path_factory", None)
    base = None
    if factory is not None and getattr(factory, "_basetemp", None) is not None:
        base = os.path.realpath(factory.getbasetemp())
    mark = session.config.stash.get(_RUN_MARK_KEY, None)  # only a run that set its mark (pytest_configure)
    if base is None and mark is None:
        return
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    left = leftover_processes(base, mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = leftover_processes(base, mark)
    if not left:
        return
    lines = "\n".join(f"  pid {pid}: {cmd[:300]}" for pid, cmd in sorted(left.items()))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = f"processes started by this run are still running (ended now; stop them in the test):\n{lines}"
    if reporter is not None:
        reporter.write_line(f"LEFTOVER PROCESSES: {message}", red=True)
    _end(list(left))
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


_RUN_MARK_KEY = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    # A deployment named in the caller's environment never leaks into the tests (topology runs set it).
    os.environ.pop("EDIT_COORDINATOR_REDIS_URL", None)
    # This run's own mark (a run started by a test gets its own: it never ends its caller's processes).
    import uuid

    mark = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    os.environ[RUN_MARK] = mark
    config.stash[_RUN_MARK_KEY] = mark
    config.addinivalue_line("markers", "topology: run the test once per Redis deployment (default, sentinel, cluster)")


@pytest.fixture(autouse=True)
def _slow_gate(request: pytest.FixtureRequest) -> None:
    """Tests marked slow run only when selected with -m slow (or EC_SLOW=1): the default run stays short.
    .ci/run runs the slow tests of tests/coordinator as a step of their own."""
    if request.node.get_closest_marker("slow") is None:
        return
    if "slow" in (request.config.getoption("markexpr") or "") or os.environ.get("EC_SLOW"):
        return
    pytest.skip("slow: run with `pytest -m slow` or EC_SLOW=1")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("topology") and "redis_topology" in metafunc.fixturenames:
        metafunc.parametrize("redis_topology", TOPOLOGIES, indirect=True)


@pytest.fixture(scope="session")
def cluster_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if system_redis_server() is None:
        pytest.skip(NO_SERVER)
    with start_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


@pytest.fixture(scope="session")
def sentinel_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSentinel]:
    if system_redis_server() is None:
        pytest.skip(NO_SERVER)
    with start_sentinel(tmp_path_factory.mktemp("sentinel")) as s:
        yield s


@pytest.fixture
def redis_topology(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The deployment of this run of the test ("default" unless the test is marked `topology`)."""
    kind: str = getattr(request, "param", "default")
    if kind != "default":
        deployment: Any = request.getfixturevalue(f"{kind}_deployment")
        monkeypatch.setenv("EDIT_COORDINATOR_REDIS_URL", deployment.url)
    return kind


@pytest.fixture
def redis_url(redis_topology: str) -> str | None:
    """The URL of this run's deployment; None for the default (the embedded server)."""
    return None if redis_topology == "default" else os.environ["EDIT_COORDINATOR_REDIS_URL"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    return r


def coordinator_for(root: Path, redis_url: str | None, **options: Any) -> Coordinator:
    """What every `coord`-style fixture builds (take `redis_url` in the fixture, and a `topology` test runs it
    on each deployment): a coordinator on fakeredis for the default run, else on the deployment."""
    options.setdefault("durability", "none")
    if redis_url is None:
        return Coordinator(root, redis_client=fakeredis.FakeRedis(), **options)
    return Coordinator(root, redis_url=redis_url, **options)


@pytest.fixture
def coord(root: Path, redis_url: str | None) -> Iterator[Coordinator]:
    """A coordinator on fakeredis (fast, single-process unit tests), or on this run's deployment."""
    c = coordinator_for(root, redis_url)
    yield c
    c.close()


@pytest.fixture
def real_redis_root(tmp_path: Path, redis_topology: str) -> Iterator[Path]:
    """A repository root whose embedded (real) Redis server is stopped at the end (on the sentinel and
    cluster runs of a `topology` test, its coordinators use that deployment instead)."""
    from coordinator.state.embedded import stop_embedded_redis

    r = tmp_path / "repo"
    r.mkdir()
    yield r
    stop_embedded_redis(r / ".edit-coordinator")


def write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def touch_later(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns + 5_000_000_000, st.st_mtime_ns + 5_000_000_000))
