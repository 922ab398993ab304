"""Many real OS processes on one file, with a real (embedded) Redis server."""

from __future__ import annotations

import multiprocessing as mp
import re
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.state.embedded import embedded_status, ensure_embedded_redis, stop_embedded_redis
from tests.conftest import touch_later

WORKERS = 8
INCREMENTS = 40


def _slot_file(n: int) -> str:
    return "".join(f"slot {i}: 0\n" for i in range(n))


def _coordinated_worker(root: str, idx: int, n: int, start: mp.synchronize.Barrier) -> tuple[int, int]:
    """Increment this worker's own slot line n times; re-read and retry on stale. Returns (acked, stale)."""
    acked = stale = 0
    with Coordinator(root, durability="none") as coord:
        s = coord.session(f"worker-{idx}")
        start.wait()
        content = s.read("counters.txt").content
        while acked < n:
            value = int(re.search(rf"^slot {idx}: (\d+)$", content, re.M).group(1))
            try:
                s.edit("counters.txt", f"slot {idx}: {value}\n", f"slot {idx}: {value + 1}\n")
            except CoordinatorError as exc:
                assert exc.code == ErrorCode.STALE, exc
                stale += 1
                content = s.read("counters.txt").content
                continue
            acked += 1
            content = content.replace(f"slot {idx}: {value}\n", f"slot {idx}: {value + 1}\n")
    return acked, stale


def _unsafe_worker(root: str, idx: int, n: int, start: mp.synchronize.Barrier) -> tuple[int, int]:
    """The same increments as plain read-modify-write: no lock, no check."""
    path = Path(root) / "counters.txt"
    acked = 0
    start.wait()
    while acked < n:
        text = path.read_text()
        m = re.search(rf"^slot {idx}: (\d+)$", text, re.M)
        if m is None:  # a torn read (the file was being rewritten): try again
            continue
        value = int(m.group(1))
        path.write_text(text.replace(f"slot {idx}: {value}\n", f"slot {idx}: {value + 1}\n"))
        acked += 1
    return acked, 0


_start: mp.synchronize.Barrier | None = None  # in a worker process: the fleet's start barrier


def _keep_barrier(barrier: mp.synchronize.Barrier) -> None:
    global _start
    _start = barrier


def _in_worker(worker, root: str, idx: int, n: int) -> tuple[int, int]:
    assert _start is not None
    return worker(root, idx, n, _start)


def _run_fleet(
    root: Path, worker, increments: int = INCREMENTS, workers: int = WORKERS
) -> tuple[list[tuple[int, int]], dict[int, int]]:
    (root / "counters.txt").write_text(_slot_file(workers))
    ctx = mp.get_context("spawn")  # new processes that inherit this test's environment (its deployment's URL)
    # A barrier, not an event set here: every worker starts editing once all are set up (a slow connection,
    # e.g. to a cluster, would otherwise stagger them until they no longer overlap). Handed to each worker
    # as its process starts (the pool's initializer): no manager process to start for it.
    start = ctx.Barrier(workers, timeout=120)
    with ctx.Pool(workers, initializer=_keep_barrier, initargs=(start,)) as pool:
        results = [pool.apply_async(_in_worker, (worker, str(root), i, increments)) for i in range(workers)]
        out = [r.get(timeout=240) for r in results]
    text = (root / "counters.txt").read_text()
    final = {int(a): int(b) for a, b in re.findall(r"^slot (\d+): (\d+)$", text, re.M)}
    return out, final


@pytest.mark.topology
def test_eight_processes_lose_no_update(real_redis_root, redis_url):
    """On each deployment: the worker processes share the root's embedded server (default: 8 processes), or
    inherit $EDIT_COORDINATOR_REDIS_URL (sentinel, cluster: 4 processes, to keep the default run short)."""
    if redis_url is None:
        ensure_embedded_redis(real_redis_root / ".edit-coordinator")
    workers, increments = (WORKERS, INCREMENTS) if redis_url is None else (4, 25)
    out, final = _run_fleet(real_redis_root, _coordinated_worker, increments, workers)
    assert [acked for acked, _ in out] == [increments] * workers
    # The oracle: every acknowledged increment is in the file, exactly.
    assert final == dict.fromkeys(range(workers), increments)
    assert sum(stale for _, stale in out) > 0, "the workers did contend"
    if redis_url is not None:  # the processes used the deployment: none of them started an embedded server
        assert embedded_status(real_redis_root / ".edit-coordinator") is None


def test_without_coordinator_updates_are_lost(tmp_path):
    """The oracle works: plain read-modify-write by the same fleet loses acknowledged increments."""
    # More increments than the coordinated run: plain file writes are fast, and on a loaded machine the
    # processes must still overlap for the losses to show.
    out, final = _run_fleet(tmp_path, _unsafe_worker, increments=400)
    acknowledged = sum(a for a, _ in out)
    assert acknowledged == WORKERS * 400
    assert sum(final.values()) < acknowledged


