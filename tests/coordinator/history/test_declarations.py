"""The gc mixin's declarations of what it uses of History (history/_gc.py) name real definitions, with the
declared parameters, and add nothing at run time."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from coordinator.history import History, _gc


def test_gc_mixin_declarations_are_defined_by_history(tmp_path: Path) -> None:
    tree = ast.parse(inspect.getsource(_gc))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_Rewrite")
    guarded = [n for n in cls.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    declared = {
        fn.name: [a.arg for a in fn.args.args] for b in guarded for fn in b.body if isinstance(fn, ast.FunctionDef)
    }
    assert {"_reconcile", "read_index", "scan", "object_path", "_pack_file"} <= set(declared)
    for name, params in declared.items():
        assert name not in vars(_gc._Rewrite), name  # a declaration only
        assert list(inspect.signature(getattr(History, name)).parameters) == params, name
    store = History(tmp_path, fsync=False)
    try:
        assert [a for a in _gc._Rewrite.__annotations__ if not hasattr(store, a)] == []
    finally:
        store.close()
