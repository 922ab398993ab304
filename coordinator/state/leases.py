"""Leases: a session reserves paths or globs, exclusive or shared, for a while.

An exclusive lease held by session S makes every other session's write, edit or undo of a path it covers
fail with `leased` (naming S and when the lease ends); reads stay free. A shared lease blocks only other
sessions' exclusive leases (several sessions may share). Leases are advisory towards the *content*: the
staleness rule still decides every write on the bytes on disk, so a lease can prevent wasted work and
collisions, never cause a lost update.

State in Redis (all keys of a repository share the `{ns}` hash tag, so every lease transaction is on one
cluster slot):
    ec:{<ns>}:leases        sorted set; member: the lease as compact JSON; score: ends_at in ms
    ec:{<ns>}:lease-token   counter: tokens of grants made without a local fence store (and the seed of one)
An expired lease vanishes on its own: every reader asks only for members whose score is in the future, the
set itself carries a PEXPIREAT at the latest end, and grants sweep expired members. A killed session's
leases simply run out. Times are the clients' wall clocks (hosts sharing a Redis need NTP-synced clocks;
lease TTLs are seconds to hours, so milliseconds of skew do not matter). Grants, renewals and releases are
optimistic transactions (WATCH the set, read, MULTI/EXEC) on a transactional pipeline, which redis-py
supports on a Redis Cluster too (its keys are all in one slot).

Fencing (a write under an expired lease is refused; Kleppmann's "How to do distributed locking", 2016):
the engine's critical section does no network I/O, so Redis cannot judge a write at the instant it
happens. The fence is local instead, kept under the path's file lock:
    <state dir>/fences/token                8 bytes: the last token handed out (under an flock, fsynced)
    <state dir>/fences/<lock name>.fence    8 bytes: the highest exclusive-lease token that has written the
                                            path, then 16 bytes: the id of that lease
Tokens come from the local store, not from Redis: a Redis failover can lose acknowledged writes (a
forced takeover lost increments of a Redis counter in our tests), so a Redis counter may hand out one token
twice; the file on the file-owning host's disk never does. And the fence compares the lease id as well as
the token: two leases with one token (from an older fence, or a state folder restored from a copy) cannot
both write. A write made under a lease (the writer's own live lease covering the path, seen in the pre-lock
Redis fetch, or a lease this process granted to the session and still remembers) carries that lease's
token, id and end time. Under the lock: the write is refused if the lease's end has passed (it ran out
while the writer waited), if the fence holds a higher token (a later exclusive lease, granted after ours ran
out, has written the path), or the same token of another lease. An exclusive write then advances the fence
to its token and id. So a paused holder whose lease expired and was taken over can never write over the new
holder's work, even if its pre-lock check saw the lease still alive. Writes by sessions without a lease
neither read nor advance the fence: they pay nothing. (One file-owning host per repository is the
supported topology, so every grant that can fence a write is made where its token store is.)

Pattern syntax (relative to the root, `/` separators): `*` any run of characters within one path
component, `**` any number of components, `?` one character, `[...]` a character class; a trailing `/`
means everything under that folder. A pattern without any of these is one exact path.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, TypeVar

import redis

from coordinator.disk.locks import lock_name
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.connection import redis_call
from coordinator.state.lane import Batch

_T = TypeVar("_T")

LeaseMode = Literal["exclusive", "shared"]
MODES: tuple[str, ...] = ("exclusive", "shared")
# The lease lifetime rules, owned here: the engine, the HTTP models and the tool schemas take them from here.
DEFAULT_TTL_S = 300.0  # a task's worth; `renew` extends a live lease
MIN_TTL_S = 0.05
MAX_TTL_S = 24 * 3600.0  # a lease is for a task, not for days: renew it instead
_GLOB_CHARS = frozenset("*?[")
_GRANT_RETRIES = 50
_PARSED_CACHE_MAX = 4096


@dataclass(frozen=True)
class Lease:
    """One grant. `token` is its fencing token: later grants (of any pattern) have larger ones."""

    id: str
    session: str
    pattern: str
    mode: str
    token: int
    granted_at: float
    ends_at: float

    @property
    def exclusive(self) -> bool:
        return self.mode == "exclusive"

    def covers(self, path_key: str) -> bool:
        return pattern_regex(self.pattern).fullmatch(path_key) is not None

    def remaining_s(self, now: float | None = None) -> float:
        return self.ends_at - (time.time() if now is None else now)

    def describe(self, now: float | None = None) -> str:
        left = max(0.0, self.remaining_s(now))
        when = time.strftime("%H:%M:%S", time.localtime(self.ends_at))
        return f"{self.mode} lease on {self.pattern!r} by session {self.session} until {when} ({left:.0f} s left)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def member(self) -> str:
        return json.dumps(
            {
                "i": self.id,
                "s": self.session,
                "p": self.pattern,
                "m": self.mode[0],
                "t": self.token,
                "g": round(self.granted_at, 3),
            },
            separators=(",", ":"),
        )


@dataclass(frozen=True)
class LeaseCheck:
    """What the leases say about one write of one path by one session.

    conflict: another session's live exclusive lease covering the path (the write must be refused).
    own: the writer's own live lease covering it with the highest token (its writes are fenced), if any.
    """

    conflict: Lease | None
    own: Lease | None


NO_LEASES = LeaseCheck(None, None)


# ---------------------------------------------------------------------------------------------------------
# Patterns
# ---------------------------------------------------------------------------------------------------------
def normalize_pattern(pattern: object, root: str | None = None) -> str:
    """A lease pattern as stored: relative to the root, `/`-separated, no `./` or empty components."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "A lease pattern must be a non-empty string.")
    if "\x00" in pattern or "\\" in pattern:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, "A lease pattern may not contain NUL or backslashes; use / between folders."
        )
    p = pattern.strip()
    if root is not None and os.path.isabs(p):
        r = root.rstrip("/") + "/"
        if not p.startswith(r):
            raise CoordinatorError(
                ErrorCode.OUTSIDE_ROOT,
                f"The lease pattern {pattern!r} is outside the repository; give it relative to the root.",
            )
        p = p[len(r) :]
    trailing = p.endswith("/")
    parts = [c for c in p.split("/") if c not in ("", ".")]
    if not parts or ".." in parts:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"The lease pattern {pattern!r} must name paths inside the root (no '..'); e.g. 'src/app.py', "
            "'src/**/*.py' or 'docs/'.",
        )
    if trailing:
        parts.append("**")
    return "/".join(parts)


