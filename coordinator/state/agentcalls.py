"""The agents' own write calls between their hooks, in Redis: the open calls (each holding a write ticket),
the calls whose ticket lapsed before their write was seen, and the notices waiting for a session.

An agent's write happens between two hook events that may reach different processes (a command hook, the
hook service, an HTTP route), so what the second needs from the first lives here, beside the leases:
    ec:{<ns>}:agent-calls                hash; field: "<session>\\0<call id>"; value: a `PendingCall` as JSON
    ec:{<ns>}:agent-notices:<session>    list of texts for the session's next hook answer (oldest first)
All keys carry the repository's `{ns}` hash tag (one cluster slot, like the leases). Entries carry their own
end time (an open call's: its ticket's life; a lapsed call's: `LAPSED_LIFE_S`), are ignored once past it
and swept by the next write of the table; the hash itself expires after the latest end. Losing this state
(a flush, a failover) does not lose the calls in flight: each open call is also journaled on disk
(coordinator/disk/calljournal.py), and one found only there is judged as a lapsed call's late write.

The protocol that reads and writes these entries is `coordinator.engine.agentwrites` (their one owner).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import redis

from coordinator.state.connection import redis_call

CallState = Literal["open", "lapsed"]
# How long a lapsed call is remembered: its late write (an answer to a long permission prompt) is still
# told apart from an outside change, and repaired, for this long.
LAPSED_LIFE_S = 3600.0
NOTICES_MAX = 20  # a session's waiting notices beyond these are dropped (oldest first)
NOTICE_LIFE_S = 24 * 3600.0
_RETRIES = 20


@dataclass(frozen=True)
class PendingCall:
    """One agent write call between its before-hook and its after-hook (or after its ticket lapsed).

    key: the path; ticket: the id of its write ticket (an exclusive lease of the path; None: none held);
    before: the hash of the pre-image kept in the history (None: the file did not exist); operation: what
    the write is ("edit", "write", ...); started: when its ticket was granted (wall clock); ends: when this
    entry ends; state: "open" (the ticket is held) or "lapsed" (released before the write was seen).
    """

    session: str
    call: str
    key: str
    ticket: str | None
    before: str | None
    operation: str
    started: float
    ends: float
    state: CallState = "open"
    window: tuple[int, int] | None = None  # the session's view was partial: (offset, limit) of what it saw
    changed: bool = False  # a change made by the call was already recorded (the tree watcher saw it)
    command: str = ""  # a shell call's command name ("sed", ...), for its messages

    def field(self) -> str:
        return field_of(self.session, self.call)

    def lapsed(self, now: float) -> PendingCall:
        return replace(self, ticket=None, state="lapsed", ends=now + LAPSED_LIFE_S)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: Any) -> PendingCall | None:
        try:
            data = json.loads(raw)
            if data.get("window") is not None:
                data["window"] = tuple(data["window"])
            return cls(**data)
        except (TypeError, ValueError):
            return None  # not ours, or of an older layout: ignored


def field_of(session: str, call: str) -> str:
    return f"{session}\0{call}"


class AgentCallStore:
    """The open and lapsed agent write calls of one repository namespace, and its sessions' notices."""

    def __init__(self, client: Any, namespace: str) -> None:
        self.r = client
        self.key = f"ec:{{{namespace}}}:agent-calls"
        self._notice_prefix = f"ec:{{{namespace}}}:agent-notices:"

    def notices_key(self, session: str) -> str:
        return self._notice_prefix + session

    # -- calls --------------------------------------------------------------------------------------------
    def put(self, call: PendingCall) -> None:
        """Keep `call` (replacing the entry of the same session and call id)."""

        def go() -> None:
            pipe = self.r.pipeline(transaction=False)
            pipe.hset(self.key, call.field(), call.to_json())
            pipe.pexpireat(self.key, int((max(call.ends, time.time()) + LAPSED_LIFE_S) * 1000))
            pipe.execute()

        redis_call(go)

    def get(self, session: str, call: str) -> PendingCall | None:
        """The entry of this call, left in place (None: none, or it ended)."""
        raw = redis_call(lambda: self.r.hget(self.key, field_of(session, call)))
        found = PendingCall.from_json(raw) if raw is not None else None
        return found if found is not None and found.ends > time.time() else None

    def take(self, session: str, call: str) -> PendingCall | None:
        """The entry of this call, removed as it is read (None: none, or it ended)."""
        field = field_of(session, call)

        def go() -> Any:
            pipe = self.r.pipeline(transaction=True)
            pipe.hget(self.key, field)
            pipe.hdel(self.key, field)
            return pipe.execute()[0]

        raw = redis_call(go)
        found = PendingCall.from_json(raw) if raw is not None else None
        return found if found is not None and found.ends > time.time() else None

    def remove(self, entry: PendingCall) -> bool:
        """Remove `entry` if it is still the one kept (True); False when another process took or changed it
        first (a compare-and-delete: only one process settles a call)."""
        field = entry.field()
        wanted = entry.to_json().encode()

        def go() -> bool:
            with self.r.pipeline(transaction=True) as pipe:
                for _ in range(_RETRIES):
                    try:
                        pipe.watch(self.key)
                        raw = pipe.hget(self.key, field)
                        if (raw.encode() if isinstance(raw, str) else raw) != wanted:
                            return False
                        pipe.multi()
                        pipe.hdel(self.key, field)
                        pipe.execute()
                        return True
                    except redis.WatchError:
                        continue  # another entry of the table changed: look again
                    finally:
                        pipe.reset()
            return False

        return bool(redis_call(go))

    def all(self) -> list[PendingCall]:
        """Every entry that has not ended (the ended ones are swept)."""
        return self._live(redis_call(lambda: self.r.hgetall(self.key)))

    def at_event(self, session: str) -> tuple[list[PendingCall], list[str]]:
        """At a hook event of `session`, in one round trip: its calls (as `of_session`) and the notices left
        for it (as `collect`: removed as they are read)."""
        nkey = self.notices_key(session)

        def go() -> Any:
            pipe = self.r.pipeline(transaction=False)
            pipe.hgetall(self.key)
            pipe.lrange(nkey, 0, -1)
            pipe.delete(nkey)
            return pipe.execute()

        table, notices, _ = redis_call(go)
        mine = [x for x in self._live(table) if x.session == session]
        return mine, [x.decode() if isinstance(x, bytes) else str(x) for x in notices or []]

    def _live(self, raw: Any) -> list[PendingCall]:
        now = time.time()
        live: list[PendingCall] = []
        ended: list[Any] = []
        for field, value in (raw or {}).items():
            entry = PendingCall.from_json(value)
            if entry is None or entry.ends <= now:
                ended.append(field)
            else:
                live.append(entry)
        if ended:
            redis_call(lambda: self.r.hdel(self.key, *ended))
        return live

    def of_session(self, session: str) -> list[PendingCall]:
        return [x for x in self.all() if x.session == session]

    def on_path(self, key: str) -> list[PendingCall]:
        return [x for x in self.all() if x.key == key]

    # -- notices ------------------------------------------------------------------------------------------
    def tell(self, session: str, text: str) -> None:
        """Leave `text` for `session`'s next hook answer."""
        nkey = self.notices_key(session)

        def go() -> None:
            pipe = self.r.pipeline(transaction=False)
            pipe.rpush(nkey, text)
            pipe.ltrim(nkey, -NOTICES_MAX, -1)
            pipe.expire(nkey, int(NOTICE_LIFE_S))
            pipe.execute()

        redis_call(go)

    def collect(self, session: str) -> list[str]:
        """The notices waiting for `session`, removed as they are read."""
        nkey = self.notices_key(session)

        def go() -> Any:
            pipe = self.r.pipeline(transaction=True)
            pipe.lrange(nkey, 0, -1)
            pipe.delete(nkey)
            return pipe.execute()[0]

        raw = redis_call(go) or []
        return [x.decode() if isinstance(x, bytes) else str(x) for x in raw]
