"""History retention: how many versions to keep, and `edit-coordinator gc`.

The history (see history.py) grows with every write: one index line per write and one content object per
distinct pre-image. Retention bounds it two ways, both configurable:

* `max_versions_per_file`: the newest N index entries of each path are kept (at least 1);
* `max_total_bytes`: the content objects may use at most this many bytes; past that, the oldest entries of
  any path are dropped, oldest first, until the objects they alone referenced fit.

Invariants, each enforced where noted:
1. The newest entry of every path is always kept (`plan`), so the latest write of every file stays undoable
   whatever the caps, and version numbers never restart (the engine numbers a write as last + 1).
2. An object referenced by a kept index entry is never deleted (`_sweep`). Writers append to an index under
   the path's lock, after storing or finding the pre-image object. So gc never deletes in one step: it moves
   unreferenced objects to a trash folder, then waits for every path lock that exists at that moment (a
   writer that saw the object before the move held its lock then, and has appended its entry once the lock
   is free), then reads every index again and puts back whatever is referenced now. Only the rest is
   deleted. Lock files are never deleted, so the barrier sees every writer.
3. An index file is rewritten only under its path's lock, by an atomic replace, and only the entries chosen
   for dropping are removed; lines it cannot parse are kept (and any hash in them counts as a reference).
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

from .errors import CoordinatorError, ErrorCode
from .history import History, HistoryEntry
from .layout import RETENTION_CONFIG, locks_dir

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

CONFIG_NAME = RETENTION_CONFIG
_HEX32 = re.compile(rb"[0-9a-f]{32}")
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
        path = Path(state_dir) / CONFIG_NAME
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
        path = Path(state_dir) / CONFIG_NAME
        tmp = path.with_name(f".{CONFIG_NAME}.{os.getpid()}.tmp")
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
# Reading the history as a whole
# ---------------------------------------------------------------------------------------------------------
@dataclass
class IndexFile:
    """One path's index: its parsed entries (oldest first) and any lines that could not be parsed."""

    file: Path
    key: str | None
    entries: list[HistoryEntry]
    unparsed: list[bytes] = field(default_factory=list)

    def references(self) -> set[str]:
        refs = {d for e in self.entries for d in (e.before, e.after) if d}
        for line in self.unparsed:
            refs.update(m.decode() for m in _HEX32.findall(line))
        return refs


def read_index_file(file: Path) -> IndexFile:
    entries: list[HistoryEntry] = []
    unparsed: list[bytes] = []
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        data = b""
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            entries.append(HistoryEntry(**json.loads(line)))
        except (ValueError, TypeError):
            unparsed.append(line)
    entries.sort(key=lambda e: e.version)
    key = entries[-1].path if entries else None
    return IndexFile(file, key, entries, unparsed)


def scan_index(history: History) -> list[IndexFile]:
    """Every path's index under `history`."""
    try:
        files = sorted(history.index.glob("*.jsonl"))
    except FileNotFoundError:
        return []
    return [read_index_file(f) for f in files]


