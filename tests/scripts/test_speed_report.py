"""scripts/speed_report.py: the table is made from real fastpath_figures runs (their --json), the targets are
judged against the figures, the HTTP rows are read from http_latency's table, and --from-json writes the
same report again."""

from __future__ import annotations

import json
from pathlib import Path

from tests.scripts import load_tool, run_tool

HTTP_TABLE = """\
column              edits   p50 ms   p99 ms  +p50 ms  client CPU ms  server CPU ms  redis CPU ms  total CPU ms
inproc               3000    0.232    0.495        -          0.246          0.000         0.040         0.286
http-project         3000    0.526    0.812   +0.294          0.108          0.410         0.047         0.565
http-project-keys    3000    0.631    0.938   +0.399          0.119          0.517         0.087         0.722
"""


def _figures(tmp_path: Path) -> dict:
    out = tmp_path / "f.json"
    done = run_tool(
        "fastpath_figures.py",
        "--seconds",
        "0.2",
        "--rounds",
        "1",
        "--paced",
        "20",
        "--pause-ms",
        "1",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())


def test_the_table_is_made_from_real_runs_and_judges_the_targets(tmp_path: Path) -> None:
    tool = load_tool("speed_report")
    run = _figures(tmp_path)
    assert run["median"]["rate"] > 0 and run["paced"]["p50_ms"] > 0 and run["paced"]["edits"] == 20
    side = tool.side_figures([run])
    assert side["cpu_ms"] == run["median"]["cpu_ms"] + run["median"]["redis_cpu_ms"]
    report = {
        "when": "now",
        "load": [0.1, 0.2],
        "base": {"commit": "aaa", "instructions": 700_000, **side},
        "head": {"commit": "bbb", "instructions": 390_000, **side},
        "http": {"columns": tool._http_columns(HTTP_TABLE)},
    }
    text = tool.table(report)
    assert "| instructions per solo edit | 700,000 | 390,000 | at most 400,000 | yes |" in text
    assert "| HTTP added p50, HttpClient, TCP | | +0.294 ms | at most +0.400 ms | yes |" in text
    assert "| service CPU beyond the engine, HttpClient, TCP | | 0.164 ms | at most 0.250 ms | yes |" in text
    assert "idempotency keys (its default) | | 0.271 ms | at most 0.250 ms | no |" in text
    floor_cpu = run["median"]["floor_cpu_ms"] + run["median"]["floor_redis_cpu_ms"]
    assert side["floor_cpu_ms"] == floor_cpu > 0 and side["floor_paced_p50_ms"] == run["paced"]["floor_p50_ms"] > 0
    assert f"| the same-I/O floor's CPU per edit, process + redis-server | {floor_cpu:.3f} ms |" in text
    assert f"| the same-I/O floor, paced p99 | {run['paced']['floor_p99_ms']:.3f} ms |" in text
    floor = "yes" if side["floor_x"] >= 0.5 else "no"
    assert (
        f"| against the same-I/O floor | {side['floor_x']:.2f}x | {side['floor_x']:.2f}x | at least 0.50x | {floor} |"
        in text
    )


def test_from_json_writes_the_report_again(tmp_path: Path) -> None:
    tool = load_tool("speed_report")
    side = tool.side_figures([_figures(tmp_path)])
    report = {"when": "now", "load": [0.1, 0.2], "base": {"commit": "aaa", "instructions": 1, **side}}
    report["head"] = {"commit": "bbb", "instructions": 2, **side}
    (tmp_path / "in.json").write_text(json.dumps(report))
    done = run_tool("speed_report.py", "x", "--from-json", str(tmp_path / "in.json"), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out" / "speed.md").read_text() == tool.table(report)
    assert json.loads((tmp_path / "out" / "speed.json").read_text()) == report
