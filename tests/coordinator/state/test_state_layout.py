"""The read state's layout in Redis: compact keys and values, one slot per path, both packings readable."""

from __future__ import annotations

import re
import struct

import fakeredis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.state.views import KIND_READ, KIND_WRITE, ReadState, StateStore, _unpack, short_hash

NS = "6ff1d8498798404796194c02b491bc69"  # a repository id as layout.namespace_for makes them
DIGEST = "0123456789abcdef0123456789abcdef"


def _store(ns: str = NS) -> StateStore:
    return StateStore(fakeredis.FakeRedis(), namespace=ns)  # key names need no real server


def _slot_tag(key: str) -> str:
    found = re.search(r"\{([^}]*)\}", key)
    assert found is not None, key
    return found.group(1)


def test_a_whole_file_view_packs_into_an_embedded_string() -> None:
    rs = ReadState(DIGEST, 1_796_153_064_804_000_000, 1789, 0, 0, 1796153064.25, KIND_WRITE)
    packed = rs.pack()
    assert len(packed) == 41  # Redis embeds strings of up to 44 bytes with their header
    assert ReadState.unpack(packed) == rs


def test_a_partial_view_keeps_its_offset_and_limit() -> None:
    rs = ReadState(DIGEST, 5, 1789, 120, 40, 17.5, KIND_READ)
    packed = rs.pack()
    assert len(packed) == 49
    assert ReadState.unpack(packed) == rs


def test_a_whole_file_view_in_the_earlier_packing_still_reads() -> None:
    earlier = struct.Struct("<16sqqiidc").pack(bytes.fromhex(DIGEST), 5, 9, 0, 0, 3.0, KIND_READ)
    assert ReadState.unpack(earlier) == ReadState(DIGEST, 5, 9, 0, 0, 3.0, KIND_READ)


@pytest.mark.parametrize("raw", [b"", b"x" * 40, b"x" * 42, b"x" * 50])
def test_a_value_of_any_other_length_counts_as_never_read(raw: bytes) -> None:
    assert _unpack(raw) is None


@given(
    mtime=st.integers(min_value=0, max_value=2**63 - 1),
    size=st.integers(min_value=0, max_value=2**63 - 1),
    offset=st.integers(min_value=0, max_value=2**31 - 1),
    limit=st.integers(min_value=0, max_value=2**31 - 1),
    when=st.floats(allow_nan=False, allow_infinity=False),
    kind=st.sampled_from([KIND_READ, KIND_WRITE]),
)
def test_every_view_round_trips(mtime: int, size: int, offset: int, limit: int, when: float, kind: bytes) -> None:
    rs = ReadState(DIGEST, mtime, size, offset, limit, when, kind)
    assert ReadState.unpack(rs.pack()) == rs


def test_a_view_key_fits_the_allocators_48_byte_class() -> None:
    key = _store().rs_key("preload-00000", "src/pkg3/module_37.py")
    assert len(key) == 44  # sds header + key + NUL = 48 bytes
    assert key.startswith("ec:{") and key.endswith("}:r:preload-00000")


def test_a_paths_view_keys_and_head_share_one_slot() -> None:
    store = _store()
    path = "src/a.py"
    tags = {_slot_tag(store.rs_key(s, path)) for s in ("alice", "bob")} | {_slot_tag(store.meta_key(path))}
    assert len(tags) == 1
    assert _slot_tag(store.meta_key("src/b.py")) not in tags


def test_repositories_sharing_a_server_get_apart_keys() -> None:
    path = "README.md"
    assert _store(NS).rs_key("s", path) != _store("f" * 32).rs_key("s", path)
    assert _store(NS).meta_key(path) != _store("f" * 32).meta_key(path)


def test_short_hash_is_eleven_url_safe_characters() -> None:
    names = ["", "a", "src/é.py", "odd\udcff.txt", "x" * 10_000]
    hashes = {short_hash(n) for n in names}
    assert len(hashes) == len(names)
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{11}", h) for h in hashes)
