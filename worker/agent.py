"""A simulated agent session: read -> think -> edit, re-reading and retrying when its view went stale.

An agent behaves like a model driving Claude Code's tools through a `Client`: it reads a file, "thinks"
for a while (a configurable delay), then makes one change with Edit or Write, computed from the text it
read. When the change is refused because its view is out of date (`stale`, or `not_read` after the read
state was lost), it reads again and redoes the change on the new text. After a successful change its view
is what it wrote, as a model's would be, so it goes on editing without another read.

Workloads say which files and which parts of them an agent changes; each is built so that a final look
at the files proves or disproves that every acknowledged change is still there (the oracle in
`worker.fleet`):

* ``counters``: every session owns one slot line (``s03 = 17``) in every counters file and increments it.
  Only the slot's owner ever changes it, so its final value is the number of increments that landed.
* ``hot-line``: every session increments the same line (``value = 17 (by s03)``): the worst contention.
* ``markers``: sessions insert unique marker comment lines into real source files (a copy of part of
  this interpreter's standard library, or of a given tree); every acknowledged marker must be present.
* ``mixed``: insert, replace (tags a line), delete, create (a new file) and write (the whole file) on the
  same real source files. Tags must survive, and a deleted line must stay deleted.

Every change is announced by an *intent* record (written before the call: what the file will be if the
call succeeds, as a hash) and closed by an *outcome* record (after the call). A worker killed in the
middle of a call leaves an intent without an outcome: the oracle then allows that change to be present
or absent, but nothing else.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sysconfig
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import xxhash

from coordinator.disk.layout import STATE_DIR_NAME
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.state.process import atomic_write_text
from worker.client import FileClient

WORKLOADS: tuple[str, ...] = ("counters", "hot-line", "markers", "mixed")
DEFAULT_FILES: dict[str, int] = {"counters": 4, "hot-line": 1, "markers": 8, "mixed": 8}

# A read asks for this many lines, so that the agent always sees (and hashes) the whole file.
READ_ALL_LINES = 10**7
# Errors after which the agent reads again and redoes its change.
RETRY_AFTER_READ = frozenset({ErrorCode.STALE, ErrorCode.NOT_READ})
# Errors after which the agent waits and tries the same call again.
RETRY_AFTER_WAIT = frozenset({ErrorCode.STATE_UNAVAILABLE, ErrorCode.LOCK_TIMEOUT})

COUNTERS_HEADER = "# edit-coordinator stress: counters file {name}. One line per session slot.\n"
COUNTERS_FOOTER = "# end of counters\n"
HOT_HEADER = "# edit-coordinator stress: hot-line file {name}. Every session increments the value.\n"
HOT_FOOTER = "# end of hot-line\n"
_COUNTER_LINE = re.compile(r"^(s\d+) = (\d+)$")
_HOT_LINE = re.compile(r"^value = (\d+) \(by ([^)]*)\)$")
TAG_RE = re.compile(r"<<m:([A-Za-z0-9._-]+):(\d+)>>")
_MIXED_KINDS = ("insert", "replace", "delete", "write", "create")
_MIXED_WEIGHTS = (40, 25, 15, 10, 10)
CREATED_DIR = "created"


def content_hash(data: bytes) -> str:
    """The engine's content hash (XXH3-128, hex): an intent's expected hash compares with `WriteResult.hash`."""
    return xxhash.xxh3_128_hexdigest(data)


def text_hash(text: str) -> str:
    return content_hash(text.encode("utf-8"))


def slot_label(index: int) -> str:
    return f"s{index:02d}"


def session_id(index: int, incarnation: int) -> str:
    """A fresh session per incarnation of a worker slot: a restarted agent starts with no view."""
    return f"{slot_label(index)}.{incarnation}"


def make_tag(session: str, seq: int) -> str:
    return f"<<m:{session}:{seq}>>"


# ---------------------------------------------------------------------------------------------------------
# File formats of the synthetic workloads (the oracle parses them back)
# ---------------------------------------------------------------------------------------------------------
def counters_text(name: str, slots: Sequence[str]) -> str:
    return COUNTERS_HEADER.format(name=name) + "".join(f"{s} = 0\n" for s in slots) + COUNTERS_FOOTER


def parse_counters(text: str) -> dict[str, int] | None:
    """Slot values of a counters file, or None if the file is not exactly one (torn, truncated, mixed)."""
    lines = text.split("\n")
    if len(lines) < 3 or lines[-1] != "" or not lines[0].startswith("# edit-coordinator stress: counters"):
        return None
    if lines[-2] + "\n" != COUNTERS_FOOTER:
        return None
    values: dict[str, int] = {}
    for line in lines[1:-2]:
        m = _COUNTER_LINE.match(line)
        if m is None or m.group(1) in values:
            return None
        values[m.group(1)] = int(m.group(2))
    return values


def hot_text(name: str) -> str:
    return HOT_HEADER.format(name=name) + "value = 0 (by nobody)\n" + HOT_FOOTER


def parse_hot(text: str) -> int | None:
    """The value of a hot-line file, or None if the file is not exactly one."""
    lines = text.split("\n")
    if len(lines) != 4 or lines[-1] != "" or not lines[0].startswith("# edit-coordinator stress: hot-line"):
        return None
    if lines[2] + "\n" != HOT_FOOTER:
        return None
    m = _HOT_LINE.match(lines[1])
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------------------------------------------------
# Corpus: the files a run works on
# ---------------------------------------------------------------------------------------------------------
def _usable_source(path: Path, max_bytes: int = 48 * 1024, max_lines: int = 900) -> str | None:
    """The text of `path` if it suits the marker workloads: UTF-8, LF only, a modest size, lines to anchor on."""
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > max_bytes:
            return None
        data = path.read_bytes()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not text or "\r" in text or "\x00" in text or data.startswith(b"\xef\xbb\xbf") or "<<m:" in text:
        return None
    lines = text.count("\n")
    if lines < 40 or lines > max_lines or not text.endswith("\n"):
        return None
    return text


def stdlib_sources(count: int, seed: int) -> list[Path]:
    """`count` source files of this interpreter's standard library, chosen by `seed` (a ready corpus of
    real code that every machine running this package has)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    candidates = sorted(p for p in stdlib.glob("*.py") if _usable_source(p) is not None)
    if len(candidates) < count:
        candidates += sorted(p for p in stdlib.glob("*/*.py") if _usable_source(p) is not None)
    if not candidates:
        raise RuntimeError(f"No usable source files found under {stdlib} for the corpus.")
    rng = random.Random(seed)
    if len(candidates) >= count:
        return rng.sample(candidates, count)
    return [candidates[i % len(candidates)] for i in range(count)]


