"""`edit-coordinator stress`: a fleet of agent sessions (real processes) on a scratch copy, then the oracle.

By default the run works in a new temporary folder: synthetic counters files, or a copy of part of this
interpreter's standard library (markers, mixed), or a copy of `--root` when one is given. It never
touches the user's files unless `--in-place` is given with `--root`. The embedded Redis of the scratch
folder is started for the run and stopped at the end; `--redis-url` uses a real server instead.

Before any worker starts, one read goes through the run's own client, so that an unreachable Redis or
service is reported as such. Exit status (the rule is `worker.verdict`'s, shared with `bench`): 0 when
edits were acknowledged and the oracle found every one of them in place, no file torn; 1 when it found a
lost update, a torn file or anything else wrong; 2 for a run that could not be made or did no work (bad
options, Redis unreachable, a worker that crashed, nothing acknowledged). `--unsafe` is a demonstration:
0 when it showed loss, 1 when it did not. Ctrl-C stops the workers and prints the report of the run so far
(exit status 130 unless it shows something wrong).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from coordinator.cli import common as cmd_common
from coordinator.disk.layout import STATE_DIR_NAME, state_dir_of
from worker.agent import DEFAULT_FILES, WORKLOADS, Corpus, prepare_corpus, stdlib_sources, text_hash
from worker.verdict import NO_WORK, Verdict, judge

INTERRUPTED = 130  # the exit status of a run stopped by Ctrl-C whose partial results showed nothing wrong

CHAOS_KINDS = ("kill", "redis", "touch")
_COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".hg", ".svn", STATE_DIR_NAME, "node_modules", ".venv", "venv", "__pycache__", ".tox"
)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Appends "(default: X)" to an option's help once: not when the help already names its default, nor for
    flags and options whose default is "not given". The epilog keeps its line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


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
        epilog=EPILOG,
        formatter_class=_HelpFormatter,
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
    cmd_common.add_redis(p)
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
        help="run the same workload WITHOUT the coordinator (plain read-modify-write), to demonstrate the lost "
        "updates it prevents; exits 0 when loss was shown (see below)",
    )
    p.add_argument("--url", default=None, help="use a running `edit-coordinator serve` at this URL")
    p.add_argument("--token", default=None, help="with --url: the token (default $EDIT_COORDINATOR_TOKEN)")
    p.add_argument(
        "--ca-file",
        default=os.environ.get("EDIT_COORDINATOR_CA_FILE") or None,
        metavar="FILE",
        help="with an https:// --url: the CA file its certificate is checked against (default "
        "$EDIT_COORDINATOR_CA_FILE)",
    )
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
    _check_numbers(args)
    _check_combinations(args)


def _check_numbers(args: argparse.Namespace) -> None:
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


def _check_combinations(args: argparse.Namespace) -> None:
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
    err = cmd_common.console(stderr=True)
    try:
        _check_args(args)
        return _run(args, err)
    except UsageError as exc:
        err.print(f"[red]stress:[/red] {exc}")
        return NO_WORK


class _Scratch:
    """The folders of one run and the embedded Redis it started; `close()` removes what the run made."""

    def __init__(self, args: argparse.Namespace, err: Any) -> None:
        self.args = args
        self.err = err
        self.run_dir = Path(tempfile.mkdtemp(prefix="ec-stress-run-"))
        self.scratch: Path | None = None
        self.redis_started: Path | None = None
        if args.url:
            self.root = Path(tempfile.mkdtemp(prefix="ec-stress-remote-"))  # local stand-in; files live remotely
        elif args.in_place:
            self.root = args.root.resolve()
        else:
            self.scratch = Path(tempfile.mkdtemp(prefix="ec-stress-"))
            self.root = self.scratch / "repo"
            if args.root is not None:
                shutil.copytree(args.root, self.root, ignore=_COPY_IGNORE, symlinks=True)
            else:
                self.root.mkdir()

    def client_spec(self) -> Any:
        from coordinator.state.embedded import embedded_status, ensure_embedded_redis
        from worker.fleet import ClientSpec

        args = self.args
        if args.url:
            token = args.token or os.environ.get("EDIT_COORDINATOR_TOKEN")
            if not token:
                raise UsageError("--url needs --token (or $EDIT_COORDINATOR_TOKEN): a token the service accepts.")
            return ClientSpec("http", url=args.url, token=token, ca_file=args.ca_file)
        if args.unsafe:
            return ClientSpec("unsafe", root=str(self.root))
        redis_url = args.redis_url
        if redis_url is None:
            state_dir = state_dir_of(self.root)
            was_running = embedded_status(state_dir) is not None
            redis_url = ensure_embedded_redis(state_dir)
            if not was_running:
                self.redis_started = state_dir
        return ClientSpec(
            "coordinator", root=str(self.root), redis_url=redis_url, durability=args.durability, policy=args.policy
        )

    def close(self) -> None:
        from coordinator.state.embedded import stop_embedded_redis
        from worker.fleet import shutdown_fork_server

        shutdown_fork_server()
        if self.redis_started is not None:
            with contextlib.suppress(Exception):
                stop_embedded_redis(self.redis_started)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.scratch is not None:
            if self.args.keep:
                self.err.print(f"Scratch copy kept at {self.scratch / 'repo'}")
            else:
                shutil.rmtree(self.scratch, ignore_errors=True)
        if self.args.url:
            shutil.rmtree(self.root, ignore_errors=True)


def _run(args: argparse.Namespace, err: Any) -> int:
    from coordinator.errors import CoordinatorError
    from worker.fleet import FleetInterrupted

    work: _Scratch | None = None
    try:
        work = _Scratch(args, err)
        spec = work.client_spec()
        corpus = _corpus(work.root, spec, args)
        _preflight(spec, corpus)
        loads = _redis_loads(spec)
        interrupted = False
        try:
            run = _fleet_run(work, spec, corpus, args, err)
        except FleetInterrupted as stopped:  # Ctrl-C: the workers are stopped; judge and report what they did
            run, interrupted = stopped.run, True
        shards = _shard_rows(spec, loads, run)
        report = _oracle(run, spec, work.root, corpus)
        # With --url the local root is a stand-in that close() removes: the files are the service's.
        where = str(work.root) if (args.keep or args.in_place) and not args.url else None
        if args.url:
            folder = corpus.created_dir.rsplit("/", 1)[0]
            err.print(f"The run's files are under {folder}/ in the service's repository (git ignores {RUNS_DIR}/).")
        return _conclude(run, report, corpus, args, where, shards, interrupted=interrupted)
    except CoordinatorError as exc:
        err.print(f"[red]stress:[/red] {exc.message}")
        return NO_WORK
    except UsageError as exc:
        err.print(f"[red]stress:[/red] {exc}")
        return NO_WORK
    finally:
        if work is not None:
            work.close()


def _corpus(root: Path, spec: Any, args: argparse.Namespace) -> Corpus:
    n_files = args.files or DEFAULT_FILES[args.workload]
    try:
        if args.url:
            return _remote_corpus(spec, args, n_files)
        # With --root, the marker workloads edit the text files of the tree (the copy, or in place).
        return prepare_corpus(
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


def _preflight(spec: Any, corpus: Corpus) -> None:
    """One read through the run's own client before any worker starts, so that an unreachable Redis or
    service is reported as such (exit 2) instead of as a fleet whose every call was refused."""
    from coordinator.errors import CoordinatorError
    from worker.fleet import make_client

    if spec.kind == "unsafe" or not corpus.files:
        return
    where = spec.url if spec.kind == "http" else (spec.redis_url or "the embedded Redis")
    try:
        client = make_client(spec)
    except CoordinatorError as exc:
        raise UsageError(f"cannot start the coordinator on {where}: {exc.message}") from exc
    try:
        client.read("stress-preflight", corpus.files[0], limit=1)
    except CoordinatorError as exc:
        raise UsageError(
            f"a first read through the coordinator ({where}) was refused with {exc.code.value}: {exc.message} "
            "No worker was started."
        ) from exc
    finally:
        client.close()


def _fleet_run(work: _Scratch, spec: Any, corpus: Corpus, args: argparse.Namespace, err: Any) -> Any:
    from worker.fleet import Chaos, Fleet, FleetConfig

    kinds = _chaos_kinds(args.chaos)
    duration = args.duration if args.edits is None else None
    if duration is None and args.edits is None:
        duration = 10.0
    chaos = Chaos(
        kill_every_s=args.kill_every if "kill" in kinds else None,
        redis_every_s=args.redis_every if "redis" in kinds else None,
        redis_down_s=args.redis_down,
        touch_every_s=args.touch_every if "touch" in kinds else None,
        state_dir=str(state_dir_of(work.root)) if "redis" in kinds else None,
    )
    cfg = FleetConfig(
        root=str(work.root),
        corpus=corpus,
        client=spec,
        run_dir=str(work.run_dir),
        workers=args.workers,
        think_ms=args.think_ms,
        skew=args.skew,
        seed=args.seed,
        duration_s=duration,
        edits=args.edits,
        disjoint=args.disjoint,
        chaos=chaos,
    )
    try:
        fleet = Fleet(cfg)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    show = not args.json and err.is_terminal
    return _run_with_progress(fleet, err) if show else fleet.run()


def _oracle(run: Any, spec: Any, root: Path, corpus: Corpus) -> Any:
    from worker.fleet import check_history, check_recovery, client_reader, make_client, verify

    if spec.kind == "http":
        reader_client = make_client(spec)
        try:
            return verify(run, read=client_reader(reader_client, "stress-oracle"))
        finally:
            reader_client.close()
    report = verify(run)
    if spec.kind == "coordinator":
        check_recovery(report, str(root), corpus.files, spec.redis_url)
        check_history(report, str(root), corpus.files, spec.redis_url)
    return report


def _redis_loads(spec: Any) -> Any:
    """Per-primary counters of the run's Redis before it (None: not a coordinator run on a given URL)."""
    from coordinator.errors import CoordinatorError
    from coordinator.state.connection import connect, node_loads

    if spec.kind != "coordinator" or not spec.redis_url or spec.redis_url.startswith("unix://"):
        return None
    try:
        client = connect(spec.redis_url)
        return client, node_loads(client)
    except CoordinatorError:
        return None  # the load report is informative only


