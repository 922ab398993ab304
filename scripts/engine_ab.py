"""Two engines side by side: the solo bare loop, one process per side, the processes alternated (issue 14).

    python3 scripts/engine_ab.py A B [--runs 6] [--edits 1500] [--reps 5]
    python3 scripts/engine_ab.py A B --instructions [--edits 400]

A and B are each a git revision of this repository (checked out into a temporary worktree, removed at the
end) or a folder that holds the `coordinator` package (a worktree, a build with compiled modules). Each
run starts one process per side, in turn, the order alternating (A B, B A, A B, ...) so that a drift of
the machine's speed hits both sides alike. A process makes `--reps` repetitions of `--edits` consecutive
edits of a 200-line counters file (one session, durability none, the embedded Redis; each edit increments
the next slot line, as the bench's solo row does), checks that the file holds every edit it made, and
prints per edit the best repetition's wall and CPU time and the median repetition's wall time.

Printed: each process's figures as they come, then per side the median over the runs, the ratio B / A of
the best-repetition wall time, and in how many runs B was faster than A. A process that fails, or whose
file lacks an edit, fails the command. This is how the "side by side" figures of the bench analysis are
made: on a shared machine two engines can only be compared in one run, interleaved. A command, not a
test: with the defaults it takes about a minute.

`--instructions` counts instead of timing: each side's process runs under valgrind's callgrind, once
with `--edits` edits and once with a quarter of them (one repetition each), and the difference of the
user-space instructions the two processes executed, divided by the difference of their edits, is the
side's instructions per edit (start-up, imports and the first read cancel out). The kernel's work (the
system calls themselves) is not counted, nor the Redis server's. The count does not depend on what else
the machine is doing (seen here: the same figure within 0.5 % over runs, with the other core busy or
not), so one process per side is enough, and a change of the engine's own work shows up even on a
machine too noisy for the timed runs. It takes about half a minute per side with 400 edits.

Only public names are used in the child (`Coordinator`, `session`, `read`, `edit`,
`coordinator.state.embedded`), so any revision of the last rounds can be measured against the current one. Each
child checks that the `coordinator` it imported is the side's own (an installed copy found first would
measure the wrong engine) and fails otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SLOTS = 200
SIDE_ENV = "EDIT_COORDINATOR_AB_SIDE"  # the side's folder, which the child checks it imported from


@dataclass(frozen=True)
class Sample:
    """One process's figures, in microseconds per edit."""

    best_wall_us: float
    best_cpu_us: float
    median_wall_us: float
    edits: int


def counters_text(values: Sequence[int]) -> str:
    """coordinator_bench.harness.counters_text, written again here: the child runs on the side's own tree,
    whose coordinator_bench may be older than the harness."""
    return "# counters\n" + "".join(f"s{i:03d} = {v}\n" for i, v in enumerate(values))


def child(edits: int, reps: int) -> int:
    """The measured loop, in the side's own process (its `coordinator` is the one on PYTHONPATH)."""
    import coordinator
    from coordinator import Coordinator
    from coordinator.state.embedded import ensure_embedded_redis, stop_embedded_redis

    side = Path(os.environ.get(SIDE_ENV, "/")).resolve()
    if not Path(coordinator.__file__).resolve().is_relative_to(side):
        print(json.dumps({"error": f"imported {coordinator.__file__}, not the side's own package in {side}"}))
        return 1

    root = Path(tempfile.mkdtemp(prefix="ec-ab-")) / "repo"
    root.mkdir()
    values = [0] * SLOTS
    (root / "c.txt").write_text(counters_text(values))
    state = root / ".edit-coordinator"
    url = ensure_embedded_redis(state)
    reps_us: list[tuple[float, float]] = []
    k = 0
    try:
        with Coordinator(root, url, durability="none") as coord:
            session = coord.session("ab")
            session.read("c.txt", limit=SLOTS + 10)
            for _ in range(reps):
                r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                for _ in range(edits):
                    i = k % SLOTS
                    session.edit("c.txt", f"\ns{i:03d} = {values[i]}\n", f"\ns{i:03d} = {values[i] + 1}\n")
                    values[i] += 1
                    k += 1
                wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
                cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
                reps_us.append((wall / edits * 1e6, cpu / edits * 1e6))
        landed = (root / "c.txt").read_text() == counters_text(values)
    finally:
        stop_embedded_redis(state)
        shutil.rmtree(root.parent, ignore_errors=True)  # the scratch folder, with its history
    if not landed:
        print(json.dumps({"error": "the file does not hold every edit this process made"}))
        return 1
    best = min(reps_us)
    median_wall = statistics.median(w for w, _ in reps_us)
    print(json.dumps({"best_wall_us": best[0], "best_cpu_us": best[1], "median_wall_us": median_wall, "edits": k}))
    return 0


def run_side(folder: Path, edits: int, reps: int) -> Sample:
    """One process of one side; raises RuntimeError with its output when it fails."""
    env = {**os.environ, "PYTHONPATH": str(folder), SIDE_ENV: str(folder)}
    args = [sys.executable, __file__, "--child", "--edits", str(edits), "--reps", str(reps)]
    out = subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=600)
    data = _outcome(out, folder, "")
    return Sample(data["best_wall_us"], data["best_cpu_us"], data["median_wall_us"], int(data["edits"]))


