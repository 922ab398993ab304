"""Leases: patterns, grants and conflicts, the `leased` refusal, fencing of writes under an ended lease,
and expiry on a real Redis server."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import fakeredis
import pytest

from coordinator import Coordinator, ErrorCode
from coordinator.state.connection import connect
from coordinator.state.leases import (
    Lease,
    LeaseStore,
    check_leases,
    may_overlap,
    normalize_pattern,
    pattern_regex,
)
from tests.refusals import refused

# --- patterns -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("src/app.py", "src/app.py", True),
        ("src/app.py", "src/app.pyc", False),
        ("src/*.py", "src/app.py", True),
        ("src/*.py", "src/sub/app.py", False),
        ("src/**/*.py", "src/app.py", True),
        ("src/**/*.py", "src/a/b/app.py", True),
        ("src/**", "src/a/b", True),
        ("docs/", "docs/x/y.md", True),
        ("?.txt", "a.txt", True),
        ("[ab].txt", "c.txt", False),
        ("[!ab].txt", "c.txt", True),
    ],
)
def test_pattern_matching(pattern: str, path: str, hit: bool) -> None:
    assert (pattern_regex(normalize_pattern(pattern)).fullmatch(path) is not None) is hit


def test_patterns_are_normalized_and_confined(tmp_path: Path) -> None:
    assert normalize_pattern("./src//a.py") == "src/a.py"
    assert normalize_pattern(str(tmp_path / "x" / "y.py"), str(tmp_path)) == "x/y.py"
    refused(ErrorCode.INVALID_ARGUMENT, normalize_pattern, "../etc/passwd")
    refused(ErrorCode.OUTSIDE_ROOT, normalize_pattern, "/etc/passwd", str(tmp_path))
    refused(ErrorCode.INVALID_ARGUMENT, normalize_pattern, "")


def test_overlap_is_never_underestimated() -> None:
    assert may_overlap("src/a.py", "src/a.py") and not may_overlap("src/a.py", "src/b.py")
    assert may_overlap("src/**", "src/a/b.py") and may_overlap("src/*.py", "src/**")
    assert not may_overlap("src/*.py", "src/*.js") and not may_overlap("src/**", "docs/**")
    assert may_overlap("**/*.py", "src/*")


# --- the store (fakeredis) ----------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path, redis_url: str | None) -> LeaseStore:
    """On fakeredis, or on the Sentinel / Cluster deployment of a `topology` run (own namespace)."""
    if redis_url is None:
        return LeaseStore(fakeredis.FakeRedis(), "ns", fence_dir=tmp_path / "fences")
    return LeaseStore(connect(redis_url), uuid.uuid4().hex, fence_dir=tmp_path / "fences")


@pytest.mark.topology
def test_exclusive_shared_and_tokens(store: LeaseStore) -> None:
    (a,) = store.grant("A", ["src/**"], "exclusive", 30)
    err = refused(ErrorCode.LEASED, store.grant, "B", ["src/x.py"], "shared", 30)
    assert err.details["holder"] == "A" and "session A" in err.message
    (b,) = store.grant("B", ["docs/*.md"], "shared", 30)
    (c,) = store.grant("C", ["docs/*.md"], "shared", 30)
    refused(ErrorCode.LEASED, store.grant, "D", ["docs/a.md"], "exclusive", 30)
    assert a.token < b.token < c.token
    assert {x.session for x in store.live()} == {"A", "B", "C"}
    assert check_leases(store.live(), "B", "src/x.py").conflict == a
    own = check_leases(store.live(), "A", "src/x.py")
    assert own.conflict is None and own.own == a  # the holder's own lease never blocks it
    assert check_leases(store.live(), "A", "elsewhere.py").own is None  # and covers only its patterns
    assert check_leases(store.live(), "D", "docs/a.md").conflict is None  # shared leases never block writes


@pytest.mark.topology
def test_renew_release_and_break(store: LeaseStore) -> None:
    (a,) = store.grant("A", ["a.txt"], "exclusive", 1)
    renewed = store.renew("A", a.id, 60)
    assert renewed.token == a.token and renewed.ends_at > a.ends_at
    assert store.live() == [renewed]
    refused(ErrorCode.LEASED, store.renew, "B", a.id, 60)  # not B's
    assert store.release("A") == 1 and store.live() == []
    store.grant("A", ["x", "y"], "exclusive", 60)
    assert sorted(x.pattern for x in store.break_lease(session="A")) == ["x", "y"]
    assert store.live() == []


def test_same_session_lease_again_replaces(store: LeaseStore) -> None:
    (a,) = store.grant("A", ["a.txt"], "exclusive", 60)
    (a2,) = store.grant("A", ["a.txt"], "shared", 60)
    assert store.live() == [a2] and a2.token > a.token


def test_all_or_nothing_grant(store: LeaseStore) -> None:
    store.grant("A", ["b.txt"], "exclusive", 60)
    refused(ErrorCode.LEASED, store.grant, "B", ["a.txt", "b.txt"], "exclusive", 60)
    assert [x.session for x in store.live()] == ["A"]


def test_fence_refuses_an_ended_or_superseded_lease(store: LeaseStore) -> None:
    now = time.time()
    old = Lease("1", "A", "f.txt", "exclusive", 5, now - 10, now + 10)
    store.enforce_fence("f.txt", old, now)
    assert store.fence_value("f.txt") == 5
    newer = Lease("2", "B", "f.txt", "exclusive", 9, now, now + 10)
    store.enforce_fence("f.txt", newer, now)
    err = refused(ErrorCode.LEASED, store.enforce_fence, "f.txt", old, now)
    assert err.details["fence"] == 9
    ended = Lease("3", "C", "f.txt", "exclusive", 12, now - 10, now - 1)
    refused(ErrorCode.LEASED, store.enforce_fence, "f.txt", ended, now)
    shared = Lease("4", "D", "f.txt", "shared", 10, now, now + 10)
    store.enforce_fence("f.txt", shared, now)  # a shared lease does not advance the fence
    assert store.fence_value("f.txt") == 9


def test_invalid_arguments(store: LeaseStore) -> None:
    refused(ErrorCode.INVALID_ARGUMENT, store.grant, "A", ["a"], "exclusive", -1)
    refused(ErrorCode.INVALID_ARGUMENT, store.grant, "A", ["a"], "mine", 10)
    refused(ErrorCode.INVALID_ARGUMENT, store.grant, "A", "a", "exclusive", 10)


# --- through the engine -------------------------------------------------------------------------------


@pytest.mark.topology
def test_exclusive_lease_refuses_other_writers_but_not_readers(root: Path, coord: Coordinator) -> None:
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("x = 1\n")
    a, b = coord.session("A"), coord.session("B")
    a.read("src/a.py")
    b.read("src/a.py")
    (lease,) = a.lease("src/**/*.py", ttl_s=60)
    assert b.read("src/a.py").content == "x = 1\n"
    err = refused(ErrorCode.LEASED, b.edit, "src/a.py", "x = 1", "x = 2")
    assert err.details["holder"] == "A" and "leased exclusively by session A" in err.message
    refused(ErrorCode.LEASED, b.write, "src/new.py", "y\n")
    assert not (root / "src" / "new.py").exists()
    r = a.edit("src/a.py", "x = 1", "x = 3")
    assert r.lease_token == lease.token
    assert [x.id for x in a.leases()] == [lease.id] and coord.leases() == a.leases()
    assert a.release() == 1
    b.read("src/a.py")
    assert b.edit("src/a.py", "x = 3", "x = 4").lease_token is None


def test_write_under_an_ended_lease_is_refused_once(root: Path, coord: Coordinator) -> None:
    (root / "f.txt").write_text("1\n")
    a = coord.session("A")
    a.read("f.txt")
    a.lease("f.txt", ttl_s=0.3)
    time.sleep(0.35)
    err = refused(ErrorCode.LEASED, a.edit, "f.txt", "1", "2")
    assert "has ended" in err.message
    assert a.edit("f.txt", "1", "2").lease_token is None  # told once; now an ordinary write


def test_broken_lease_is_reported_to_its_holder(root: Path, coord: Coordinator) -> None:
    (root / "f.txt").write_text("1\n")
    a, b = coord.session("A"), coord.session("B")
    a.read("f.txt")
    b.read("f.txt")
    (lease,) = a.lease("f.txt", ttl_s=60)
    refused(ErrorCode.LEASED, b.edit, "f.txt", "1", "2")
    assert [x.id for x in coord.break_lease(lease_id=lease.id)] == [lease.id]
    b.edit("f.txt", "1", "2")
    refused(ErrorCode.LEASED, a.edit, "f.txt", "2", "3")


@pytest.mark.topology
def test_lease_taken_over_fences_the_old_holder(root: Path, coord: Coordinator) -> None:
    """A's lease ran out; B leased the file and wrote. A write carrying A's old token is refused under
    the lock, even if its pre-lock check had still seen the lease alive."""
    (root / "f.txt").write_text("1\n")
    a, b = coord.session("A"), coord.session("B")
    a.read("f.txt")
    b.read("f.txt")
    (old,) = a.lease("f.txt", ttl_s=0.25)
    time.sleep(0.3)
    (new,) = b.lease("f.txt", ttl_s=60)
    b.edit("f.txt", "1", "2")
    assert coord.lease_store.fence_value("f.txt") == new.token > old.token
    pretend_alive = Lease(old.id, "A", old.pattern, old.mode, old.token, old.granted_at, time.time() + 60)
    err = refused(ErrorCode.LEASED, coord.lease_store.enforce_fence, "f.txt", pretend_alive)
    assert "superseded" in err.message


# --- real Redis: expiry -------------------------------------------------------------------------------


@pytest.mark.slow
def test_leases_expire_on_their_own_on_a_real_server(real_redis_root: Path) -> None:
    (real_redis_root / "f.txt").write_text("1\n")
    with Coordinator(real_redis_root, durability="none") as coord:
        a, b = coord.session("A"), coord.session("B")
        b.read("f.txt")
        a.lease(["f.txt", "docs/"], ttl_s=0.4)
        refused(ErrorCode.LEASED, b.edit, "f.txt", "1", "2")
        # A is "killed": nobody renews or releases. The leases run out by themselves.
        time.sleep(0.5)
        assert coord.leases() == []
        b.edit("f.txt", "1", "2")
        b.lease("docs/**", "exclusive", ttl_s=0.2)
        time.sleep(1.5)  # the set itself expires (PEXPIREAT at the last end, plus 1 s)
        assert coord.redis.exists(coord.lease_store.key) == 0


def test_leases_command_lists_and_breaks(real_redis_root: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from coordinator.cli import main as cli_main

    with Coordinator(real_redis_root, durability="none") as coord:
        (lease,) = coord.session("A").lease("src/**", ttl_s=60)
    assert cli_main(["leases", "list", "--root", str(real_redis_root)]) == 0
    assert f"{lease.id}  A  exclusive" in capsys.readouterr().out
    assert cli_main(["leases", "break", "--root", str(real_redis_root), "--session", "A", "--json"]) == 0
    assert [x["id"] for x in json.loads(capsys.readouterr().out)] == [lease.id]
    assert cli_main(["leases", "list", "--root", str(real_redis_root)]) == 0
    assert "no live leases" in capsys.readouterr().out


def test_one_lease_lifetime_rule_for_the_engine_the_http_models_and_the_tools(coord: Coordinator) -> None:
    """The lease TTL's default and limits are owned by state/leases.py; every way in applies the same ones."""
    import pydantic

    from coordinator.client.operations import LeaseOp, Renew
    from coordinator.state.leases import DEFAULT_TTL_S, MAX_TTL_S, MIN_TTL_S
    from coordinator.tools.coordination_tools import LEASE_SCHEMA

    lease_request, renew_request = (
        pydantic.TypeAdapter(LeaseOp),
        pydantic.TypeAdapter(Renew),
    )  # as the service reads them
    assert lease_request.validate_json('{"paths": ["a"]}').ttl_s == DEFAULT_TTL_S == Renew().ttl_s
    for model in (lease_request, renew_request):
        for bad in (MAX_TTL_S + 1, MIN_TTL_S / 2):
            with pytest.raises(pydantic.ValidationError):
                model.validate_json(
                    json.dumps({"paths": ["a"], "ttl_s": bad} if model is lease_request else {"ttl_s": bad})
                )
    ttl = LEASE_SCHEMA["properties"]["ttl_s"]
    assert (ttl["minimum"], ttl["maximum"]) == (MIN_TTL_S, MAX_TTL_S)
    s = coord.session("a")
    refused(ErrorCode.INVALID_ARGUMENT, s.lease, ["x"], ttl_s=MAX_TTL_S + 1)
    (lease,) = s.lease(["x"], ttl_s=MAX_TTL_S)
    assert lease.ends_at - time.time() > MAX_TTL_S - 60