def _shard_rows(spec: Any, loads: Any, run: Any) -> list[dict[str, Any]] | None:
    from coordinator.errors import CoordinatorError
    from coordinator.state.connection import node_loads, shard_report
    from worker.fleet import summarize

    if loads is None:
        return None
    client, before = loads
    try:
        return shard_report(before, node_loads(client), summarize(run)["acknowledged"])
    except CoordinatorError:
        return None  # a primary that failed over during the run: no load report
    finally:
        client.close()


def _print_shards(shards: list[dict[str, Any]]) -> None:
    from rich.table import Table

    t = Table(title="Redis load per primary (commands and server CPU during the run)")
    for col in ("primary", "commands", "share", "per edit", "CPU s", "CPU us/edit", "keys"):
        t.add_column(col, justify="left" if col == "primary" else "right")
    for r in shards:
        t.add_row(
            r["node"],
            f"{r['commands']:,}",
            f"{r['share']:.0%}",
            str(r.get("commands_per_edit", "-")),
            f"{r['cpu_s']:.2f}",
            str(r.get("cpu_us_per_edit", "-")),
            f"{r['keys']:,}",
        )
    cmd_common.console().print(t)


def _conclude(
    run: Any,
    report: Any,
    corpus: Corpus,
    args: argparse.Namespace,
    where: str | None,
    shards: list[dict[str, Any]] | None = None,
    *,
    interrupted: bool = False,
) -> int:
    from worker.fleet import summarize

    summary = summarize(run)
    verdict = judge(summary, report, unsafe=args.unsafe, worker_errors=run.worker_errors)
    exit_code = (verdict.exit_code or INTERRUPTED) if interrupted else verdict.exit_code
    if args.json:
        out = {"summary": summary, "oracle": report.to_dict(), "corpus": corpus.to_dict(), "root": where}
        out["worker_errors"] = run.worker_errors
        out["verdict"] = {"exit_code": exit_code, "headline": verdict.headline, "hint": verdict.hint}
        out["interrupted"] = interrupted
        if shards is not None:
            out["redis_primaries"] = shards
        print(json.dumps(out, indent=2))
    else:
        if interrupted:
            cmd_common.console().print(
                f"[yellow]Interrupted after {run.wall_s:.1f} s: the report covers the run so far.[/yellow]"
            )
        _print_report(summary, report, where, run.worker_errors, verdict, exit_code)
        if shards:
            _print_shards(shards)
    return exit_code


