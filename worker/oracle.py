"""The oracle: judges a finished fleet run from its records and the final bytes on disk, never from the
system under test.

Every acknowledged change must be in the final files, nothing may be there that no session intended, and
every file (and every sampled read) must be exactly one of the versions some intended change produced, or
the original. A change whose worker was killed during the call ("in flight") may be present or absent.

`verify(run)` judges a `worker.fleet.FleetRun`; `judge_counts` judges counters files against acknowledged
increments counted by any other harness (the benchmarks' bare loop and asyncio scenario), with the same
rule. `worker.fleet` re-exports every name here, so the old import paths keep working.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.errors import CoordinatorError, ErrorCode
from worker.agent import TAG_RE, content_hash, parse_counters, parse_hot
from worker.client import FileClient

if TYPE_CHECKING:
    from worker.fleet import FleetRun

MUTATING_OPS = frozenset({"increment", "insert", "replace", "delete", "write", "create"})
TAGGED_OPS = frozenset({"insert", "replace", "write", "create"})


# ---------------------------------------------------------------------------------------------------------
# Operations: intents paired with outcomes
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Op:
    session: str
    seq: int
    change_id: int
    slot: str | None
    file: str
    op: str
    t: float
    expected: str | None
    tag: str | None
    gone: str | None
    value: int | None
    code: str | None = None  # None: in flight when its worker died
    latency_s: float | None = None
    lock_wait_s: float | None = None
    lock_hold_s: float | None = None
    mismatch: str | None = None
    rebased_to: str | None = None  # policy rebase: the version the carried-over edit produced
    t_end: float | None = None


def pair_ops(records: Iterable[dict[str, Any]]) -> tuple[list[Op], list[dict[str, Any]]]:
    """Intents matched with their outcomes, and the read records."""
    ops: dict[tuple[str, int], Op] = {}
    reads: list[dict[str, Any]] = []
    outcomes: list[dict[str, Any]] = []
    for r in records:
        k = r.get("k")
        if k == "i":
            ops[(r["s"], r["n"])] = Op(
                r["s"], r["n"], r.get("cid", 0), r.get("slot"), r["f"], r["op"], r["t"],
                r.get("x"), r.get("m"), r.get("g"), r.get("v"),
            )  # fmt: skip
        elif k == "o":
            outcomes.append(r)
        elif k == "r":
            reads.append(r)
    for r in outcomes:
        op = ops.get((r["s"], r["n"]))
        if op is None:
            continue
        op.code = r["c"]
        op.latency_s = r.get("lat")
        op.lock_wait_s = r.get("w")
        op.lock_hold_s = r.get("h")
        op.mismatch = r.get("xm")
        op.rebased_to = r.get("rb")
        op.t_end = r.get("t")
    return sorted(ops.values(), key=lambda o: o.t), reads


# ---------------------------------------------------------------------------------------------------------
# The oracle
# ---------------------------------------------------------------------------------------------------------
@dataclass
class OracleReport:
    ok: bool = True
    lost_updates: int = 0  # acknowledged changes missing from the final files
    torn_files: list[str] = field(default_factory=list)  # final files that are no whole version
    torn_reads: int = 0  # sampled reads that were no whole version
    phantom_writes: int = 0  # changes present that no session made, or that were refused
    mismatches: int = 0  # the engine wrote other bytes than the change computed
    in_flight: int = 0  # calls cut short by a kill (allowed either way)
    in_flight_landed: int = 0  # of those, how many are in the files (counters / hot-line: the surplus)
    verified: int = 0  # acknowledged changes checked
    locks_left_held: int = 0
    stale_temp_files: list[str] = field(default_factory=list)
    redis_windows: int = 0
    written_while_down: list[str] = field(default_factory=list)
    acked_while_down: int = 0
    refused_while_down: int = 0
    history_entries: int = 0  # versions the history lists for the run's files (check_history)
    history_unreal: int = 0  # of those, versions that never reached the file (the chain is broken there)
    undo_checked: int = 0  # files whose newest version was undone (and redone) at the end
    undo_failed: int = 0  # of those, undos or redos that were refused or gave other bytes than the history's
    details: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.ok = False
        if len(self.details) < 25:
            self.details.append(message)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def local_reader(root: str | os.PathLike[str]) -> Callable[[str], bytes | None]:
    def read(rel: str) -> bytes | None:
        try:
            return Path(root, rel).read_bytes()
        except FileNotFoundError:
            return None

    return read


def client_reader(client: FileClient, session: str = "oracle") -> Callable[[str], bytes | None]:
    """Reads final files through a client (for a remote service); the text is encoded back as UTF-8."""

    def read(rel: str) -> bytes | None:
        try:
            return client.read(session, rel, offset=None, limit=10**7).content.encode("utf-8")
        except CoordinatorError as exc:
            if exc.code == ErrorCode.FILE_NOT_FOUND:
                return None
            raise

    return read


def verify(
    run: FleetRun, read: Callable[[str], bytes | None] | None = None, check_versions: bool | None = None
) -> OracleReport:
    """Judge a finished run against the final files (read with `read`; default: from the local root).

    check_versions: require every final file and every sample to be a version some intent produced (or the
    original); default: on for the coordinator clients, off for the unsafe baseline, whose writes are not
    the changes the agents computed.
    """
    cfg = run.config
    read = read or local_reader(cfg.root)
    if check_versions is None:
        check_versions = not cfg.client.unsafe
    rep = OracleReport()
    ops, _ = pair_ops(run.records)
    ops = [o for o in ops if o.op in MUTATING_OPS]
    rep.in_flight = sum(1 for o in ops if o.code is None)
    if check_versions:
        rep.mismatches = sum(1 for o in ops if o.mismatch)
        if rep.mismatches:
            rep.fail(f"{rep.mismatches} changes were written with other bytes than the change computed")
    for err in run.worker_errors:
        rep.fail("worker error: " + err.strip().splitlines()[-1] if err.strip() else "worker error")

    created = sorted({o.file for o in ops if o.op == "create" and o.code in ("ok", None)})
    final = {rel: read(rel) for rel in [*cfg.corpus.files, *created]}
    if check_versions:
        _verify_whole_versions(rep, run, ops, final)
    else:
        rep.torn_reads = run.torn_reads
    if rep.torn_reads:
        rep.fail(f"{rep.torn_reads} sampled reads saw a file that was no whole version")

    workload = cfg.corpus.workload
    if workload == "counters":
        _verify_counters(rep, ops, final)
    elif workload == "hot-line":
        _verify_hot(rep, ops, final)
    else:
        _verify_tags(rep, ops, final)
    _verify_events(rep, run, ops)
    return rep


def _known_versions(run: FleetRun, ops: list[Op]) -> tuple[dict[str, set[str]], set[str]]:
    """Per file, the hashes of every whole version some change may have produced (the original included),
    and the files whose versions cannot be known (a change with no expected result)."""
    known: dict[str, set[str]] = defaultdict(set)
    for rel, h in run.config.corpus.original.items():
        known[rel].add(h)
    unverifiable: set[str] = set()
    rebase = getattr(run.config.client, "policy", "strict") == "rebase"
    for o in ops:
        if o.rebased_to is not None:
            known[o.file].add(o.rebased_to)
        elif o.code is None and rebase:
            unverifiable.add(o.file)  # killed mid-call: it may have been carried over onto unknown bytes
        elif o.code in ("ok", None):
            if o.expected is None:
                unverifiable.add(o.file)
            else:
                known[o.file].add(o.expected)
    return known, unverifiable


def _verify_whole_versions(rep: OracleReport, run: FleetRun, ops: list[Op], final: dict[str, bytes | None]) -> None:
    """Torn: every final file and every sampled read is a whole version (the original or an intended result)."""
    known, unverifiable = _known_versions(run, ops)
    for rel, data in final.items():
        if data is None or rel in unverifiable:
            continue
        if content_hash(data) not in known[rel]:
            rep.torn_files.append(rel)
            rep.fail(f"{rel}: the final bytes are no version any change produced (torn or foreign)")
    torn = sum(len(hashes - known[rel]) for rel, hashes in run.observed.items() if rel not in unverifiable)
    rep.torn_reads = max(torn, run.torn_reads)


def _verify_counters(rep: OracleReport, ops: list[Op], final: dict[str, bytes | None]) -> None:
    acked: Counter[tuple[str, str]] = Counter()
    flying: Counter[tuple[str, str]] = Counter()
    for o in ops:
        if o.slot is None:
            continue
        if o.code == "ok":
            acked[(o.file, o.slot)] += 1
        elif o.code is None:
            flying[(o.file, o.slot)] += 1
    for rel, data in final.items():
        values = parse_counters(data.decode("utf-8", "replace")) if data is not None else None
        if values is None:
            if rel not in rep.torn_files:
                rep.torn_files.append(rel)
            rep.fail(f"{rel}: not a well-formed counters file at the end (torn or truncated)")
            values = {}
        slots = {s for (f, s) in acked if f == rel} | set(values)
        for slot in sorted(slots):
            _judge_counter(rep, f"{rel} {slot}", acked[(rel, slot)], flying[(rel, slot)], values.get(slot, 0))


def _judge_counter(rep: OracleReport, where: str, acked: int, flying: int, value: int) -> None:
    """A counter must hold every acknowledged increment, plus at most the ones in flight when a kill hit."""
    rep.verified += acked
    if value < acked:
        rep.lost_updates += acked - value
        rep.fail(f"{where}: {acked} increments acknowledged, the file says {value}")
    elif value > acked + flying:
        rep.phantom_writes += value - acked - flying
        rep.fail(f"{where}: the file says {value}, but only {acked} acknowledged (+{flying} in flight)")
    else:
        rep.in_flight_landed += value - acked


def judge_counts(
    acked: Mapping[tuple[str, str], int],
    final: Mapping[str, bytes | None],
    in_flight: Mapping[tuple[str, str], int] | None = None,
) -> OracleReport:
    """Counters files judged against acknowledged increments counted by a harness of its own.

    acked: (file, slot) -> increments acknowledged; in_flight: calls whose outcome is unknown (cancelled or
    cut short), which may or may not have landed. Same rule as for a fleet: every acknowledged increment is
    in the file, nothing beyond those in flight, and every file parses as a whole counters file.
    """
    rep = OracleReport()
    flying = in_flight or {}
    for rel, data in final.items():
        values = parse_counters(data.decode("utf-8", "replace")) if data is not None else None
        if values is None:
            rep.torn_files.append(rel)
            rep.fail(f"{rel}: not a well-formed counters file at the end (torn or truncated)")
            values = {}
        slots = {s for (f, s) in acked if f == rel} | set(values)
        for slot in sorted(slots):
            _judge_counter(
                rep, f"{rel} {slot}", acked.get((rel, slot), 0), flying.get((rel, slot), 0), values.get(slot, 0)
            )
    return rep


def _verify_hot(rep: OracleReport, ops: list[Op], final: dict[str, bytes | None]) -> None:
    acked: Counter[str] = Counter(o.file for o in ops if o.code == "ok")
    flying: Counter[str] = Counter(o.file for o in ops if o.code is None)
    for rel, data in final.items():
        value = parse_hot(data.decode("utf-8", "replace")) if data is not None else None
        if value is None:
            if rel not in rep.torn_files:
                rep.torn_files.append(rel)
            rep.fail(f"{rel}: not a well-formed hot-line file at the end (torn or truncated)")
            value = 0
        _judge_counter(rep, rel, acked[rel], flying[rel], value)


def _verify_tags(rep: OracleReport, ops: list[Op], final: dict[str, bytes | None]) -> None:
    """Markers and mixed: every acknowledged tag present once in its file, deleted lines stay deleted."""
    found: dict[str, Counter[str]] = {}
    for rel, data in final.items():
        text = data.decode("utf-8", "replace") if data is not None else ""
        found[rel] = Counter(m.group(0) for m in TAG_RE.finditer(text))
    intended: dict[str, Op] = {o.tag: o for o in ops if o.tag}
    for o in ops:
        if o.op in TAGGED_OPS and o.tag:
            _judge_tag(rep, o, found.get(o.file, Counter())[o.tag])
        elif o.op == "delete" and o.code == "ok" and o.gone:
            rep.verified += 1
            data = final.get(o.file)
            if data is not None and o.gone.encode("utf-8") in data:
                rep.lost_updates += 1
                rep.fail(f"{o.file}: a line deleted by {o.session} (acknowledged) is back")
    for rel, tags in found.items():
        for tag, n in tags.items():
            owner = intended.get(tag)
            if owner is None or owner.file != rel:
                rep.phantom_writes += n
                rep.fail(f"{rel}: {tag} is in the file but no session put it there")


def _judge_tag(rep: OracleReport, o: Op, n: int) -> None:
    """A tag found `n` times: once if acknowledged, at most once if in flight, never if refused."""
    if o.code == "ok":
        rep.verified += 1
        if n == 0:
            rep.lost_updates += 1
            rep.fail(f"{o.file}: acknowledged {o.op} {o.tag} by {o.session} is missing")
        elif n > 1:
            rep.phantom_writes += n - 1
            rep.fail(f"{o.file}: {o.tag} is there {n} times")
    elif o.code is None:
        rep.in_flight_landed += 1 if n else 0
        if n > 1:
            rep.phantom_writes += n - 1
            rep.fail(f"{o.file}: {o.tag} (in flight) is there {n} times")
    elif n:
        rep.phantom_writes += n
        rep.fail(f"{o.file}: {o.tag} was refused ({o.code}) but is in the file")


def _verify_events(rep: OracleReport, run: FleetRun, ops: list[Op]) -> None:
    for e in run.events:
        if e["e"] == "kill" and e.get("lock_wait_s") == -1.0:
            rep.locks_left_held += 1
            rep.fail(f"the lock of {e.get('file')} was still held 5 s after its holder was killed")
        elif e["e"] == "redis_window":
            rep.redis_windows += 1
            t_down, t_up = e["t_down"], e["t_up"]
            for o in ops:
                if t_down < o.t < t_up:
                    if o.code == "ok":
                        rep.acked_while_down += 1
                        rep.fail(f"{o.file}: {o.op} by {o.session} was acknowledged while Redis was down")
                    elif o.code == ErrorCode.STATE_UNAVAILABLE.value:
                        rep.refused_while_down += 1
            if e["changed"]:
                # A call that passed Redis before it went down may still be writing; anything else is a
                # write that failed to fail closed.
                late = {o.file for o in ops if o.t < t_down and (o.t_end is None or o.t_end > (e["t_snap"] or t_down))}
                for rel in e["changed"]:
                    if rel not in late:
                        rep.written_while_down.append(rel)
                        rep.fail(f"{rel} changed while Redis was down")


def check_recovery(rep: OracleReport, root: str, files: Iterable[str], redis_url: str | None) -> None:
    """After a run (all workers gone): no temporary file in the repository, none left in the state folder
    once a coordinator has opened it again (the recovery), and every file's lock free at once."""
    from coordinator import Coordinator
    from coordinator.disk.layout import STATE_DIR_NAME, locks_dir, tmp_dir
    from coordinator.disk.locks import LockManager

    state = Path(root, STATE_DIR_NAME)
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == Path(root):
            dirnames[:] = [d for d in dirnames if d != STATE_DIR_NAME]
        for name in filenames:
            if ".ec-" in name and name.endswith(".tmp"):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                rep.stale_temp_files.append(rel)
                rep.fail(f"temporary file {rel} left in the repository")
    Coordinator(root, redis_url).close()  # opening the root again is the recovery: it removes dead temps
    tmp = tmp_dir(state)
    left = sorted(n for n in os.listdir(tmp) if n.endswith(".tmp")) if tmp.is_dir() else []
    for name in left:
        rep.stale_temp_files.append(f"{STATE_DIR_NAME}/tmp/{name}")
        rep.fail(f"temporary file {name} still in the state folder after recovery")
    locks = LockManager(locks_dir(state))
    for rel in files:
        try:
            locks.acquire(rel, timeout=1.0).release()
        except CoordinatorError:
            rep.locks_left_held += 1
            rep.fail(f"the lock of {rel} is still held after the run")


