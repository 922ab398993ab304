"""What keeps a repository correct when Redis is replaced, fails over or loses state: local fencing tokens,
the repository id as namespace, and landed writes that are never reported as failed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import fakeredis
import pytest
from redis.exceptions import RedisClusterException

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.disk import layout
from coordinator.state.leases import Lease, LeaseStore
from coordinator.state.views import path_hash


def test_tokens_come_from_the_local_store_and_never_repeat_when_redis_loses_its_counter(tmp_path: Path) -> None:
    r = fakeredis.FakeRedis()
    store = LeaseStore(r, "ns", fence_dir=tmp_path / "fences")
    (a,) = store.grant("A", ["x.py"], ttl_s=30)
    store.release("A")
    r.flushall()  # a failover that lost the counter and the lease set
    (b,) = LeaseStore(r, "ns", fence_dir=tmp_path / "fences").grant("B", ["x.py"], ttl_s=30)
    assert b.token > a.token


def test_first_local_token_continues_after_the_redis_counter(tmp_path: Path) -> None:
    r = fakeredis.FakeRedis()
    r.set("ec:{ns}:lease-token", 41)  # tokens handed out by an older version, maybe written into fences
    (a,) = LeaseStore(r, "ns", fence_dir=tmp_path / "fences").grant("A", ["x.py"], ttl_s=30)
    assert a.token == 42


def test_a_token_issued_twice_lets_only_one_holder_write(tmp_path: Path) -> None:
    store = LeaseStore(fakeredis.FakeRedis(), "ns", fence_dir=tmp_path / "fences")
    first = Lease("aaaaaaaaaaaaaaaa", "A", "x.py", "exclusive", 7, 0.0, 1e12)
    twin = Lease("bbbbbbbbbbbbbbbb", "B", "x.py", "exclusive", 7, 0.0, 1e12)
    store.enforce_fence("x.py", first)
    store.enforce_fence("x.py", first)  # the same lease again: fine
    with pytest.raises(CoordinatorError) as ei:
        store.enforce_fence("x.py", twin)
    assert ei.value.code is ErrorCode.LEASED and "handed out twice" in ei.value.message
    assert store.fence_value("x.py") == 7


def test_an_old_fence_without_a_lease_id_is_taken_over_by_its_token(tmp_path: Path) -> None:
    store = LeaseStore(fakeredis.FakeRedis(), "ns", fence_dir=tmp_path / "fences")
    fence = store.fence_path("x.py")
    fence.parent.mkdir(parents=True)
    fence.write_bytes((7).to_bytes(8, "little"))  # the 8-byte format of older versions
    lease = Lease("aaaaaaaaaaaaaaaa", "A", "x.py", "exclusive", 7, 0.0, 1e12)
    store.enforce_fence("x.py", lease)
    other = Lease("bbbbbbbbbbbbbbbb", "B", "x.py", "exclusive", 7, 0.0, 1e12)
    with pytest.raises(CoordinatorError):
        store.enforce_fence("x.py", other)


def test_the_namespace_is_the_repository_id_and_follows_a_moved_checkout(tmp_path: Path) -> None:
    root = tmp_path / "a" / "repo"
    root.mkdir(parents=True)
    r = fakeredis.FakeRedis()
    (root / "f.txt").write_text("1\n")
    with Coordinator(root, redis_client=r, durability="none") as c:
        ns = c.namespace
        c.session("S").read("f.txt")
    assert ns != path_hash(os.path.realpath(root))
    assert (layout.state_dir_of(root) / "repository-id").read_text().strip() == ns
    moved = tmp_path / "b" / "repo"
    moved.parent.mkdir()
    shutil.move(str(root), str(moved))
    with Coordinator(moved, redis_client=r, durability="none") as c:
        assert c.namespace == ns
        c.session("S").edit("f.txt", "1", "2")  # the read made at the old path still counts
    assert layout.namespace_for(moved) == ns  # what the commands use


def test_a_state_folder_from_before_ids_keeps_its_path_hash(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / ".edit-coordinator" / "locks").mkdir(parents=True)
    with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none") as c:
        assert c.namespace == path_hash(os.path.realpath(root))


def test_no_namespace_file_where_nothing_was_ever_used(tmp_path: Path) -> None:
    ns = layout.namespace_for(tmp_path)
    assert ns == path_hash(os.path.realpath(tmp_path)) and not (tmp_path / ".edit-coordinator").exists()


@pytest.mark.parametrize(
    "exc",
    [RedisClusterException("evalsha is blocked"), RuntimeError("anything at all"), KeyError("x")],
)
def test_no_exception_after_the_rename_reports_a_landed_write_as_failed(
    root: Path, coord: Coordinator, monkeypatch: pytest.MonkeyPatch, exc: BaseException
) -> None:
    (root / "f.txt").write_text("one\n")
    s = coord.session("S")
    s.read("f.txt")

    def broken(*a: object, **k: object) -> None:
        raise exc

    monkeypatch.setattr(coord.state, "record_write", broken)  # the record waited for
    monkeypatch.setattr(coord.state, "start_record_write", broken)  # the record sent before the result
    r = s.edit("f.txt", "one", "two")
    assert (root / "f.txt").read_text() == "two\n"
    assert r.warnings and "was written" in r.warnings[0]
    monkeypatch.undo()
    assert coord.history("f.txt")[0].version == 1
