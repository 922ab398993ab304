"""The folder tree is the architecture: imports run one way, from the adapters down to text and disk.

Every import of every module of `coordinator` counts, those under `TYPE_CHECKING` and those inside functions
included. A module's layer is its folder (ground modules sit at the top level); an arrow may only point to
the same layer or a lower one, and no two folders may import each other, directly or around a circle."""

from __future__ import annotations

import ast
from pathlib import Path

from tests import REPO_ROOT

PACKAGE = REPO_ROOT / "coordinator"

# Lowest first. The face (`coordinator/__init__.py`) re-exports the layers and sits above them all.
LAYERS: dict[str, int] = {
    "ground": 0,  # errors, frozen, version, hashing
    "text": 1,
    "disk": 1,
    "rules": 2,  # arguments (argument rules built on text's edit spec and disk's path rule) and tokens
    "history": 2,
    "state": 2,
    "engine": 3,
    "git": 3,  # a session's commit: over history, text and disk; the client offers it
    "client": 4,
    "server": 5,
    "tools": 5,
    "agents": 5,
    "cli": 6,
    "face": 7,
}
TOP_LEVEL_LIMIT = 10
RULES = {"arguments", "tokens"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def folder_of(module: str) -> str:
    parts = module.split(".")
    if parts == ["coordinator"]:
        return "face"
    if len(parts) == 2 and parts[1] in RULES:
        return "rules"
    if len(parts) == 2 and (PACKAGE / f"{parts[1]}.py").exists():
        return "ground"
    return parts[1]


def imports_of(path: Path) -> set[str]:
    """Every `coordinator.*` module this file imports (a `from X import name` counts X.name when it is a
    module, else X)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                is_module = (REPO_ROOT / candidate.replace(".", "/")).with_suffix(".py").exists() or (
                    REPO_ROOT / candidate.replace(".", "/") / "__init__.py"
                ).exists()
                found.add(candidate if is_module else base)
    return {name for name in found if name == "coordinator" or name.startswith("coordinator.")}


def folder_arrows() -> dict[tuple[str, str], list[str]]:
    arrows: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = module_name(path)
        for target in imports_of(path):
            edge = (folder_of(source), folder_of(target))
            if edge[0] != edge[1]:
                arrows.setdefault(edge, []).append(f"{source} -> {target}")
    return arrows


def test_every_folder_has_a_layer() -> None:
    folders = {folder_of(module_name(p)) for p in PACKAGE.rglob("*.py")}
    assert folders <= set(LAYERS), sorted(folders - set(LAYERS))


def test_no_arrow_runs_up_a_layer() -> None:
    upward = {edge: where for edge, where in folder_arrows().items() if LAYERS[edge[0]] < LAYERS[edge[1]]}
    assert not upward, upward


def test_no_circle_between_folders() -> None:
    graph: dict[str, set[str]] = {}
    for source, target in folder_arrows():
        graph.setdefault(source, set()).add(target)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            for nxt in graph.get(node, ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    circles = sorted(f"{a} <-> {b}" for a, b in folder_arrows() if reaches(b, a))
    assert not circles, circles


def test_the_top_level_stays_small() -> None:
    modules = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= TOP_LEVEL_LIMIT, sorted(modules)


def test_the_checker_sees_an_upward_arrow(tmp_path: Path) -> None:
    """The graph reader itself: a lazy import inside a function, as the package writes them, is an arrow."""
    probe = PACKAGE / "text" / "_probe_for_test.py"
    probe.write_text("def f() -> None:\n    from coordinator.engine import Coordinator\n")
    try:
        assert "coordinator.engine" in imports_of(probe)
        assert ("text", "engine") in folder_arrows()
    finally:
        probe.unlink()
