"""The one-screen summary printed at the end of `edit-coordinator bench`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

KEY_ROWS = {
    "solo": "fleet",
    "disjoint": "N=2",
    "hot": "N=16",
    "hot-line": "N=16",
    "zipf": "think=0ms",
    "corpus": "mixed",
    "scale": "P=10000",
}


def key_row(result: dict[str, Any]) -> str:
    """The row a scenario is summarised by (its headline point; the last row when that one did not run)."""
    rows = [r["key"] for r in result["scenario"]["rows"]]
    want = KEY_ROWS.get(result["scenario"]["name"])
    return want if want in rows else rows[-1]


def coordinator_lost(results: list[dict[str, Any]]) -> int:
    total = 0
    for res in results:
        coord = {c["name"] for c in res["columns"] if c["kind"] in ("coordinator", "http")}
        total += sum(r["lost_updates"] or 0 for c in res["cells"] if c["column"] in coord for r in c["reps"])
    return total


def print_summary(results: list[dict[str, Any]], out: Path, plots: dict[str, Path], elapsed_s: float) -> int:
    """Print the summary; returns the number of updates the coordinator lost (0 expected)."""
    from rich.console import Console
    from rich.table import Table

    con = Console()
    if not results:
        con.print("bench: nothing ran.")
        return 0
    cols: list[str] = []
    for res in results:
        for c in res["columns"]:
            if c["name"] not in cols:
                cols.append(c["name"])
    reps = results[0]["reps"]
    t = Table(
        title=f"bench: {len(results)} scenarios, {reps} repetition{'s' if reps != 1 else ''}, {elapsed_s / 60:.1f} min"
        + (" (quick: a smoke test, no speed claims)" if results[0].get("quick") else ""),
        title_justify="left",
        caption="acknowledged edits/s, median; red: an acknowledged update lost",
        caption_justify="left",
    )
    t.add_column("scenario / row")
    for c in cols:
        t.add_column(c, justify="right")
    for res in results:
        row = key_row(res)
        cells = {c["column"]: c for c in res["cells"] if c["row"] == row}
        vals = []
        for name in cols:
            c = cells.get(name)
            if c is None or c["agg"].get("throughput_per_s") is None:
                vals.append("-")
                continue
            v = f"{c['agg']['throughput_per_s']['median']:,.0f}"
            lost = c["agg"]["lost_updates"]["max"] if c["agg"].get("lost_updates") else 0
            vals.append(f"[red]{v}[/red]" if lost else v)
        t.add_row(f"{res['scenario']['name']} {row}", *vals)
    con.print(t)

    targets = [tg for res in results for tg in res.get("targets", []) if not tg["id"].startswith("lost-")]
    tt = Table(title="Targets", title_justify="left")
    tt.add_column("target")
    tt.add_column("column")
    tt.add_column("measured")
    tt.add_column("verdict")
    verdicts = {True: "[green]met[/green]", False: "[red]missed[/red]", None: "[dim]info[/dim]"}
    for kind, label in (
        ("lost-coordinator", "0 lost via the coordinator"),
        ("lost-unsafe", "unsafe loses when contended"),
    ):
        rows = [tg for res in results for tg in res.get("targets", []) if tg["id"] == kind]
        if rows:
            met = all(tg["met"] for tg in rows)
            n = sum(tg["value"] or 0 for tg in rows)
            if kind == "lost-coordinator":
                what = f"{n:,.0f} lost"
            else:
                what = f"{n:,.0f} of {sum(int(tg['goal'].split()[0]) for tg in rows)} cells"
            tt.add_row(label, "", f"{what} ({', '.join(tg['scenario'] for tg in rows)})", verdicts[met])
    for tg in targets:
        tt.add_row(tg.get("label", tg["id"]), tg["column"] or "", tg["measured"].split(" (")[0], verdicts[tg["met"]])
    con.print(tt)
    lost = coordinator_lost(results)
    if lost:
        con.print(f"[red]The oracle found {lost} lost updates in coordinator cells.[/red]")
    else:
        con.print("[green]The oracle found no lost update in any coordinator cell.[/green]")
    con.print(
        f"Results: {out}/<scenario>.json" + (f"; plots: {', '.join(p.name for p in plots.values())}" if plots else "")
    )
    con.print("BENCHMARKS.md: `edit-coordinator bench --report` regenerates its generated part from these results.")
    return lost
