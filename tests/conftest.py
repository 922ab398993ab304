from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest

from coordinator import Coordinator


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    return r


@pytest.fixture
def coord(root: Path) -> Iterator[Coordinator]:
    """A coordinator on fakeredis: fast, single-process unit tests only."""
    c = Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none")
    yield c
    c.close()


@pytest.fixture
def real_redis_root(tmp_path: Path) -> Iterator[Path]:
    """A repository root whose embedded (real) Redis server is stopped at the end."""
    from coordinator.embedded import stop_embedded_redis

    r = tmp_path / "repo"
    r.mkdir()
    yield r
    stop_embedded_redis(r / ".edit-coordinator")


def write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def touch_later(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns + 5_000_000_000, st.st_mtime_ns + 5_000_000_000))