#: The one folder a run in the user's repository (--url, or --in-place) writes its own files under, one
#: subfolder per run; it holds a .gitignore of "*", so git ignores everything in it.
RUNS_DIR = "stress-runs"


def run_folder() -> str:
    """The folder of this run's own files, relative to the repository's root: stress-runs/<time>-<pid>."""
    return f"{RUNS_DIR}/{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def _ignore_runs_dir(client: Any) -> None:
    """Put stress-runs/.gitignore ("*") in place through `client`, unless the file is already there."""
    from coordinator.errors import CoordinatorError, ErrorCode

    path = f"{RUNS_DIR}/.gitignore"
    try:
        client.read("stress-setup", path)
    except CoordinatorError as exc:
        if exc.code != ErrorCode.FILE_NOT_FOUND:
            raise
        client.write("stress-setup", path, "*\n")


def _remote_corpus(spec: Any, args: argparse.Namespace, n_files: int) -> Corpus:
    """Create the run's files through the service under `run_folder()` (created files under its created/),
    and return the corpus."""
    from worker.agent import counters_text, hot_text, slot_label
    from worker.fleet import make_client

    base = run_folder()
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
        _ignore_runs_dir(client)
        for rel, text in contents.items():
            client.write("stress-setup", rel, text)
    finally:
        client.close()
    original = {rel: text_hash(t) for rel, t in contents.items()}
    return Corpus(args.workload, tuple(contents), slots, original, created_dir=f"{base}/created")


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


