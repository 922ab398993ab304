"""`edit-coordinator bench --scenario cooperbench`: real parallel feature work replayed on one shared tree.

Every pair of features of a CooperBench task (coordinator_bench/cooperdata.py) is replayed by two sessions on
one copy of the base files: each session reads its files at the base, then sends its feature's hunks as
Edits (one per hunk, 3 lines of context as the patch has them, or the ``shortest`` unique context) and
creates its new files with Write, in one of two orders: interleaved (A1, B1, A2, ...) or sequential (A's
hunks, then B's). The modes (`MODES`): policy strict or rebase, first try only or with what an agent does on
a refusal (read the file again, send the same edit once more). Beside them, the two ways without a
coordinator: ``git merge-file`` of the two features' files (a pair is clean when every file merges without a
conflict) and plain read-modify-write of whole files (each session keeps its own copy and writes it whole).

What is counted, per repository and mode: pairs whose every hunk of both features landed ("fully landed"),
hunks landed (an edit answered "already made" counts), refusals by kind (error code and rebase reason, first
try), wrong-place landings and lost acknowledged edits. The last two come from one check of each file at the
end of the pair: the file must be the base with the blocks of exactly the landed hunks, each at the place
where its hunk lands when its feature is applied alone (insertions of both features at one point in either
order); a landed hunk whose added lines are missing is lost, any other landed hunk of a file that fails the
check is at a wrong place. Both must be 0.

Results: ``<out>/cooperbench.json`` (every pair, every mode) and, with matplotlib, ``bench-cooperbench.png``;
`markdown_table` makes the per-repository table of BENCHMARKS.md from the JSON.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.disk.layout import STATE_DIR_NAME
from coordinator.state.embedded import stop_embedded_redis
from coordinator.text.rebase import diff_texts
from coordinator_bench.cooperdata import (
    BaseFiles,
    Block,
    Feature,
    Hunk,
    Task,
    load_tasks,
    located,
    splice,
    split_lines,
)
from coordinator_bench.harness import markdown_table as table_of


@dataclass(frozen=True)
class Mode:
    name: str
    policy: str  # strict | rebase
    retry: bool  # one re-read and retry per refused edit
    order: str = "interleaved"  # interleaved | sequential
    shortest: bool = False  # the shortest unique context instead of the patch's 3 lines


MODES: tuple[Mode, ...] = (
    Mode("strict", "strict", False),
    Mode("strict+retry", "strict", True),
    Mode("rebase", "rebase", False),
    Mode("rebase+retry", "rebase", True),
    Mode("rebase+retry sequential", "rebase", True, order="sequential"),
    Mode("rebase+retry shortest", "rebase", True, shortest=True),
)
GIT = "git merge-file"
RMW = "read-modify-write"


@dataclass(frozen=True)
class Op:
    """One step of a session: an Edit of a hunk, or the Write that creates a file."""

    path: str
    hunk: Hunk | None  # None: a Write of `content`
    content: str = ""


@dataclass
class PairFiles:
    """What a pair needs: the base text of each file (None: created by a feature), each feature's steps, and
    each file as its feature alone makes it."""

    base: dict[str, str | None]
    ops: dict[str, list[Op]]  # "A" / "B" -> steps
    alone: dict[str, dict[str, str]]  # "A" / "B" -> path -> text


@dataclass
class Outcome:
    hunks: int = 0
    landed: int = 0
    already: int = 0
    refusals: Counter[str] = field(default_factory=Counter)
    final_refusals: Counter[str] = field(default_factory=Counter)
    wrong_place: int = 0
    lost: int = 0
    # the same, in files where an edit was sent again after a read (the simulated agent's retry, an edit
    # made on a fresh view: what it replaces is what the agent saw; see `_still_there`)
    wrong_place_reread: int = 0
    lost_reread: int = 0
    full: bool = False
    same_as_git: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "hunks": self.hunks,
            "landed": self.landed,
            "already": self.already,
            "refusals": dict(self.refusals),
            "final_refusals": dict(self.final_refusals),
            "wrong_place": self.wrong_place,
            "lost": self.lost,
            "wrong_place_reread": self.wrong_place_reread,
            "lost_reread": self.lost_reread,
            "full": self.full,
            "same_as_git": self.same_as_git,
        }


# ---------------------------------------------------------------------------------------------------------
# Preparing a pair
# ---------------------------------------------------------------------------------------------------------
def prepare(task: Task, a: Feature, b: Feature, files: BaseFiles) -> PairFiles | None:
    """The pair's files and steps, or None when a patch does not apply to the base (not replayable)."""
    base: dict[str, str | None] = {}
    ops: dict[str, list[Op]] = {"A": [], "B": []}
    alone: dict[str, dict[str, str]] = {"A": {}, "B": {}}
    for side, feat in (("A", a), ("B", b)):
        for fp in feat.files:
            if fp.binary or fp.deleted:
                continue
            if fp.created:
                content = "".join(line for h in fp.hunks for line in h.new)
                base.setdefault(fp.path, None)
                ops[side].append(Op(fp.path, None, content))
                alone[side][fp.path] = content
                continue
            text = base.get(fp.path) or files.text(task, fp.path)
            if text is None:
                return None
            base[fp.path] = text
            lines = split_lines(text)
            hunks = [located(h, lines, text) for h in fp.hunks]
            if any(h is None for h in hunks):
                return None
            ok = [h for h in hunks if h is not None]
            ops[side].extend(Op(fp.path, h) for h in ok)
            alone[side][fp.path] = splice(lines, [bl for h in ok for bl in h.blocks])
    return PairFiles(base, ops, alone)