def test_outside_rewrite_is_stale_and_touch_is_not(real_redis_root):
    f = real_redis_root / "app.py"
    f.write_text("x = 1\ny = 2\n")
    with Coordinator(real_redis_root) as coord:
        s = coord.session("agent")
        s.read("app.py")
        subprocess.run([sys.executable, "-c", f"open({str(f)!r}, 'w').write('x = 10\\ny = 2\\n')"], check=True)
        with pytest.raises(CoordinatorError) as ei:
            s.edit("app.py", "y = 2", "y = 3")
        assert ei.value.code == ErrorCode.STALE
        assert f.read_text() == "x = 10\ny = 2\n"
        s.read("app.py")
        subprocess.run(["touch", "-d", "+1 hour", str(f)], check=True)
        touch_later(f)
        s.edit("app.py", "y = 2", "y = 3")
        assert f.read_text() == "x = 10\ny = 3\n"


def test_redis_stopped_mid_run_fails_closed_then_recovers(real_redis_root):
    state_dir = real_redis_root / ".edit-coordinator"
    f = real_redis_root / "r.txt"
    f.write_text("a\n")
    # "always": Redis is the authority on views, so a flush refuses even a view this process holds (the
    # default, "cached", lets the disk decide then: see test_engine_cached.py).
    with Coordinator(real_redis_root, redis_timeout=0.5, state_check="always") as coord:
        s = coord.session("agent")
        s.read("r.txt")
        s.edit("r.txt", "a", "b")
        assert stop_embedded_redis(state_dir)
        calls = (lambda: s.edit("r.txt", "b", "c"), lambda: s.write("n.txt", "x"), lambda: s.read("r.txt"))
        for call in calls:
            with pytest.raises(CoordinatorError) as ei:
                call()
            assert ei.value.code == ErrorCode.STATE_UNAVAILABLE
            assert "try again" in ei.value.message.lower()
        assert f.read_text() == "b\n" and not (real_redis_root / "n.txt").exists()
        ensure_embedded_redis(state_dir)  # back, with its append-only file: the read state survived
        s.edit("r.txt", "b", "c")
        coord.redis.flushall()  # now the state is lost (a server replaced without its data)
    with Coordinator(real_redis_root, redis_timeout=0.5) as fresh:  # a process that holds no view
        s = fresh.session("agent")
        with pytest.raises(CoordinatorError) as ei:
            s.edit("r.txt", "c", "d")
        assert ei.value.code == ErrorCode.NOT_READ
        assert "coordination state was reset" in ei.value.message and ei.value.details["state_reset"]
        s.read("r.txt")
        s.edit("r.txt", "c", "d")
        assert f.read_text() == "d\n"


def test_second_coordinator_finds_same_server_and_state(real_redis_root):
    (real_redis_root / "s.txt").write_text("1\n")
    with Coordinator(real_redis_root) as a:
        a.session("agent").read("s.txt")
        url = a.redis_url
    code = (
        "from coordinator import Coordinator\n"
        f"c = Coordinator({str(real_redis_root)!r})\n"
        f"assert c.redis_url == {url!r}, c.redis_url\n"
        "c.session('agent').edit('s.txt', '1', '2')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert (real_redis_root / "s.txt").read_text() == "2\n"


@pytest.mark.parametrize(("mode", "expected"), [("always", 2.0), ("cached", 1.0)])
def test_round_trips_per_consecutive_edit(real_redis_root, monkeypatch, mode, expected):
    """state_check="always": one round trip before the lock (fail closed) and one after; "cached": only the
    one after, for a session whose view this process already holds."""
    from coordinator.state import connection

    f = real_redis_root / "rt.txt"
    f.write_text("".join(f"line {i} = 0\n" for i in range(20)))
    sends = 0

    class Counting:  # every round trip: redis-py's counted sends and the lane's own
        def round_trip(self) -> None:
            nonlocal sends
            sends += 1

        def error(self, kind: str) -> None:
            pass

    with Coordinator(real_redis_root, state_check=mode, notices=False) as coord:
        s = coord.session("rt")
        s.read("rt.txt")
        s.edit("rt.txt", "line 0 = 0", "line 0 = 1")  # warm up (script load, lease snapshot)
        connection.observe_redis(Counting())
        try:
            for i in range(1, 11):
                s.edit("rt.txt", f"line {i} = 0", f"line {i} = 1")
        finally:
            connection.observe_redis(None)
    # lease snapshots are refreshed now and then: allow a little above the floor
    assert expected <= sends / 10 < expected + 0.5
