"""The hooks' own failures, kept where people look: a small log in the state folder
(`<state>/hook-failures.log`, disk/layout.py's `hook_failures_file`), shown by `status`, `init --check`
and the dashboard.

Why a log: only a PreToolUse/BeforeTool that guards a write fails closed (the model sees the refusal). Every
other hook (after a tool, the end of a turn, the session's end) answers "go on" on an error of its own, so
that a broken install never keeps an agent looping; its failure would go unseen without this file.

One line per failure, newest last: `<unix seconds> <agent> <event> <what happened>` (the text on one line).
Three writers append it: this module (the full hook, the hook service), the fast client
(coordinator/cli/fasthook.py, without imports) and the shell fallback of the command `init` writes (when
the interpreter itself is gone: coordinator/agents/settings.py). Appends of one short line with O_APPEND do
not interleave. The file is cut to its last `KEEP_LINES` lines when it passes `MAX_BYTES`.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import NamedTuple

from coordinator.disk.layout import STATE_DIR_NAME, hook_failures_file

MAX_BYTES = 256 * 1024
KEEP_LINES = 200
_MAX_TEXT = 500


class Failure(NamedTuple):
    time: float
    agent: str
    event: str
    what: str


def line(agent: str, event: str, what: str, now: float | None = None) -> str:
    """The log line of one failure (with its newline)."""
    text = " ".join(what.split())[:_MAX_TEXT]
    return f"{int(now if now is not None else time.time())} {agent or '-'} {event or '-'} {text}\n"


def record(root: str | os.PathLike[str], agent: str, event: str, what: str) -> None:
    """Append one failure to the log of the repository at `root` (its state folder must exist: a hook
    never creates it for a log line). Never raises: the log must not turn a hook's "go on" into an error."""
    path = hook_failures_file(Path(root) / STATE_DIR_NAME)
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line(agent, event, what).encode("utf-8", "replace"))
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if size > MAX_BYTES:
            _cut(path)


def _cut(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)[-KEEP_LINES:]
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(b"".join(lines))
    os.replace(tmp, path)


def recent(root: str | os.PathLike[str], limit: int = 5, agent: str | None = None) -> tuple[int, list[Failure]]:
    """(how many failures the log holds, the newest `limit` of them, oldest first), of `agent` alone when
    given; (0, []) with no log."""
    path = hook_failures_file(Path(root) / STATE_DIR_NAME)
    try:
        raw = path.read_bytes()
    except OSError:
        return 0, []
    found = [f for f in (_parse(x) for x in raw.decode("utf-8", "replace").splitlines()) if f is not None]
    if agent is not None:
        found = [f for f in found if f.agent == agent]
    return len(found), found[-limit:] if limit > 0 else []


def _parse(text: str) -> Failure | None:
    parts = text.split(" ", 3)
    if len(parts) < 4 or not parts[0].isdigit():
        return None
    return Failure(float(parts[0]), parts[1], parts[2], parts[3])


def summary(root: str | os.PathLike[str], limit: int = 3, agent: str | None = None) -> list[str]:
    """What `status` and `init --check` print of the log (of `agent` alone when given): nothing when it is
    empty, else a count and the newest failures, each with its time (UTC), agent and event."""
    count, newest = recent(root, limit, agent)
    if count == 0:
        return []
    where = hook_failures_file(Path(root) / STATE_DIR_NAME)
    out = [f"{count} hook failure(s) logged in {where} (the hooks let the agent go on; newest last):"]
    for f in newest:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(f.time))
        out.append(f"  {stamp} UTC {f.agent} {f.event}: {f.what}")
    return out


def status_part(root: str | os.PathLike[str], limit: int = 5) -> dict[str, object]:
    """The hook failures as `status --json` and the dashboard give them: the count and the newest."""
    count, newest = recent(root, limit)
    return {"count": count, "recent": [f._asdict() for f in newest], "lines": summary(root, limit)}


def clear(root: str | os.PathLike[str]) -> None:
    """Empty the log (after the cause is fixed)."""
    with contextlib.suppress(FileNotFoundError):
        hook_failures_file(Path(root) / STATE_DIR_NAME).unlink()