def tree_sources(tree: Path, count: int, seed: int) -> list[Path]:
    """`count` text files of `tree` that suit the marker workloads (skipping VCS and state folders)."""
    skip = {".git", ".hg", ".svn", STATE_DIR_NAME, "node_modules", ".venv", "venv", "__pycache__"}
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith(".tox"))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if _usable_source(p) is not None:
                found.append(p)
    if not found:
        raise RuntimeError(
            f"No file under {tree} suits the marker workloads (UTF-8 text with LF line ends, 40-900 lines, "
            "at most 48 KiB). Use another tree, or run without one to use a copy of the standard library."
        )
    rng = random.Random(seed)
    return rng.sample(found, count) if len(found) >= count else found


@dataclass(frozen=True)
class Corpus:
    """The files of a run, relative to the root, and the hash of each as it was at the start."""

    workload: str
    files: tuple[str, ...]
    slots: tuple[str, ...]
    original: dict[str, str] = field(default_factory=dict)
    created_dir: str = CREATED_DIR  # where the mixed workload's sessions create their files

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "files": list(self.files), "slots": list(self.slots)}


def prepare_corpus(
    root: Path,
    workload: str,
    n_files: int,
    n_slots: int,
    seed: int,
    source_tree: Path | None = None,
    in_place: bool = False,
    own_files: bool = False,
) -> Corpus:
    """Create (or pick) the files a run works on, under `root`.

    counters / hot-line: new files under ``stress/`` (never over an existing file when `in_place`: the
    root is then the user's own tree). markers / mixed: with `own_files` or `in_place`, text files of `root`
    itself; otherwise copies, under ``corpus/``, of files of `source_tree` (or of the standard library).
    """
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}")
    if n_files < 1:
        raise ValueError("a run needs at least one file")
    slots = tuple(slot_label(i) for i in range(n_slots))
    files: list[str] = []
    if workload in ("counters", "hot-line"):
        (root / "stress").mkdir(parents=True, exist_ok=True)
        for i in range(n_files):
            name = f"c{i:02d}" if workload == "counters" else f"hot{i:02d}"
            rel = f"stress/{name}.txt"
            text = counters_text(name, slots) if workload == "counters" else hot_text(name)
            if in_place and (root / rel).exists():
                raise ValueError(
                    f"{rel} already exists in {root}; a run in place never overwrites a file it did not make. "
                    "Remove it, or run on a copy (without --in-place)."
                )
            # Made whole before it is seen: a program watching the folder (a formatter, a test's) never
            # reads a half-written file.
            atomic_write_text(root / rel, text)
            files.append(rel)
    elif in_place or own_files:
        files = [p.relative_to(root).as_posix() for p in tree_sources(root, n_files, seed)]
    else:
        sources = tree_sources(source_tree, n_files, seed) if source_tree else stdlib_sources(n_files, seed)
        (root / "corpus").mkdir(parents=True, exist_ok=True)
        used: set[str] = set()
        for i, src in enumerate(sources):
            name = src.name if src.name not in used else f"{src.stem}_{i}{src.suffix}"
            used.add(name)
            shutil.copyfile(src, root / "corpus" / name)
            files.append(f"corpus/{name}")
    original = {rel: content_hash((root / rel).read_bytes()) for rel in files}
    return Corpus(workload, tuple(files), slots, original)


