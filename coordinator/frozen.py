"""`fast_init`: a frozen dataclass whose instances are made several times faster.

A frozen dataclass's generated `__init__` sets each field through `object.__setattr__` (its own
`__setattr__` refuses), a call per field that the same class unfrozen does not make (figures in
BENCHMARKS.md, "Figures behind design choices"). An edit makes a dozen such records (the request, the
resolved path, the read state, the history entry, the 25-field result...). `fast_init` replaces the
generated `__init__` with one of the same signature that fills the instance's `__dict__` in one update.
Nothing else changes: the instance stays frozen (assignment still raises FrozenInstanceError), and
equality, hashing, repr, `dataclasses.replace` and `asdict` are the dataclass's own.

Invariant, checked when the decorator runs: the class is a frozen dataclass with an instance `__dict__`
(no slots), no `__post_init__`, no keyword-only or init-less fields. A class that breaks it is refused
with TypeError when its module is imported, so it cannot go unnoticed. tests/coordinator/test_frozen.py pins the
behaviour against the generated `__init__`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

_C = TypeVar("_C", bound=type)
_T = TypeVar("_T")


def fast_init(cls: _C) -> _C:
    """See the module docstring."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"fast_init: {cls.__name__} is not a frozen dataclass")
    if hasattr(cls, "__slots__") or hasattr(cls, "__post_init__"):
        raise TypeError(f"fast_init: {cls.__name__} has slots or a __post_init__")
    fields = dataclasses.fields(cls)
    if any(f.kw_only or not f.init for f in fields):
        raise TypeError(f"fast_init: {cls.__name__} has keyword-only or init-less fields")
    cls.__init__ = _make_init(cls.__name__, fields)  # type: ignore[misc]
    return cls


_new_object = object.__new__
_set_attr = object.__setattr__


def made_from(cls: type[_T], values: dict[str, Any]) -> _T:
    """The instance of the frozen dataclass `cls` whose instance dict is `values`, taken as it is (not
    copied: the caller hands it over), for a write path that makes one per write: no keyword binding, no
    generated `__init__` between. The caller owes `values` every field of `cls`, each once, in field order,
    with values of the fields' types; the instance is then the one `cls(**values)` makes (equal, frozen)."""
    made = _new_object(cls)
    _set_attr(made, "__dict__", values)
    return made


def _make_init(name: str, fields: tuple[dataclasses.Field[Any], ...]) -> Any:
    namespace: dict[str, Any] = {"_MISSING": dataclasses.MISSING}
    params: list[str] = []
    factories: list[str] = []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            factories.append(f"    if {f.name} is _MISSING:\n        {f.name} = _factory_{f.name}()\n")
        else:
            params.append(f.name)
    items = ", ".join(f"{f.name!r}: {f.name}" for f in fields)
    source = (
        f"def __init__(self, {', '.join(params)}):\n" + "".join(factories) + f"    self.__dict__.update({{{items}}})\n"
    )
    exec(source, namespace)  # the same technique as dataclasses' own generated __init__
    init = namespace["__init__"]
    init.__qualname__ = f"{name}.__init__"
    return init
