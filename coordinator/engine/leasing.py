"""Leases in the check-then-write: the snapshot, the decision before the lock, grants of this process."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from coordinator.disk import fsio
from coordinator.engine.base import _CoordinatorBase
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.leases import Lease, LeaseCheck, check_leases, leased_error, normalize_pattern
from coordinator.state.views import ReadState

# How old a lease snapshot may be when this process's cached view spares the pre-lock round trip. A grant
# waits this long before returning, so every snapshot taken before it has been dropped by then.
LEASE_SNAPSHOT_S = 0.2


class _LeaseSteps(_CoordinatorBase):
    """Coordinator methods: the pre-lock view and lease step, and this process's grants."""

    # -- leases -------------------------------------------------------------------------------------------
    def _pre_lock(
        self, session: str, rp: fsio.ResolvedPath, use_cache: bool
    ) -> tuple[ReadState | None, bool, LeaseCheck]:
        """S's read state for P and what the leases say, with at most one round trip, failing closed.

        Read state: from this process's cache when it has one (a cached view can only err towards a
        refusal, which is then checked against Redis), else from Redis. Leases: from a snapshot at most
        `LEASE_SNAPSHOT_S` old (and refreshed as soon as any lease in it has ended), else fetched on the
        same pipeline as the read state. A conflicting lease raises `leased` here, before the lock.
        """
        use_cache = use_cache and self.state_check == "cached"
        recorded = self._views.get(session, rp.key) if use_cache else None
        leases = self._lease_snapshot_if_fresh()
        if recorded is not None:
            if leases is None:
                leases = self._fetch_leases()  # this round trip also proves Redis is up
            else:
                self._state_call(self.state.alive)
        else:
            use_cache = False
            if leases is None:
                taken = time.monotonic()
                recorded, replies = self._state_call(
                    lambda: self.state.get_with(session, rp.key, self.lease_store.queue_live)
                )
                leases = self._set_lease_snapshot(replies[0], taken)
            else:
                recorded = self._state_call(lambda: self.state.get(session, rp.key))
        return recorded, use_cache, self._lease_decision(session, rp, leases)

    def _lease_snapshot_if_fresh(self) -> list[Lease] | None:
        snap = self._lease_snapshot
        if snap is None:
            return None
        taken, earliest_end, leases = snap
        if time.monotonic() - taken > LEASE_SNAPSHOT_S or time.time() >= earliest_end:
            return None
        return leases

    def _set_lease_snapshot(self, raw: Any, taken: float) -> list[Lease]:
        """`taken`: monotonic time before the fetch was sent (the snapshot is at least that old)."""
        leases = self.lease_store.live_from(raw)
        earliest = min((x.ends_at for x in leases), default=float("inf"))
        self._lease_snapshot = (taken, earliest, leases)
        return leases

    def _fetch_leases(self) -> list[Lease]:
        taken = time.monotonic()
        replies = self._state_call(lambda: self.state.run_extra(self.lease_store.queue_live))
        return self._set_lease_snapshot(replies[0], taken)

    def _lease_rider(self) -> tuple[Callable[[Any], None] | None, Callable[[Any], None]]:
        """A lease-snapshot refresh to ride a round trip made anyway (after a write, a read), once the
        snapshot is half-way to stale: in a steady stream of edits, the snapshot never goes stale and no
        edit waits for it. Returns (the command to queue or None, what to do with its reply)."""
        snap = self._lease_snapshot
        if snap is not None and time.monotonic() - snap[0] < LEASE_SNAPSHOT_S / 2 and time.time() < snap[1]:
            return None, _ignore
        sent: list[float] = []

        def queue(pipe: Any) -> None:
            sent.append(time.monotonic())
            self.lease_store.queue_live(pipe)

        def apply(reply: Any) -> None:
            if sent and not isinstance(reply, Exception):
                self._set_lease_snapshot(reply, sent[0])

        return queue, apply

    def _lease_decision(self, session: str, rp: fsio.ResolvedPath, leases: list[Lease]) -> LeaseCheck:
        """Refuse a write that another session's exclusive lease covers; find the writer's own lease (the
        highest token covering P, which fences the write). A lease this process granted to S that is no
        longer live (ran out, released elsewhere, broken) is reported once, as `leased`."""
        check = check_leases(leases, session, rp.key) if leases else LeaseCheck(None, None)
        if check.conflict is not None:
            raise leased_error(check.conflict, rp.shown)
        with self._granted_lock:
            remembered = [x for x in self._granted.get(session, {}).values() if x.covers(rp.key)]
        if not remembered:
            return check
        live_ids = {x.id for x in leases}
        if any(x.id not in live_ids for x in remembered):
            leases = self._fetch_leases()  # the snapshot may predate the grant: look once more
            live_ids = {x.id for x in leases}
            check = check_leases(leases, session, rp.key)
            if check.conflict is not None:
                raise leased_error(check.conflict, rp.shown)
        for lease in remembered:
            if lease.id not in live_ids:
                self._forget_grant(session, lease.id)
                when = time.strftime("%H:%M:%S", time.localtime(lease.ends_at))
                raise CoordinatorError(
                    ErrorCode.LEASED,
                    f"Your {lease.mode} lease on {lease.pattern!r} (token {lease.token}) has ended: it ran out at "
                    f"{when}, or was released or broken. Nothing was written to {rp.shown}. Lease it again and "
                    "read the file again before changing it (another session may have changed it); or, if you "
                    "no longer need the lease, just make the change again.",
                    path=rp.key,
                    lease_id=lease.id,
                    token=lease.token,
                )
        return check

    def _forget_grant(self, session: str, lease_id: str) -> None:
        with self._granted_lock:
            mine = self._granted.get(session)
            if mine is not None:
                mine.pop(lease_id, None)
                if not mine:
                    del self._granted[session]

    def _lease(self, session: str, patterns: Sequence[str], mode: str, ttl_s: float) -> list[Lease]:
        pats = [normalize_pattern(p, self.root) for p in patterns]
        granted = self.lease_store.grant(session, pats, mode, ttl_s)
        with self._granted_lock:
            mine = self._granted.setdefault(session, {})
            for old_id in [i for i, x in mine.items() if x.pattern in set(pats)]:
                del mine[old_id]
            mine.update({x.id: x for x in granted})
        self._lease_snapshot = None
        # Every process's lease snapshot taken before the grant is dropped within LEASE_SNAPSHOT_S: only
        # then may the holder rely on the lease.
        time.sleep(LEASE_SNAPSHOT_S)
        return granted

    def _renew(self, session: str, lease_id: str | None, ttl_s: float) -> list[Lease]:
        ids = [lease_id] if lease_id else [x.id for x in self.lease_store.live() if x.session == session]
        out = [self.lease_store.renew(session, i, ttl_s) for i in ids]
        with self._granted_lock:
            mine = self._granted.get(session, {})
            for x in out:
                if x.id in mine:
                    mine[x.id] = x
        self._lease_snapshot = None
        return out

    def _release(self, session: str, lease_id: str | None, pattern: str | None) -> int:
        pat = normalize_pattern(pattern, self.root) if pattern is not None else None
        n = self.lease_store.release(session, lease_id=lease_id, pattern=pat)
        with self._granted_lock:
            mine = self._granted.get(session, {})
            ended = [i for i, x in mine.items() if lease_id in (None, i) and pat in (None, x.pattern)]
            for i in ended:
                del mine[i]
        self._lease_snapshot = None
        return n


def _ignore(reply: Any) -> None:
    return None
