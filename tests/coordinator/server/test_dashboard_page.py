"""The dashboard page's own helpers, run in node (the page's script, cut out of it as served): far-apart
colours for any two sessions, paths that break only after a "/", a "last seen" never older than the
session's last change the page has seen, ages that tick (the timeline's too)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from coordinator.server.dashboard import page

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the page's script")


def _run(expression: str) -> object:
    html = page()[0].decode()
    script = html[html.index("<script>") + len("<script>") : html.index("</script>")]
    helpers = script[script.index("const hues = new Map();") : script.index("const chip = ")]
    last_seen = re.search(r"function lastSeen\(.*?\n}\n", script, re.S)
    server_now = re.search(r"function serverNow\(\) \{.*?}\n", script)
    assert last_seen is not None and server_now is not None
    stubs = "const el = (tag) => `<${tag}>`; const ago = (t) => `ago ${t}`;\n"
    stubs += "const state = {snap: {now: 1000}, snapAt: Date.now() / 1000 - 5};\n"  # a snapshot 5 s old
    program = stubs + helpers + last_seen.group(0) + server_now.group(0)
    program += f"console.log(JSON.stringify({expression}));"
    out = subprocess.run(["node", "-e", program], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_any_two_of_the_first_sessions_get_far_apart_hues() -> None:
    names = [f"agent-{i}" for i in range(1, 9)]
    colours = _run(f"{json.dumps(names)}.map(colour)")
    assert isinstance(colours, list)
    hues = [int(re.match(r"hsl\((\d+)", c).group(1)) for c in colours]  # type: ignore[union-attr]
    gaps = [min(abs(a - b), 360 - abs(a - b)) for i, a in enumerate(hues) for b in hues[i + 1 :]]
    assert min(gaps) >= 20, hues
    same = _run('[colour("x"), colour("y"), colour("x")]')
    assert isinstance(same, list) and same[0] == same[2] != same[1]  # a session keeps its colour


def test_paths_break_after_a_slash_only() -> None:
    assert _run('pathParts("src/click/globals.py")') == ["src/", "<wbr>", "click/", "<wbr>", "globals.py"]
    assert _run('pathParts("README.md")') == ["README.md"]


def test_last_seen_is_never_older_than_the_last_change() -> None:
    assert _run("lastSeen(100, {last: {time: 250}})") == "ago 250"
    assert _run("lastSeen(300, {last: {time: 250}})") == "ago 300"
    assert _run("lastSeen(undefined, undefined)") == ""


def test_the_clock_runs_on_between_snapshots() -> None:
    """Times left and ages are counted from the service's clock run on since the last snapshot, so they tick."""
    now = _run("serverNow()")
    assert isinstance(now, float | int) and 1004.5 <= now < 1100


def test_the_timelines_age_ticks_with_the_sessions_ages() -> None:
    """The one-second timer that re-renders the sessions' ages also counts on the timeline's age (the diff
    head's "... ago"); at 0baa582 that age was written once and stood still."""
    html = page()[0].decode()
    script = html[html.index("<script>") + len("<script>") : html.index("</script>")]
    cut = re.search(r"function span\(.*?\nconst ago = .*?\n", script, re.S)
    timer = re.search(r"setInterval\((\w+), 1000\)", script)
    assert cut is not None and timer is not None, "the page's timer takes a named function"
    every = re.search(rf"function {timer.group(1)}\(\) \{{.*?\n}}\n", script, re.S)
    assert every is not None
    program = (
        "const calls = [];\n"
        "const renderFromEvents = () => calls.push('events'); const renderClock = () => calls.push('clock');\n"
        "const state = {snap: {}, stopped: false};\n"
        "const age = {dataset: {time: String(Date.now() / 1000 - 65)}, textContent: '0s'};\n"
        "const $ = (id) => ({querySelectorAll: (sel) => (id === 'diff-head' && sel.includes('.age') ? [age] : [])});\n"
        + cut.group(0)
        + every.group(0)
        + f"{timer.group(1)}();\n"
        + "console.log(JSON.stringify({calls, age: age.textContent}));"
    )
    out = subprocess.run(["node", "-e", program], capture_output=True, text=True, timeout=60, check=True)
    got = json.loads(out.stdout)
    assert got["calls"] == ["events", "clock"]
    assert got["age"] in ("1m 5s", "1m 6s")