# ---------------------------------------------------------------------------------------------------------
# Changes: what an agent decides to do, from the text it holds
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    """One intended change. `expected` is the whole file after it, when the agent's view is exact."""

    kind: str  # increment | insert | replace | delete | write | create
    path: str
    call: str  # "edit" or "write"
    old: str = ""
    new: str = ""
    expected: str | None = None
    tag: str | None = None  # a tag that must be present after the change
    gone: str | None = None  # text that must be absent after the change (a deleted line)
    slot: str | None = None
    value: int | None = None  # a counter's value after the change


def _unique_lines(view: str, rng: random.Random, tries: int, exclude_tagged: bool) -> list[str]:
    """Up to a few distinct lines of `view`, each present exactly once as ``line + "\\n"``."""
    lines = view.split("\n")[:-1]  # the text ends with "\n": the last element is empty
    picked: list[str] = []
    for _ in range(tries):
        line = lines[rng.randrange(len(lines))] if lines else ""
        if not line.strip() or (exclude_tagged and "<<m:" in line) or line in picked:
            continue
        if view.count(line + "\n") == 1:
            picked.append(line)
            break
    return picked


def plan_change(
    workload: str,
    path: str,
    view: str,
    session: str,
    slot: str,
    seq: int,
    rng: random.Random,
    kind: str = "insert",
) -> Change | None:
    """The change an agent makes to `path`, whose text it holds as `view`; None if it finds nothing to do.

    `kind` chooses the change of the mixed workload (insert, replace, delete or write); markers always
    insert, counters and hot-line always increment.
    """
    if workload == "counters":
        m = re.search(rf"(?m)^{re.escape(slot)} = (\d+)$", view)
        if m is None:
            return None
        v = int(m.group(1))
        old, new = f"\n{slot} = {v}\n", f"\n{slot} = {v + 1}\n"
        return Change("increment", path, "edit", old, new, view.replace(old, new, 1), slot=slot, value=v + 1)
    if workload == "hot-line":
        m = re.search(r"(?m)^value = (\d+) \(by [^)]*\)$", view)
        if m is None:
            return None
        v = int(m.group(1))
        old, new = m.group(0) + "\n", f"value = {v + 1} (by {session})\n"
        return Change("increment", path, "edit", old, new, view.replace(old, new, 1), slot=None, value=v + 1)
    tag = make_tag(session, seq)
    if workload == "markers":
        kind = "insert"
    if kind == "write":
        sep = "" if view.endswith("\n") or not view else "\n"
        content = f"{view}{sep}# {tag}\n"
        return Change("write", path, "write", new=content, expected=content, tag=tag)
    anchors = _unique_lines(view, rng, tries=20, exclude_tagged=kind != "insert")
    if not anchors:
        return None
    line = anchors[0]
    old = line + "\n"
    if kind == "insert":
        new = f"{line}\n# {tag}\n"
        return Change("insert", path, "edit", old, new, view.replace(old, new, 1), tag=tag)
    if kind == "replace":
        new = f"{line}  # {tag}\n"
        return Change("replace", path, "edit", old, new, view.replace(old, new, 1), tag=tag)
    return Change("delete", path, "edit", old, "", view.replace(old, "", 1), gone=old)