def _outcome(out: subprocess.CompletedProcess[str], folder: Path, how: str) -> dict[str, float]:
    """The figures a child printed (its last line, JSON); raises RuntimeError when it failed."""
    lines = out.stdout.strip().splitlines()
    data = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    if out.returncode != 0 or "error" in data or not data:
        why = data.get("error") or out.stderr.strip()[-1500:] or f"exit status {out.returncode}"
        raise RuntimeError(f"the process for {folder} failed{how}: {why}")
    return data


def count_side(folder: Path, edits: int) -> float:
    """Instructions per edit of `folder`'s engine (module docstring, `--instructions`): processes of
    `edits` and of a quarter of them. Raises RuntimeError when a process fails or valgrind reports no
    count."""
    from coordinator_bench.harness import instructions_of, instructions_per_edit

    env = {**os.environ, "PYTHONPATH": str(folder), SIDE_ENV: str(folder), "PYTHONHASHSEED": "0"}

    def count(n: int) -> int:
        argv = [sys.executable, __file__, "--child", "--edits", str(n), "--reps", "1"]
        found, out = instructions_of(argv, env, f"the process for {folder}")
        _outcome(out, folder, " under valgrind")
        return found

    return instructions_per_edit(count, edits)


def instructions(sides: Sequence[str], folders: Sequence[Path], edits: int) -> int:
    """`--instructions`: each side counted once, then the ratio."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install -y valgrind); --instructions needs it")
    per_edit = []
    for name, folder in zip(sides, folders, strict=True):
        try:
            ir = count_side(folder, edits)
        except RuntimeError as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
        per_edit.append(ir)
        print(f"{name}: {ir:,.0f} instructions per edit ({edits} and {max(1, edits // 4)} edits)", flush=True)
    print(f"B / A {per_edit[1] / per_edit[0]:.3f} (instructions per edit)")
    return 0


def order(runs: int) -> list[tuple[int, int]]:
    """The sides' turns: (run, side) with the side first in a run alternating, A first in run 0."""
    return [(r, s if r % 2 == 0 else 1 - s) for r in range(runs) for s in (0, 1)]


def summary(a: Sequence[Sample], b: Sequence[Sample]) -> dict[str, float]:
    """Medians over the runs of each side, the B / A ratio of the best-repetition wall time, and the runs
    (paired by index) in which B's best repetition was faster."""

    def med(xs: Sequence[Sample], field: str) -> float:
        return float(statistics.median(getattr(x, field) for x in xs))

    return {
        "a_best_wall_us": med(a, "best_wall_us"),
        "b_best_wall_us": med(b, "best_wall_us"),
        "a_best_cpu_us": med(a, "best_cpu_us"),
        "b_best_cpu_us": med(b, "best_cpu_us"),
        "a_median_wall_us": med(a, "median_wall_us"),
        "b_median_wall_us": med(b, "median_wall_us"),
        "ratio": med(b, "best_wall_us") / med(a, "best_wall_us"),
        "b_faster": float(sum(1 for x, y in zip(a, b, strict=True) if y.best_wall_us < x.best_wall_us)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sides", nargs="*", metavar="A B", help="two revisions or folders")
    ap.add_argument("--runs", type=int, default=6, help="processes per side (default 6)")
    ap.add_argument("--edits", type=int, help="edits per repetition (default 1500; --instructions: 400)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions per process (default 5)")
    ap.add_argument("--instructions", action="store_true", help="count instructions under valgrind, once per side")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.edits is None:
        args.edits = 400 if args.instructions else 1500
    if args.child:
        return child(args.edits, args.reps)
    if len(args.sides) != 2 or args.runs < 1 or args.edits < 1 or args.reps < 1:
        ap.error("give two sides (A B), and --runs, --edits, --reps of at least 1")
    if args.instructions and args.edits < 2:
        ap.error("--instructions needs --edits of at least 2")
    from coordinator_bench.harness import revision_tree  # here, not at the top: the child runs another tree

    with revision_tree(args.sides[0]) as fa, revision_tree(args.sides[1]) as fb:
        if args.instructions:
            return instructions(args.sides, (fa, fb), args.edits)
        got: tuple[list[Sample], list[Sample]] = ([], [])
        for run, side in order(args.runs):
            try:
                s = run_side((fa, fb)[side], args.edits, args.reps)
            except RuntimeError as exc:
                print(f"FAILED: {exc}", file=sys.stderr)
                return 1
            got[side].append(s)
            print(
                f"run {run + 1} {'AB'[side]}: best {s.best_wall_us:6.1f} us wall, {s.best_cpu_us:6.1f} us CPU; "
                f"median {s.median_wall_us:6.1f} us ({s.edits} edits)",
                flush=True,
            )
    f = summary(*got)
    print(f"A {args.sides[0]}: best {f['a_best_wall_us']:.1f} us wall, {f['a_best_cpu_us']:.1f} us CPU, "
          f"median {f['a_median_wall_us']:.1f} us (medians over {args.runs} runs)")  # fmt: skip
    print(f"B {args.sides[1]}: best {f['b_best_wall_us']:.1f} us wall, {f['b_best_cpu_us']:.1f} us CPU, "
          f"median {f['b_median_wall_us']:.1f} us")  # fmt: skip
    print(f"B / A {f['ratio']:.3f} (best-repetition wall); B faster in {int(f['b_faster'])} of {args.runs} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