# What each row of the report means (the third column of the table, and the --help epilog).
LEGEND = (
    ("attempts", "edit/write calls that completed, acknowledged or refused"),
    ("acknowledged", "calls that returned success: each must be in the files at the end"),
    (
        "refused: CODE",
        "calls refused with that error code; nothing was written (stale: the file had changed "
        "since the session's read, so it re-read and retried)",
    ),
    (
        "conflict rate",
        "refused as stale / attempts: the share of edit calls that found the file changed by "
        "another session since their read, and re-read and retried (as in `bench`)",
    ),
    ("throughput", "acknowledged edits per second of the run, all workers together"),
    ("latency", "time of one edit call, acknowledged or refused (p50 / p95 / p99)"),
    ("lock wait", "time an acknowledged edit waited for the file lock"),
    ("edit incl. retries", "from a change's first attempt to its acknowledgement, re-reads included"),
    ("acknowledged edits in the files", "what the oracle found of the acknowledged edits, by reading the final files"),
    ("torn files / torn reads", "final files, and sampled reads, that were no whole version of the file"),
    (
        "history: versions never applied",
        "versions the history lists whose result the file never held next (a write whose replace never "
        "happened must be taken back): 0; the count beside it is every version listed for the run's files",
    ),
    (
        "history: newest undone + redone",
        "each file's newest version undone, then redone, by an audit session at the end: both must give the "
        "history's bytes, so the files end as the fleet left them",
    ),
    ("LOST UPDATES", "acknowledged edits missing from the final files: 0 through the coordinator"),
)
# The few terms a reader needs at a glance, printed under the table (every row: the --help epilog).
_LEGEND_LINE = (
    "attempts = edit calls completed (acknowledged + refused); conflict rate = stale / attempts, the share of "
    "edit calls that had to re-read and retry; stale = the file changed since the session's read; LOST UPDATES "
    "= acknowledged edits missing from the final files."
)
_EXIT_STATUS = (
    "Exit status: 0 when edits were acknowledged and the oracle found every one of them in the files, with no "
    "file or read torn; 1 when it found a lost update, a torn file or another fault; 2 when the run could not be "
    "made or did no work (bad options, Redis or the service unreachable, a worker crashed, nothing acknowledged "
    "because every call was refused).",
    "With --unsafe the run is a demonstration of what the coordinator prevents: it exits 0 when it showed loss "
    "(acknowledged edits missing, or torn files), and says so, and 1 when nothing was lost that time (too little "
    "contention to show anything).",
)
EPILOG = "\n".join(
    [
        "The report, row by row:",
        *(
            textwrap.fill(text, 100, initial_indent=f"  {name:<32} ", subsequent_indent=" " * 35)
            for name, text in LEGEND
        ),
        "",
        *(textwrap.fill(par, 100) + "\n" for par in _EXIT_STATUS),
    ]
)


def _fmt_ms(d: dict[str, float | None]) -> str:
    vals = [d.get("p50"), d.get("p95"), d.get("p99")]
    if all(v is None for v in vals):
        return "-"
    return "/".join("-" if v is None else f"{v:.2f}" for v in vals) + " ms"


