"""The common path against the general path, side by side over generated edits (engine/write.py).

Two coordinators on two roots that start identical, each with its own Redis: on "fast" every write may
take the common path (`_common_write`); on "general" it is switched off, so every write runs the general
path. The same seeded sequence of operations runs on both, one operation on each in turn, and after each
one the test compares everything a caller or another process could see: the result (or the refusal's
code, message and details), every file's bytes, the history, the sessions' views in Redis, the change
events and the refusal counts. The sequences mix the common case with every case the common path hands
over (a stale view, a change made outside, a view not held here, a lease, a missing file, a link swapped
in, a path given another way, a removal, a file in another encoding or with a byte order mark, an edit
that puts control characters in, up to making the file binary) and with the transform's own refusals;
the test also checks that the fast side took the common path for most plain edits, decoded some contents
as known clean, and handed every hand-over case to the general path.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from coordinator import Coordinator, CoordinatorError
from coordinator.engine import leasing
from coordinator.engine import write as write_mod

SESSIONS = ("s", "t")
FILES = ("a.txt", "b.txt", "sub/c.txt")
WORDS = ("alpha", "beta", "gamma", "delta", "x = 1", "return 'a'", "caf\u00e9", "\u2018q\u2019")


@dataclass
class Side:
    """One coordinator of the pair, and what its common path did (counted on the fast side only)."""

    coord: Coordinator
    taken: int = 0
    handed: int = 0
    raised: int = 0
    unsniffed: int = 0  # contents decoded without the binary sniff, known clean
    log: list[str] = field(default_factory=list)  # per write: "taken", "handed" or "raised"


def _spy(side: Side) -> None:
    real = side.coord.writer._common_write

    def spy(req: Any) -> Any:
        try:
            done = real(req)
        except CoordinatorError:
            side.raised += 1
            side.log.append("raised")
            raise
        side.log.append("handed" if done is None else "taken")
        if done is None:
            side.handed += 1
        else:
            side.taken += 1
        return done

    side.coord.writer._common_write = spy  # type: ignore[method-assign]


def _count_unsniffed(side: Side, monkeypatch: pytest.MonkeyPatch) -> None:
    real = write_mod.decode_clean

    def counted(data: bytes) -> Any:
        side.unsniffed += 1
        return real(data)

    monkeypatch.setattr(write_mod, "decode_clean", counted)


@pytest.fixture
def sides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Side, Side]]:
    # Each coordinator has its own Redis here and every lease change is made through it (dropping its
    # snapshot), so no snapshot can miss a grant: the grant's wait (LEASE_SNAPSHOT_S) would only make the
    # test slow, and a snapshot's age (a step of this test is slow) would only hand writes over by the clock.
    monkeypatch.setattr(leasing.time, "sleep", lambda s: None)
    monkeypatch.setattr(leasing, "LEASE_SNAPSHOT_S", 3600.0)
    made = []
    for name in ("fast", "general"):
        root = tmp_path / name
        root.mkdir()
        coord = Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none")
        assert coord.tracker is not None
        coord.tracker.interval_s = 0.0  # notices looked up on every write on both sides, not by the clock
        made.append(Side(coord))
    fast, general = made
    _spy(fast)
    _count_unsniffed(fast, monkeypatch)  # only the fast side takes the common path, which alone uses it
    general.coord.writer._common_write = lambda req: None  # type: ignore[method-assign]
    yield fast, general
    for side in made:
        side.coord.close()


Op = Callable[[Coordinator], Any]


def _text(rng: random.Random, lines: int) -> str:
    eol = "\r\n" if rng.random() < 0.1 else "\n"
    return "".join(f"{rng.choice(WORDS)} {i}{eol}" for i in range(lines))


def _encoded(rng: random.Random, text: str) -> bytes:
    kind = rng.random()
    if kind < 0.06:
        return text.encode("utf-16")
    if kind < 0.12:
        return b"\xef\xbb\xbf" + text.encode()
    if kind < 0.16:
        return text.encode() + b"\x01\x02 control\n"
    return text.encode()


def _line_of(coord: Coordinator, path: str, rng: random.Random) -> str:
    """A piece of the file's current text (the same on both sides: the sides hold the same bytes)."""
    try:
        text = (Path(coord.root) / path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return "alpha"
    lines = [ln for ln in text.splitlines(keepends=True) if ln.strip()]
    if not lines:
        return "alpha"
    return rng.choice(lines).rstrip("\r\n") if rng.random() < 0.85 else rng.choice(WORDS)


class Generator:
    """Seeded operations; each is a function of a coordinator, drawn once and applied to both sides.

    An operation's arguments depend on the files' contents, which are the same on both sides when it is
    drawn (the test checks that after every operation), so it is drawn against the fast side."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def draw(self, fast: Coordinator) -> tuple[str, Op]:
        rng = self.rng
        kind = rng.choices(
            [
                "edit",
                "edit_all",
                "multi",
                "write",
                "read",
                "outside",
                "other_edit",
                "forget",
                "lease",
                "release",
                "remove",
                "link",
                "shown",
                "undo",
                "bad_edit",
                "later",
                "control",
            ],
            weights=[50, 4, 5, 6, 6, 3, 3, 2, 1, 8, 2, 1, 3, 3, 5, 6, 3],
        )[0]
        session, path = rng.choices(SESSIONS, weights=[9, 1])[0], rng.choice(FILES)
        return kind, getattr(self, f"_{kind}")(fast, session, path)

    def _edit(self, fast: Coordinator, session: str, path: str) -> Op:
        """An edit of a line of the file, mostly right after the session read it (as agents do)."""
        old = _line_of(fast, path, self.rng)
        new = old + self.rng.choice(["!", " # changed", "", "\nadded line"])
        read_first = self.rng.random() < 0.6

        def op(c: Coordinator) -> Any:
            s = c.session(session)
            if read_first:
                try:
                    s.read(path)
                except CoordinatorError:
                    pass  # the edit then gives its own refusal
            return s.edit(path, old, new)

        return op

    def _control(self, fast: Coordinator, session: str, path: str) -> Op:
        """An edit that puts control characters in: a few (still text), or enough to make the file binary,
        so that the next edit of it is refused (a content the fast side decoded without sniffing before)."""
        old = _line_of(fast, path, self.rng)
        new = old + self.rng.choice(["\x01", "\x07\x08", "\x00", "\x02" * 40, "\x1b[0m"])
        return lambda c: c.session(session).edit(path, old, new)

    def _later(self, fast: Coordinator, session: str, path: str) -> Op:
        """A few seconds pass: the paths found stale lately are no longer counted as contended."""
        return lambda c: c.writer.rebaser._contended.clear()

    def _edit_all(self, fast: Coordinator, session: str, path: str) -> Op:
        word = self.rng.choice(WORDS)
        return lambda c: c.session(session).edit(path, word, word.upper(), replace_all=True)

    def _bad_edit(self, fast: Coordinator, session: str, path: str) -> Op:
        """An edit the transform refuses: no match, an ambiguous match, an empty old_string on content."""
        old = self.rng.choice(["nowhere at all", "", self.rng.choice(WORDS), "\n"])
        return lambda c: c.session(session).edit(path, old, "changed")

    def _multi(self, fast: Coordinator, session: str, path: str) -> Op:
        a, b = _line_of(fast, path, self.rng), _line_of(fast, path, self.rng)
        edits = [{"old_string": a, "new_string": a + " (1)"}, {"old_string": b, "new_string": b + " (2)"}]
        return lambda c: c.session(session).multi_edit(path, edits)

    def _write(self, fast: Coordinator, session: str, path: str) -> Op:
        content = _text(self.rng, self.rng.randint(0, 12))
        return lambda c: c.session(session).write(path, content)

    def _read(self, fast: Coordinator, session: str, path: str) -> Op:
        return lambda c: c.session(session).read(path)

    def _outside(self, fast: Coordinator, session: str, path: str) -> Op:
        data = _encoded(self.rng, _text(self.rng, self.rng.randint(1, 12)))

        def op(c: Coordinator) -> None:
            target = Path(c.root) / path
            target.parent.mkdir(exist_ok=True)
            if target.is_symlink():
                target.unlink()
            target.write_bytes(data)

        return op

    def _other_edit(self, fast: Coordinator, session: str, path: str) -> Op:
        other = "u"
        old = _line_of(fast, path, self.rng)

        def op(c: Coordinator) -> Any:
            s = c.session(other)
            s.read(path)
            return s.edit(path, old, old + " (other)")

        return op

    def _forget(self, fast: Coordinator, session: str, path: str) -> Op:
        return lambda c: c._access.views.clear()  # as another process of the same sessions would find it

    def _lease(self, fast: Coordinator, session: str, path: str) -> Op:
        return lambda c: c.session(session).lease(path, ttl_s=60)

    def _release(self, fast: Coordinator, session: str, path: str) -> Op:
        return lambda c: sum(c.session(s).release() for s in SESSIONS)

    def _remove(self, fast: Coordinator, session: str, path: str) -> Op:
        return lambda c: (Path(c.root) / path).unlink(missing_ok=True)

    def _link(self, fast: Coordinator, session: str, path: str) -> Op:
        """The file's place taken by a link to another file of the repository (or the link put back)."""
        target = self.rng.choice([f for f in FILES if f != path and "/" not in f])

        def op(c: Coordinator) -> None:
            place = Path(c.root) / path
            place.parent.mkdir(exist_ok=True)
            if place.is_symlink() or place.exists():
                place.unlink()
            os.symlink(os.path.relpath(Path(c.root) / target, place.parent), place)

        return op

    def _shown(self, fast: Coordinator, session: str, path: str) -> Op:
        """The same file named another way: through "./", or as an absolute path inside the root."""
        old = _line_of(fast, path, self.rng)
        absolute = self.rng.random() < 0.5

        def op(c: Coordinator) -> Any:
            name = os.path.join(c.root, path) if absolute else "./" + path
            return c.session(session).edit(name, old, old + " (shown)")

        return op

    def _undo(self, fast: Coordinator, session: str, path: str) -> Op:
        return lambda c: c.session(session).undo(path)


def _outcome(op: Op, coord: Coordinator) -> tuple[str, Any]:
    try:
        res = op(coord)
    except CoordinatorError as exc:
        return "refused", (exc.code, exc.message.replace(coord.root, "<root>"), _plain(exc.details, coord))
    if res is None or isinstance(res, int):
        return "done", res
    if isinstance(res, list):  # leases
        return "done", [(x.session, x.pattern, x.mode) for x in res]
    d = res.to_dict()
    d.pop("timings", None)
    d.pop("lease_token", None)
    for k in ("leases",):
        d.pop(k, None)
    return "done", _plain(d, coord)


_LEASE_END = re.compile(r"until \d\d:\d\d:\d\d, \d+ s from now")


def _plain(value: Any, coord: Coordinator) -> Any:
    """`value` with the root's absolute path and the times of leases (which differ by side) taken out."""
    if isinstance(value, str):
        return _LEASE_END.sub("until <end>", value.replace(coord.root, "<root>"))
    if isinstance(value, dict):
        return {k: _plain(v, coord) for k, v in value.items() if k not in ("ends_at", "lease_id", "token")}
    if isinstance(value, list | tuple):
        return [_plain(v, coord) for v in value]
    return value


def _seen(coord: Coordinator) -> dict[str, Any]:
    """What the outside world can see of one side: files, history, views, events, refusal counts."""
    root = Path(coord.root)
    files: dict[str, Any] = {}
    history: dict[str, Any] = {}
    views: dict[str, Any] = {}
    for path in FILES:
        place = root / path
        files[path] = (
            ("link", os.readlink(place)) if place.is_symlink() else (place.read_bytes() if place.exists() else None)
        )
        try:
            key = coord.resolve(path).key
        except CoordinatorError as exc:
            history[path] = exc.code
            continue
        history[path] = [
            (e.version, e.session, e.operation, e.before, e.after, e.first_line, e.last_line, e.reverts)
            for e in coord.history_store.entries(key)
        ]
        for s in (*SESSIONS, "u"):
            rs = coord.state.get(s, key)
            views[f"{s}:{path}"] = None if rs is None else (rs.hash, rs.size, rs.offset, rs.limit, rs.kind)
        meta = coord.state.meta(key)
        views[f"meta:{path}"] = {k: v for k, v in meta.items() if k != "time"}
    events = [
        (e.path, e.session, e.version, e.operation, tuple(map(tuple, e.ranges)), e.hash, e.rebased)
        for e in coord.recent_events(500)
    ]
    refusals = dict(coord.state.error_counts())
    for code, n in coord._access.refusals._counts.items():
        refusals[code] = refusals.get(code, 0) + n
    return {"files": files, "history": history, "views": views, "events": events, "refusals": refusals}


def _start(coord: Coordinator, rng: random.Random) -> None:
    root = Path(coord.root)
    (root / "sub").mkdir(exist_ok=True)
    for path in FILES:
        (root / path).write_text(_text(rng, 6))
    for s in SESSIONS:
        for path in FILES:
            coord.session(s).read(path)


def _run(sides: tuple[Side, Side], seed: int, steps: int) -> dict[str, int]:
    fast, general = sides
    for side in sides:
        _start(side.coord, random.Random(seed))
    gen = Generator(seed)
    kinds: dict[str, int] = {}
    for step in range(steps):
        kind, op = gen.draw(fast.coord)
        kinds[kind] = kinds.get(kind, 0) + 1
        got = _outcome(op, fast.coord)
        want = _outcome(op, general.coord)
        assert got == want, f"seed {seed} step {step} ({kind}): the answers differ"
        assert _seen(fast.coord) == _seen(general.coord), f"seed {seed} step {step} ({kind}): the sides differ"
    # A resolution is kept only for a path given as its own key: "./a.txt" and absolute paths are resolved
    # on every call (and a kept one that a link made wrong was handed over above, with the same answers).
    assert fast.coord.writer._known_paths and all(p in FILES for p in fast.coord.writer._known_paths)
    return kinds


def _check_coverage(fast: Side, kinds: dict[str, int]) -> None:
    assert fast.taken > 0 and fast.handed > 0 and fast.raised > 0, (fast.taken, fast.handed, fast.raised)
    assert "edit" in kinds
    assert fast.unsniffed > 0  # some contents were decoded as known clean (`_KnownPath.clean`)


SEEDS = range(6)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_common_path_gives_what_the_general_path_gives(sides: tuple[Side, Side], seed: int) -> None:
    kinds = _run(sides, seed, steps=60)
    _check_coverage(sides[0], kinds)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 110))
def test_the_common_path_gives_what_the_general_path_gives_over_long_runs(sides: tuple[Side, Side], seed: int) -> None:
    kinds = _run(sides, seed, steps=200)
    _check_coverage(sides[0], kinds)
