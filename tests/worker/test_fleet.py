"""Fleets of agent sessions as real OS processes on a real (embedded) Redis, judged by the oracle.

Properties guarded here:
- through the coordinator, 8 processes incrementing their own lines of one file lose nothing: every slot
  ends at exactly the number of acknowledged increments;
- the same workload as plain read-modify-write loses updates, and the oracle says so (it is not blind);
- the markers and mixed workloads (real source files) keep every acknowledged change;
- `edit-coordinator stress` reports the run, exits 0 on success and 1 on loss (`--unsafe`: 0 when it showed
  loss), and leaves no Redis running.

Longer variants are marked `slow` and run only when asked for (`pytest -m slow`, or EC_SLOW=1).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.state.embedded import embedded_status, ensure_embedded_redis, stop_embedded_redis
from worker import agent as agent_mod
from worker.agent import (
    Agent,
    AgentConfig,
    LocalControl,
    Recorder,
    counters_text,
    parse_counters,
    parse_hot,
    plan_change,
    prepare_corpus,
)
from worker.fleet import (
    Chaos,
    ClientSpec,
    Fleet,
    FleetConfig,
    FleetRun,
    OracleReport,
    check_recovery,
    pair_ops,
    shutdown_fork_server,
    summarize,
    verify,
)


# --- helpers ---------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True, scope="module")
def _fork_server() -> Iterator[None]:
    yield
    shutdown_fork_server()


@pytest.fixture
def redis_root(tmp_path: Path) -> Iterator[Path]:
    """A repository root with its embedded (real) Redis running; the server is stopped at the end."""
    root = tmp_path / "repo"
    root.mkdir()
    ensure_embedded_redis(root / ".edit-coordinator")
    yield root
    stop_embedded_redis(root / ".edit-coordinator")
    assert embedded_status(root / ".edit-coordinator") is None


def run_fleet(
    root: Path,
    workload: str,
    *,
    workers: int,
    files: int,
    kind: str = "coordinator",
    duration: float | None = None,
    edits: int | None = None,
    think_ms: float = 0.0,
    skew: float = 0.0,
    disjoint: bool = False,
    chaos: Chaos | None = None,
    seed: int = 1,
    durability: str = "fsync",
    check_versions: bool | None = None,
    recover: bool = True,
    policy: str = "strict",
) -> tuple[FleetRun, OracleReport]:
    """Run a fleet on `root` (whose embedded Redis must be running for kind="coordinator") and judge it."""
    corpus = prepare_corpus(root, workload, files, workers, seed)
    url = ensure_embedded_redis(root / ".edit-coordinator") if kind == "coordinator" else None
    cfg = FleetConfig(
        root=str(root),
        corpus=corpus,
        client=ClientSpec(kind, root=str(root), redis_url=url, durability=durability, policy=policy),
        run_dir=str(root.parent / f"run-{workload}-{kind}"),
        workers=workers,
        think_ms=think_ms,
        skew=skew,
        seed=seed,
        duration_s=duration,
        edits=edits,
        disjoint=disjoint,
        chaos=chaos or Chaos(),
        timeout_s=120.0,
    )
    run = Fleet(cfg).run()
    assert not run.worker_errors, run.worker_errors
    report = verify(run, check_versions=check_versions)
    if kind == "coordinator" and recover:
        check_recovery(report, str(root), corpus.files, url)
    return run, report


def _final_counters(root: Path, rel: str) -> dict[str, int]:
    values = parse_counters((root / rel).read_text(encoding="utf-8"))
    assert values is not None, f"{rel} is not a well-formed counters file"
    return values


# --- the lost-update oracle, both ways -------------------------------------------------------------------
def test_eight_processes_through_the_coordinator_lose_no_update(redis_root: Path) -> None:
    run, report = run_fleet(redis_root, "counters", workers=8, files=1, edits=320)
    assert report.ok, report.details
    ops, _ = pair_ops(run.records)
    acked = [o for o in ops if o.code == "ok"]
    assert len(acked) >= 320
    values = _final_counters(redis_root, "stress/c00.txt")
    # The final file holds exactly the acknowledged increments, slot by slot and in total.
    for slot, value in values.items():
        assert value == sum(1 for o in acked if o.slot == slot), slot
    assert sum(values.values()) == len(acked)
    # Contention was real: sessions were refused as stale and redid their edit on a fresh read.
    assert summarize(run)["refused"].get("stale", 0) > 0
    assert report.torn_reads == 0 and run.samples > 0


def test_the_same_workload_as_plain_read_modify_write_loses_updates(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    run, report = run_fleet(root, "counters", workers=8, files=1, edits=320, kind="unsafe")
    assert not report.ok
    assert report.lost_updates > 0
    values = parse_counters((root / "stress/c00.txt").read_text(encoding="utf-8"))
    acked = sum(1 for o in pair_ops(run.records)[0] if o.code == "ok")
    assert values is None or sum(values.values()) < acked


@pytest.mark.parametrize("workload", ["markers", "mixed"])
def test_real_source_workloads_keep_every_acknowledged_change(redis_root: Path, workload: str) -> None:
    # A count of edits, not a duration: how many land in a given time depends on the machine's load.
    run, report = run_fleet(redis_root, workload, workers=3, files=3, edits=60, think_ms=0.5)
    assert report.ok, report.details
    assert report.verified > 40
    kinds = {o.op for o in pair_ops(run.records)[0] if o.code == "ok"}
    assert "insert" in kinds
    if workload == "mixed":
        assert {"replace", "delete"} <= kinds


def test_rebase_policy_keeps_every_change_and_refuses_less(redis_root: Path) -> None:
    """Under policy rebase the oracle still finds every acknowledged change, and the edits it carried over
    are whole versions (the oracle knows them by the hash the engine reported)."""
    run, report = run_fleet(redis_root, "mixed", workers=4, files=2, edits=80, think_ms=0.5, policy="rebase")
    assert report.ok, report.details
    ops = pair_ops(run.records)[0]
    assert any(o.rebased_to for o in ops), "some edits were carried over others' changes"
    assert report.torn_reads == 0 and not report.torn_files


def test_hot_line_with_zipf_skew(redis_root: Path) -> None:
    run, report = run_fleet(redis_root, "hot-line", workers=4, files=3, duration=1.5, skew=1.2)
    assert report.ok, report.details
    values = [parse_hot((redis_root / f).read_text()) for f in run.config.corpus.files]
    assert sum(v or 0 for v in values) == sum(1 for o in pair_ops(run.records)[0] if o.code == "ok")


@pytest.mark.slow
def test_sixteen_processes_on_one_hot_file_for_long(redis_root: Path) -> None:
    _, report = run_fleet(redis_root, "counters", workers=16, files=1, duration=20.0)
    assert report.ok, report.details
    assert report.verified > 1000


@pytest.mark.slow
def test_mixed_workload_with_skew_for_long(redis_root: Path) -> None:
    _, report = run_fleet(redis_root, "mixed", workers=8, files=8, duration=20.0, think_ms=1.0)
    assert report.ok, report.details


# --- the oracle is not blind: synthetic runs with known defects ------------------------------------------
def _synthetic_run(tmp_path: Path, workload: str, records: list[dict], files: dict[str, str]) -> FleetRun:
    root = tmp_path / "synthetic"
    root.mkdir(exist_ok=True)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    corpus = agent_mod.Corpus(workload, tuple(files), ("s00", "s01"), {})
    cfg = FleetConfig(str(root), corpus, ClientSpec("coordinator", str(root)), str(tmp_path / "run"))
    return FleetRun(cfg, records, [], 0.0, 1.0, [], {}, 0, 0)


def _intent(s: str, n: int, f: str, op: str, **kw: object) -> dict:
    return {"k": "i", "s": s, "n": n, "cid": n, "f": f, "op": op, "t": float(n), **kw}


def _outcome(s: str, n: int, code: str = "ok") -> dict:
    return {"k": "o", "s": s, "n": n, "c": code, "t": n + 0.5, "lat": 0.001}


def test_oracle_counts_a_missing_increment_as_lost(tmp_path: Path) -> None:
    text = counters_text("c00", ["s00", "s01"]).replace("s00 = 0", "s00 = 1")
    records = [
        _intent("s00.0", 1, "stress/c00.txt", "increment", slot="s00", v=1),
        _outcome("s00.0", 1),
        _intent("s00.0", 2, "stress/c00.txt", "increment", slot="s00", v=2),
        _outcome("s00.0", 2),
        _intent("s01.0", 1, "stress/c00.txt", "increment", slot="s01", v=1),  # in flight: may be absent
    ]
    rep = verify(_synthetic_run(tmp_path, "counters", records, {"stress/c00.txt": text}), check_versions=False)
    assert rep.lost_updates == 1 and rep.in_flight == 1 and not rep.ok


def test_oracle_flags_torn_files_phantoms_and_refused_writes(tmp_path: Path) -> None:
    truncated = counters_text("c00", ["s00", "s01"])[:-10]
    rep = verify(_synthetic_run(tmp_path, "counters", [], {"stress/c00.txt": truncated}), check_versions=False)
    assert rep.torn_files == ["stress/c00.txt"] and not rep.ok

    text = "line one\n# <<m:s00.0:1>>\n# <<m:s01.0:7>>\nline two\n"
    records = [
        _intent("s00.0", 1, "corpus/a.py", "insert", m="<<m:s00.0:1>>"),
        _outcome("s00.0", 1, "stale"),  # refused, yet in the file
        _intent("s00.0", 2, "corpus/a.py", "insert", m="<<m:s00.0:2>>"),
        _outcome("s00.0", 2),  # acknowledged, yet missing
    ]
    rep = verify(_synthetic_run(tmp_path, "markers", records, {"corpus/a.py": text}), check_versions=False)
    assert rep.lost_updates == 1
    assert rep.phantom_writes == 2  # the refused one, and s01.0:7 that nobody intended


def test_oracle_flags_a_final_file_no_change_produced(tmp_path: Path) -> None:
    records = [_intent("s00.0", 1, "corpus/a.py", "insert", m="<<m:s00.0:1>>", x="0" * 32), _outcome("s00.0", 1)]
    run = _synthetic_run(tmp_path, "markers", records, {"corpus/a.py": "x\n# <<m:s00.0:1>>\n"})
    rep = verify(run)
    assert rep.torn_files == ["corpus/a.py"]


# --- agents, in-process ----------------------------------------------------------------------------------
def test_plans_are_exact_replacements_of_unique_text() -> None:
    rng = random.Random(3)
    view = counters_text("c00", ["s00", "s01"])
    ch = plan_change("counters", "c.txt", view, "s01.0", "s01", 1, rng)
    assert ch is not None and ch.value == 1 and view.count(ch.old) == 1
    assert parse_counters(ch.expected or "") == {"s00": 0, "s01": 1}
    src = "".join(f"x{i} = {i}\n" for i in range(50))
    for kind in ("insert", "replace", "delete", "write"):
        ch = plan_change("mixed", "a.py", src, "s00.0", "s00", 5, rng, kind)
        assert ch is not None and ch.kind == kind
        if ch.call == "edit":
            assert src.count(ch.old) == 1
            assert ch.expected == src.replace(ch.old, ch.new, 1)
        if kind != "delete":
            assert "<<m:s00.0:5>>" in (ch.expected or "")


def test_agent_retries_stale_edits_until_acknowledged(coord, root: Path) -> None:  # type: ignore[no-untyped-def]
    from coordinator.client import LocalClient

    (root / "stress").mkdir()
    (root / "stress/c00.txt").write_text(counters_text("c00", ["s00", "s01"]))
    client = LocalClient(coord)
    rec0, rec1 = Recorder(None), Recorder(None)
    ctl0, ctl1 = LocalControl(edits=5), LocalControl(edits=5)
    files = ("stress/c00.txt",)
    a0 = Agent(client, AgentConfig("counters", files, "s00.0", "s00", seed=1, think_ms=0), ctl0, rec0)
    a1 = Agent(client, AgentConfig("counters", files, "s01.0", "s01", seed=2, think_ms=0), ctl1, rec1)
    # Interleave the two sessions step by step: every edit of one makes the other's view stale.
    for _ in range(5):
        a0._change_one("stress/c00.txt", "increment")
        a1._change_one("stress/c00.txt", "increment")
    assert _final_counters(root, "stress/c00.txt") == {"s00": 5, "s01": 5}
    codes = [r["c"] for r in (rec0.events or []) + (rec1.events or []) if r["k"] == "o"]
    assert codes.count("ok") == 10 and "stale" in codes


# --- the stress command ----------------------------------------------------------------------------------
def _stress(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    from worker.stress import main

    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in argv else {}


def test_stress_command_reports_zero_lost_and_stops_its_redis(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _stress(capsys, "--workers", "3", "--duration", "1.5", "--json", "--keep", "--think-ms", "0")
    root = Path(out["root"])
    try:
        assert code == 0, out["oracle"]
        s = out["summary"]
        assert s["acknowledged"] > 0 and s["attempts"] >= s["acknowledged"]
        assert out["oracle"]["lost_updates"] == 0 and out["oracle"]["ok"]
        assert {"p50", "p95", "p99"} <= set(s["latency_ms"]) and s["lock_wait_ms"]["p50"] is not None
        # The embedded Redis the run started for its scratch copy is gone.
        assert embedded_status(root / ".edit-coordinator") is None
    finally:
        import shutil

        shutil.rmtree(root.parent, ignore_errors=True)


def test_stress_command_without_the_coordinator_shows_the_loss(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("--workers", "6", "--files", "1", "--edits", "300", "--think-ms", "0", "--unsafe", "--json")
    code, out = _stress(capsys, *argv)
    assert code == 0  # --unsafe demonstrated the loss it exists to show (worker.verdict)
    assert out["oracle"]["lost_updates"] > 0


def test_stress_command_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    from worker.stress import main

    assert main(["--workers", "2", "--edits", "20", "--workload", "hot-line", "--think-ms", "0"]) == 0
    out = capsys.readouterr().out
    assert "LOST UPDATES" in out and "acknowledged" in out and "conflict rate" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--in-place"], "--in-place needs --root"),
        (["--chaos", "meteor"], "unknown --chaos kind"),
        (["--url", "http://127.0.0.1:9"], "--in-place"),
        (["--unsafe", "--chaos", "redis"], "only --chaos kill"),
    ],
)
def test_stress_command_refuses_bad_runs(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    from worker.stress import main

    assert main(argv) == 2
    assert needle in capsys.readouterr().err.replace("\n", " ")


# --- the one percentile definition, the oracle's own module, the fleet's public worker target ----------
def test_percentiles_are_the_standard_librarys_inclusive_quantiles() -> None:
    import statistics

    from worker.stats import percentile, percentiles

    data = [random.Random(5).random() for _ in range(997)]
    cuts = statistics.quantiles(data, n=100, method="inclusive")
    assert percentiles(data, [50, 95, 99]) == pytest.approx([cuts[49], cuts[94], cuts[98]])
    assert percentile(data, 0) == min(data) and percentile(data, 100) == max(data)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5  # interpolated, not a rank
    assert percentile([7.0], 99) == 7.0 and percentile([], 50) is None
    with pytest.raises(ValueError, match=r"multiple of 0\.1"):
        percentile(data, 99.95)


def test_oracle_lives_in_its_own_module_and_old_names_still_work() -> None:
    from worker import fleet, oracle

    for name in ("verify", "check_recovery", "pair_ops", "OracleReport", "Op", "local_reader", "MUTATING_OPS"):
        assert getattr(fleet, name) is getattr(oracle, name)
    assert not hasattr(fleet, "_worker_main") and not hasattr(fleet, "_Shared")  # old aliases, removed


def test_judge_counts_finds_lost_and_phantom_increments(tmp_path: Path) -> None:
    from worker.oracle import judge_counts

    text = counters_text("c00", ["s00", "s01"]).replace("s00 = 0", "s00 = 3").replace("s01 = 0", "s01 = 5")
    final = {"c.txt": text.encode()}
    assert judge_counts({("c.txt", "s00"): 3, ("c.txt", "s01"): 5}, final).ok
    lost = judge_counts({("c.txt", "s00"): 4, ("c.txt", "s01"): 5}, final)
    assert lost.lost_updates == 1 and not lost.ok
    phantom = judge_counts({("c.txt", "s00"): 3, ("c.txt", "s01"): 4}, final)
    assert phantom.phantom_writes == 1 and not phantom.ok
    assert judge_counts({("c.txt", "s00"): 3, ("c.txt", "s01"): 4}, final, in_flight={("c.txt", "s01"): 1}).ok
    torn = judge_counts({}, {"c.txt": text.encode()[:-5]})
    assert torn.torn_files == ["c.txt"] and not torn.ok


def _marking_target(spec, shared, marker_dir: str) -> None:  # type: ignore[no-untyped-def]
    """A worker target of a caller's own: it leaves a mark, then runs the fleet's worker as usual."""
    from worker.fleet import worker_main

    Path(marker_dir, spec.agent.session).write_text("ran")
    worker_main(spec, shared)


def test_fleet_runs_a_given_worker_target(redis_root: Path, tmp_path: Path) -> None:
    import functools

    marks = tmp_path / "marks"
    marks.mkdir()
    corpus = prepare_corpus(redis_root, "counters", 1, 2, 1)
    url = ensure_embedded_redis(redis_root / ".edit-coordinator")
    cfg = FleetConfig(
        root=str(redis_root),
        corpus=corpus,
        client=ClientSpec("coordinator", root=str(redis_root), redis_url=url, durability="none"),
        run_dir=str(tmp_path / "run"),
        workers=2,
        think_ms=0.0,
        edits=20,
        timeout_s=120.0,
    )
    run = Fleet(cfg, target=functools.partial(_marking_target, marker_dir=str(marks))).run()
    assert not run.worker_errors, run.worker_errors
    assert sorted(p.name for p in marks.iterdir()) == ["s00.0", "s01.0"]
    report = verify(run)
    assert report.ok and report.verified >= 20, report.details
