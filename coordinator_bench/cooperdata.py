"""CooperBench's data for the `cooperbench` scenario: the features' patches, the pairs, the base files.

CooperBench (github.com/cooperbench/CooperBench, MIT) splits real pull requests into features, each with its
own patch against one base commit of the upstream repository; two features of one task are a pair that two
agents would build at once. The dataset folder holds ``<repo>_task/task<id>/setup.sh`` (its ``BASE_COMMIT=``
and the clone URL) and ``feature<N>/feature.patch``.

The base files come from `BaseFiles`: either a folder of git repositories (a bare mirror or a clone; found by
the clone URL's ``owner+name`` or ``name``, and used only when it holds the base commit) or a plain tree per
task, ``<repos>/<repo>_task/task<id>/<path>`` (what the test fixture ships). Pure apart from reading them.

A patch is split into hunks (unified diff, as git writes it: 3 lines of context) and each hunk into blocks:
the runs of removed and added lines, each at its place in the base (`Block`). A hunk becomes one Edit: its
old lines as ``old_string``, its new lines as ``new_string`` (or, for the ``shortest`` variant, with its
context cut to the fewest lines, the same on both sides, that keep ``old_string`` unique in the base).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_URL = re.compile(r"github\.com[/:]([\w.-]+)/([\w.-]+?)(?:\.git)?[\s\"']")
_BASE = re.compile(r"BASE_COMMIT=\"?([0-9a-f]{7,40})")


@dataclass(frozen=True)
class Block:
    """Base lines ``[a, b)`` (0-based) replaced by ``new`` (a == b: an insertion before line a)."""

    a: int
    b: int
    new: tuple[str, ...]


@dataclass(frozen=True)
class Hunk:
    """One hunk of a feature's patch: where its old lines start in the base (0-based), the old and new
    lines (with their line ends), and its blocks."""

    path: str
    start: int
    old: tuple[str, ...]
    new: tuple[str, ...]
    blocks: tuple[Block, ...]

    def edit(self, base_text: str, shortest: bool = False) -> tuple[str, str]:
        """(old_string, new_string) of the Edit that makes this hunk: its whole context, or the shortest
        context (the same number of lines each side, 0-3) that makes old_string unique in the base."""
        if not shortest:
            return "".join(self.old), "".join(self.new)
        lead = _common_lead(self.old, self.new)
        trail = _common_lead(self.old[lead:][::-1], self.new[lead:][::-1])
        for k in range(0, max(lead, trail) + 1):
            lo, hi_old, hi_new = lead - min(k, lead), len(self.old) - trail + min(k, trail), len(self.new) - trail
            old = "".join(self.old[lo:hi_old])
            if old and base_text.count(old) == 1:
                new = "".join(self.new[lo : hi_new + min(k, trail)])
                return old, new
        return "".join(self.old), "".join(self.new)


def _common_lead(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


@dataclass
class FilePatch:
    path: str
    created: bool = False
    deleted: bool = False
    binary: bool = False
    hunks: list[Hunk] = field(default_factory=list)


@dataclass(frozen=True)
class Feature:
    task: str  # "pallets_click_task/task2068"
    number: int
    files: tuple[FilePatch, ...]

    @property
    def name(self) -> str:
        return f"{self.task}/feature{self.number}"


@dataclass(frozen=True)
class Task:
    repo_dir: str  # "pallets_click_task"
    task_id: str  # "task2068"
    base_commit: str
    owner: str
    name: str
    features: tuple[Feature, ...]

    @property
    def key(self) -> str:
        return f"{self.repo_dir}/{self.task_id}"

    def pairs(self) -> list[tuple[Feature, Feature]]:
        return list(combinations(self.features, 2))


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    last = parts.pop()
    out = [p + "\n" for p in parts]
    if last:
        out.append(last)
    return out


def parse_patch(text: str) -> list[FilePatch]:
    """The files of a unified diff (git's format), with their hunks and blocks."""
    files: list[FilePatch] = []
    lines = _lines(text)
    i = 0
    cur: FilePatch | None = None
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            cur = FilePatch(path=line.split(" b/", 1)[-1].rstrip("\n"))
            files.append(cur)
        elif cur is not None and line.startswith("new file mode"):
            cur.created = True
        elif cur is not None and line.startswith("deleted file mode"):
            cur.deleted = True
        elif cur is not None and (line.startswith("Binary files") or line.startswith("GIT binary patch")):
            cur.binary = True
        elif cur is not None and line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
            cur.path = line[4:].rstrip("\n").removeprefix("b/")
        elif cur is not None and line.startswith("@@"):
            hunk, i = _parse_hunk(cur.path, lines, i)
            cur.hunks.append(hunk)
            continue
        i += 1
    return files


def _parse_hunk(path: str, lines: list[str], i: int) -> tuple[Hunk, int]:
    m = _HUNK.match(lines[i])
    assert m is not None, lines[i]
    old_n = int(m.group(2)) if m.group(2) is not None else 1
    new_n = int(m.group(4)) if m.group(4) is not None else 1
    start = int(m.group(1)) - (1 if old_n else 0)
    entries: list[list[str]] = []  # [tag, body]
    n_old = n_new = 0
    i += 1
    while i < len(lines):
        line = lines[i]
        tag = line[:1]
        if tag == "\\":  # "\ No newline at end of file": the line before has no line end
            if entries:
                entries[-1][1] = entries[-1][1].removesuffix("\n")
        elif n_old >= old_n and n_new >= new_n:
            break
        elif tag in (" ", "-", "+") or line == "\n":
            body = line[1:] if tag in (" ", "-", "+") else "\n"
            tag = tag if tag in ("-", "+") else " "
            entries.append([tag, body])
            n_old += tag != "+"
            n_new += tag != "-"
        else:
            break
        i += 1
    return _hunk_of(path, start, entries), i


def _hunk_of(path: str, start: int, entries: list[list[str]]) -> Hunk:
    old: list[str] = []
    new: list[str] = []
    blocks: list[Block] = []
    run: tuple[int, int, list[str]] | None = None  # (a, removed count, added lines)
    for tag, body in entries:
        if tag == " ":
            if run is not None:
                blocks.append(Block(run[0], run[0] + run[1], tuple(run[2])))
                run = None
            old.append(body)
            new.append(body)
            continue
        if run is None:
            run = (start + len(old), 0, [])
        if tag == "-":
            run = (run[0], run[1] + 1, run[2])
            old.append(body)
        else:
            run[2].append(body)
            new.append(body)
    if run is not None:
        blocks.append(Block(run[0], run[0] + run[1], tuple(run[2])))
    return Hunk(path, start, tuple(old), tuple(new), tuple(blocks))


def read_feature(dataset: Path, task: str, number: int) -> Feature:
    text = (dataset / task / f"feature{number}" / "feature.patch").read_text(encoding="utf-8", errors="surrogateescape")
    return Feature(task, number, tuple(parse_patch(text)))


def load_tasks(dataset: Path, only: list[str] | None = None) -> list[Task]:
    """Every task of the dataset folder (``<repo>_task/task<id>``), with its features in number order."""
    tasks: list[Task] = []
    for setup in sorted(dataset.glob("*/task*/setup.sh")):
        task_dir = setup.parent
        key = f"{task_dir.parent.name}/{task_dir.name}"
        if only and not any(key.startswith(o) for o in only):
            continue
        text = setup.read_text(encoding="utf-8", errors="replace")
        base = _BASE.search(text)
        url = _URL.search(text + "\n")
        owner, name = (url.group(1), url.group(2)) if url else _url_from_vars(text)
        numbers = sorted(int(p.name[7:]) for p in task_dir.glob("feature*") if (p / "feature.patch").exists())
        feats = tuple(read_feature(dataset, key, n) for n in numbers)
        if base is None or len(feats) < 2:
            continue
        tasks.append(Task(task_dir.parent.name, task_dir.name, base.group(1), owner, name, feats))
    return tasks


def _url_from_vars(text: str) -> tuple[str, str]:
    """setup.sh scripts that spell the URL with ``${REPO_OWNER}/${REPO_NAME}``."""
    owner = re.search(r"REPO_OWNER=\"?([\w.-]+)", text)
    name = re.search(r"REPO_NAME=\"?([\w.-]+)", text)
    return (owner.group(1) if owner else "", name.group(1) if name else "")


class BaseFiles:
    """The base version of a task's files, from a git repository that holds the base commit or from a plain
    tree (module docstring). `source(task)` says which, or None when neither is there."""

    def __init__(self, repos: Path) -> None:
        self.repos = repos
        self._git: dict[str, Path | None] = {}
        self._cache: dict[tuple[str, str], str | None] = {}

    def source(self, task: Task) -> str | None:
        tree = self.repos / task.repo_dir / task.task_id
        if tree.is_dir():
            return str(tree)
        git = self._git_dir(task)
        return str(git) if git is not None else None

    def _git_dir(self, task: Task) -> Path | None:
        key = f"{task.owner}/{task.name}@{task.base_commit}"
        if key not in self._git:
            found = None
            for cand in (
                self.repos / f"{task.owner}+{task.name}" / "repo",
                self.repos / f"{task.owner}+{task.name}",
                self.repos / task.name,
                self.repos / f"{task.name}.git",
            ):
                if cand.exists() and _has_commit(cand, task.base_commit):
                    found = cand
                    break
            self._git[key] = found
        return self._git[key]

    def text(self, task: Task, path: str) -> str | None:
        """The file at the base, or None when it does not exist there (or is not UTF-8 text)."""
        key = (task.key, path)
        if key not in self._cache:
            self._cache[key] = self._load(task, path)
        return self._cache[key]

    def _load(self, task: Task, path: str) -> str | None:
        tree = self.repos / task.repo_dir / task.task_id
        data: bytes | None
        if tree.is_dir():
            p = tree / path
            data = p.read_bytes() if p.is_file() else None
        else:
            git = self._git_dir(task)
            if git is None:
                return None
            done = subprocess.run(
                ["git", "--git-dir", str(git), "show", f"{task.base_commit}:{path}"], capture_output=True, check=False
            )
            data = done.stdout if done.returncode == 0 else None
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None


def _has_commit(git: Path, commit: str) -> bool:
    done = subprocess.run(
        ["git", "--git-dir", str(git), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True, check=False
    )
    return done.returncode == 0


def applies(hunk: Hunk, base_lines: list[str]) -> bool:
    """Do the hunk's old lines stand at its place in the base?"""
    return tuple(base_lines[hunk.start : hunk.start + len(hunk.old)]) == hunk.old


def located(hunk: Hunk, base_lines: list[str], base_text: str) -> Hunk | None:
    """The hunk at its place in the base: where its header says, else (as ``git apply`` does with an
    offset) at the one place its old lines occur; None when they occur nowhere or at several places."""
    if applies(hunk, base_lines):
        return hunk
    old = "".join(hunk.old)
    at = base_text.find(old)
    if not old or at < 0 or base_text.find(old, at + 1) >= 0 or (at and base_text[at - 1] != "\n"):
        return None
    start = base_text.count("\n", 0, at)
    d = start - hunk.start
    blocks = tuple(Block(b.a + d, b.b + d, b.new) for b in hunk.blocks)
    return Hunk(hunk.path, start, hunk.old, hunk.new, blocks)


def split_lines(text: str) -> list[str]:
    """Lines with their ends (a last line without one kept as it is)."""
    return _lines(text)


def splice(base_lines: list[str], blocks: list[Block]) -> str:
    """The base with `blocks` (disjoint; several insertions at one point in the given order) applied."""
    out: list[str] = []
    ordered = sorted(enumerate(blocks), key=lambda t: (t[1].a, t[1].b > t[1].a, t[0]))
    i = 0
    for _, bl in ordered:
        out.extend(base_lines[i : bl.a])
        out.extend(bl.new)
        i = max(i, bl.b)
    out.extend(base_lines[i:])
    return "".join(out)
