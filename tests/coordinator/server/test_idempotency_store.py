"""The idempotency store on its own: the claim (SET NX PX, on the store's lane or the pool's way), the
replay, the refusal of a reused key."""

from __future__ import annotations

import fakeredis
import pytest

from coordinator.server.common import ServiceError
from coordinator.server.idempotency import IdempotencyStore, WouldBlock


@pytest.fixture
def store() -> IdempotencyStore:
    return IdempotencyStore(fakeredis.FakeRedis(), "ns", ttl_s=60, wait_s=0.2)


def test_claim_wait_replay_and_reuse(store: IdempotencyStore) -> None:
    k, fp = store.key("s1", "key-1"), b"f" * 16
    assert store.begin(k, fp) is None  # claimed: run the operation
    assert 0 < store.r.pttl(k) <= store.pending_ms
    assert store.r.get(k) == b"P" + fp
    with pytest.raises(WouldBlock):  # a duplicate while the first runs, on the event loop
        store.begin(k, fp, may_wait=False)
    with pytest.raises(ServiceError) as waited:  # in the pool: waits, then gives up
        store.begin(k, fp)
    assert waited.value.code == "request_in_progress"
    store.finish(k, fp, 200, b'{"ok": 1}')
    assert store.begin(k, fp) == (200, b'{"ok": 1}')
    with pytest.raises(ServiceError) as reused:
        store.begin(k, b"g" * 16)
    assert reused.value.code == "idempotency_key_reused"
    store.close()


def test_claim_takes_the_pools_way_when_the_lane_is_busy(store: IdempotencyStore) -> None:
    assert store._lane is not None
    k, fp = store.key("s1", "key-2"), b"h" * 16
    with store._lane._lock:  # another thread holds the lane
        assert store.begin(k, fp) is None
        assert store.begin(store.key("s2", "key-2"), fp) is None  # another session's key is its own
        with pytest.raises(WouldBlock):
            store.begin(k, fp, may_wait=False)
    store.release(k, fp)
    assert store.begin(k, fp) is None  # given back: claimed again, on the lane
    store.close()


def test_an_answer_kept_soon_is_replayed(store: IdempotencyStore) -> None:
    """finish_soon sends the answer at once and reads the reply when called; the lane is the caller's until
    then (another claim meanwhile takes the pool's way). Busy lane or not, the answer is kept."""
    k, fp = store.key("s1", "key-3"), b"k" * 16
    assert store.begin(k, fp) is None
    read = store.finish_soon(k, fp, 200, b'{"version": 3}')
    other = store.key("s1", "key-4")
    assert store.begin(other, fp) is None  # while the reply is owed
    read()
    assert store.begin(k, fp) == (200, b'{"version": 3}')
    assert 0 < store.r.ttl(k) <= 60
    assert store._lane is not None
    with store._lane._lock:
        store.finish_soon(other, fp, 409, b'{"code": "stale"}')()
    assert store.begin(other, fp) == (409, b'{"code": "stale"}')
    store.close()


def test_an_answer_that_cannot_be_kept_is_logged_not_raised(
    store: IdempotencyStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The call it answers has run (a write may have landed): failing to keep its answer never turns into
    an error answer; it is logged, and a retry waits for the pending claim to expire."""
    k, fp = store.key("s1", "key-5"), b"m" * 16
    assert store.begin(k, fp) is None
    assert store._lane is not None

    def broken(*args: object) -> object:
        raise RuntimeError("the connection broke")

    monkeypatch.setattr(store._lane, "start", broken)
    store.finish_soon(k, fp, 200, b"{}")()
    assert "could not keep the answer" in caplog.text
    assert store.r.get(k) == b"P" + fp  # still pending