@lru_cache(maxsize=1024)
def pattern_regex(pattern: str) -> re.Pattern[str]:
    """The compiled matcher for a normalized pattern (see the module docstring for the syntax)."""
    out: list[str] = []
    parts = pattern.split("/")
    for k, part in enumerate(parts):
        last = k == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        i = 0
        while i < len(part):
            c = part[i]
            if c == "*":
                out.append("[^/]*")
            elif c == "?":
                out.append("[^/]")
            elif c == "[":
                j = part.find("]", i + 2)
                if j < 0:
                    out.append(re.escape(c))
                else:
                    body = part[i + 1 : j]
                    neg = body.startswith("!")
                    body = body[1:] if neg else body
                    out.append("[" + ("^" if neg else "") + body.replace("\\", "\\\\") + "]")
                    i = j
            else:
                out.append(re.escape(c))
            i += 1
        if not last:
            out.append("/")
    return re.compile("".join(out))


def is_glob(pattern: str) -> bool:
    return any(c in _GLOB_CHARS for c in pattern)


def may_overlap(p: str, q: str) -> bool:
    """Can some path match both patterns? Exact for two literal paths or a literal and a glob; for two
    globs a sound over-approximation (False only when their literal heads or tails rule out a common
    match), so a grant may be refused needlessly but never granted wrongly."""
    if not is_glob(p) and not is_glob(q):
        return p == q
    if not is_glob(p):
        return pattern_regex(q).fullmatch(p) is not None
    if not is_glob(q):
        return pattern_regex(p).fullmatch(q) is not None
    hp, hq = _literal_head(p), _literal_head(q)
    if not (hp.startswith(hq) or hq.startswith(hp)):
        return False
    tp, tq = _literal_tail(p), _literal_tail(q)
    return tp.endswith(tq) or tq.endswith(tp)


