"""History retention: how many versions to keep, and `edit-coordinator gc`.

The history (see history.py) grows with every write: one index line per write and one content object per
distinct pre-image. Retention bounds it two ways, both configurable:

* `max_versions_per_file`: the newest N index entries of each path are kept (at least 1);
* `max_total_bytes`: the content objects may use at most this many bytes; past that, the oldest entries of
  any path are dropped, oldest first, until the objects they alone referenced fit.

The history's format (per-path index and pack, and the earlier loose objects) belongs to history.py; this
module decides what to keep and asks it to rewrite. Each path is rewritten under its own lock: the dropped
entries go, the pack is compacted to the contents the kept entries refer to (loose objects of the earlier
format move in), and an entry whose replace never happened (a writer killed in between) is taken back.

Invariants, each enforced where noted:
1. The newest entry of every path is always kept (`plan`), so the latest write of every file stays undoable
   whatever the caps, and version numbers never restart (the engine numbers a write as last + 1).
2. A content referenced by a kept index entry is never deleted: packed ones are copied into the new pack
   under the path's lock (history.History.rewrite); loose ones are swept by `_sweep`. Writers append to an index under
   the path's lock, after storing or finding the pre-image object. So gc never deletes in one step: it moves
   unreferenced objects to a trash folder, then waits for every path lock that exists at that moment (a
   writer that saw the object before the move held its lock then, and has appended its entry once the lock
   is free), then reads every index again and puts back whatever is referenced now. Only the rest is
   deleted. Lock files are never deleted, so the barrier sees every writer.
3. An index file is rewritten only under its path's lock, by an atomic replace, and only the entries chosen
   for dropping (and entries never applied) are removed; lines it cannot parse are kept (and any hash in
   them counts as a reference).
4. One gc at a time (`history/gc.lock`); a gc that died mid-sweep leaves a trash folder that the next one
   restores first.

Configuration: `<state dir>/retention.json` (`{"max_versions_per_file": 200, "max_total_bytes": 536870912}`),
overridden by `edit-coordinator gc --keep-versions N --max-bytes SIZE` (`--save` writes the file).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from coordinator.disk import fsio
from coordinator.disk.layout import locks_dir, retention_config
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.history import History, HistoryEntry, IndexFile, content_hash

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1024 * GiB}


@dataclass(frozen=True)
class RetentionPolicy:
    max_versions_per_file: int = 200
    max_total_bytes: int = 512 * MiB

    def __post_init__(self) -> None:
        if self.max_versions_per_file < 1:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT,
                "max_versions_per_file must be at least 1 (the newest version of a file is always kept).",
            )
        if self.max_total_bytes < 0:
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "max_total_bytes must be 0 or more.")

    @classmethod
    def load(cls, state_dir: Path) -> RetentionPolicy:
        """The policy in `<state_dir>/retention.json`, or the defaults."""
        path = retention_config(state_dir)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT, f"{path} is not valid JSON ({exc}); fix or remove it."
            ) from exc
        if not isinstance(raw, dict):
            raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{path} must hold a JSON object.")
        known = {"max_versions_per_file", "max_total_bytes"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise CoordinatorError(
                ErrorCode.INVALID_ARGUMENT, f"{path}: unknown settings {unknown}; known: {sorted(known)}."
            )
        kwargs: dict[str, int] = {}
        for k, v in raw.items():
            if k == "max_total_bytes" and isinstance(v, str):
                v = parse_size(v)
            if isinstance(v, bool) or not isinstance(v, int):
                raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, f"{path}: {k} must be a whole number.")
            kwargs[k] = v
        return cls(**kwargs)

    def save(self, state_dir: Path) -> Path:
        path = retention_config(state_dir)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path


def parse_size(text: str) -> int:
    """'512M', '1.5GiB', '1000000' -> bytes (binary units)."""
    m = _SIZE.match(text)
    if not m:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT, f"{text!r} is not a size; use e.g. 500M, 2G or a number of bytes."
        )
    unit = (m.group(2) or "").lower().replace("i", "").rstrip("b") or ""
    return int(float(m.group(1)) * _UNITS[unit])


def format_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


# ---------------------------------------------------------------------------------------------------------
# Reading the history as a whole (through history.py, the owner of the format)
# ---------------------------------------------------------------------------------------------------------
def _object_ids(ix: IndexFile) -> dict[int, list[str]]:
    """Each entry's stored contents as object ids, by version: `<path hash>:<digest>` for a content in the
    path's pack, the bare digest for an earlier version's loose object."""
    packed = ix.packed_sizes()
    out: dict[int, list[str]] = {}
    for e in ix.entries:
        out[e.version] = [f"{ix.name}:{d}" if d in packed else d for d in (e.before, e.after) if d]
    return out


def object_sizes(history: History, indexes: list[IndexFile]) -> dict[str, int]:
    """Every stored content by object id (see `_object_ids`), with its size."""
    sizes = {f"{ix.name}:{d}": n for ix in indexes for d, n in ix.packed_sizes().items()}
    sizes.update((d, size) for d, _, size in history.iter_loose())
    return sizes


# ---------------------------------------------------------------------------------------------------------
# Planning (no side effects)
# ---------------------------------------------------------------------------------------------------------
@dataclass
class GcPlan:
    drop: dict[str, set[int]]  # path key -> versions to drop
    entries_total: int
    entries_dropped: int
    objects_total: int
    bytes_total: int
    bytes_after: int  # referenced bytes left once the plan is applied
    over_budget: bool  # the byte cap cannot be met without dropping a file's newest entry


def plan(indexes: list[IndexFile], sizes: dict[str, int], policy: RetentionPolicy) -> GcPlan:
    """Which entries to drop. Invariant 1: the newest entry of each path is never chosen."""
    drop: dict[str, set[int]] = {}
    refcount: dict[str, int] = {}
    candidates: list[tuple[float, str, HistoryEntry, list[str]]] = []
    total_entries = 0
    for ix in indexes:
        if ix.key is None:
            continue
        ids = _object_ids(ix)
        total_entries += len(ix.entries)
        cut = max(len(ix.entries) - policy.max_versions_per_file, 0)
        for e in ix.entries[:cut]:
            drop.setdefault(ix.key, set()).add(e.version)
        kept = ix.entries[cut:]
        for e in kept:
            for d in ids[e.version]:
                refcount[d] = refcount.get(d, 0) + 1
        for d in ix.references() - {d for e in ix.entries for d in (e.before, e.after) if d}:
            refcount[d] = refcount.get(d, 0) + 1  # hashes seen in unparsable lines: pinned
        candidates.extend((e.time, ix.key, e, ids[e.version]) for e in kept[:-1])
    live = sum(sizes[d] for d in refcount if d in sizes)
    candidates.sort(key=lambda c: (c[0], c[1], c[2].version))
    for _, key, e, refs in candidates:
        if live <= policy.max_total_bytes:
            break
        drop.setdefault(key, set()).add(e.version)
        for d in refs:
            refcount[d] -= 1
            if refcount[d] == 0:
                del refcount[d]
                live -= sizes.get(d, 0)
    return GcPlan(
        drop=drop,
        entries_total=total_entries,
        entries_dropped=sum(len(v) for v in drop.values()),
        objects_total=len(sizes),
        bytes_total=sum(sizes.values()),
        bytes_after=live,
        over_budget=live > policy.max_total_bytes,
    )


# ---------------------------------------------------------------------------------------------------------
# Applying
# ---------------------------------------------------------------------------------------------------------
@dataclass
class GcReport:
    dry_run: bool
    policy: dict[str, int]
    entries_total: int
    entries_dropped: int
    files_rewritten: int
    objects_total: int
    bytes_total: int
    objects_removed: int
    bytes_removed: int
    bytes_after: int
    over_budget: bool
    restored_after_race: int = 0
    not_applied_taken_back: int = 0  # entries whose replace never happened (a crash in between)
    recovered_from_earlier_run: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextlib.contextmanager
def _gc_lock(history: History) -> Iterator[None]:
    fd = os.open(history.base / "gc.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CoordinatorError(
                ErrorCode.LOCK_TIMEOUT, "Another gc of this history is running; wait for it to finish."
            ) from None
        yield
    finally:
        os.close(fd)


def collect(
    state_dir: Path,
    policy: RetentionPolicy | None = None,
    *,
    dry_run: bool = False,
    lock_timeout: float = 10.0,
    root: Path | str | None = None,
) -> GcReport:
    """Apply the retention policy to the history in `state_dir` (see the module docstring). `root` is the
    repository the history belongs to (default: the state folder's parent), read to reconcile entries."""
    from coordinator.disk.locks import LockManager

    state_dir = Path(state_dir)
    policy = policy or RetentionPolicy.load(state_dir)
    history = History(state_dir, fsync=True)
    locks = LockManager(locks_dir(state_dir), timeout=lock_timeout)
    with _gc_lock(history):
        recovered = 0 if dry_run else _recover_trash(history)
        indexes = list(history.scan())
        sizes = object_sizes(history, indexes)
        the_plan = plan(indexes, sizes, policy)
        report = _report(dry_run, policy, the_plan, recovered)
        if dry_run:
            planned = _references_after(indexes, the_plan.drop)
            unref = [d for d in sizes if d not in planned]
            report.objects_removed = len(unref)
            report.bytes_removed = sum(sizes[d] for d in unref)
            return report
        packed_before = {k: v for k, v in sizes.items() if ":" in k}
        real_root = str(root) if root is not None else os.path.realpath(state_dir.parent)
        for ix in indexes:
            if ix.key is None:
                continue
            changed, taken_back = _rewrite_index(history, locks, ix.key, the_plan.drop.get(ix.key, set()), real_root)
            report.files_rewritten += int(changed)
            report.not_applied_taken_back += taken_back
        packed_after = object_sizes(history, list(history.scan()))
        gone = [k for k in packed_before if k not in packed_after]
        removed, freed, restored = _sweep(history, locks_dir(state_dir), lock_timeout)
        for orphan in history.orphan_packs():
            with contextlib.suppress(OSError):
                orphan.unlink()
        report.objects_removed = removed + len(gone)
        report.bytes_removed = freed + sum(packed_before[k] for k in gone)
        report.restored_after_race = restored
        return report


def _report(dry_run: bool, policy: RetentionPolicy, the_plan: GcPlan, recovered: int) -> GcReport:
    report = GcReport(
        dry_run=dry_run,
        policy=asdict(policy),
        entries_total=the_plan.entries_total,
        entries_dropped=the_plan.entries_dropped,
        files_rewritten=0,
        objects_total=the_plan.objects_total,
        bytes_total=the_plan.bytes_total,
        objects_removed=0,
        bytes_removed=0,
        bytes_after=the_plan.bytes_after,
        over_budget=the_plan.over_budget,
        recovered_from_earlier_run=recovered,
    )
    if the_plan.over_budget:
        report.notes.append(
            f"The newest versions alone use {format_size(the_plan.bytes_after)}, more than the cap of "
            f"{format_size(policy.max_total_bytes)}: the newest version of every file is always kept."
        )
    return report


def _references_after(indexes: list[IndexFile], drop: dict[str, set[int]]) -> set[str]:
    refs: set[str] = set()
    for ix in indexes:
        gone = drop.get(ix.key or "", set())
        newest = ix.entries[-1].version if ix.entries else None
        ids = _object_ids(ix)
        for e in ix.entries:
            if e.version == newest or e.version not in gone:
                refs.update(ids[e.version])
        refs.update(ix.references() - {d for e in ix.entries for d in (e.before, e.after) if d})
    return refs


def _rewrite_index(history: History, locks: Any, key: str, versions: set[int], root: str) -> tuple[bool, int]:
    """Drop `versions` of one path and compact its pack, under the path's lock (invariant 3); entries whose
    replace never happened are taken back on the way. Returns (changed, entries taken back)."""
    held = locks.acquire(key)
    try:
        return history.rewrite(held, key, versions, lambda: _current_digest(root, key))
    finally:
        held.release()


def read_on_disk(root: str, key: str) -> bytes | None:
    """`key`'s bytes on disk now, read without locks or Redis; None when there is no such file (or folder on
    the way). CoordinatorError when it cannot be read (outside the root, not a regular file, ...)."""
    try:
        rp = fsio.resolve(root, key)
        dfd = fsio.open_parent(rp, root)
    except CoordinatorError as exc:
        if exc.code == ErrorCode.FILE_NOT_FOUND:
            return None
        raise
    try:
        found = fsio.read_at(dfd, rp, 1 << 40)
    finally:
        os.close(dfd)
    return None if found is None else found[0]


def _current_digest(root: str, key: str) -> str | bool | None:
    """The hash of `key`'s bytes on disk (None: no file); False when they cannot be read (then nothing is
    decided from them)."""
    try:
        data = read_on_disk(root, key)
    except CoordinatorError:
        return False
    return None if data is None else content_hash(data)


def settle(state_dir: Path, key: str, root: Path | str | None = None, locks: Any = None) -> bool:
    """Reconcile `key`'s newest history entry with the file (history.py, invariant 3) so that a listing
    shows only versions that reached the file. Takes the path's lock (waits for a write in flight); reads
    the file only when an entry is pending. True if an entry was taken back. Best effort, for listings: a
    lock that cannot be had (busy for the whole timeout, or not openable) leaves the entry as it is."""
    from coordinator.disk.locks import LockManager

    state_dir = Path(state_dir)
    history = History(state_dir, fsync=False)
    locks = locks or LockManager(locks_dir(state_dir))
    real_root = str(root) if root is not None else os.path.realpath(state_dir.parent)
    try:
        held = locks.acquire(key)
    except CoordinatorError:
        history.close()
        return False
    try:
        if not history.pending(held):
            return False
        digest = _current_digest(real_root, key)
        if digest is False:
            return False
        return history.reconcile(held, key, digest if isinstance(digest, str) else None)
    finally:
        held.release()
        history.close()


def _loose_references(history: History) -> set[str]:
    refs: set[str] = set()
    for ix in history.scan():
        refs |= ix.loose_references()
    return refs


def _sweep(history: History, lock_dir: Path, lock_timeout: float) -> tuple[int, int, int]:
    """Delete loose objects (the earlier format) that no index references (invariant 2). Returns (removed,
    bytes freed, restored)."""
    referenced = _loose_references(history)
    doomed = [(d, p, s) for d, p, s in history.iter_loose() if d not in referenced]
    if not doomed:
        return 0, 0, 0
    trash = history.base / "trash" / f"{os.getpid()}-{secrets.token_hex(4)}"
    trash.mkdir(parents=True)
    moved: list[tuple[str, int]] = []
    for digest, path, size in doomed:
        try:
            os.replace(path, trash / digest)
            moved.append((digest, size))
        except FileNotFoundError:
            continue
    try:
        _lock_barrier(lock_dir, lock_timeout)
    except CoordinatorError:
        _restore_all(history, trash)
        raise
    referenced = _loose_references(history)
    removed = freed = restored = 0
    for digest, size in moved:
        src = trash / digest
        if digest in referenced:
            _put_back(history, src, digest)
            restored += 1
        else:
            src.unlink()
            removed += 1
            freed += size
    with contextlib.suppress(OSError):
        trash.rmdir()
    return removed, freed, restored


def _lock_barrier(lock_dir: Path, timeout: float) -> None:
    """Wait until every path lock that exists now has been free at least once (shared probe, so writers
    wait on us for microseconds at most)."""
    try:
        names = [n for n in os.listdir(lock_dir) if n.endswith(".lock")]
    except FileNotFoundError:
        return
    for name in names:
        try:
            fd = os.open(lock_dir / name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            continue
        try:
            deadline = time.monotonic() + timeout
            delay = 0.0005
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise CoordinatorError(
                            ErrorCode.LOCK_TIMEOUT,
                            f"A file lock ({name}) stayed held for over {timeout:g} s during gc; nothing was "
                            "deleted. Run gc again later.",
                        ) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
        finally:
            os.close(fd)


def _put_back(history: History, src: Path, digest: str) -> None:
    dest = history.object_path(digest)
    dest.parent.mkdir(exist_ok=True)
    try:
        os.link(src, dest)
    except FileExistsError:
        pass  # stored again meanwhile by a writer: the same bytes (content-addressed)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
    src.unlink()


def _restore_all(history: History, trash: Path) -> int:
    n = 0
    for item in list(trash.iterdir()):
        _put_back(history, item, item.name)
        n += 1
    with contextlib.suppress(OSError):
        trash.rmdir()
    return n


def _recover_trash(history: History) -> int:
    """Put back every object left in the trash by a gc that did not finish (invariant 4)."""
    base = history.base / "trash"
    if not base.is_dir():
        return 0
    return sum(_restore_all(history, d) for d in base.iterdir() if d.is_dir())