def schedule(pf: PairFiles, order: str) -> list[tuple[str, Op]]:
    a, b = pf.ops["A"], pf.ops["B"]
    if order == "sequential":
        return [("A", op) for op in a] + [("B", op) for op in b]
    out: list[tuple[str, Op]] = []
    for x, y in itertools.zip_longest(a, b):
        if x is not None:
            out.append(("A", x))
        if y is not None:
            out.append(("B", y))
    return out


# ---------------------------------------------------------------------------------------------------------
# The check of a file at the end of a pair
# ---------------------------------------------------------------------------------------------------------
def expected_matches(final: str, base_lines: list[str], blocks: list[Block]) -> bool:
    """Is `final` the base with `blocks` applied, each at its own place (identical blocks once; insertions
    at one point in any order), as the patches place them or with insertions slid up (`_slid_up`)?"""
    return any(
        _matches(final, base_lines, variant)
        for variant in (blocks, _slid_up(blocks, base_lines), _slid_down(blocks, base_lines))
    )


def _matches(final: str, base_lines: list[str], blocks: list[Block]) -> bool:
    uniq = list(dict.fromkeys(blocks))
    uniq.sort(key=lambda bl: (bl.a, bl.b > bl.a))
    segments: list[list[tuple[str, ...]]] = []  # each: alternatives' line lists to put in some order
    i = 0
    k = 0
    while k < len(uniq):
        bl = uniq[k]
        if bl.a < i:
            return False  # overlapping blocks: no place is right for both
        segments.append([tuple(base_lines[i : bl.a])])
        group = [bl.new]
        while bl.a == bl.b and k + 1 < len(uniq) and uniq[k + 1].a == uniq[k + 1].b == bl.a:
            k += 1
            group.append(uniq[k].new)
        segments.append(group)
        i = max(i, bl.b)
        k += 1
    segments.append([tuple(base_lines[i:])])
    got = split_lines(final)
    pos = 0
    for group in segments:
        for perm in itertools.permutations(group):
            lines = [x for part in perm for x in part]
            if got[pos : pos + len(lines)] == lines:
                pos += len(lines)
                break
        else:
            return False
    return pos == len(got)


def _slid_up(blocks: list[Block], base_lines: list[str]) -> list[Block]:
    """Each insertion moved up while its last line equals the base line above it (the same text, told as
    made one line higher: a line diff cannot tell the two apart), never into a replaced line. Two
    insertions the patches place a line apart around such a line then meet at one point."""
    replaced = {i for bl in blocks for i in range(bl.a, bl.b)}
    out = []
    for bl in blocks:
        a, new = bl.a, bl.new
        while bl.a == bl.b and new and a > 0 and a - 1 not in replaced and new[-1] == base_lines[a - 1]:
            a, new = a - 1, (base_lines[a - 1], *new[:-1])
        out.append(Block(a, a, new) if bl.a == bl.b else bl)
    return out


