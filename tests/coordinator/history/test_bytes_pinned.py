"""The files a few writes leave on disk (index lines, packs, head record) are pinned byte for byte.

The expected digests were taken from the format as it stood before the write path was made cheaper; any change
to an index line, a pack record or the head record fails here, so "byte-identical" is checked, not promised.
One change since, on purpose: a write's time is written as its nanoseconds' decimal text (coordinator/clock.py,
"1700000000.250000000" where `repr` wrote "1700000000.25", the same float); with that text put back, the
index files are byte for byte the ones first pinned (their digests then were 9733a66f..., 587aa541...,
0b11288c...).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from coordinator.disk.locks import HeldLock, LockManager
from coordinator.history import History, PendingWrite, content_hash

FIELDS = {"session": "s", "operation": "write", "size_before": 0, "size_after": 0, "first_line": 1, "last_line": 1}
_IX, _PK, _LK = "history/index/", "history/packs/", "locks/"
EXPECTED: dict[str, str] = {
    _IX + "5e009c4ac9085a494697bfed4f1efbad.jsonl": "82aa28b86d712df31cc734219f678bc31ce9fdc77d1e772da3c771ca266b8d23",
    _IX + "b3328de7e0d84c8fdd7583f8271dde87.jsonl": "b892f67faa6984433c44d22b7152c95854841e61afd5d418ccbb42ab762cf919",
    _PK + "5e009c4ac9085a494697bfed4f1efbad.0.pack": "1cfc94862de79be0b6f579b7a9f6f5c31919653b93287be4dca8d3a1b583e16c",
    _PK + "b3328de7e0d84c8fdd7583f8271dde87.0.pack": "5605822a6cc3f6e0b9352546b3a197b14195af671c2025acbd14482d4eb0d810",
    _LK + "5e009c4ac9085a494697bfed4f1efbad.lock": "4e1e5fee30f6379ab217d59b080b936e6d84edc2abc1d48ced87f17503347328",
    _LK + "b3328de7e0d84c8fdd7583f8271dde87.lock": "cefc43fc8591655695d08e80db72377de7b74fdd574b18d925ca7b4a7fe6fb28",
}


# The head record (the lock file's bytes) after every begin and every commit of the four writes, and after
# each step of the second test: sha256 of the whole lock file, taken from the format as it stood at 9949242
# (the code of 0f0e6b7, before the write path was made cheaper).
EXPECTED_HEADS = [
    "5f8d14ee73b1430f37ca4128cd581ecae4318f4186f5d73058b853739761d075",
    "50cc91abc94bffc9637fc7e46eccbf1572552986bc58a5c9276c7f03ecbc4378",
    "300ea140e1e9e4ac1dacf3d8757347a319ccfe11a18d5de39470ccb70f1e52e9",
    "b8a37fa6e67f3d66f5d42103b65f78e0e2e5d2c7ca94e6ce7b0b5758a9a7504e",
    "5f8d14ee73b1430f37ca4128cd581ecae4318f4186f5d73058b853739761d075",
    "cefc43fc8591655695d08e80db72377de7b74fdd574b18d925ca7b4a7fe6fb28",
    "556c51b63fd6ccfb0bf6586d72b0fa8df30462e44043840b1f9c3664477f9e8f",
    "4e1e5fee30f6379ab217d59b080b936e6d84edc2abc1d48ced87f17503347328",
]
EXPECTED_RECOVERY = {
    _IX + "6a7a51f78b326e41ca324432477a3dc1.jsonl": "78784ece4dde1812c84680b67488d3f91883bf196b39473da015f1916fd3e686",
    _PK + "6a7a51f78b326e41ca324432477a3dc1.0.pack": "5ce980f4007fe599dd83f75396c13adc5d07656cefb8c38bcd97d0a417aae783",
    _LK + "6a7a51f78b326e41ca324432477a3dc1.lock": "214c627ff0b53b6686990163d119a191f5ff4e0ce644fc5079e326359e5123f8",
}
EXPECTED_RECOVERY_HEADS = [
    "5f8d14ee73b1430f37ca4128cd581ecae4318f4186f5d73058b853739761d075",
    "50cc91abc94bffc9637fc7e46eccbf1572552986bc58a5c9276c7f03ecbc4378",
    "50cc91abc94bffc9637fc7e46eccbf1572552986bc58a5c9276c7f03ecbc4378",
    "300ea140e1e9e4ac1dacf3d8757347a319ccfe11a18d5de39470ccb70f1e52e9",
    "6f92046f148ae379cf6ae440bb7d49fddc271a195ef1c2d6dae6637ef58fad3a",
    "27b751a3f63c90655f2fa9d8467359113fc20c19aefe312e6eff2613411016c0",
    "68a0831f15175af1213f3e519123cccad4490b2bd42954399195ecbe50f3c2a9",
    "578d9118c6719bf6a71bcb4c40380c84b5852238b691b831c61a93d79b7b88cc",
    "bf6fae84305e94df7292606e20d379f3898d39735808852840562ad54e84a404",
    "e1fca44654fb50548e61b152f112b6e694e0c10fc291a42142b8cc45f7d82085",
    "1cb102cf49bc4370d09f716939e737b9db404a8415e13ea03ab828b93c4b8414",
    "d0eccd84e4c5c889bdd599e082e45f9f9dab74eb3ebefc0dda4050180332c828",
    "aa82cde09f548e7f6cca26ec4e97460e8bf8162f8bcb49b31a6cf4f110098446",
    "d0ada6a5f3e952b7891b1b84d866f07c7e0814d66aaa9a937011c1ade61c64b0",
    "214c627ff0b53b6686990163d119a191f5ff4e0ce644fc5079e326359e5123f8",
]


def _head(held: HeldLock) -> str:
    return hashlib.sha256(os.pread(held.fd, 4096, 0)).hexdigest()


def _begin(h: History, held: HeldLock, before: bytes | None, after: bytes | None) -> PendingWrite:
    return h.begin(
        held,
        held.key,
        before=before,
        before_digest=None if before is None else content_hash(before),
        after=after,
        after_digest=None if after is None else content_hash(after),
        **FIELDS,
    )


def _write(
    h: History, locks: LockManager, key: str, before: bytes | None, after: bytes | None, heads: list[str]
) -> None:
    with locks.acquire(key) as held:
        pending = _begin(h, held, before, after)
        heads.append(_head(held))
        h.commit(held, pending)
        heads.append(_head(held))


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_on_disk_bytes_are_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("coordinator.clock._time_ns", lambda: 1_700_000_000_250_000_000)
    h, locks = History(tmp_path, fsync=False), LockManager(tmp_path / "locks")
    heads: list[str] = []
    _write(h, locks, "a.txt", None, b"one\n", heads)
    _write(h, locks, "a.txt", b"one\n", b"two\n", heads)
    _write(h, locks, "dir/b \u00e9.txt", None, b"x" * 300, heads)
    _write(h, locks, "a.txt", b"two\n", None, heads)
    h.close()
    assert _files(tmp_path) == EXPECTED
    assert heads == EXPECTED_HEADS


def test_recovery_bytes_are_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An abort, a reconcile that takes an entry back and one that confirms it, a begin that reconciles,
    an outside change kept (`keep`) and recorded (`record_kept`), a write after a torn tail, one after an
    outside change (both contents appended), one that changes nothing: every file and head record pinned."""
    monkeypatch.setattr("coordinator.clock._time_ns", lambda: 1_700_000_000_500_000_000)
    h, locks = History(tmp_path, fsync=False), LockManager(tmp_path / "locks")
    heads: list[str] = []
    one, two, three = b"one\n", b"two\n", b"three\n"
    _write(h, locks, "r.txt", None, one, heads)
    with locks.acquire("r.txt") as held:
        h.abort(held, _begin(h, held, one, two))  # the replace failed
        heads.append(_head(held))
        _begin(h, held, one, two)  # a crash before the replace: never committed
        heads.append(_head(held))
        assert h.reconcile(held, "r.txt", content_hash(one), h.read_head(held))  # taken back
        heads.append(_head(held))
        _begin(h, held, one, two)  # a crash after the replace, before the commit
        assert not h.reconcile(held, "r.txt", content_hash(two))  # confirmed
        heads.append(_head(held))
        _begin(h, held, two, three)  # never committed: the next begin reconciles it (taken back)
        h.commit(held, _begin(h, held, two, one))
        heads.append(_head(held))
        h.keep(held, "r.txt", three, content_hash(three))  # an outside program is about to write
        heads.append(_head(held))
        kept = {k: v for k, v in FIELDS.items() if k != "size_before"}
        recorded = h.record_kept(
            held, "r.txt", before_digest=content_hash(three), after=two, after_digest=content_hash(two), **kept
        )
        assert recorded is not None
        heads.append(_head(held))
    with open(h.index_path("r.txt"), "ab") as f:
        f.write(b'{"version":99,"ti')  # a torn tail (crash mid-append): the next line starts on a line of its own
    _write(h, locks, "r.txt", two, three, heads)
    _write(h, locks, "r.txt", b"outside\n", b"four\n", heads)  # a pre-image not stored yet: both in one append
    _write(h, locks, "r.txt", b"four\n", b"four\n", heads)  # the content as it was: nothing appended
    h.close()
    assert _files(tmp_path) == EXPECTED_RECOVERY
    assert heads == EXPECTED_RECOVERY_HEADS
