"""The lease gate of the check-then-write: the lease snapshot, the decision before the lock, and the leases
this process granted. One object per Coordinator, owned by it; the write steps and Session call only its
public methods."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from coordinator.disk import fsio
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.leases import Lease, LeaseCheck, LeaseStore, check_leases, leased_error, normalize_pattern
from coordinator.state.views import StateStore

# How old a lease snapshot may be when this process's cached view spares the pre-lock round trip. A grant
# waits this long before returning, so every snapshot taken before it has been dropped by then.
LEASE_SNAPSHOT_S = 0.2

StateCall = Callable[[Callable[[], Any]], Any]


class LeaseGate:
    """Which leases a write must respect, as this process knows them.

    Invariant: a snapshot is used only while it is at most `LEASE_SNAPSHOT_S` old and none of its leases
    has ended; every grant, renewal, release or break made here drops it, and a grant returns only after
    `LEASE_SNAPSHOT_S` (so no process's snapshot can miss a lease its holder relies on).
    """

    def __init__(self, store: LeaseStore, state: StateStore, state_call: StateCall, root: str) -> None:
        self.store = store
        self._state = state
        self._state_call = state_call
        self._root = root
        self._snapshot: tuple[float, float, list[Lease]] | None = None  # (taken at, earliest end, leases)
        self._granted: dict[str, dict[str, Lease]] = {}  # leases this process granted, per session
        self._granted_lock = threading.Lock()

    def invalidate(self) -> None:
        """Drop the snapshot (a lease changed): the next write fetches the leases again."""
        self._snapshot = None

    def granted_any(self, session: str) -> bool:
        """Whether this process granted `session` a lease it still remembers."""
        return bool(self._granted.get(session))

    def fresh(self) -> list[Lease] | None:
        """The snapshot's leases while it may be used, else None."""
        snap = self._snapshot
        if snap is None:
            return None
        taken, earliest_end, leases = snap
        if time.monotonic() - taken > LEASE_SNAPSHOT_S or time.time() >= earliest_end:
            return None
        return leases

    def take(self, raw: Any, taken: float) -> list[Lease]:
        """Keep the leases of a `queue_live` reply as the snapshot. `taken`: monotonic time before the fetch
        was sent (the snapshot is at least that old)."""
        leases = self.store.live_from(raw)
        earliest = min((x.ends_at for x in leases), default=float("inf"))
        self._snapshot = (taken, earliest, leases)
        return leases

    def fetch(self) -> list[Lease]:
        """The live leases, from Redis (one round trip), kept as the snapshot."""
        taken = time.monotonic()
        replies = self._state_call(lambda: self._state.run_extra(self.store.queue_live))
        return self.take(replies[0], taken)

    def rider(self) -> tuple[Callable[[Any], None] | None, Callable[[Any], None]]:
        """A lease-snapshot refresh to ride a round trip made anyway (after a write, a read), once the
        snapshot is half-way to stale: in a steady stream of edits, the snapshot never goes stale and no
        edit waits for it. Returns (the command to queue or None, what to do with its reply)."""
        snap = self._snapshot
        if snap is not None and time.monotonic() - snap[0] < LEASE_SNAPSHOT_S / 2 and time.time() < snap[1]:
            return NOT_DUE
        sent: list[float] = []

        def queue(pipe: Any) -> None:
            sent.append(time.monotonic())
            self.store.queue_live(pipe)

        def apply(reply: Any) -> None:
            if sent and not isinstance(reply, Exception):
                self.take(reply, sent[0])

        return queue, apply

    def decide(self, session: str, rp: fsio.ResolvedPath, leases: list[Lease]) -> LeaseCheck:
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
            leases = self.fetch()  # the snapshot may predate the grant: look once more
            live_ids = {x.id for x in leases}
            check = check_leases(leases, session, rp.key)
            if check.conflict is not None:
                raise leased_error(check.conflict, rp.shown)
        for lease in remembered:
            if lease.id not in live_ids:
                self.forget(session, lease.id)
                raise _ended_error(lease, rp)
        return check

    def fence(self, session: str, key: str, own: Lease) -> None:
        """Under the lock: refused if the writer's own lease ran out while it waited, or a later lease wrote
        here (the grant is then forgotten)."""
        try:
            self.store.enforce_fence(key, own)
        except CoordinatorError:
            self.forget(session, own.id)
            raise

    def forget(self, session: str, lease_id: str) -> None:
        with self._granted_lock:
            mine = self._granted.get(session)
            if mine is not None:
                mine.pop(lease_id, None)
                if not mine:
                    del self._granted[session]

    def grant(
        self, session: str, patterns: Sequence[str], mode: str, ttl_s: float, *, fences: bool = True
    ) -> list[Lease]:
        """Grant leases; returns after `LEASE_SNAPSHOT_S` (class docstring). `fences`: the session's own
        writes in this process carry the lease (False for an agent's write ticket: the agent writes, not
        this process, and the ticket may end in another process)."""
        pats = [normalize_pattern(p, self._root) for p in patterns]
        granted = self.store.grant(session, pats, mode, ttl_s)
        with self._granted_lock:
            if not fences:
                granted_here: list[Lease] = []
            else:
                granted_here = granted
            if granted_here:
                mine = self._granted.setdefault(session, {})
                for old_id in [i for i, x in mine.items() if x.pattern in set(pats)]:
                    del mine[old_id]
                mine.update({x.id: x for x in granted_here})
        self._snapshot = None
        # Every process's lease snapshot taken before the grant is dropped within LEASE_SNAPSHOT_S: only
        # then may the holder rely on the lease.
        time.sleep(LEASE_SNAPSHOT_S)
        return granted

    def renew(self, session: str, lease_id: str | None, ttl_s: float) -> list[Lease]:
        ids = [lease_id] if lease_id else [x.id for x in self.store.live() if x.session == session]
        out = [self.store.renew(session, i, ttl_s) for i in ids]
        with self._granted_lock:
            mine = self._granted.get(session, {})
            for x in out:
                if x.id in mine:
                    mine[x.id] = x
        self._snapshot = None
        return out

    def release(self, session: str, lease_id: str | None, pattern: str | None) -> int:
        pat = normalize_pattern(pattern, self._root) if pattern is not None else None
        n = self.store.release(session, lease_id=lease_id, pattern=pat)
        with self._granted_lock:
            mine = self._granted.get(session, {})
            ended = [i for i, x in mine.items() if lease_id in (None, i) and pat in (None, x.pattern)]
            for i in ended:
                del mine[i]
        self._snapshot = None
        return n

    def break_lease(self, lease_id: str | None, session: str | None) -> list[Lease]:
        ended = self.store.break_lease(lease_id=lease_id, session=session)
        self._snapshot = None
        return ended


def _ended_error(lease: Lease, rp: fsio.ResolvedPath) -> CoordinatorError:
    when = time.strftime("%H:%M:%S", time.localtime(lease.ends_at))
    return CoordinatorError(
        ErrorCode.LEASED,
        f"Your {lease.mode} lease on {lease.pattern!r} (token {lease.token}) has ended: it ran out at "
        f"{when}, or was released or broken. Nothing was written to {rp.shown}. Lease it again and "
        "read the file again before changing it (another session may have changed it); or, if you "
        "no longer need the lease, just make the change again.",
        path=rp.key,
        lease_id=lease.id,
        token=lease.token,
    )


def _ignore(reply: Any) -> None:
    return None


#: `LeaseGate.rider`'s answer when no refresh is due: no command, a reply handler that does nothing.
NOT_DUE: tuple[Callable[[Any], None] | None, Callable[[Any], None]] = (None, _ignore)
