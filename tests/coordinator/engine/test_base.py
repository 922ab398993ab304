"""The typing-only base of the Coordinator's mixins (engine/base.py): every name it declares is really
defined, with the declared parameters, and it defines nothing itself."""

from __future__ import annotations

import ast
import inspect

from coordinator import Coordinator
from coordinator.engine import base
from coordinator.engine.base import _CoordinatorBase


def _declared_methods() -> dict[str, list[str]]:
    """Method name -> parameter names, as declared under TYPE_CHECKING in the base's class body."""
    tree = ast.parse(inspect.getsource(base))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_CoordinatorBase")
    guarded = [n for n in cls.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    out: dict[str, list[str]] = {}
    for block in guarded:
        for fn in block.body:
            assert isinstance(fn, ast.FunctionDef), ast.unparse(fn)
            out[fn.name] = [a.arg for a in fn.args.args]
    return out


def test_declared_attributes_are_set_by_a_real_coordinator(coord: Coordinator) -> None:
    declared = _CoordinatorBase.__annotations__
    assert len(declared) >= 20
    missing = [name for name in declared if not hasattr(coord, name)]
    assert missing == []


def test_declared_methods_are_defined_with_the_declared_parameters() -> None:
    methods = _declared_methods()
    assert {"_state_call", "_missing", "_notice_extra", "_intervening"} <= set(methods)
    for name, params in methods.items():
        real = getattr(Coordinator, name)
        owner = next(k for k in Coordinator.__mro__ if name in vars(k))
        assert owner is not _CoordinatorBase, name
        assert list(inspect.signature(real).parameters) == params, name


def test_the_base_adds_nothing_at_run_time() -> None:
    own = {k for k in vars(_CoordinatorBase) if not k.startswith("__")}
    assert own == set()
    assert Coordinator.__mro__[-2] is _CoordinatorBase  # every mixin shares it; only object comes after
