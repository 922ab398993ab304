"""`edit-coordinator stress`: a fleet of agent sessions (real processes) on a scratch copy, then the oracle.

By default the run works in a new temporary folder: synthetic counters files, or a copy of part of this
interpreter's standard library (markers, mixed), or a copy of `--root` when one is given. It never
touches the user's files unless `--in-place` is given with `--root`. The embedded Redis of the scratch
folder is started for the run and stopped at the end; `--redis-url` uses a real server instead.

Exit status: 0 when the oracle finds every acknowledged change in place and no torn file; 1 when it finds
a lost update, a torn file or anything else wrong; 2 for a run that could not be made (bad options, a
worker that crashed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from coordinator.layout import STATE_DIR_NAME, state_dir_of

from .agent import DEFAULT_FILES, WORKLOADS, Corpus, prepare_corpus, stdlib_sources, text_hash

CHAOS_KINDS = ("kill", "redis", "touch")
_COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".hg", ".svn", STATE_DIR_NAME, "node_modules", ".venv", "venv", "__pycache__", ".tox"
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "stress",
        help="run a fleet of agent sessions on a scratch copy and check that no update is lost",
        description=(
            "Start WORKERS agent sessions as separate processes that read, think and edit the same files "
            "through the coordinator, re-reading when their view is stale. At the end an oracle checks the "
            "files: every acknowledged edit must be there (LOST UPDATES must be 0) and no file may be torn. "
            "Runs on a scratch copy in a temporary folder unless --in-place is given."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--workers", type=int, default=8, help="worker processes, one agent session each")
    p.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="counters",
        help="counters: each session increments its own line; hot-line: all increment one line; markers: "
        "insert marker lines into real source files; mixed: insert, replace, delete, create and write",
    )
    p.add_argument(
        "--files", type=int, default=None, help="files to work on (default: 4 counters, 1 hot-line, 8 otherwise)"
    )
    p.add_argument("--skew", type=float, default=0.0, help="Zipf exponent of the file choice (0: uniform)")
    p.add_argument("--disjoint", action="store_true", help="give each worker its own share of the files")
    p.add_argument("--think-ms", type=float, default=1.0, help="mean think time between a read and its edit")
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--duration", type=float, default=None, help="seconds to run (default 10)")
    stop.add_argument("--edits", type=int, default=None, help="stop after this many acknowledged edits")
    p.add_argument("--seed", type=int, default=1, help="seed of every random choice")
    p.add_argument(
        "--chaos",
        nargs="?",
        const="kill",
        default=None,
        metavar="KINDS",
        help="inject faults, a comma-separated list of: kill (SIGKILL workers mid-edit and restart them), "
        "redis (stop and restart the embedded Redis), touch (change files' mtime only); bare --chaos: kill",
    )
    p.add_argument("--kill-every", type=float, default=0.05, help="mean seconds between two kills")
    p.add_argument("--redis-every", type=float, default=2.0, help="seconds of Redis uptime between outages")
    p.add_argument("--redis-down", type=float, default=0.6, help="seconds each Redis outage lasts")
    p.add_argument("--touch-every", type=float, default=0.01, help="mean seconds between two touches")
    p.add_argument("--redis-url", default=None, help="a real Redis server (default: the embedded one)")
    p.add_argument("--durability", choices=("fsync", "none"), default="fsync", help="fsync every write or not")
    p.add_argument(
        "--policy",
        choices=("strict", "rebase"),
        default="strict",
        help="strict: refuse every edit of a file changed since the session's view; rebase: carry an edit over "
        "changes that do not touch its lines",
    )
    p.add_argument(
        "--root",
        type=Path,
        default=None,
        help="a tree to copy as the scratch repository (markers/mixed edit its text files)",
    )
    p.add_argument(
        "--in-place",
        action="store_true",
        help="work on --root itself instead of a copy: edits its files for real",
    )
    p.add_argument("--keep", action="store_true", help="keep the scratch folder and print where it is")
    p.add_argument(
        "--unsafe",
        action="store_true",
        help="run the same workload WITHOUT the coordinator (plain read-modify-write) to see lost updates",
    )
    p.add_argument("--url", default=None, help="use a running `edit-coordinator serve` at this URL")
    p.add_argument("--token", default=None, help="with --url: the token (default $EDIT_COORDINATOR_TOKEN)")
    p.add_argument("--json", action="store_true", help="print the results as JSON, without the live display")
    p.set_defaults(func=run_stress)


class UsageError(Exception):
    """A run that cannot be made as asked; the message says why and what to do."""


def _chaos_kinds(value: str | None) -> set[str]:
    if value is None:
        return set()
    kinds = {k.strip() for k in value.split(",") if k.strip()}
    unknown = kinds - set(CHAOS_KINDS)
    if unknown:
        raise UsageError(f"unknown --chaos kind {', '.join(sorted(unknown))}; choose from {', '.join(CHAOS_KINDS)}")
    return kinds


def _check_args(args: argparse.Namespace) -> None:
    if args.workers < 1 or args.workers > 256:
        raise UsageError("--workers must be between 1 and 256.")
    if args.files is not None and args.files < 1:
        raise UsageError("--files must be at least 1.")
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be positive.")
    if args.edits is not None and args.edits < 1:
        raise UsageError("--edits must be at least 1.")
    if args.think_ms < 0 or args.skew < 0:
        raise UsageError("--think-ms and --skew cannot be negative.")
    if args.in_place and args.root is None and not args.url:
        raise UsageError("--in-place needs --root: the tree to work on for real.")
    if args.url and args.root is not None:
        raise UsageError("--root names a local tree; with --url the service's repository is used.")
    if args.root is not None and not args.root.is_dir():
        raise UsageError(f"--root {args.root} is not a folder.")
    if args.url and args.unsafe:
        raise UsageError("--unsafe runs without any coordinator; it cannot be combined with --url.")
    if args.url and args.redis_url:
        raise UsageError("--redis-url is the service's business when --url is given; drop one of them.")
    if args.url and not args.in_place:
        raise UsageError(
            "--url runs against the service's own repository: the run creates its files there (under "
            "stress-runs/). Pass --in-place to allow that, or run without --url on a scratch copy."
        )
    kinds = _chaos_kinds(args.chaos)
    if "redis" in kinds and (args.redis_url or args.url):
        raise UsageError("--chaos redis stops the embedded Redis; it cannot stop a server given by URL.")
    if kinds - {"kill"} and args.unsafe:
        raise UsageError("--unsafe uses no Redis and no coordinator; only --chaos kill applies to it.")
    if args.disjoint and (args.files or DEFAULT_FILES[args.workload]) < args.workers:
        raise UsageError("--disjoint needs at least one file per worker: raise --files.")


def run_stress(args: argparse.Namespace) -> int:
    from rich.console import Console

    err = Console(stderr=True)
    try:
        _check_args(args)
        return _run(args, err)
    except UsageError as exc:
        err.print(f"[red]stress:[/red] {exc}")
        return 2


def _run(args: argparse.Namespace, err: Any) -> int:
    from coordinator.embedded import embedded_status, ensure_embedded_redis, stop_embedded_redis
    from coordinator.errors import CoordinatorError

    from .fleet import (
        Chaos,
        ClientSpec,
        Fleet,
        FleetConfig,
        check_recovery,
        client_reader,
        make_client,
        shutdown_fork_server,
        summarize,
        verify,
    )

    kinds = _chaos_kinds(args.chaos)
    n_files = args.files or DEFAULT_FILES[args.workload]
    duration = args.duration if args.edits is None else None
    if duration is None and args.edits is None:
        duration = 10.0
    scratch: Path | None = None
    run_dir = Path(tempfile.mkdtemp(prefix="ec-stress-run-"))
    redis_started: Path | None = None
    try:
        # 1. The repository.
        if args.url:
            root = Path(tempfile.mkdtemp(prefix="ec-stress-remote-"))  # local stand-in; files live remotely
        elif args.in_place:
            root = args.root.resolve()
        else:
            scratch = Path(tempfile.mkdtemp(prefix="ec-stress-"))
            root = scratch / "repo"
            if args.root is not None:
                shutil.copytree(args.root, root, ignore=_COPY_IGNORE, symlinks=True)
            else:
                root.mkdir()
        # 2. The client and its state.
        if args.url:
            token = args.token or os.environ.get("EDIT_COORDINATOR_TOKEN")
            if not token:
                raise UsageError("--url needs --token (or $EDIT_COORDINATOR_TOKEN): a token the service accepts.")
            spec = ClientSpec("http", url=args.url, token=token)
        elif args.unsafe:
            spec = ClientSpec("unsafe", root=str(root))
        else:
            redis_url = args.redis_url
            state_dir = state_dir_of(root)
            if redis_url is None:
                was_running = embedded_status(state_dir) is not None
                redis_url = ensure_embedded_redis(state_dir)
                if not was_running:
                    redis_started = state_dir
            spec = ClientSpec(
                "coordinator", root=str(root), redis_url=redis_url, durability=args.durability, policy=args.policy
            )
        # 3. The corpus.
        try:
            if args.url:
                corpus = _remote_corpus(spec, args, n_files)
            else:
                # With --root, the marker workloads edit the text files of the tree (the copy, or in place).
                corpus = prepare_corpus(
                    root,
                    args.workload,
                    n_files,
                    args.workers,
                    args.seed,
                    in_place=args.in_place,
                    own_files=args.root is not None,
                )
        except (RuntimeError, ValueError) as exc:
            raise UsageError(str(exc)) from exc
        chaos = Chaos(
            kill_every_s=args.kill_every if "kill" in kinds else None,
            redis_every_s=args.redis_every if "redis" in kinds else None,
            redis_down_s=args.redis_down,
            touch_every_s=args.touch_every if "touch" in kinds else None,
            state_dir=str(state_dir_of(root)) if "redis" in kinds else None,
        )
        cfg = FleetConfig(
            root=str(root),
            corpus=corpus,
            client=spec,
            run_dir=str(run_dir),
            workers=args.workers,
            think_ms=args.think_ms,
            skew=args.skew,
            seed=args.seed,
            duration_s=duration,
            edits=args.edits,
            disjoint=args.disjoint,
            chaos=chaos,
        )
        # 4. The run.
        try:
            fleet = Fleet(cfg)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        show = not args.json and err.is_terminal
        run = _run_with_progress(fleet, err) if show else fleet.run()
        # 5. The oracle.
        if spec.kind == "http":
            reader_client = make_client(spec)
            try:
                report = verify(run, read=client_reader(reader_client, "stress-oracle"))
            finally:
                reader_client.close()
        else:
            report = verify(run)
            if spec.kind == "coordinator":
                check_recovery(report, str(root), corpus.files, spec.redis_url)
        summary = summarize(run)
        crashed = bool(run.worker_errors)
        where = str(root) if (args.keep or args.in_place) else None
        if args.json:
            out = {"summary": summary, "oracle": report.to_dict(), "corpus": corpus.to_dict(), "root": where}
            out["worker_errors"] = run.worker_errors
            print(json.dumps(out, indent=2))
        else:
            _print_report(summary, report, corpus, args, where, run.worker_errors)
        if crashed:
            return 2
        return 0 if report.ok else 1
    except CoordinatorError as exc:
        err.print(f"[red]stress:[/red] {exc.message}")
        return 2
    except UsageError as exc:
        err.print(f"[red]stress:[/red] {exc}")
        return 2
    finally:
        shutdown_fork_server()
        if redis_started is not None:
            with contextlib.suppress(Exception):
                stop_embedded_redis(redis_started)
        shutil.rmtree(run_dir, ignore_errors=True)
        if scratch is not None:
            if args.keep:
                err.print(f"Scratch copy kept at {scratch / 'repo'}")
            else:
                shutil.rmtree(scratch, ignore_errors=True)
        if args.url:
            shutil.rmtree(root, ignore_errors=True)


def _remote_corpus(spec: Any, args: argparse.Namespace, n_files: int) -> Corpus:
    """Create the run's files through the service, under stress-runs/<id>/, and return the corpus."""
    from .agent import counters_text, hot_text, slot_label
    from .fleet import make_client

    base = f"stress-runs/{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    slots = tuple(slot_label(i) for i in range(args.workers))
    contents: dict[str, str] = {}
    if args.workload == "counters":
        for i in range(n_files):
            contents[f"{base}/c{i:02d}.txt"] = counters_text(f"c{i:02d}", slots)
    elif args.workload == "hot-line":
        for i in range(n_files):
            contents[f"{base}/hot{i:02d}.txt"] = hot_text(f"hot{i:02d}")
    else:
        for i, src in enumerate(stdlib_sources(n_files, args.seed)):
            contents[f"{base}/{i:02d}_{src.name}"] = src.read_text(encoding="utf-8")
    client = make_client(spec)
    try:
        for rel, text in contents.items():
            client.write("stress-setup", rel, text)
    finally:
        client.close()
    return Corpus(args.workload, tuple(contents), slots, {rel: text_hash(t) for rel, t in contents.items()})


