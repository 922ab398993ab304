"""`edit-coordinator bench`: the benchmark suite, its report and its plots.

    edit-coordinator bench                    # every scenario, 3 repetitions (about an hour)
    edit-coordinator bench --quick            # a smoke test: figures from one short repetition, no verdicts
    edit-coordinator bench --scenario hot --scenario solo --reps 5
    edit-coordinator bench --scenario hot --row hot:N=4 --row hot:N=16   # some rows only
    edit-coordinator bench --report           # regenerate the plots and BENCHMARKS.md from the results

A run writes `<out>/<scenario>.json` for each scenario and the plots; `--report` writes the generated part
of BENCHMARKS.md (between `<!-- bench:begin -->` and `<!-- bench:end -->`; the rest of the file is left as
it is) from whatever results are in `--out`. Exit status: 0 when the oracle found no lost update in any
coordinator cell, 1 when it found one, 2 when the suite could not run or a coordinator cell did no work (a
repetition that acknowledged nothing, e.g. every call refused).

Timed figures move with the machine's load, and the verdicts made from them with it: when the 1-minute load
average is above half a task per core as the run begins, or the hypervisor steals over 5 % of the CPU time
during it, the command says so before the run and after the verdicts, and points to the figures load does
not move (callgrind instruction counts, `scripts/engine_ab.py --instructions`).

The plots need matplotlib, an optional extra (`pip install -e ".[bench]"`); without it the suite runs,
writes its figures and tables, and says how to get the plots. A scenario whose columns this build or
machine cannot run (no `AsyncClient` yet, no Debian redis-server for Sentinel and Cluster) is skipped with
the reason, in the summary and in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator_bench.scenarios import DEFAULT_DURATION_S, QUICK_DURATION_S, scenario_names

QUICK_DIR_NAME = "quick"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="run the benchmark suite (throughput, conflicts, lost updates) against the baselines",
        description=(
            f"Run the benchmark scenarios ({', '.join(scenario_names())}) through the coordinator and the "
            "baselines (unsafe: no lock; naive-lock: a redis-py Lock plus an mtime check), side by side, "
            "repetitions interleaved. Writes one JSON per scenario and the plots into --out; --report "
            "regenerates the generated part of BENCHMARKS.md from them. --quick prints figures, no verdicts."
        ),
    )
    p.add_argument(
        "--quick", action="store_true", help="smoke test: few cells, one short repetition; figures, no verdicts"
    )
    p.add_argument(
        "--scenario",
        action="append",
        choices=[*scenario_names(), "cooperbench"],
        default=None,
        metavar="NAME",
        help=f"run only this scenario (repeatable): {', '.join(scenario_names())}; or cooperbench (alone: "
        "CooperBench's pairs of features replayed on one shared tree, with --dataset and --repos)",
    )
    p.add_argument(
        "--dataset",
        type=Path,
        default=None,
        help="cooperbench: CooperBench's dataset folder (<repo>_task/task<id>/feature<N>/feature.patch, setup.sh)",
    )
    p.add_argument(
        "--repos",
        type=Path,
        default=None,
        help="cooperbench: a folder of the upstream repositories (git dirs named owner+name[/repo] or name, "
        "holding the base commits) or of plain base trees (<repo>_task/task<id>/<path>)",
    )
    p.add_argument(
        "--task",
        action="append",
        default=None,
        metavar="PREFIX",
        help="cooperbench: only the tasks whose key (e.g. pallets_click_task/task2068) starts with this",
    )
    p.add_argument(
        "--max-pairs", type=int, default=None, help="cooperbench: at most this many pairs per task (the first ones)"
    )
    p.add_argument(
        "--tests",
        action="store_true",
        help="cooperbench: run both features' tests on every pair rebase+retry fully landed, where the task's "
        "tests pass on its base tree with this interpreter (git dirs in --repos only)",
    )
    p.add_argument(
        "--row",
        action="append",
        default=None,
        metavar="SCENARIO:ROW",
        help="run only this row of a scenario (repeatable; e.g. hot:N=16); other scenarios keep all their rows",
    )
    p.add_argument(
        "--reps",
        type=int,
        default=None,
        help="repetitions per cell (default 3; disjoint and scale, whose targets compare rows, run 2 more; --quick: 1)",
    )
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        help=f"seconds per cell (default {DEFAULT_DURATION_S:g}; --quick: {QUICK_DURATION_S:g})",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for the results and plots (default: coordinator_bench/results in a source checkout, else "
        "./bench-results; --quick: its quick/ subfolder)",
    )
    p.add_argument(
        "--column",
        action="append",
        default=None,
        metavar="NAME",
        help="run only this column (repeatable): unsafe, naive-lock, strict-none, strict-fsync, rebase-none, "
        "rebase-fsync, http-plain, http-strict-none, http-uds, redis-server, redis-sentinel, redis-cluster, async",
    )
    p.add_argument("--no-http", action="store_true", help="leave out the HTTP column even if the service is installed")
    p.add_argument("--no-profile", action="store_true", help="do not profile the cells of missed targets")
    p.add_argument(
        "--report",
        action="store_true",
        help="run nothing: regenerate the plots and BENCHMARKS.md's generated part from the results in --out",
    )
    p.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="the file --report writes (default: the checkout's BENCHMARKS.md, else ./BENCHMARKS.md)",
    )
    p.set_defaults(func=run_bench)


def _default_out(quick: bool) -> Path:
    from coordinator_bench.measure import default_results_dir

    base = default_results_dir()
    return base / QUICK_DIR_NAME if quick else base


def run_bench(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from coordinator_bench.plots import matplotlib_missing

    err = cmd_common.console(stderr=True)
    missing = matplotlib_missing()
    if missing:
        err.print(f"[yellow]bench:[/yellow] {escape(missing)}")
    out: Path = args.out or _default_out(args.quick)
    if args.scenario and "cooperbench" in args.scenario:
        return _cooperbench(args, err)
    if args.report:
        return _report(out, args.markdown, err)
    from coordinator_bench.scenarios import only_rows, select
    from coordinator_bench.suite import SuiteOptions, run_suite

    try:
        scenarios = only_rows(select(args.scenario, args.quick), args.row)
    except ValueError as exc:
        err.print(f"[red]bench:[/red] {exc}")
        return 2
    reps = args.reps if args.reps is not None else (1 if args.quick else 3)
    duration = args.duration if args.duration is not None else (QUICK_DURATION_S if args.quick else DEFAULT_DURATION_S)
    if reps < 1 or duration <= 0:
        err.print("[red]bench:[/red] --reps must be at least 1 and --duration positive.")
        return 2
    if args.quick and args.out is None:
        # Quick results are a smoke test, not figures to keep: their default folder ignores itself in git.
        out.mkdir(parents=True, exist_ok=True)
        (out / ".gitignore").write_text("*\n")
    load = _LoadWatch(err)
    reporter = ProgressReporter(err)
    opts = SuiteOptions(
        scenarios=scenarios,
        reps=reps,
        duration_s=duration,
        out=out,
        quick=args.quick,
        with_http=not args.no_http,
        columns=args.column,
        profile_missed=not args.no_profile and not args.quick,
        reporter=reporter,
    )
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    t0 = time.monotonic()
    try:
        with reporter:
            results = run_suite(opts)
    except KeyboardInterrupt:
        err.print("[yellow]bench: interrupted; the scenarios finished so far are saved.[/yellow]")
        return 130
    except Exception as exc:  # the suite could not run: say why, briefly
        err.print(f"[red]bench: the suite could not run:[/red] {type(exc).__name__}: {exc}")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    return _conclude(results, out, time.monotonic() - t0, load, err)


def _conclude(results: list[dict[str, Any]], out: Path, elapsed_s: float, load: _LoadWatch, err: Any) -> int:
    """The plots, the summary with its verdicts, the load warning, and the exit status."""
    from coordinator_bench.plots import make_plots

    plots = make_plots(results, out)
    from coordinator_bench.summary import print_summary

    lost = print_summary(results, out, plots, elapsed_s)
    load.after()  # again after the verdicts, where it is read
    if lost:
        return 1
    idle = idle_coordinator_cells(results)
    if idle:
        err.print(
            f"[red]bench: {len(idle)} coordinator cell(s) acknowledged no edit in a repetition "
            f"({', '.join(idle[:5])}): a run that did no work proves nothing; see the refusal codes in the "
            "results.[/red]"
        )
        return 2
    return 0


def _cooperbench(args: argparse.Namespace, err: Any) -> int:
    """`bench --scenario cooperbench`: the replay of coordinator_bench/cooperbench.py. Exit 1 when an edit
    was lost or landed at a wrong place, 2 when it could not run or replayed no pair."""
    from coordinator_bench import cooperbench

    if args.scenario != ["cooperbench"] or args.dataset is None or args.repos is None:
        err.print("[red]bench:[/red] --scenario cooperbench runs alone and needs --dataset and --repos.")
        return 2
    out: Path = (args.out or _default_out(False)) / "cooperbench"
    opts = cooperbench.RunOptions(
        dataset=args.dataset,
        repos=args.repos,
        out=out,
        only=args.task,
        max_pairs=args.max_pairs,
        progress=err,
        tests=args.tests,
    )
    results = cooperbench.run(opts)
    total = results["summary"].get("all")
    if not total or not total["replayable"]:
        err.print(f"[red]bench:[/red] no pair could be replayed from {args.dataset} with {args.repos}.")
        return 2
    png = cooperbench.plot(results, out / "bench-cooperbench.png")
    print(cooperbench.markdown_table(results), end="")
    if results["repos_missing"]:
        print(f"Not found under {args.repos}: {', '.join(results['repos_missing'])}")
    print(f"Results: {out / 'cooperbench.json'}" + (f"; plot: {png}" if png else ""))
    bad = sum(m["wrong_place"] + m["lost"] for m in total["modes"].values())
    return 1 if bad else 0


class _LoadWatch:
    """Says when the machine is loaded (`measure.load_warning`): before the run, from the load average, and
    after it, with the share of CPU time the hypervisor stole meanwhile."""

    def __init__(self, err: Any) -> None:
        from coordinator_bench.measure import current_load, machine_cpu_ticks

        self.err = err
        self.loadavg, self.cpus = current_load()
        self.ticks = machine_cpu_ticks()
        self._say(during=False)

    def after(self) -> None:
        self._say(during=True)

    def _say(self, *, during: bool) -> None:
        from rich.markup import escape

        from coordinator_bench.measure import load_warning, machine_busy, machine_cpu_ticks

        busy = machine_busy(self.ticks, machine_cpu_ticks()) if during else None
        warning = load_warning(self.loadavg, self.cpus, busy["steal"] if busy else None, during=during)
        if warning:
            self.err.print(f"[yellow]bench: {escape(warning)}[/yellow]")


def idle_coordinator_cells(results: list[dict[str, Any]]) -> list[str]:
    """The coordinator cells (scenario/row/column) of which a repetition acknowledged nothing: every call
    refused, or none made. They make the run fail like a lost update would (exit 2, the rule of
    `worker.verdict`)."""
    idle = []
    for res in results:
        if res.get("skipped"):
            continue
        coord = {c["name"] for c in res["columns"] if c["kind"] in ("coordinator", "http", "async")}
        for c in res["cells"]:
            if c["column"] in coord and any(not r.get("acknowledged") for r in c.get("reps", [])):
                idle.append(f"{res['scenario']['name']}/{c['row']}/{c['column']}")
    return idle


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _report(out: Path, markdown: Path | None, err: Any) -> int:
    from coordinator_bench.measure import default_markdown
    from coordinator_bench.plots import make_plots
    from coordinator_bench.report import write_report
    from coordinator_bench.suite import load_results

    results = load_results(out)
    if not results:
        err.print(f"[red]bench --report:[/red] no results in {out}; run `edit-coordinator bench` first.")
        return 2
    plots = make_plots(results, out)
    path = write_report(results, markdown or default_markdown(), plots, out)
    err.print(f"Wrote the generated part of {path} from {len(results)} scenario results in {out}.")
    return 0


class ProgressReporter:
    """A rich progress bar over the cells of the suite, with the running cell's live figures."""

    def __init__(self, console: Any) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.progress = Progress(
            TextColumn("[bold]bench[/bold] {task.description}", table_column=None),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=console,
            transient=False,
            disable=not console.is_terminal,
        )
        self.task: Any = None
        self.label = ""
        self.last_print = 0.0

    def __enter__(self) -> ProgressReporter:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def plan(self, total_cells: int) -> None:
        self.task = self.progress.add_task("starting", total=total_cells, status="")

    def cell_started(self, scenario: str, row: str, column: str, rep: int, duration_s: float) -> None:
        rep_s = f"rep {rep + 1}" if rep >= 0 else "profile"
        self.label = f"{scenario} {row} {column} ({rep_s})"
        if self.task is not None:
            self.progress.update(self.task, description=self.label, status="starting workers")
        if not self.console.is_terminal:
            now = time.monotonic()
            if now - self.last_print > 30:
                self.last_print = now
                self.console.print(f"bench: {self.label}")

    def fleet_progress(self, p: Any) -> None:
        if self.task is not None:
            rate = p.acked / p.elapsed_s if p.elapsed_s > 0 else 0.0
            self.progress.update(self.task, status=f"{p.acked:,} acked, {p.conflicts:,} refused, {rate:,.0f}/s")

    def cell_done(self, record: dict[str, Any]) -> None:
        if self.task is not None and record.get("rep", 0) >= 0:
            self.progress.advance(self.task)
            lost = record.get("lost_updates") or 0
            self.progress.update(self.task, status=f"last: {record['throughput_per_s']:,.0f}/s, lost {lost:,}")

    def note(self, text: str) -> None:
        from rich.markup import escape

        self.progress.console.print(f"[dim]bench: {escape(text)}[/dim]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="edit-coordinator")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