def plan_create(session: str, seq: int, folder: str = CREATED_DIR) -> Change:
    tag = make_tag(session, seq)
    path = f"{folder}/{session}-{seq:06d}.py"
    content = f"# {tag}\n# A file created by a mixed-workload stress session.\n"
    return Change("create", path, "write", new=content, expected=content, tag=tag)


# ---------------------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------------------
class Recorder:
    """Appends one JSON line per event to a file, unbuffered: a killed worker loses at most the line it was
    writing (a torn last line is skipped by the reader). Times are `time.monotonic()`, which on Linux is one
    clock for every process of the machine."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644) if path else None
        self.events: list[dict[str, Any]] | None = None if path else []

    def emit(self, record: dict[str, Any]) -> None:
        if self.fd is None:
            assert self.events is not None
            self.events.append(record)
            return
        os.write(self.fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        with open(path, "rb") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # the line a killed worker was writing
    except FileNotFoundError:
        pass
    return out


# ---------------------------------------------------------------------------------------------------------
# The agent
# ---------------------------------------------------------------------------------------------------------
class Control(Protocol):
    """How a fleet steers and watches an agent (shared memory in `worker.fleet`)."""

    def should_stop(self) -> bool: ...

    def set_busy(self, file_index: int) -> None: ...  # 0: not in a call; i + 1: in a call on files[i]

    def count(self, acked: int, attempts: int, conflicts: int) -> None: ...


@dataclass
class LocalControl:
    """A Control for one agent run in this process: stops at a deadline or after `edits` acknowledgements."""

    deadline: float | None = None
    edits: int | None = None
    acked: int = 0
    attempts: int = 0
    conflicts: int = 0

    def should_stop(self) -> bool:
        if self.edits is not None and self.acked >= self.edits:
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline

    def set_busy(self, file_index: int) -> None:
        pass

    def count(self, acked: int, attempts: int, conflicts: int) -> None:
        self.acked += acked
        self.attempts += attempts
        self.conflicts += conflicts


@dataclass(frozen=True)
class AgentConfig:
    workload: str
    files: tuple[str, ...]  # the files this session may change (the whole pool, or its own share)
    session: str
    slot: str
    seed: int
    think_ms: float = 1.0
    skew: float = 0.0  # 0: uniform file choice; s > 0: Zipf with exponent s
    max_retries: int = 1000
    backoff_s: float = 0.02
    created_dir: str = CREATED_DIR  # the corpus's: where a "create" change puts its file


class FileChooser:
    """Uniform or Zipf-skewed choice among files (rank 1 is the hottest)."""

    def __init__(self, files: Sequence[str], skew: float, rng: random.Random) -> None:
        if not files:
            raise ValueError("an agent needs at least one file")
        self.files = list(files)
        self.rng = rng
        self.weights = [1.0 / (i + 1) ** skew for i in range(len(files))] if skew > 0 else None

    def pick(self) -> int:
        if self.weights is None:
            return self.rng.randrange(len(self.files))
        return self.rng.choices(range(len(self.files)), self.weights)[0]


class Agent:
    """One simulated session. `run()` loops until `control.should_stop()`."""

    def __init__(
        self,
        client: FileClient,
        config: AgentConfig,
        control: Control,
        recorder: Recorder,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.cfg = config
        self.control = control
        self.rec = recorder
        self.sleep = sleep
        self.rng = random.Random(config.seed)
        self.chooser = FileChooser(config.files, config.skew, self.rng)
        self.index = {path: i for i, path in enumerate(config.files)}
        self.views: dict[str, str] = {}
        self.exact: dict[str, bool] = {}
        self.seq = 0
        self.change_id = 0

    # -- the loop -----------------------------------------------------------------------------------------
    def run(self) -> None:
        while not self.control.should_stop():
            self.change_id += 1
            kind = "insert"
            if self.cfg.workload == "mixed":
                kind = self.rng.choices(_MIXED_KINDS, _MIXED_WEIGHTS)[0]
                if kind == "create":
                    self._create()
                    continue
            self._change_one(self.cfg.files[self.chooser.pick()], kind)

    def _change_one(self, path: str, kind: str) -> None:
        """Make one change to `path`: read if needed, think, change; read again and redo it when stale."""
        for _ in range(self.cfg.max_retries):
            if self.control.should_stop():
                return
            view = self.views.get(path)
            if view is None:
                code = self._read(path)
                if code != "ok":
                    if code in RETRY_AFTER_WAIT:
                        self.sleep(self.cfg.backoff_s)
                        continue
                    return
                view = self.views[path]
            self._think()
            self.seq += 1
            exact = self.exact.get(path, False)
            if kind == "write" and not exact:
                kind = "insert"  # never write back a view that is not the whole file
            change = plan_change(
                self.cfg.workload, path, view, self.cfg.session, self.cfg.slot, self.seq, self.rng, kind
            )
            if change is None:
                # Nothing to anchor on in this view (or the slot line is missing from it, which only an
                # unsafe run can cause): forget the view and choose again.
                self.views.pop(path, None)
                return
            if not exact:
                change = _without_expectation(change)
            code = self._apply(change)
            if code == "ok":
                return
            if code in RETRY_AFTER_READ:
                self.views.pop(path, None)
            elif code in RETRY_AFTER_WAIT:
                # Keep the view: the engine decides against the disk, so a view that went stale meanwhile
                # only earns a `stale` (or `not_read` if the state was lost), never a lost update.
                self.sleep(self.cfg.backoff_s)
            else:
                self.views.pop(path, None)
                return

    def _create(self) -> None:
        self.seq += 1
        change = plan_create(self.cfg.session, self.seq, self.cfg.created_dir)
        for _ in range(self.cfg.max_retries):
            if self.control.should_stop():
                return
            code = self._apply(change)
            if code not in RETRY_AFTER_WAIT:
                return
            self.sleep(self.cfg.backoff_s)

    def _think(self) -> None:
        if self.cfg.think_ms > 0:
            self.sleep(self.cfg.think_ms / 1000.0 * self.rng.uniform(0.5, 1.5))

    # -- calls, each recorded -----------------------------------------------------------------------------
    def _read(self, path: str) -> str:
        t0 = time.monotonic()
        code = "ok"
        try:
            r = self.client.read(self.cfg.session, path, offset=None, limit=READ_ALL_LINES)
        except CoordinatorError as exc:
            code = exc.code
        lat = time.monotonic() - t0
        self.rec.emit({"k": "r", "s": self.cfg.session, "f": path, "t": t0, "c": str(code), "lat": lat})
        if code == "ok":
            self.views[path] = r.content
            # The view is exact when the text held hashes to the file's bytes (UTF-8, LF, whole file).
            self.exact[path] = text_hash(r.content) == r.hash
        return str(code)

    def _apply(self, change: Change) -> str:
        cfg = self.cfg
        expected_hash = text_hash(change.expected) if change.expected is not None else None
        intent = {
            "k": "i",
            "s": cfg.session,
            "slot": cfg.slot,
            "n": self.seq,
            "cid": self.change_id,
            "f": change.path,
            "op": change.kind,
            "x": expected_hash,
            "m": change.tag,
            "g": change.gone,
            "v": change.value,
            "t": time.monotonic(),
        }
        self.rec.emit(intent)
        self.control.set_busy(self.index.get(change.path, -1) + 1)
        t0 = time.monotonic()
        code = "ok"
        res = None
        try:
            if change.call == "edit":
                res = self.client.edit(cfg.session, change.path, change.old, change.new)
            else:
                res = self.client.write(cfg.session, change.path, change.new)
        except CoordinatorError as exc:
            code = exc.code
        t1 = time.monotonic()
        self.control.set_busy(0)
        outcome: dict[str, Any] = {"k": "o", "s": cfg.session, "n": self.seq, "c": str(code), "t": t1}
        outcome["lat"] = t1 - t0
        if res is not None:
            outcome["w"] = res.timings.get("lock_wait_s")
            outcome["h"] = res.timings.get("lock_hold_s")
            if getattr(res, "rebased", False):
                outcome["rb"] = res.hash  # carried over others' changes (policy rebase): this is the version
            elif expected_hash is not None and res.hash is not None and res.hash != expected_hash:
                outcome["xm"] = res.hash  # the engine wrote something other than the change computed
            if res.warnings:
                outcome["warn"] = len(res.warnings)
        self.rec.emit(outcome)
        ok = code == "ok"
        self.control.count(1 if ok else 0, 1, 0 if ok else 1)
        if ok and change.kind != "create":
            if change.expected is not None and "xm" not in outcome and "rb" not in outcome:
                self.views[change.path] = change.expected
            else:
                self.views.pop(change.path, None)
        return str(code)


def _without_expectation(change: Change) -> Change:
    return replace(change, expected=None)