def _slid_down(blocks: list[Block], base_lines: list[str]) -> list[Block]:
    """`_slid_up`'s mirror: each insertion moved down while its first line equals the base line below it."""
    replaced = {i for bl in blocks for i in range(bl.a, bl.b)}
    out = []
    for bl in blocks:
        a, new = bl.a, bl.new
        while bl.a == bl.b and new and a < len(base_lines) and a not in replaced and new[0] == base_lines[a]:
            a, new = a + 1, (*new[1:], base_lines[a])
        out.append(Block(a, a, new) if bl.a == bl.b else bl)
    return out


def check_files(
    pf: PairFiles, read: Callable[[str], str | None], landed: list[tuple[str, Op, bool]], outcome: Outcome
) -> None:
    """Count lost and wrong-place landings (module docstring); `landed`: (side, step, sent again after a
    read). A file where an edit was sent again after a read counts in the ``_reread`` figures."""
    by_path: dict[str, list[tuple[str, Op, bool]]] = {}
    for entry in landed:
        by_path.setdefault(entry[1].path, []).append(entry)
    for path, ops in by_path.items():
        wrong, lost = _check_file(pf, path, read(path), [op for _, op, _ in ops])
        if any(again for _, _, again in ops):
            outcome.wrong_place_reread += wrong
            outcome.lost_reread += lost
        else:
            outcome.wrong_place += wrong
            outcome.lost += lost


def _check_file(pf: PairFiles, path: str, final: str | None, ops: list[Op]) -> tuple[int, int]:
    """(wrong place, lost) among the landed steps `ops` of one file."""
    if final is None:
        return 0, len(ops)
    base = pf.base.get(path)
    if base is None:  # created: the one Write that landed
        writes = [op for op in ops if op.hunk is None]
        return len(writes) - 1, int(final != writes[-1].content)
    blocks = [bl for op in ops if op.hunk is not None for bl in op.hunk.blocks]
    if expected_matches(final, split_lines(base), blocks):
        return 0, 0
    wrong = lost = 0
    for op in ops:
        blocks_of = op.hunk.blocks if op.hunk else ()
        if any(bl.new and "".join(bl.new) not in final for bl in blocks_of):
            lost += 1
        else:
            wrong += 1
    return wrong, lost


# ---------------------------------------------------------------------------------------------------------
# The replays
# ---------------------------------------------------------------------------------------------------------
def _kind(exc: Any) -> str:
    reason = getattr(exc, "details", {}).get("reason")
    return f"{exc.code.value}:{reason}" if reason else str(exc.code.value)


def replay(coord: Any, root: Path, folder: str, pf: PairFiles, mode: Mode) -> Outcome:
    """The pair through the coordinator, in `mode`, in ``root/folder``."""
    from coordinator import CoordinatorError

    for path, text in pf.base.items():
        if text is not None:
            p = root / folder / path
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(text.encode("utf-8", "surrogateescape"))
    sessions = {side: coord.session(f"{folder}/{side}", policy=mode.policy) for side in ("A", "B")}
    for side, s in sessions.items():
        for path in dict.fromkeys(op.path for op in pf.ops[side]):
            if pf.base.get(path) is not None:
                s.read(f"{folder}/{path}")
    out = Outcome()
    landed: list[tuple[str, Op, bool]] = []
    for side, op in schedule(pf, mode.order):
        out.hunks += 1
        s = sessions[side]
        again = False
        try:
            res = _send(s, folder, op, pf, mode)
        except CoordinatorError as exc:
            out.refusals[_kind(exc)] += 1
            if not mode.retry or op.hunk is None:
                out.final_refusals[_kind(exc)] += 1
                continue
            try:
                now = s.read(f"{folder}/{op.path}").content
                if not _still_there(pf.base[op.path] or "", now, _edit_of(op, pf, mode)[0]):
                    out.final_refusals["redo:lines_changed"] += 1  # the agent must redo it by hand
                    continue
                res = _send(s, folder, op, pf, mode)
                again = True
            except CoordinatorError as second:
                out.final_refusals[_kind(second)] += 1
                continue
        out.landed += 1
        out.already += bool(getattr(res, "already_made", False))
        landed.append((side, op, again))
    out.full = out.landed == out.hunks

    def read(path: str) -> str | None:
        p = root / folder / path
        return p.read_bytes().decode("utf-8", "surrogateescape") if p.exists() else None

    check_files(pf, read, landed, out)
    return out


