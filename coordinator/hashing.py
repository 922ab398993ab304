"""The package's hashes of names, one owner each (the content hash of a file is the engine's, XXH3-128).

- `path_hash`: XXH3-64 hex of a key, for short names: a session's registry shard in Redis, the legacy
  repository id of a state folder.
- `file_stem`: XXH3-128 hex of a path key, the file name stem of its history index, pack and lock file.
"""

from __future__ import annotations

import xxhash


def path_hash(key: str) -> str:
    """XXH3-64 of `key` (UTF-8, lone surrogates kept) as 16 hex digits."""
    return xxhash.xxh3_64_hexdigest(key.encode("utf-8", "surrogateescape"))


def file_stem(key: str) -> str:
    """XXH3-128 of a path key as 32 hex digits: the file name stem for that path (index, pack, lock file)."""
    return xxhash.xxh3_128_hexdigest(key.encode("utf-8", "surrogateescape"))
