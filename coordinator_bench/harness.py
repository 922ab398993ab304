"""The measuring harness shared by the benchmark suite and the measuring commands of scripts/.

One copy of each set-up part a measure needs (docs/measuring.md lists who uses which):

- `scratch`: a temporary folder with one or more repositories in it; on the way out every repository's
  embedded Redis is stopped and the folder removed (a measure that fails leaves no server behind);
- `counters_text` and `SlotEditor`: the 200-line counters file of the suite's solo row and the edit loop
  that increments its slot lines in turn, with the check that the file holds every acknowledged edit;
- `coordinator_bench.httpserver.HttpService`: a served coordinator (`edit-coordinator serve`) with its URL
  or unix socket and an admin token; `empty_service`: the same server (uvicorn with the service's options)
  around an ASGI app that answers every request with a fixed body, the floor any Python service pays;
- `ms`, `cpu_seconds` (coordinator_bench.measure): percentiles by the project's one definition
  (`worker.stats`), the CPU seconds of other processes;
- `instructions_of`, `instructions_per_edit`: valgrind's callgrind count of a process, and the per-edit
  difference of two runs (start-up and imports cancel out);
- `revision_tree`: a git revision of this repository (or a folder) as a folder holding its `coordinator`;
- `markdown_table`: a table in the form BENCHMARKS.md uses.

Nothing here decides anything about the coordinator; it only sets up, times and counts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.disk.layout import STATE_DIR_NAME
from coordinator_bench.measure import REPO
from coordinator_bench.scenarios import COUNTER_LINES
from worker.stats import percentile


# ---------------------------------------------------------------------------------------------------------
# A scratch folder of repositories, their embedded Redis servers stopped on the way out
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Scratch:
    """A temporary folder (`work`) and the repositories made in it; `root` is the first one."""

    work: Path
    roots: list[Path] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.roots[0]

    def repo(self, name: str = "repo", *, git: bool = False) -> Path:
        """A new repository folder `work/name` (with an empty `.git` when `git`: what makes a folder a
        repository for the hook commands); its embedded Redis is stopped at the end."""
        root = self.work / name
        (root / ".git" if git else root).mkdir(parents=True)
        self.roots.append(root)
        return root

    def redis_url(self, root: Path | None = None) -> str:
        """The embedded Redis of `root` (default: the first repository), started if none runs."""
        from coordinator.state.embedded import ensure_embedded_redis

        return ensure_embedded_redis((root or self.root) / STATE_DIR_NAME)

    def redis_pid(self, root: Path | None = None) -> int:
        """The process id of `root`'s embedded Redis server (started if none runs)."""
        from coordinator.state.embedded import embedded_status

        self.redis_url(root)
        status = embedded_status((root or self.root) / STATE_DIR_NAME)
        if status is None:
            raise RuntimeError(f"the embedded Redis of {root or self.root} is not running")
        return int(status["pid"])