def check_history(rep: OracleReport, root: str, files: Iterable[str], redis_url: str | None) -> None:
    """After a run (all workers gone, `check_recovery` done): every version the history lists reached the
    file, and the newest version of every file can be undone and redone.

    A version reached the file when the next version started from its bytes (its `before` is this one's
    `after`) and the newest one's `after` is the file's current content: an entry whose replace never
    happened breaks that chain, since the file kept the bytes from before it. Then a session undoes each
    file's newest version (the file must hold that version's `before` after it) and redoes it (the file
    must hold its `after` again), so the run leaves the files as the fleet did.
    """
    from coordinator import Coordinator

    coord = Coordinator(root, redis_url)
    try:
        session = coord.session("stress-history-audit")
        for rel in files:
            entries = coord.history(rel)  # newest first; listing settles an unmarked newest entry
            rep.history_entries += len(entries)
            _check_chain(rep, rel, entries, Path(root, rel))
            if entries:
                _check_undo(rep, session, rel, entries[0], Path(root, rel))
    finally:
        coord.close()


def _hash_of(path: Path) -> str | None:
    """The content hash of the file now (None: there is none)."""
    try:
        return content_hash(path.read_bytes())
    except FileNotFoundError:
        return None


def _check_chain(rep: OracleReport, rel: str, entries: list[Any], path: Path) -> None:
    expected = _hash_of(path)
    for entry in entries:  # newest first: each entry's result is what the next newer one started from
        if entry.after != expected:
            rep.history_unreal += 1
            rep.fail(f"{rel}: history lists version {entry.version}, but the file never held its result next")
        expected = entry.before


def _check_undo(rep: OracleReport, session: Any, rel: str, newest: Any, path: Path) -> None:
    rep.undo_checked += 1
    try:
        session.read(rel)
        session.undo(rel, version=newest.version)
        undone = _hash_of(path)
        session.redo(rel)
        redone = _hash_of(path)
    except CoordinatorError as exc:
        rep.undo_failed += 1
        rep.fail(f"{rel}: undo or redo of the newest version {newest.version} was refused ({exc.code.value})")
        return
    if undone != newest.before or redone != newest.after:
        rep.undo_failed += 1
        rep.fail(f"{rel}: undo of version {newest.version} then redo did not give back the history's bytes")
