"""`edit-coordinator demo`: two sessions collide on one file, on a scratch copy with the embedded Redis."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from coordinator.cli.history import changed_text
from coordinator.cli.repo import ContentLookup, open_repo
from coordinator.disk.layout import state_dir_of
from coordinator.engine import Coordinator
from coordinator.errors import CoordinatorError
from coordinator.state.embedded import stop_embedded_redis


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="two agent sessions collide on one file (a one-minute tour)",
        description="In a temporary folder, two agent sessions read one file; the first edit lands, the second "
        "is refused as stale (nothing written), then succeeds after a fresh read. Nothing is left behind.",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="ec-demo-") as tmp:
        root = Path(tmp)
        (root / "app.py").write_text('GREETING = "hello"\nTIMEOUT = 30\n')
        try:
            with Coordinator(root) as coord:
                return _tour(coord, root)
        finally:
            stop_embedded_redis(state_dir_of(root))


def _tour(coord: Coordinator, root: Path) -> int:
    a, b = coord.session("agent-a"), coord.session("agent-b")
    print(f"Repository: {root} (embedded Redis at {coord.redis_url})\n")
    print("agent-a and agent-b both read app.py:")
    print(a.read("app.py").text + "\n")
    b.read("app.py")
    r = a.edit("app.py", "TIMEOUT = 30", "TIMEOUT = 60")
    print(f"agent-a edits TIMEOUT -> {r.message}\n{r.snippet}\n")
    try:
        b.edit("app.py", 'GREETING = "hello"', 'GREETING = "hi"')
        print("agent-b's stale edit was accepted: this must not happen")
        return 1
    except CoordinatorError as exc:
        print(f"agent-b edits GREETING from its old view -> refused [{exc.code}]: {exc.message}\n")
    b.read("app.py")
    r = b.edit("app.py", 'GREETING = "hello"', 'GREETING = "hi"')
    print(f"agent-b reads again and retries -> {r.message}\n{r.snippet}\n")
    final = (root / "app.py").read_text()
    ok = 'GREETING = "hi"' in final and "TIMEOUT = 60" in final
    print("Both edits are in the file; nothing was lost." if ok else "An edit was lost!")
    print("\nHistory of app.py (newest first):")
    repo = open_repo(str(root))
    lookup = ContentLookup(repo, repo.history())
    for e in coord.history("app.py"):
        print(f"  v{e.version}  {e.session:8}  {e.operation}  {changed_text(e, lookup)}")
    return 0 if ok else 1