def _edit_of(op: Op, pf: PairFiles, mode: Mode) -> tuple[str, str]:
    base = pf.base[op.path]
    assert base is not None and op.hunk is not None
    return op.hunk.edit(base, shortest=mode.shortest)


def _send(s: Any, folder: str, op: Op, pf: PairFiles, mode: Mode) -> Any:
    if op.hunk is None:
        return s.write(f"{folder}/{op.path}", op.content)
    old, new = _edit_of(op, pf, mode)
    return s.edit(f"{folder}/{op.path}", old, new)


def _still_there(base: str, now: str, old: str) -> bool:
    """What an agent that read the file again checks before sending its edit once more: the lines it meant
    (`old`, whole lines, once in the base) are still there, untouched by others, at the place they moved
    to, and nowhere else. Where they are not, it has to redo the change by hand (not simulated)."""
    at = base.find(old)
    if at < 0 or base.find(old, at + 1) >= 0:
        return False
    first = base.count("\n", 0, at)
    end = first + old.count("\n") + (0 if old.endswith("\n") else 1)
    shift = 0
    for span in diff_texts(base, now):
        h = span.hunk
        if h.a2 <= first:
            shift += (h.b2 - h.b1) - (h.a2 - h.a1)
        elif h.a1 < end:
            return False  # others changed these lines, or put lines among them
    found = now.find(old)
    return found >= 0 and now.find(old, found + 1) < 0 and now.count("\n", 0, found) == first + shift


def git_merge(pf: PairFiles) -> dict[str, Any]:
    """``git merge-file`` of the two features' files: clean or not, and the merged texts."""
    merged: dict[str, str] = {}
    clean = True
    with tempfile.TemporaryDirectory(prefix="ec-coop-git-") as tmp:
        for path in pf.base:
            a, b = pf.alone["A"].get(path), pf.alone["B"].get(path)
            if a is None or b is None:
                merged[path] = a if a is not None else b or ""
                continue
            names = []
            for name, text in (("a", a), ("base", pf.base[path] or ""), ("b", b)):
                f = Path(tmp) / name
                f.write_bytes(text.encode("utf-8", "surrogateescape"))
                names.append(str(f))
            done = subprocess.run(["git", "merge-file", "-p", *names], capture_output=True, check=False)
            clean = clean and done.returncode == 0
            merged[path] = done.stdout.decode("utf-8", "surrogateescape")
    return {"clean": clean, "merged": merged}


def read_modify_write(pf: PairFiles, order: str = "interleaved") -> Outcome:
    """No coordinator: each session keeps its own copy of each file (read at the base, its own hunks
    applied) and writes it whole after each hunk. A hunk is lost when the file's last whole write came from
    the other session's copy."""
    out = Outcome()
    last_writer: dict[str, str] = {}
    made: list[tuple[str, Op]] = []
    for side, op in schedule(pf, order):
        out.hunks += 1
        out.landed += 1
        last_writer[op.path] = side
        made.append((side, op))
    out.lost = sum(1 for side, op in made if last_writer[op.path] != side)
    out.full = out.lost == 0
    return out


# ---------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------
@dataclass
class RunOptions:
    dataset: Path
    repos: Path
    out: Path
    modes: tuple[Mode, ...] = MODES
    only: list[str] | None = None  # task keys (or prefixes) to run
    max_pairs: int | None = None  # per task
    progress: Any = None  # a rich Console, or None
    tests: bool = False  # run both features' tests on each pair the tested mode fully landed (coopertests.py)


TESTED_MODE = "rebase+retry"


