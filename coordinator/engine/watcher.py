"""The tree watcher: every change to a file of the repository, whatever made it, is seen within about 100 ms
and recorded as a version with its author (invariant 7 (b), docs/agents/agent-writes.md).

One per repository, in its hook service (`serve --watch`, which the first hook starts): watchdog's inotify
observer on the root, recursive. A path's events are gathered until it has been quiet for `QUIET_S` (a tool
that writes a file in several system calls is seen once, whole), at most `MAX_DELAY_S` after the first; then
the path is handed to `AgentWrites.observed`, which attributes it (an open or lapsed agent call on the path:
that session; else "outside") and records it under the path's lock. The coordinator's own writes are
recorded before their lock is released, so for them the watcher finds the newest version already on disk
and records nothing.

"The tree" is what git would track: paths git ignores (build output, virtual environments; asked of
`git check-ignore` once per batch), the `.git` folder, the state folder, the coordinator's temporaries and
Claude Code's (NAME.tmp.PID.HEX, renamed over NAME),
binaries and files over the size limit stay out. Removals are not recorded (a version needs content).
inotify watches every folder, ignored ones too (one watch per folder; see BENCHMARKS.md for the cost).
"""

from __future__ import annotations

import logging
import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from watchdog.events import FileSystemEventHandler

from coordinator.disk.layout import STATE_DIR_NAME

log = logging.getLogger("coordinator.watcher")

# An agent's atomic-write temporary (Claude Code writes NAME.tmp.PID.HEX, then renames it over NAME): the
# rename is the change of NAME; the temporary itself is no file of the tree (under load the watcher could
# look at it before the rename and record it as a file created by "outside").
_ATOMIC_TEMPORARY = re.compile(r"\.tmp\.\d+\.[0-9a-f]{6,}$")
_IGNORED_KEPT = 100_000  # paths whose ignore status is kept at most (then asked again)
QUIET_S = 0.03  # a path is handled once no event has come for it this long,
MAX_DELAY_S = 0.1  # and at the latest this long after its first event
_STOP = object()


class TreeWatcher:
    """Watches `root` and calls `seen(key, created)` for each changed path of the tree (module docstring);
    `created`: the path was created (or moved in) among the events gathered."""

    def __init__(self, root: str, seen: Callable[[str, bool], Any]) -> None:
        self.root = os.path.realpath(root)
        self._seen = seen
        self._events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._observer: Any = None
        self._thread: threading.Thread | None = None
        self.handled = 0  # paths handed on (for tests and the benchmark)
        self._ignored: dict[str, bool] = {}  # key -> whether git ignores it (`_tracked`)

    def start(self) -> None:
        from watchdog.observers.inotify import InotifyObserver

        observer = InotifyObserver()
        observer.schedule(_Handler(self._events.put), self.root, recursive=True)
        observer.start()
        self._observer = observer
        self._thread = threading.Thread(target=self._run, name="tree-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
        if self._thread is not None:
            self._events.put(_STOP)
            self._thread.join(timeout=5)
            self._thread = None

    # -- the batching thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        due: dict[str, tuple[float, float]] = {}  # path -> (first event, last event)
        created: set[str] = set()
        while True:
            timeout = _next_wait(due)
            try:
                item = self._events.get(timeout=timeout) if timeout is None or timeout > 0 else None
            except queue.Empty:
                item = None
            if item is _STOP:
                return
            now = time.monotonic()
            if isinstance(item, tuple):
                path, made = item
                first = due.get(path, (now, now))[0]
                due[path] = (first, now)
                if made:
                    created.add(path)
            ready = [p for p, (first, last) in due.items() if now - last >= QUIET_S or now - first >= MAX_DELAY_S]
            for p in ready:
                del due[p]
            if ready:
                self._handle(ready, created)
                created.difference_update(ready)

    def _handle(self, paths: list[str], created: set[str]) -> None:
        keys = {k: p for k, p in ((self._key(p), p) for p in paths) if k is not None}
        for key in self._tracked(list(keys)):
            try:
                self._seen(key, keys[key] in created)
                self.handled += 1
            except Exception:  # never stops the watcher; the change is seen again at the next event
                log.exception("recording the change of %s failed", key)

    def _key(self, path: str) -> str | None:
        rel = os.path.relpath(path, self.root)
        if rel.startswith("..") or rel == ".":
            return None
        parts = rel.split(os.sep)
        if parts[0] in (STATE_DIR_NAME, ".git") or (parts[-1].startswith(".") and parts[-1].endswith(".tmp")):
            return None
        if _ATOMIC_TEMPORARY.search(parts[-1]):
            return None
        return "/".join(parts)

    def _tracked(self, keys: list[str]) -> Iterable[str]:
        """The keys git would track (all of them outside a git work tree). Git is asked once per path, not per
        change (a `git check-ignore` process per write cost a hooked Edit more than the rest of its hook event,
        measured in the real Claude Code: BENCHMARKS.md, "Figures behind design choices"): the answers are kept
        until a `.gitignore` changes (or `_IGNORED_KEPT` paths are known); a change of `.git/info/exclude` or of
        the user's global excludes is not seen."""
        if any(k == ".gitignore" or k.endswith("/.gitignore") for k in keys) or len(self._ignored) > _IGNORED_KEPT:
            self._ignored.clear()
        unknown = [k for k in keys if k not in self._ignored]
        if unknown:
            asked = self._ask_git(unknown)
            if asked is None:
                return keys  # git could not say: everything is the tree, and nothing is kept
            self._ignored.update((k, k in asked) for k in unknown)
        return [k for k in keys if not self._ignored[k]]

    def _ask_git(self, keys: list[str]) -> set[str] | None:
        """The keys of `keys` git ignores; None when git cannot say (no git work tree, no git). Each path is
        given as `./KEY`: check-ignore reads its paths as pathspecs (and refuses GIT_LITERAL_PATHSPECS), so a
        file named `:(top)build` would be judged as `build`, and one named `:!x.py` fail the whole batch."""
        try:
            done = subprocess.run(
                ["git", "-C", self.root, "check-ignore", "-z", "--stdin"],
                input="".join(f"./{k}\0" for k in keys),
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode not in (0, 1):
            return None  # not a git work tree (128): everything is the tree
        return {p[2:] for p in done.stdout.split("\0") if p.startswith("./")}


class _Handler(FileSystemEventHandler):
    """File events' paths into the queue."""

    def __init__(self, put: Callable[[object], None]) -> None:
        super().__init__()
        self._put = put

    def dispatch(self, event: Any) -> None:
        if event.is_directory or event.event_type in ("opened", "closed_no_write", "deleted"):
            return
        moved = event.event_type == "moved" and event.dest_path
        made = moved or event.event_type == "created"
        self._put((os.fsdecode(event.dest_path if moved else event.src_path), bool(made)))


def _next_wait(due: dict[str, tuple[float, float]]) -> float | None:
    if not due:
        return None
    now = time.monotonic()
    return max(0.0, min(min(last + QUIET_S, first + MAX_DELAY_S) for first, last in due.values()) - now)
