"""scripts/call_depth.py: the edits it measures land, and it counts the frames of both ways in."""

from __future__ import annotations

import re

from tests.scripts import run_tool


def test_counts_the_frames_of_an_http_edit_and_of_a_library_edit() -> None:
    out = run_tool("call_depth.py", "--show")
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    http = re.search(r"HTTP edit: (\d+) frames from App.__call__", out.stdout)
    lib = re.search(r"library edit: (\d+) frames from Session.edit", out.stdout)
    assert http and lib, out.stdout
    assert int(http.group(1)) > int(lib.group(1)) > 1
    shown = [line.strip() for line in out.stdout.splitlines() if line.startswith("  ")]
    assert shown[0] == "app.py:__call__" and len(shown) == int(http.group(1))
