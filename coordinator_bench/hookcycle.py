"""A guarded Edit as Claude Code makes it, event by event, for the hook measures of scripts/ (hook_latency,
ticket_latency, mcp_hook_latency): the events, the ways of sending one, and the figures of the cycles.

A cycle is one session's Edit tool call on its own line of one file: PostToolUse of a Read of the file,
PreToolUse of the Edit, the edit itself (made here, as the agent's tool would), PostToolUse of the Edit.
The events are the captured payloads of tests/data/hooks/claude-code/ (a source checkout's), with the
file, the session and the strings put in.
"""

from __future__ import annotations

import http.client
import json
import os
import resource
import statistics
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coordinator_bench.harness import ms
from coordinator_bench.measure import REPO

PAYLOADS = REPO / "tests" / "data" / "hooks" / "claude-code"

#: One event sent and its answer (the JSON the hook printed or the endpoint answered; {} allows).
Send = Callable[[bytes], dict[str, Any]]


def http_sender(url: str, path: str, token: str) -> Send:
    """POST each event to `url` + `path`, a new connection each, as a hook client opens one."""
    where = urllib.parse.urlsplit(url)

    def send(raw: bytes) -> dict[str, Any]:
        conn = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=60)
        try:
            conn.request("POST", path, raw, {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            raise SystemExit(f"{path} answered {resp.status}: {body[:300]!r}")
        return dict(json.loads(body or b"{}"))

    return send


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command_sender(argv: list[str], env: dict[str, str], cwd: Path, cpu: list[float] | None = None) -> Send:
    """A process per event, the event on its stdin; `cpu` gets each process's own CPU time (user + system),
    which load moves far less than its wall time."""

    def send(raw: bytes) -> dict[str, Any]:
        before = _children_cpu()
        r = subprocess.run(argv, input=raw, capture_output=True, env=env, cwd=cwd, timeout=120)
        if cpu is not None:
            cpu.append(_children_cpu() - before)
        if r.returncode != 0:
            raise SystemExit(f"{argv[:4]} exited {r.returncode}: {r.stderr.decode()[-500:]}")
        return dict(json.loads(r.stdout or b"{}"))

    return send


class Cycle:
    """One session's guarded Edit tool calls on its own line of one file (the events as Claude Code sends
    them); every decision must allow (a no-op allows everything anyway)."""

    def __init__(self, root: Path, name: str, session: str) -> None:
        self.file = root / name
        self.session = session
        self.n = 0
        self.file.write_text(f"{session} = 0\n")

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = json.loads((PAYLOADS / f"{kind}.json").read_text().replace("__ROOT__", str(self.file.parent)))
        data.update(session_id=self.session, tool_use_id=f"toolu_{self.session}_{self.n}")
        data["tool_input"]["file_path"] = str(self.file)
        for key, value in fields.items():
            data["tool_input"][key] = value
        if kind == "post_read":
            text = self.file.read_text()
            data["tool_response"]["file"].update(filePath=str(self.file), content=text, numLines=1, totalLines=1)
        return json.dumps(data).encode()

    def run(self, send: Send, timings: list[list[float]]) -> None:
        """One cycle; appends the times of its three events (post_read, pre_edit, post_edit) to `timings`."""
        old, new = f"{self.session} = {self.n}", f"{self.session} = {self.n + 1}"
        self.n += 1
        times: list[float] = []
        for kind, fields in (("post_read", {}), ("pre_edit", {"old_string": old, "new_string": new})):
            raw = self._event(kind, **fields)
            start = time.perf_counter()
            answer = send(raw)
            times.append(time.perf_counter() - start)
            if answer:
                raise SystemExit(f"{self.session}: {kind} was not allowed: {answer}")
        self.file.write_text(self.file.read_text().replace(old, new))
        raw = self._event("post_edit", old_string=old, new_string=new)
        start = time.perf_counter()
        send(raw)
        times.append(time.perf_counter() - start)
        timings.append(times)

    def check(self) -> None:
        if self.file.read_text() != f"{self.session} = {self.n}\n":
            raise SystemExit(f"{self.file.name} does not hold its {self.n} edits")


def cycle_figures(cycles: Sequence[Sequence[float]]) -> dict[str, float]:
    """Per hook event and per tool call (a cycle's events together): p50 and p99 in ms, the events' mean."""
    events = [t for cycle in cycles for t in cycle]
    calls = [sum(cycle) for cycle in cycles]
    return {
        "events": len(events),
        "event_p50_ms": ms(events, 50),
        "event_p99_ms": ms(events, 99),
        "call_p50_ms": ms(calls, 50),
        "call_p99_ms": ms(calls, 99),
        "event_mean_ms": 1000 * statistics.fmean(events),
    }


def conclude(figures: dict[str, Any], json_out: str | None) -> None:
    """The closing lines of a hook measure, once its cycles were checked: that every guarded edit landed,
    the load average (the figures are timed), and the figures written as JSON to `json_out` when given."""
    print("every guarded edit is in its file")
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if json_out:
        Path(json_out).write_text(json.dumps(figures, indent=2) + "\n")