def _literal_head(p: str) -> str:
    i = min((p.index(c) for c in _GLOB_CHARS if c in p), default=len(p))
    return p[:i]


def _literal_tail(p: str) -> str:
    i = max((p.rindex(c) for c in "*?]" if c in p), default=-1)
    return p[i + 1 :]


# ---------------------------------------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------------------------------------
class LeaseStore:
    """Leases of one repository namespace in Redis, plus the local fences under the state folder."""

    def __init__(self, client: Any, namespace: str, fence_dir: Path | None = None) -> None:
        self.r = client
        self.ns = namespace
        self.key = f"ec:{{{namespace}}}:leases"
        self.token_key = f"ec:{{{namespace}}}:lease-token"
        self.fence_dir = Path(fence_dir) if fence_dir is not None else None
        self._parsed: dict[bytes, Lease | None] = {}

    # -- reading ------------------------------------------------------------------------------------------
    def queue_live(self, pipe: Any, now: float | None = None) -> None:
        """Add the fetch of all live leases to `pipe` (so it rides on another call's round trip);
        interpret its reply with `live_from`. On a lane.py `Batch` the same command goes raw (its reply
        is then the server's own, which `live_from` takes as well)."""
        low = _ms(time.time() if now is None else now)
        if type(pipe) is Batch:
            pipe.execute_command("ZRANGEBYSCORE", self.key, low, "+inf", "WITHSCORES")
            return
        pipe.zrangebyscore(self.key, low, "+inf", withscores=True)

    def live_from(self, raw: Iterable[Any]) -> list[Lease]:
        """The leases of a `queue_live` reply, in any of its forms: redis-py's (member, score) pairs, or the
        server's own reply read raw (RESP2: members and scores in one flat list; RESP3: [member, score]
        pairs)."""
        out = []
        for member, score in _score_pairs(raw):
            lease = self._parse(member, score)
            if lease is not None:
                out.append(lease)
        return out

    def live(self) -> list[Lease]:
        """Every lease that has not ended, soonest end first."""
        raw = redis_call(lambda: self.r.zrangebyscore(self.key, _ms(time.time()), "+inf", withscores=True))
        return self.live_from(raw)

    def check(self, session: str, path_key: str, leases: Sequence[Lease] | None = None) -> LeaseCheck:
        """What leases mean for a write of `path_key` by `session` (one Redis call unless `leases`, the
        reply of `queue_live`, is given)."""
        if leases is None:
            leases = self.live()
        return check_leases(leases, session, path_key)

    def _parse(self, member: bytes, score: float) -> Lease | None:
        key = member + b"|" + str(int(score)).encode()
        if key in self._parsed:
            return self._parsed[key]
        try:
            d = json.loads(member)
            lease: Lease | None = Lease(
                id=str(d["i"]),
                session=str(d["s"]),
                pattern=str(d["p"]),
                mode="exclusive" if d["m"] == "e" else "shared",
                token=int(d["t"]),
                granted_at=float(d["g"]),
                ends_at=score / 1000.0,
            )
        except (ValueError, KeyError, TypeError):
            lease = None  # not ours: ignored, never blocks anything
        if len(self._parsed) >= _PARSED_CACHE_MAX:
            self._parsed.clear()
        self._parsed[key] = lease
        return lease

    # -- granting -----------------------------------------------------------------------------------------
    def grant(
        self, session: str, patterns: Sequence[str], mode: str = "exclusive", ttl_s: float = DEFAULT_TTL_S
    ) -> list[Lease]:
        """Lease each of `patterns` (normalized) for `session`, all or none. Refused with `leased` if another
        session holds an overlapping lease that conflicts (any lease against an exclusive request; an
        exclusive one against a shared request). The same session's earlier lease on the same pattern is
        replaced (a new token; its old token no longer fences anything)."""
        if mode not in MODES:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"mode must be 'exclusive' or 'shared', not {mode!r}.")
        if isinstance(patterns, str) or not patterns:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give a non-empty list of patterns to lease.")
        ttl = _check_ttl(ttl_s)
        # Tokens are drawn before the transaction: strictly increasing across every grant ever made here; a
        # grant that is refused just leaves a gap.
        tokens = self._draw_tokens(len(patterns))

        def attempt(pipe: Any) -> list[Lease]:
            now = round(time.time(), 3)
            live = self.live_from(pipe.zrangebyscore(self.key, _ms(now), "+inf", withscores=True))
            for pattern in patterns:
                blocking = [
                    lease
                    for lease in live
                    if lease.session != session
                    and (mode == "exclusive" or lease.exclusive)
                    and may_overlap(lease.pattern, pattern)
                ]
                if blocking:
                    raise _grant_refused(pattern, mode, blocking, now)
            ends_at = _ms(now + ttl) / 1000.0
            granted = [
                Lease(uuid.uuid4().hex[:16], session, pattern, mode, token, now, ends_at)
                for pattern, token in zip(patterns, tokens, strict=True)
            ]
            replaced = [x for x in live if x.session == session and x.pattern in set(patterns)]
            pipe.multi()
            pipe.zremrangebyscore(self.key, "-inf", _ms(now) - 1)
            for old in replaced:
                pipe.zrem(self.key, old.member())
            pipe.zadd(self.key, {lease.member(): _ms(lease.ends_at) for lease in granted})
            pipe.pexpireat(self.key, max([_ms(ends_at)] + [_ms(x.ends_at) for x in live]) + 1000)
            pipe.execute()
            return granted

        return self._transaction(attempt)

    def renew(self, session: str, lease_id: str, ttl_s: float = DEFAULT_TTL_S) -> Lease:
        """Extend a live lease of `session` to end `ttl_s` from now (same token). A lease that has already
        ended cannot be renewed: lease again (and read again what you will change)."""
        ttl = _check_ttl(ttl_s)

        def attempt(pipe: Any) -> Lease:
            now = round(time.time(), 3)
            live = self.live_from(pipe.zrangebyscore(self.key, _ms(now), "+inf", withscores=True))
            mine = next((x for x in live if x.id == lease_id), None)
            if mine is None or mine.session != session:
                pipe.reset()
                raise CoordinatorError(
                    ErrorCode.LEASED,
                    f"Lease {lease_id} is not held by session {session}: it has ended (expired, released or "
                    "broken by an administrator). Lease the paths again, then read the files again before "
                    "changing them.",
                    lease_id=lease_id,
                )
            renewed = Lease(
                mine.id, mine.session, mine.pattern, mine.mode, mine.token, mine.granted_at, _ms(now + ttl) / 1000.0
            )
            pipe.multi()
            pipe.zadd(self.key, {renewed.member(): _ms(renewed.ends_at)}, xx=True)
            pipe.pexpireat(self.key, max([_ms(renewed.ends_at)] + [_ms(x.ends_at) for x in live]) + 1000)
            pipe.execute()
            return renewed

        return self._transaction(attempt)

    def release(self, session: str, lease_id: str | None = None, pattern: str | None = None) -> int:
        """End leases of `session`: one by id, all on one pattern, or (neither given) all of them. Returns
        how many ended."""
        return len(self.release_leases(session, lease_id, pattern))

    def release_leases(self, session: str, lease_id: str | None = None, pattern: str | None = None) -> list[Lease]:
        """`release`, returning the leases that ended."""
        return self._remove(lambda x: x.session == session and _chosen(x, lease_id, pattern))

    def break_lease(self, lease_id: str | None = None, session: str | None = None) -> list[Lease]:
        """Administrator: end a lease by id, or every lease of a session, whoever holds it."""
        if lease_id is None and session is None:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "Give a lease id or a session to break leases of.")
        ended: list[Lease] = []

        def pick(x: Lease) -> bool:
            hit = (lease_id is None or x.id == lease_id) and (session is None or x.session == session)
            if hit:
                ended.append(x)
            return hit

        self._remove(pick)
        return ended

    def _remove(self, pick: Callable[[Lease], bool]) -> list[Lease]:
        def attempt(pipe: Any) -> list[Lease]:
            live = self.live_from(pipe.zrangebyscore(self.key, _ms(time.time()), "+inf", withscores=True))
            gone = [x for x in live if pick(x)]
            pipe.multi()
            for x in gone:
                pipe.zrem(self.key, x.member())
            pipe.execute()
            return gone

        return self._transaction(attempt)

    def _transaction(self, attempt: Callable[[Any], _T]) -> _T:
        """Optimistic transaction on the lease set: WATCH, read, decide, MULTI/EXEC; again if it moved."""

        def go() -> _T:
            with self.r.pipeline(transaction=True) as pipe:
                for _ in range(_GRANT_RETRIES):
                    try:
                        pipe.watch(self.key)
                        return attempt(pipe)
                    except redis.WatchError:
                        continue
                    finally:
                        pipe.reset()
            raise CoordinatorError(
                ErrorCode.LOCK_TIMEOUT,
                "The lease table changed too often to complete this request; try again in a moment.",
            )

        return redis_call(go)

    def _draw_tokens(self, n: int) -> range:
        """`n` fresh fencing tokens: from the local token store when there is a fence folder (never the same
        token twice, whatever Redis loses), else from the Redis counter."""
        if self.fence_dir is None:
            last = int(redis_call(lambda: self.r.incrby(self.token_key, n)))
            return range(last - n + 1, last + 1)
        path = self.fence_dir / "token"
        fd = _open_fence_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 8, 0)
            if len(raw) == 8:
                last = int.from_bytes(raw, "little")
            else:  # first grant with a local store: continue after the tokens Redis handed out before
                last = int(redis_call(lambda: self.r.get(self.token_key)) or 0)
            os.pwrite(fd, (last + n).to_bytes(8, "little"), 0)
            os.fsync(fd)
        except OSError as exc:
            raise CoordinatorError(
                ErrorCode.IO_ERROR,
                f"The lease token store {path} could not be updated ({exc}); no lease was granted. Check that "
                "the state folder is writable and the disk is not full, then try again.",
            ) from exc
        finally:
            os.close(fd)  # releases the flock
        return range(last + 1, last + n + 1)

    # -- fencing (local, under the path's file lock) -------------------------------------------------------
    def fence_path(self, path_key: str) -> Path:
        assert self.fence_dir is not None
        return self.fence_dir / (lock_name(path_key)[: -len(".lock")] + ".fence")

    def enforce_fence(self, path_key: str, lease: Lease, now: float | None = None) -> None:
        """Refuse a write under `lease` that ran out, or that a later exclusive lease has fenced off; advance
        the fence for an exclusive lease.

        Must be called with the path's file lock held (the read-compare-write of the fence is atomic only
        under it) and does only local file I/O. Raises CoordinatorError(LEASED).
        """
        now = time.time() if now is None else now
        if lease.ends_at <= now:
            raise CoordinatorError(
                ErrorCode.LEASED,
                f"Your {lease.mode} lease on {lease.pattern!r} (token {lease.token}) ended "
                f"{now - lease.ends_at:.1f} s ago, before this write could be made; nothing was written. Lease "
                "the path again, read the file again (someone else may have changed it), then redo the change.",
                token=lease.token,
                ends_at=lease.ends_at,
            )
        if self.fence_dir is None:
            return
        path = self.fence_path(path_key)
        fd = _open_fence_file(path)
        try:
            raw = os.pread(fd, 24, 0)
            fence = int.from_bytes(raw[:8], "little") if len(raw) >= 8 else 0
            fence_id = raw[8:24].decode("ascii", "replace").rstrip("\x00") if len(raw) > 8 else ""
            if fence == lease.token and fence_id and fence_id != lease.id:
                raise CoordinatorError(
                    ErrorCode.LEASED,
                    f"Your lease on {lease.pattern!r} (token {lease.token}, id {lease.id}) is not the lease "
                    f"that last wrote {path_key} under this token (id {fence_id}): the token was handed out "
                    "twice. Nothing was written. Lease the path again, read the file again, then redo the change.",
                    token=lease.token,
                    fence=fence,
                )
            if fence > lease.token:
                raise CoordinatorError(
                    ErrorCode.LEASED,
                    f"Your lease on {lease.pattern!r} (token {lease.token}) has been superseded: a later "
                    f"exclusive lease (token {fence}) was granted after yours ended and has written "
                    f"{path_key}. Nothing was written. Lease the path again, read the file again, then redo "
                    "the change.",
                    token=lease.token,
                    fence=fence,
                )
            if lease.exclusive and (lease.token > fence or (lease.token == fence and not fence_id)):
                os.pwrite(fd, lease.token.to_bytes(8, "little") + lease.id.encode("ascii")[:16].ljust(16, b"\x00"), 0)
        finally:
            os.close(fd)

    def fence_value(self, path_key: str) -> int:
        if self.fence_dir is None:
            return 0
        try:
            raw = self.fence_path(path_key).read_bytes()
        except FileNotFoundError:
            return 0
        return int.from_bytes(raw[:8], "little") if len(raw) >= 8 else 0