def _run_with_progress(fleet: Any, err: Any) -> Any:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    cfg = fleet.cfg
    total = cfg.edits if cfg.edits is not None else cfg.duration_s
    with Progress(
        TextColumn("[bold]stress[/bold] {task.description}"),
        BarColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as bar:
        task = bar.add_task(f"{cfg.corpus.workload}, {cfg.workers} workers", total=total, status="starting workers...")

        def update(p: Any) -> None:
            rate = p.acked / p.elapsed_s if p.elapsed_s > 0 else 0.0
            status = f"{p.acked:,} acknowledged  {p.conflicts:,} refused  {rate:,.0f}/s"
            if p.kills:
                status += f"  {p.kills} killed"
            done = p.acked if cfg.edits is not None else min(p.elapsed_s, total)
            bar.update(task, completed=done, status=status)

        run = fleet.run(progress=update)
        bar.update(task, completed=total, status="checking the files...")
    return run


def _fmt_ms(d: dict[str, float | None]) -> str:
    vals = [d.get("p50"), d.get("p95"), d.get("p99")]
    if all(v is None for v in vals):
        return "-"
    return " / ".join("-" if v is None else f"{v:.2f}" for v in vals) + " ms"


def _print_report(
    summary: dict[str, Any],
    report: Any,
    corpus: Corpus,
    args: argparse.Namespace,
    where: str | None,
    worker_errors: list[str],
) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console()
    client = {"coordinator": "through the coordinator", "unsafe": "WITHOUT the coordinator", "http": "over HTTP"}
    title = (
        f"stress: {summary['workload']}, {summary['workers']} workers, {summary['files']} files, "
        f"{summary['wall_s']:.1f} s, {client.get(summary['client'], summary['client'])}"
    )
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("", style="bold")
    t.add_column("", justify="right")
    t.add_row("attempts", f"{summary['attempts']:,}")
    t.add_row("acknowledged", f"{summary['acknowledged']:,}")
    if summary["refused"]:
        for code, n in summary["refused"].items():
            t.add_row(f"  refused: {code}", f"{n:,}")
    else:
        t.add_row("  refused", "0")
    t.add_row("conflict rate", f"{summary['conflict_rate'] * 100:.1f} %")
    t.add_row("throughput", f"{summary['throughput_per_s']:,.0f} acknowledged edits/s")
    t.add_row("latency p50 / p95 / p99", _fmt_ms(summary["latency_ms"]))
    t.add_row("lock wait p50 / p95 / p99", _fmt_ms(summary["lock_wait_ms"]))
    t.add_row("edit incl. retries p50 / p95 / p99", _fmt_ms(summary["change_latency_ms"]))
    if summary["kills"]:
        t.add_row("workers killed (SIGKILL)", f"{summary['kills']:,} ({report.in_flight} edits cut short)")
    if summary["redis_restarts"]:
        t.add_row(
            "Redis outages",
            f"{summary['redis_restarts']} ({report.refused_while_down:,} edits refused while down)",
        )
    if summary["touches"]:
        t.add_row("files touched (mtime only)", f"{summary['touches']:,}")
    t.add_row("edits verified by the oracle", f"{report.verified:,}")
    torn = len(report.torn_files)
    t.add_row("torn files / torn reads", _verdict(torn + report.torn_reads, f"{torn} / {report.torn_reads}"))
    if report.phantom_writes or report.mismatches:
        t.add_row("unexplained writes", _verdict(1, f"{report.phantom_writes + report.mismatches}"))
    if report.locks_left_held or report.stale_temp_files:
        left = f"{report.locks_left_held} / {len(report.stale_temp_files)}"
        t.add_row("locks held / temp files left", _verdict(1, left))
    t.add_row("LOST UPDATES", _verdict(report.lost_updates, f"{report.lost_updates:,}"))
    out.print(t)
    for line in report.details[:10]:
        out.print(f"  [red]-[/red] {line}")
    for e in worker_errors[:3]:
        out.print(f"[red]worker error:[/red]\n{e}")
    if where:
        out.print(f"Files: {where}")
    if report.ok and not worker_errors:
        out.print("[green]OK[/green]: every acknowledged edit is in the files, and no file is torn.")
    elif summary["client"] == "unsafe":
        out.print("[red]As expected without the coordinator: updates were lost.[/red]")


def _verdict(bad: int, text: str) -> str:
    return f"[red]{text}[/red]" if bad else f"[green]{text}[/green]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="edit-coordinator")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["stress", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
