"""The Coordinator's public face is all that code outside the engine sees.

The Coordinator (coordinator/engine/coordinator.py) holds parts: the Redis client, the state and lease
stores, the history store, the lease gate, the reader, the writer, the native writes, the agent-write
protocol, its caches. Code outside coordinator/engine/ goes through its public methods (and reads its plain
settings: the root, the Redis URL, the default policy ...); a reach into a part (`coord.state.ping()`,
`self.coord.redis`) ties an adapter to the engine's insides, so that a change to a part breaks the adapter.

The parts are read from the source: every attribute the Coordinator assigns to `self` that is neither a
public method nor one of the settings below. An expression `coord.<part>` or `<anything>.coord.<part>`
(also `_coord`) in any module outside coordinator/engine/ is refused."""

from __future__ import annotations

import ast
from pathlib import Path

from tests import REPO_ROOT

COORDINATOR = REPO_ROOT / "coordinator" / "engine" / "coordinator.py"
ENGINE = REPO_ROOT / "coordinator" / "engine"
SCANNED = ("coordinator", "worker", "coordinator_bench", "scripts")
COORD_NAMES = {"coord", "_coord"}

# Plain values a caller may read: where the repository is, how the Coordinator was configured.
SETTINGS = {
    "root",
    "redis_url",
    "durability",
    "policy",
    "match",
    "placeholders",
    "state_check",
    "fsync",
    "max_file_bytes",
    "max_read_bytes",
    "default_read_lines",
    "read_state_ttl",
    "publish_events",
}


def _coordinator_class() -> ast.ClassDef:
    tree = ast.parse(COORDINATOR.read_text(), str(COORDINATOR))
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Coordinator")


def coordinator_parts() -> set[str]:
    """Every attribute the Coordinator's methods assign to `self`, less its settings and public methods."""
    cls = _coordinator_class()
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assigned: set[str] = set()
    for node in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [
                t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])
            ]
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                assigned.add(t.attr)
    return assigned - SETTINGS - {m for m in methods if not m.startswith("_")}


def _is_coord(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id in COORD_NAMES) or (
        isinstance(node, ast.Attribute) and node.attr in COORD_NAMES
    )


def reaches_in(source: str, name: str, parts: set[str]) -> list[str]:
    """`name:line coord.<part>` for each reach into a part in this source."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Attribute) and node.attr in parts and _is_coord(node.value):
            found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return found


def outside_engine() -> list[Path]:
    files = [p for top in SCANNED if (REPO_ROOT / top).is_dir() for p in (REPO_ROOT / top).rglob("*.py")]
    return sorted(p for p in files if ENGINE not in p.parents)


def test_the_parts_are_read_from_the_source() -> None:
    parts = coordinator_parts()
    # The ones the adapters used to reach for are among them; the settings and public methods are not.
    assert {"state", "redis", "native", "lease_store", "history_store", "agent_writes", "lease_gate"} <= parts
    assert not parts & (SETTINGS | {"session", "leases", "events", "history"})


def test_the_scan_finds_a_reach() -> None:
    sample = "def f(app, coord):\n    app.coord.state.ping()\n    return coord.redis, coord.root, coord.leases()\n"
    found = reaches_in(sample, "sample.py", coordinator_parts())
    assert sorted(f.split(" ", 1)[1] for f in found) == ["app.coord.state", "coord.redis"]


def test_no_module_outside_the_engine_reaches_into_a_coordinator_part() -> None:
    parts = coordinator_parts()
    files = outside_engine()
    assert any(p.name == "app.py" for p in files)  # the scan covers the adapters
    reaches = [r for p in files for r in reaches_in(p.read_text(), str(p.relative_to(REPO_ROOT)), parts)]
    assert reaches == [], "use (or add) a public method of Coordinator instead:\n" + "\n".join(reaches)