def _print_report(
    summary: dict[str, Any],
    report: Any,
    where: str | None,
    worker_errors: list[str],
    verdict: Verdict,
    exit_code: int,
) -> None:
    out = cmd_common.console()
    out.print(_table(summary, report))
    out.print(f"[dim]{_LEGEND_LINE}[/dim]")
    for line in report.details[:10]:
        out.print(f"  [red]-[/red] {line}")
    for e in worker_errors[:3]:
        out.print(f"[red]worker error:[/red]\n{e}")
    if where:
        out.print(f"Files: {where}")
    colour = "green" if verdict.passed else "red"
    out.print(f"[{colour}]{verdict.headline}[/{colour}]")
    if verdict.hint:
        out.print(verdict.hint)
    out.print(f"[dim](exit status {exit_code}; `edit-coordinator stress --help` explains each row)[/dim]")


def _table(summary: dict[str, Any], report: Any) -> Any:
    from rich.table import Table

    client = {"coordinator": "through the coordinator", "unsafe": "WITHOUT the coordinator", "http": "over HTTP"}
    # The title stays short enough for an 80-column terminal (a table's title wraps at the table's width);
    # how the files were reached is the table's first row.
    title = (
        f"stress: {summary['workload']}, {summary['workers']} workers, {_plural(summary['files'], 'file')}, "
        f"{summary['wall_s']:.1f} s"
    )
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("", style="bold", no_wrap=True)
    t.add_column("", justify="right", no_wrap=True)
    t.add_row("edits", client.get(summary["client"], summary["client"]))
    t.add_row("attempts", f"{summary['attempts']:,}")
    t.add_row("acknowledged", f"{summary['acknowledged']:,}")
    for code, n in summary["refused"].items() or [("", 0)]:
        t.add_row(f"  refused{': ' + code if code else ''}", f"{n:,}")
    attempts = summary["attempts"]
    stale = summary["refused"].get("stale", 0)
    t.add_row("conflict rate", f"{stale / attempts * 100 if attempts else 0.0:.1f} %")
    t.add_row("throughput", f"{summary['throughput_per_s']:,.0f} edits/s")
    t.add_row("latency p50/p95/p99", _fmt_ms(summary["latency_ms"]))
    t.add_row("lock wait p50/p95/p99", _fmt_ms(summary["lock_wait_ms"]))
    t.add_row("edit incl. retries p50/p95/p99", _fmt_ms(summary["change_latency_ms"]))
    _fault_rows(t, summary, report)
    acked = summary["acknowledged"]
    found = f"{acked - report.lost_updates:,} of {acked:,}" if acked else "0"
    t.add_row("acknowledged edits in the files", _verdict(report.lost_updates, found))
    torn = len(report.torn_files)
    t.add_row("torn files / torn reads", _verdict(torn + report.torn_reads, f"{torn} / {report.torn_reads}"))
    if report.phantom_writes or report.mismatches:
        t.add_row("unexplained writes", _verdict(1, f"{report.phantom_writes + report.mismatches}"))
    if report.locks_left_held or report.stale_temp_files:
        left = f"{report.locks_left_held} / {len(report.stale_temp_files)}"
        t.add_row("locks held / temp files left", _verdict(1, left))
    if report.undo_checked:
        unreal = f"{report.history_unreal:,} of {report.history_entries:,}"
        t.add_row("history: versions never applied", _verdict(report.history_unreal, unreal))
        undo = f"{report.undo_checked - report.undo_failed} of {_plural(report.undo_checked, 'file')}"
        t.add_row("history: newest undone + redone", _verdict(report.undo_failed, undo))
    t.add_row("LOST UPDATES", _verdict(report.lost_updates, f"{report.lost_updates:,}"))
    return t


def _fault_rows(t: Any, summary: dict[str, Any], report: Any) -> None:
    """The rows of injected faults (--chaos), when there were any."""
    if summary["kills"]:
        t.add_row("workers killed (SIGKILL)", f"{summary['kills']:,} ({report.in_flight} edits cut short)")
    if summary["redis_restarts"]:
        t.add_row(
            "Redis outages", f"{summary['redis_restarts']} ({report.refused_while_down:,} edits refused while down)"
        )
    if summary["touches"]:
        t.add_row("files touched (mtime only)", f"{summary['touches']:,}")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _verdict(bad: int, text: str) -> str:
    return f"[red]{text}[/red]" if bad else f"[green]{text}[/green]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="edit-coordinator")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["stress", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