# ---------------------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------------------
def check_leases(leases: Iterable[Lease], session: str, path_key: str, now: float | None = None) -> LeaseCheck:
    """The conflict (another session's live exclusive lease covering the path, latest-ending first) and the
    writer's own covering lease with the highest token."""
    now = time.time() if now is None else now
    conflict: Lease | None = None
    own: Lease | None = None
    for lease in leases:
        if lease.ends_at <= now or not lease.covers(path_key):
            continue
        if lease.session == session:
            if own is None or lease.token > own.token:
                own = lease
        elif lease.exclusive and (conflict is None or lease.ends_at > conflict.ends_at):
            conflict = lease
    return LeaseCheck(conflict, own)


def leased_error(conflict: Lease, path_shown: str, now: float | None = None) -> CoordinatorError:
    """The `leased` refusal of a write to a path that another session holds exclusively."""
    left = max(0.0, conflict.remaining_s(now))
    when = time.strftime("%H:%M:%S", time.localtime(conflict.ends_at))
    return CoordinatorError(
        ErrorCode.LEASED,
        f"{path_shown} is leased exclusively by session {conflict.session} (pattern {conflict.pattern!r}) "
        f"until {when}, {left:.0f} s from now; nothing was written. Reading it is still allowed. Work on "
        "something else and come back after the lease ends, or ask that session to release it.",
        holder=conflict.session,
        pattern=conflict.pattern,
        ends_at=conflict.ends_at,
        lease_id=conflict.id,
    )


