"""The one-screen summary printed at the end of `edit-coordinator bench`.

A full run prints the targets with their verdicts; a quick run (one short repetition) prints the same
figures with no verdict (see `coordinator_bench.targets`), apart from lost updates, which are counted either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.cli import common as cmd_common

KEY_ROWS = {
    "solo": "raw",
    "http": "raw",
    "disjoint": "N=2",
    "hot": "N=16",
    "hot-line": "N=16",
    "conflicts": "counters",
    "zipf": "think=0ms",
    "corpus": "mixed",
    "scale": "P=10000",
}
VERDICTS = {True: "[green]met[/green]", False: "[red]missed[/red]", None: "[dim]figure[/dim]"}


def key_row(result: dict[str, Any]) -> str:
    """The row a scenario is summarised by (its headline point; the last row when that one did not run)."""
    rows = [r["key"] for r in result["scenario"]["rows"]]
    want = KEY_ROWS.get(result["scenario"]["name"])
    return want if want is not None and want in rows else rows[-1]


def coordinator_lost(results: list[dict[str, Any]]) -> int:
    total = 0
    for res in results:
        coord = {c["name"] for c in res["columns"] if c["kind"] in ("coordinator", "http", "async")}
        total += sum(r["lost_updates"] or 0 for c in res["cells"] if c["column"] in coord for r in c["reps"])
    return total


def _cell_text(c: dict[str, Any] | None) -> str:
    if c is None or c["agg"].get("throughput_per_s") is None:
        return "-"
    v = f"{c['agg']['throughput_per_s']['median']:,.0f}"
    lost = c["agg"]["lost_updates"]["max"] if c["agg"].get("lost_updates") else 0
    return f"[red]{v}[/red]" if lost else v


def _throughput_table(results: list[dict[str, Any]], elapsed_s: float) -> Any:
    from rich.table import Table

    ran = [r for r in results if not r.get("skipped")]
    cols = list(dict.fromkeys(c["name"] for res in ran for c in res["columns"]))
    reps = max((r["reps"] for r in ran), default=0)
    quick = " (quick: a smoke test, figures only, no verdicts)" if any(r.get("quick") for r in results) else ""
    t = Table(
        title=f"bench: {len(ran)} scenarios, {reps} repetition{'s' if reps != 1 else ''}, "
        f"{elapsed_s / 60:.1f} min{quick}",
        title_justify="left",
        caption="acknowledged edits/s, median; red: an acknowledged update lost",
        caption_justify="left",
    )
    t.add_column("scenario / row")
    for c in cols:
        t.add_column(c, justify="right")
    for res in ran:
        row = key_row(res)
        cells = {c["column"]: c for c in res["cells"] if c["row"] == row}
        t.add_row(f"{res['scenario']['name']} {row}", *(_cell_text(cells.get(name)) for name in cols))
    return t


def _lost_rows(results: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    out = []
    for kind, label in (("lost-coordinator", "0 lost via the coordinator"), ("lost-unsafe", "unsafe loses")):
        rows = [tg for res in results for tg in res.get("targets", []) if tg["id"] == kind]
        if not rows:
            continue
        n = sum(tg["value"] or 0 for tg in rows)
        if kind == "lost-coordinator":
            what = f"{n:,.0f} lost"
        else:
            what = f"{n:,.0f} of {sum(int(tg['goal'].split()[0]) for tg in rows)} contended cells"
        scenarios = ", ".join(tg["scenario"] for tg in rows)
        out.append((label, "", f"{what} ({scenarios})", VERDICTS[all(tg["met"] for tg in rows)]))
    return out


def _targets_table(results: list[dict[str, Any]]) -> Any:
    from rich.markup import escape
    from rich.table import Table

    tt = Table(title="Targets", title_justify="left")
    for name in ("target", "column", "measured", "verdict"):
        tt.add_column(name)
    for row in _lost_rows(results):
        tt.add_row(*row)
    for res in results:
        if res.get("skipped"):
            tt.add_row(res["scenario"]["name"], "", escape(res["skipped"]), "[yellow]skipped[/yellow]")
        for tg in res.get("targets", []):
            if not tg["id"].startswith("lost-"):
                verdict = VERDICTS[tg["met"]]
                measured = escape(tg["measured"].split(" (")[0])
                tt.add_row(escape(tg.get("label", tg["id"])), tg["column"] or "", measured, verdict)
    return tt


def print_summary(results: list[dict[str, Any]], out: Path, plots: dict[str, Path], elapsed_s: float) -> int:
    """Print the summary; returns the number of updates the coordinator lost (0 expected)."""
    con = cmd_common.console()
    if not results:
        con.print("bench: nothing ran.")
        return 0
    con.print(_throughput_table(results, elapsed_s))
    con.print(_targets_table(results))
    lost = coordinator_lost(results)
    if lost:
        con.print(f"[red]The oracle found {lost} lost updates in coordinator cells.[/red]")
    else:
        con.print("[green]The oracle found no lost update in any coordinator cell.[/green]")
    where = f"Results: {out}/<scenario>.json"
    if plots:
        where += f"; plots: {', '.join(p.name for p in plots.values())}"
    con.print(where)
    con.print("BENCHMARKS.md: `edit-coordinator bench --report` regenerates its generated part from these results.")
    return lost