@contextlib.contextmanager
def scratch(prefix: str = "ec-measure-", *, git: bool = False, short: bool = False) -> Iterator[Scratch]:
    """A scratch folder holding one repository, `repo/` (more with `Scratch.repo`). `short`: under /tmp, so
    that a unix socket's path in it stays within the 107 bytes a socket path may hold. At the end every
    repository's embedded Redis is stopped and the folder removed."""
    from coordinator.state.embedded import stop_embedded_redis

    made = Scratch(Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp" if short else None)))
    try:
        made.repo(git=git)
        yield made
    finally:
        for root in made.roots:
            with contextlib.suppress(Exception):
                stop_embedded_redis(root / STATE_DIR_NAME)
        shutil.rmtree(made.work, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------
# The counters file and the slot-after-slot edit loop
# ---------------------------------------------------------------------------------------------------------
COUNTERS_HEADER = "# counters\n"


def counters_text(values: Sequence[int]) -> str:
    """A counters file: a header line, then one `sNNN = value` line per slot."""
    return COUNTERS_HEADER + "".join(f"s{i:03d} = {v}\n" for i, v in enumerate(values))


Edit = Callable[[str, str, str], Any]


class SlotEditor:
    """Edits one counters file through `edit(path, old, new)`, incrementing its slot lines in turn (the
    suite's solo row); `landed` says whether the file holds every edit acknowledged so far."""

    def __init__(self, path: str, edit: Edit, slots: int = COUNTER_LINES) -> None:
        self.path = path
        self.edit = edit
        self.values = [0] * slots
        self.n = 0

    def write_file(self, root: Path) -> None:
        """The file as this editor starts from (every slot 0, or the values so far)."""
        (root / self.path).write_text(counters_text(self.values))

    def step(self) -> None:
        slot = self.n % len(self.values)
        v = self.values[slot]
        self.edit(self.path, f"\ns{slot:03d} = {v}\n", f"\ns{slot:03d} = {v + 1}\n")
        self.values[slot] = v + 1
        self.n += 1

    def landed(self, root: Path) -> bool:
        return (root / self.path).read_text() == counters_text(self.values)

    def check(self, root: Path, name: str = "") -> None:
        """Raise SystemExit when the file lacks an acknowledged edit: the figures would mean nothing."""
        if not self.landed(root):
            raise SystemExit(f"{name or self.path}: {self.path} does not hold the {self.n} edits acknowledged")


# ---------------------------------------------------------------------------------------------------------
# Percentiles
# ---------------------------------------------------------------------------------------------------------
def ms(values: Sequence[float], q: float) -> float:
    """The value at percentile `q` (0..100) of `values` (seconds), in milliseconds; the project's one
    percentile definition (`worker.stats`). Raises ValueError when there are no values."""
    found = percentile(values, q)
    if found is None:
        raise ValueError("no values to take a percentile of")
    return found * 1e3


# ---------------------------------------------------------------------------------------------------------
# The empty service: uvicorn with the service's options around an app that answers a fixed body
# ---------------------------------------------------------------------------------------------------------
def _empty_app(answer: bytes) -> Callable[..., Any]:
    headers = [(b"content-length", str(len(answer)).encode())]
    if answer:  # an empty answer is a bare 200, as a hook endpoint that says nothing sends it
        headers.append((b"content-type", b"application/json"))

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return app


def serve_empty(url_file: str, answer_hex: str) -> None:
    """The empty service's process (`empty_service` runs it): binds a free port, writes its URL to
    `url_file`, serves until terminated."""
    import argparse
    import socket

    import uvicorn

    from coordinator.cli.serve import _uvicorn_options

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    Path(url_file).write_text(f"http://127.0.0.1:{sock.getsockname()[1]}")
    args = argparse.Namespace(access_log=False, log_level="error", graceful_timeout=1.0)
    options = {k: v for k, v in _uvicorn_options(args, {}).items() if k != "lifespan"}
    app = _empty_app(bytes.fromhex(answer_hex))
    uvicorn.Server(uvicorn.Config(app, lifespan="off", **options)).run(sockets=[sock])


@contextlib.contextmanager
def empty_service(work: Path, answer: bytes = b"{}") -> Iterator[tuple[str, int]]:
    """A child process serving `answer` to every request (see `serve_empty`); yields (its URL, its pid)."""
    url_file = work / f"empty-{os.getpid()}-{time.monotonic_ns()}.url"
    code = f"from coordinator_bench.harness import serve_empty; serve_empty({str(url_file)!r}, {answer.hex()!r})"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not url_file.exists() or not url_file.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the empty service did not start")
            time.sleep(0.02)
        yield url_file.read_text(), proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


# ---------------------------------------------------------------------------------------------------------
# Instruction counts (valgrind's callgrind)
# ---------------------------------------------------------------------------------------------------------
COLLECTED = re.compile(r"Collected : (\d+)")


def require_valgrind() -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install -y valgrind); counting instructions needs it")


def instructions_of(
    argv: Sequence[str], env: Mapping[str, str], what: str, timeout_s: float = 1800
) -> tuple[int, subprocess.CompletedProcess[str]]:
    """The user-space instructions the process `argv` executes under callgrind (with its outcome, for the
    caller's own checks). Raises RuntimeError when it fails or valgrind reports no count."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(env), check=False, timeout=timeout_s)
    found = COLLECTED.search(out.stderr)
    if out.returncode != 0 or found is None:
        raise RuntimeError(f"{what} failed under valgrind (exit {out.returncode}): {out.stderr[-1500:]}")
    return int(found.group(1)), out


def instructions_per_edit(count: Callable[[int], int], edits: int) -> float:
    """(count(edits) - count(edits // 4)) / the difference of edits: what one more edit costs, with the
    process's start-up, imports and first calls cancelled out."""
    short = max(1, edits // 4)
    if edits <= short:
        raise ValueError("instructions per edit needs at least 2 edits")
    first = count(short)
    return (count(edits) - first) / (edits - short)


# ---------------------------------------------------------------------------------------------------------
# A revision of this repository as a folder
# ---------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def revision_tree(spec: str, repo: Path = REPO) -> Iterator[Path]:
    """A folder holding `coordinator` for `spec`: the folder itself, or a detached git worktree of the
    revision `spec` of `repo`, removed at the end."""
    folder = Path(spec)
    if folder.is_dir():
        if not (folder / "coordinator" / "__init__.py").is_file():
            raise SystemExit(f"{spec}: no coordinator package in this folder; give a folder that holds one")
        yield folder.resolve()
        return
    tmp = Path(tempfile.mkdtemp(prefix="ec-rev-")) / "tree"
    made = subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "--detach", str(tmp), spec], capture_output=True, text=True
    )
    if made.returncode != 0:
        shutil.rmtree(tmp.parent, ignore_errors=True)
        raise SystemExit(f"{spec}: neither a folder nor a revision of {repo}: {made.stderr.strip()}")
    try:
        yield tmp
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tmp)], capture_output=True)
        shutil.rmtree(tmp.parent, ignore_errors=True)  # the folder mkdtemp made around it


# ---------------------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------------------
def markdown_table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table of `rows` under `head` (cells as str() gives them; an empty cell as `| |`), ending
    with a line end."""

    def line(cells: Sequence[object]) -> str:
        return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"

    return "\n".join([line(head), "|" + "---|" * len(head), *(line(row) for row in rows)]) + "\n"