def _grant_refused(pattern: str, mode: str, blocking: Sequence[Lease], now: float) -> CoordinatorError:
    first = max(blocking, key=lambda x: x.ends_at)
    others = f" (and {len(blocking) - 1} more)" if len(blocking) > 1 else ""
    return CoordinatorError(
        ErrorCode.LEASED,
        f"Cannot lease {pattern!r} {mode}: it overlaps the {first.describe(now)}{others}. Try again after "
        "that lease ends, lease a narrower pattern, or ask its holder to release it.",
        holder=first.session,
        pattern=first.pattern,
        ends_at=first.ends_at,
        lease_id=first.id,
    )


def _chosen(x: Lease, lease_id: str | None, pattern: str | None) -> bool:
    return (lease_id is None or x.id == lease_id) and (pattern is None or x.pattern == pattern)


def _check_ttl(ttl_s: object) -> float:
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"ttl_s must be a number of seconds between {MIN_TTL_S} and {MAX_TTL_S:.0f}; got {ttl_s!r}.",
        )
    return float(ttl_s)


def _score_pairs(raw: Any) -> list[tuple[Any, float]]:
    """A ZRANGEBYSCORE ... WITHSCORES reply as (member, score) pairs, whichever form it came in."""
    items = list(raw or ())
    if items and not isinstance(items[0], list | tuple):
        it = iter(items)
        return [(member, float(score)) for member, score in zip(it, it, strict=True)]
    return [(member, float(score)) for member, score in items]


def _ms(t: float) -> int:
    return int(t * 1000)


def _open_fence_file(path: Path) -> int:
    """Open (creating it, and its folder, if need be) a file of the fence folder, read-write, mode 0600."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(path, flags, 0o600)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o600)
