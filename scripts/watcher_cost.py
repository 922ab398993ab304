"""What the tree watcher (coordinator/engine/watcher.py) and the agent-write protocol cost.

    python3 scripts/watcher_cost.py [--files 100000] [--changes 200]

1. A tree of `--files` files (100 per folder): the watcher's start-up time, the memory it adds to the process
   (VmRSS) and the inotify watches it holds (from /proc/self/fdinfo).
2. On a small repository with a real coordinator (embedded Redis): `--changes` outside writes, one at a time,
   each waited for in the history: the time from the write to its version (median, p90) and the process CPU
   per change (the watcher thread and the record).
3. The hook events through the adapter, in process (median of 30): a Read's PostToolUse, an Edit's
   PreToolUse (its ticket granted and marked under the path's lock) and PostToolUse.
Everything is made in a scratch folder that is removed at the end; the embedded Redis is stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

from coordinator_bench.harness import Scratch, ms, scratch


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _inotify_watches() -> int:
    total = 0
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            text = Path(f"/proc/self/fdinfo/{fd}").read_text()
        except OSError:
            continue
        total += text.count("inotify wd:")
    return total


def big_tree(base: Path, files: int) -> dict[str, float]:
    from coordinator.engine.watcher import TreeWatcher

    root = base / "big"
    per = 100
    for d in range(files // per):
        folder = root / f"d{d // 100:03d}" / f"s{d % 100:02d}"
        folder.mkdir(parents=True)
        for i in range(per):
            (folder / f"f{i}.py").write_text(f"x = {i}\n")
    seen: list[str] = []
    got = threading.Event()
    rss0 = _rss_kib()
    t0 = time.perf_counter()

    def on_change(key: str, created: bool) -> None:
        seen.append(key)
        got.set()

    watcher = TreeWatcher(str(root), on_change)
    watcher.start()
    started = time.perf_counter() - t0
    rss1 = _rss_kib()
    watches = _inotify_watches()
    (root / "d000" / "s00" / "f0.py").write_text("x = 99\n")
    got.wait(10)
    watcher.stop()
    return {
        "files": files,
        "start_s": round(started, 3),
        "rss_added_mib": round((rss1 - rss0) / 1024, 1),
        "inotify_watches": watches,
        "change_seen": bool(seen),
    }


def per_change(sc: Scratch, changes: int) -> dict[str, float]:
    from coordinator import Coordinator
    from coordinator.engine.watcher import TreeWatcher

    root = sc.root
    target = root / "notes.txt"
    with Coordinator(root, durability="none") as coord:
        spent: list[float] = []

        def observed(key: str, created: bool) -> None:
            t = time.thread_time()
            coord.agent_port().observed(key, created)
            spent.append(time.thread_time() - t)

        watcher = TreeWatcher(coord.root, observed)
        watcher.start()
        target.write_text("0\n")
        _wait(lambda: coord.history("notes.txt"))
        lat: list[float] = []
        spent.clear()
        for i in range(1, changes + 1):
            t = time.perf_counter()
            target.write_text(f"{i}\n")
            _wait(lambda i=i: len(coord.history("notes.txt")) > i)
            lat.append(time.perf_counter() - t)
        watcher.stop()
    return {
        "changes": changes,
        "seen_p50_ms": round(ms(lat, 50), 1),
        "seen_p90_ms": round(ms(lat, 90), 1),
        "record_cpu_p50_ms": round(ms(spent, 50), 2),
    }


def _wait(check) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 20
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("a change was never recorded")
        time.sleep(0.002)


def hook_events(sc: Scratch, rounds: int = 30) -> dict[str, float]:
    from coordinator import Coordinator
    from coordinator.agents import claude_code
    from coordinator.agents.adapter import HookAdapter

    root = sc.repo("hooks")
    f = root / "app.py"
    f.write_text("n = 0\n")
    times: dict[str, list[float]] = {"post_read": [], "pre_edit": [], "post_edit": []}
    with Coordinator(root, durability="none") as coord:
        hooks = HookAdapter(coord, session_end=lambda r, s: None)
        for i in range(rounds):
            text = f.read_text()
            common = {"session_id": "s", "cwd": str(root), "tool_use_id": f"t{i}"}
            read = {**common, "hook_event_name": "PostToolUse", "tool_name": "Read",
                    "tool_input": {"file_path": str(f)},
                    "tool_response": {"type": "text", "file": {"filePath": str(f), "content": text,
                                      "numLines": 1, "startLine": 1, "totalLines": 1}}}  # fmt: skip
            edit = {**common, "tool_name": "Edit", "tool_input": {"file_path": str(f)}}
            for name, data, act in (
                ("post_read", read, None),
                ("pre_edit", {**edit, "hook_event_name": "PreToolUse"}, lambda i=i: f.write_text(f"n = {i + 1}\n")),
                ("post_edit", {**edit, "hook_event_name": "PostToolUse", "tool_response": {}}, None),
            ):
                call = claude_code.parse(data)
                assert call is not None
                t = time.perf_counter()
                decision = hooks.handle(call)
                times[name].append(time.perf_counter() - t)
                assert decision.allow, decision.reason
                if act is not None:
                    act()
    return {f"{k}_p50_ms": round(ms(v, 50), 1) for k, v in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", type=int, default=100_000)
    p.add_argument("--changes", type=int, default=200)
    args = p.parse_args()
    with scratch("ec-watcher-") as sc:
        out = {"big_tree": big_tree(sc.work, args.files), "per_change": per_change(sc, args.changes)}
        out["hook_events"] = hook_events(sc)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
