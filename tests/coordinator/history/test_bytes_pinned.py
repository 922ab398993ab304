"""The files a few writes leave on disk (index lines, packs, head record) are pinned byte for byte.

The expected digests were taken from the format as it stood before the write path was made cheaper; any change
to an index line, a pack record or the head record fails here, so "byte-identical" is checked, not promised.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from coordinator.disk.locks import LockManager
from coordinator.history import History, content_hash

FIELDS = {"session": "s", "operation": "write", "size_before": 0, "size_after": 0, "first_line": 1, "last_line": 1}
_IX, _PK = "history/index/", "history/packs/"
EXPECTED: dict[str, str] = {
    _IX + "5e009c4ac9085a494697bfed4f1efbad.jsonl": "9733a66f76be82778a750a18b52706a47f1cd46d6dc5dbe15c58f7a817c1eba1",
    _IX + "b3328de7e0d84c8fdd7583f8271dde87.jsonl": "587aa5413e9206d81d86c2c9bb2155d115181557764b991194e01f532c302d12",
    _PK + "5e009c4ac9085a494697bfed4f1efbad.0.pack": "1cfc94862de79be0b6f579b7a9f6f5c31919653b93287be4dca8d3a1b583e16c",
    _PK + "b3328de7e0d84c8fdd7583f8271dde87.0.pack": "5605822a6cc3f6e0b9352546b3a197b14195af671c2025acbd14482d4eb0d810",
}


def _write(h: History, locks: LockManager, key: str, before: bytes | None, after: bytes | None) -> None:
    with locks.acquire(key) as held:
        pending = h.begin(
            held,
            key,
            before=before,
            before_digest=None if before is None else content_hash(before),
            after=after,
            after_digest=None if after is None else content_hash(after),
            **FIELDS,
        )
        h.commit(held, pending)


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "locks" not in p.parts
    }


def test_on_disk_bytes_are_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("coordinator.history._store.time.time", lambda: 1700000000.25)
    h, locks = History(tmp_path, fsync=False), LockManager(tmp_path / "locks")
    _write(h, locks, "a.txt", None, b"one\n")
    _write(h, locks, "a.txt", b"one\n", b"two\n")
    _write(h, locks, "dir/b \u00e9.txt", None, b"x" * 300)
    _write(h, locks, "a.txt", b"two\n", None)
    h.close()
    assert _files(tmp_path) == EXPECTED