def iter_objects(history: History) -> Iterator[tuple[str, Path, int]]:
    """(digest, path, size) of every stored object (temporaries skipped)."""
    try:
        shards = list(os.scandir(history.objects))
    except FileNotFoundError:
        return
    for shard in shards:
        if not shard.is_dir(follow_symlinks=False):
            continue
        try:
            items = list(os.scandir(shard.path))
        except FileNotFoundError:
            continue
        for item in items:
            if item.name.startswith(".") or not item.is_file(follow_symlinks=False):
                continue
            try:
                size = item.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
            yield item.name, Path(item.path), size


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
    candidates: list[tuple[float, str, HistoryEntry]] = []
    total_entries = 0
    for ix in indexes:
        if ix.key is None:
            continue
        total_entries += len(ix.entries)
        cut = max(len(ix.entries) - policy.max_versions_per_file, 0)
        for e in ix.entries[:cut]:
            drop.setdefault(ix.key, set()).add(e.version)
        kept = ix.entries[cut:]
        for e in kept:
            for d in (e.before, e.after):
                if d:
                    refcount[d] = refcount.get(d, 0) + 1
        for d in ix.references() - {d for e in ix.entries for d in (e.before, e.after) if d}:
            refcount[d] = refcount.get(d, 0) + 1  # hashes seen in unparsable lines: pinned
        candidates.extend((e.time, ix.key, e) for e in kept[:-1])
    live = sum(sizes[d] for d in refcount if d in sizes)
    candidates.sort(key=lambda c: (c[0], c[1], c[2].version))
    for _, key, e in candidates:
        if live <= policy.max_total_bytes:
            break
        drop.setdefault(key, set()).add(e.version)
        for d in (e.before, e.after):
            if not d:
                continue
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
) -> GcReport:
    """Apply the retention policy to the history in `state_dir` (see the module docstring)."""
    from .locks import LockManager

    state_dir = Path(state_dir)
    policy = policy or RetentionPolicy.load(state_dir)
    history = History(state_dir, fsync=True)
    locks = LockManager(locks_dir(state_dir), timeout=lock_timeout)
    with _gc_lock(history):
        recovered = 0 if dry_run else _recover_trash(history)
        indexes = scan_index(history)
        sizes = {d: size for d, _, size in iter_objects(history)}
        the_plan = plan(indexes, sizes, policy)
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
        if dry_run:
            planned_refs = _references_after(indexes, the_plan.drop)
            unref = [d for d in sizes if d not in planned_refs]
            report.objects_removed = len(unref)
            report.bytes_removed = sum(sizes[d] for d in unref)
            return report
        by_key = {ix.key: ix for ix in indexes if ix.key is not None}
        for key, versions in sorted(the_plan.drop.items()):
            if _rewrite_index(by_key[key].file, key, versions, locks):
                report.files_rewritten += 1
        removed, freed, restored = _sweep(history, locks_dir(state_dir), lock_timeout)
        report.objects_removed = removed
        report.bytes_removed = freed
        report.restored_after_race = restored
        return report


def _references_after(indexes: list[IndexFile], drop: dict[str, set[int]]) -> set[str]:
    refs: set[str] = set()
    for ix in indexes:
        gone = drop.get(ix.key or "", set())
        kept = [e for e in ix.entries if e.version not in gone]
        refs.update(d for e in kept for d in (e.before, e.after) if d)
        refs.update(ix.references() - {d for e in ix.entries for d in (e.before, e.after) if d})
    return refs


def _rewrite_index(file: Path, key: str, versions: set[int], locks: Any) -> bool:
    """Drop `versions` from one index, under the path's lock (invariant 3). The newest entry found under
    the lock is kept even if it was planned for dropping (invariant 1)."""
    held = locks.acquire(key)
    try:
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            return False
        lines = data.splitlines(keepends=True)
        parsed: list[tuple[bytes, int | None]] = []
        newest = 0
        for line in lines:
            try:
                v = int(json.loads(line)["version"])
            except (ValueError, KeyError, TypeError):
                v = None
            parsed.append((line, v))
            if v is not None:
                newest = max(newest, v)
        out = [line for line, v in parsed if v is None or v == newest or v not in versions]
        if len(out) == len(lines):
            return False
        body = b"".join(out)
        if body and not body.endswith(b"\n"):
            body += b"\n"
        tmp = file.with_name(f".{file.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, file)
        return True
    finally:
        held.release()


def _all_references(history: History) -> set[str]:
    refs: set[str] = set()
    for ix in scan_index(history):
        refs |= ix.references()
    return refs


def _sweep(history: History, lock_dir: Path, lock_timeout: float) -> tuple[int, int, int]:
    """Delete objects that no index references (invariant 2). Returns (removed, bytes freed, restored)."""
    referenced = _all_references(history)
    doomed = [(d, p, s) for d, p, s in iter_objects(history) if d not in referenced]
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
    referenced = _all_references(history)
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


def history_usage(state_dir: Path) -> dict[str, int]:
    """Objects, bytes and index files of the history (for status displays)."""
    history = History(Path(state_dir), fsync=False)
    n = size = 0
    for _, _, s in iter_objects(history):
        n += 1
        size += s
    try:
        files = sum(1 for _ in history.index.glob("*.jsonl"))
    except FileNotFoundError:
        files = 0
    return {"objects": n, "bytes": size, "index_files": files}