def run(opts: RunOptions) -> dict[str, Any]:
    """Replay every pair; write and return the results (module docstring)."""
    from coordinator import Coordinator

    tasks = load_tasks(opts.dataset, opts.only)
    files = BaseFiles(opts.repos)
    missing = sorted({f"{t.owner}/{t.name}" for t in tasks if files.source(t) is None})
    todo = [(t, a, b) for t in tasks if files.source(t) is not None for a, b in t.pairs()[: opts.max_pairs]]
    pairs: list[dict[str, Any]] = []
    t0 = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="ec-cooperbench-"))
    runner = None
    if opts.tests:
        from coordinator_bench.coopertests import TestRunner

        runner = TestRunner(opts.dataset, files)
    try:
        with Coordinator(root, durability="none") as coord, _progress(opts.progress, len(todo)) as advance:
            for n, (task, a, b) in enumerate(todo):
                rec = _one_pair(coord, root, n, task, a, b, files, opts.modes)
                if runner is not None and rec.get(TESTED_MODE, {}).get("full"):
                    folder = root / f"p{n}m{[m.name for m in opts.modes].index(TESTED_MODE)}"
                    final = {p: (folder / p).read_text(errors="surrogateescape") for p in _written(folder)}
                    rec["tests_pass"] = runner.both_pass(task, a, b, final)
                pairs.append(rec)
                for k in range(len(opts.modes)):
                    shutil.rmtree(root / f"p{n}m{k}", ignore_errors=True)
                advance(f"{task.key} {a.number}+{b.number}")
    finally:
        stop_embedded_redis(root / STATE_DIR_NAME)  # the embedded Redis outlives its Coordinator
        shutil.rmtree(root, ignore_errors=True)
        if runner is not None:
            runner.close()
    results = {
        "scenario": "cooperbench",
        "modes": [m.name for m in opts.modes],
        "repos_missing": missing,
        "elapsed_s": round(time.monotonic() - t0, 1),
        "pairs": pairs,
        "summary": summarize(pairs, [m.name for m in opts.modes]),
    }
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "cooperbench.json").write_text(json.dumps(results, separators=(",", ":")) + "\n")
    return results


def _written(folder: Path) -> list[str]:
    """The files of a replayed pair (relative to its folder)."""
    return [str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()]


def _one_pair(
    coord: Any, root: Path, n: int, task: Task, a: Feature, b: Feature, files: BaseFiles, modes: Iterable[Mode]
) -> dict[str, Any]:
    rec: dict[str, Any] = {"task": task.key, "repo": f"{task.owner}/{task.name}", "a": a.number, "b": b.number}
    pf = prepare(task, a, b, files)
    if pf is None:
        rec["replayable"] = False
        return rec
    rec["replayable"] = True
    merge = git_merge(pf)
    rec[GIT] = {"clean": merge["clean"]}
    rec[RMW] = read_modify_write(pf).to_dict()
    for k, mode in enumerate(modes):
        folder = f"p{n}m{k}"
        o = replay(coord, root, folder, pf, mode)
        if merge["clean"] and o.full:
            o.same_as_git = all(
                (root / folder / p).read_bytes().decode("utf-8", "surrogateescape") == text
                for p, text in merge["merged"].items()
                if (root / folder / p).exists()
            )
        rec[mode.name] = o.to_dict()
    return rec


class _progress:
    """A rich progress bar over the pairs (nothing without a console)."""

    def __init__(self, console: Any, total: int) -> None:
        self.console = console
        self.total = total
        self.bar: Any = None

    def __enter__(self) -> Callable[[str], None]:
        if self.console is None:
            return lambda label: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("[bold]cooperbench[/bold] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.console.is_terminal,
        )
        self.bar.start()
        task = self.bar.add_task("pairs", total=self.total)

        def advance(label: str) -> None:
            self.bar.update(task, advance=1, description=label)

        return advance

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


# ---------------------------------------------------------------------------------------------------------
# Summary, table, plot
# ---------------------------------------------------------------------------------------------------------
def summarize(pairs: list[dict[str, Any]], modes: list[str]) -> dict[str, Any]:
    """Per repository (and "all"): pairs, replayable pairs, and per mode the counts of the docstring."""
    out: dict[str, Any] = {}
    for rec in pairs:
        for repo in (rec["repo"], "all"):
            s = out.setdefault(
                repo, {"pairs": 0, "replayable": 0, GIT: 0, RMW: _zero(), "modes": {}, "tests_run": 0, "tests_pass": 0}
            )
            s["pairs"] += 1
            if not rec.get("replayable"):
                continue
            s["replayable"] += 1
            if rec.get("tests_pass") is not None:
                s["tests_run"] += 1
                s["tests_pass"] += int(rec["tests_pass"])
            s[GIT] += int(rec[GIT]["clean"])
            _add(s[RMW], rec[RMW])
            for m in modes:
                _add(s["modes"].setdefault(m, _zero()), rec[m])
    return out


