"""scripts/http_instructions.py, the service's instructions per edit under callgrind: the count is read from
valgrind's summary (a missing one is an error, not a zero), and end to end (slow: interpreters under
callgrind) every run's edits land and a figure per listener is printed."""

from __future__ import annotations

import shutil

import pytest

from tests.scripts import load_tool, run_tool

http_instructions = load_tool("http_instructions")


def test_the_count_is_read_from_valgrinds_summary() -> None:
    summary = "==123== Events    : Ir\n==123== Collected : 4567890\n==123==\n==123== I   refs:      4,567,890\n"
    assert http_instructions.collected(summary, "x") == 4567890
    with pytest.raises(RuntimeError, match="no instruction count for the service"):
        http_instructions.collected("serve crashed\n", "the service")


def test_a_dumps_total_is_read_from_its_totals_line() -> None:
    dump = "# callgrind format\nversion: 1\nevents: Ir\nfn=(1) main\n0 12\ntotals: 987654\n"
    found = http_instructions.TOTALS.search(dump)
    assert found is not None and int(found.group(1)) == 987654
    assert http_instructions.TOTALS.search("fn=(1) totals: 5\n") is None  # only a line of its own


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_it_counts_the_service_on_a_unix_socket() -> None:
    out = run_tool("http_instructions.py", "--edits", "8", "--listeners", "uds", timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = {line.split(":")[0].strip(): line for line in out.stdout.splitlines() if ":" in line}
    assert "engine in-process" in lines and "service over uds" in lines, out.stdout
    assert "beyond the engine" in lines["service over uds"]
