"""The gc rewrite of one path's index and pack, under its lock (see __init__, invariant 5)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator.hashing import file_stem
from coordinator.history._format import (
    _PACK_HEADER,
    _PACK_MAGIC,
    FORMAT,
    IndexFile,
    Loc,
    LockFile,
    _Head,
    _Line,
    _line_bytes,
    _pread_file,
    _write_file,
    content_hash,
)


class _Rewrite:
    """History methods for gc (mixed into History).

    What it uses of History is declared here for the type checker, with annotations only (the methods
    under TYPE_CHECKING): nothing is added at run time, and History's own definitions are checked against
    these signatures."""

    packs: Path
    _locs: dict[tuple[str, str], tuple[int, Loc]]

    if TYPE_CHECKING:

        def _reconcile(self, held: LockFile, key: str, head: _Head, current: str | None) -> bool: ...

        def read_index(self, name: str) -> IndexFile: ...

        def scan(self) -> Iterator[IndexFile]: ...

        def object_path(self, digest: str) -> Path: ...

        def _index_file(self, name: str) -> str: ...

        def _pack_file(self, name: str, gen: int) -> str: ...

    def rewrite(
        self, held: LockFile, key: str, drop: set[int], current: Callable[[], str | bool | None]
    ) -> tuple[bool, int]:
        """Under `key`'s lock: reconcile, drop the `drop` versions (never the newest), and compact the pack
        to the contents the kept entries refer to (moving earlier loose objects in). `current()` gives the
        hash of the file's bytes (None: no file; False: unreadable, then nothing is taken back). Returns
        (whether the index changed, versions taken back as never applied). Invariant 5."""
        head = _Head.read(held)
        taken_back = 0
        if head.counter > head.applied:
            digest = current()
            if digest is not False:
                taken_back = int(self._reconcile(held, key, head, digest if isinstance(digest, str) else None))
        name = file_stem(key)
        ix = self.read_index(name)
        if not ix.lines:
            return False, taken_back
        newest = ix.lines[-1].entry.version
        kept = [ln for ln in ix.lines if ln.entry.version == newest or ln.entry.version not in drop]
        if len(kept) == len(ix.lines) and not any(self._loose_only(ln) for ln in kept):
            return False, taken_back
        head = _Head.read(held)
        gen = max(head.generation, ix.generation) + 1
        body, relocated, placed = self._compact(key, ix, kept)
        pack_tmp = self._pack_file(name, gen) + f".{secrets.token_hex(4)}.tmp"
        _write_file(pack_tmp, b"".join(body))
        os.replace(pack_tmp, self._pack_file(name, gen))
        head.generation = gen  # before the index names it: writers elsewhere reopen (invariant 5)
        head.at = placed.get(head.digest or "")
        head.write(held)
        lines = [json.dumps({"format": FORMAT, "pack": gen}, separators=(",", ":")).encode()]
        lines += [_line_bytes(ln.entry, *relocated[ln.entry.version]) for ln in kept]
        lines += ix.unparsed
        index_tmp = self._index_file(name) + f".{secrets.token_hex(4)}.tmp"
        _write_file(index_tmp, b"\n".join(lines) + b"\n")
        os.replace(index_tmp, self._index_file(name))
        if ix.generation != gen:
            with contextlib.suppress(OSError):
                os.unlink(self._pack_file(name, ix.generation))
        self._locs = {k: v for k, v in self._locs.items() if k[0] != key}
        return True, taken_back

    def _loose_only(self, ln: _Line) -> bool:
        """An entry whose content is stored only as an earlier version's loose object (to move in)."""
        pairs = ((ln.entry.before, ln.before_at), (ln.entry.after, ln.after_at))
        return any(d is not None and at is None and self.object_path(d).is_file() for d, at in pairs)

    def _compact(
        self, key: str, ix: IndexFile, kept: list[_Line]
    ) -> tuple[list[bytes], dict[int, tuple[Loc | None, Loc | None]], dict[str, Loc]]:
        body: list[bytes] = []
        placed: dict[str, Loc] = {}
        pos = 0
        relocated: dict[int, tuple[Loc | None, Loc | None]] = {}
        for ln in kept:
            locs: list[Loc | None] = []
            for d, at in ((ln.entry.before, ln.before_at), (ln.entry.after, ln.after_at)):
                if d is None:
                    locs.append(None)
                    continue
                if d not in placed:
                    data = self._read_for_compaction(key, ix.generation, d, at)
                    if data is None:
                        locs.append(None)  # gone already: the entry stays, its content cannot be loaded
                        continue
                    body.append(_PACK_HEADER.pack(_PACK_MAGIC, bytes.fromhex(d), len(data)))
                    body.append(data)
                    placed[d] = (pos + _PACK_HEADER.size, len(data))
                    pos += _PACK_HEADER.size + len(data)
                locs.append(placed[d])
            relocated[ln.entry.version] = (locs[0], locs[1])
        return body, relocated, placed

    def _read_for_compaction(self, key: str, gen: int, digest: str, at: Loc | None) -> bytes | None:
        if at is not None:
            data = _pread_file(self._pack_file(file_stem(key), gen), at)
            if data is not None and content_hash(data) == digest:
                return data
        try:
            data = self.object_path(digest).read_bytes()
        except OSError:
            return None
        return data if content_hash(data) == digest else None

    def orphan_packs(self) -> list[Path]:
        """Packs of an earlier generation than their index names (left by a gc that died between its
        steps, or kept open by a reader). A pack whose index does not exist is left alone (a writer may be
        creating both right now)."""
        gens = {ix.name: ix.generation for ix in self.scan()}
        out: list[Path] = []
        try:
            names = os.listdir(self.packs)
        except FileNotFoundError:
            return []
        for n in names:
            stem, _, rest = n.partition(".")
            gen = rest[: -len(".pack")] if rest.endswith(".pack") else ""
            if stem in gens and gen.isdigit() and int(gen) != gens[stem]:
                out.append(self.packs / n)
        return out