def _zero() -> dict[str, Any]:
    return {
        "full": 0,
        "hunks": 0,
        "landed": 0,
        "already": 0,
        "wrong_place": 0,
        "lost": 0,
        "wrong_place_reread": 0,
        "lost_reread": 0,
        "refusals": {},
        "final_refusals": {},
        "same_as_git": 0,
        "differs_from_git": 0,
    }


def _add(acc: dict[str, Any], o: dict[str, Any]) -> None:
    for k in ("hunks", "landed", "already", "wrong_place", "lost", "wrong_place_reread", "lost_reread"):
        acc[k] += o.get(k, 0)
    acc["full"] += int(o["full"])
    for k in ("refusals", "final_refusals"):
        for kind, n in o[k].items():
            acc[k][kind] = acc[k].get(kind, 0) + n
    if o.get("same_as_git") is True:
        acc["same_as_git"] += 1
    elif o.get("same_as_git") is False:
        acc["differs_from_git"] += 1


def markdown_table(results: dict[str, Any], modes: list[str] | None = None) -> str:
    """Per repository: pairs, git merge-file's clean pairs, fully landed pairs per mode, hunks landed in the
    rebase + retry mode, and over every mode the wrong-place and lost landings (as sent, and in files
    where the simulated agent sent an edit again after a read); the last row sums every repository."""
    modes = modes or results["modes"]
    summary = results["summary"]
    head = [
        "repository",
        "pairs",
        "git merge-file clean",
        *modes,
        "hunks landed (rebase+retry)",
        "wrong place / lost",
        "wrong place / lost after a re-read",
        "tests of both features pass (rebase+retry)",
    ]
    rows = []
    for repo in [*sorted(k for k in summary if k != "all"), "all"]:
        s = summary.get(repo)
        if not s or not s["replayable"]:
            continue
        cells = [repo if repo != "all" else "**all**", str(s["replayable"]), str(s[GIT])]
        cells += [str(s["modes"].get(m, {}).get("full", "")) for m in modes]
        rr = s["modes"].get("rebase+retry", _zero())
        total = {k: sum(x.get(k, 0) for x in s["modes"].values()) for k in _zero() if k.startswith(("wrong", "lost"))}
        cells += [
            f"{rr['landed']:,} / {rr['hunks']:,}",
            f"{total['wrong_place']} / {total['lost']}",
            f"{total['wrong_place_reread']} / {total['lost_reread']}",
            f"{s['tests_pass']} of {s['tests_run']}" if s.get("tests_run") else "not run",
        ]
        rows.append(cells)
    return table_of(head, rows)


def plot(results: dict[str, Any], path: Path, before: dict[str, Any] | None = None) -> Path | None:
    """Fully landed pairs per repository: git merge-file's clean pairs beside the coordinator's modes (and
    the rebase + retry mode of an earlier run, `before`). None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    summary = results["summary"]
    repos = sorted(k for k in summary if k != "all" and summary[k]["replayable"])
    series: list[tuple[str, list[float]]] = [(GIT + " (clean)", [summary[r][GIT] for r in repos])]
    if before is not None:
        old = before["summary"]
        values = [old.get(r, {}).get("modes", {}).get("rebase+retry", {}).get("full", 0) for r in repos]
        series.append(("rebase+retry, before", values))
    for m in ("strict+retry", "rebase+retry", "rebase+retry shortest"):
        if m in results["modes"]:
            series.append((m, [summary[r]["modes"][m]["full"] for r in repos]))
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.8 / len(series)
    for k, (label, values) in enumerate(series):
        ax.bar([i + k * width for i in range(len(repos))], values, width, label=label)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(repos))])
    ax.set_xticklabels([r.split("/")[-1] for r in repos], rotation=30, ha="right")
    ax.set_ylabel("pairs where every hunk of both features landed")
    ax.set_title("CooperBench pairs on one shared tree: fully landed pairs per repository")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
