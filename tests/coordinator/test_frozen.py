"""`fast_init` (coordinator/frozen.py) makes the same instances as a frozen dataclass's own __init__."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest

from coordinator.engine.results import WriteResult
from coordinator.frozen import fast_init
from coordinator.history import HistoryEntry
from coordinator.state.views import ReadState


def _pair() -> tuple[type, type]:
    def make() -> type:
        @dataclass(frozen=True)
        class Rec:
            a: int
            b: str = "b"
            c: dict[str, int] = field(default_factory=dict)
            d: tuple[int, ...] = ()

        return Rec

    return make(), fast_init(make())


@pytest.mark.parametrize(
    "args,kwargs",
    [((1,), {}), ((1, "x"), {}), ((1,), {"c": {"k": 2}}), ((), {"a": 3, "d": (1, 2)}), ((1, "x", {"z": 1}, (5,)), {})],
)
def test_the_same_instance_as_the_generated_init(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    slow, fast = _pair()
    s, f = slow(*args, **kwargs), fast(*args, **kwargs)
    assert dataclasses.asdict(s) == dataclasses.asdict(f)
    assert repr(s).replace(slow.__qualname__, "R") == repr(f).replace(fast.__qualname__, "R")
    assert f == fast(*args, **kwargs) and f != fast(-1)


def test_still_frozen_and_a_fresh_default_each_time() -> None:
    _, fast = _pair()
    one, two = fast(1), fast(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.a = 5  # type: ignore[misc]
    assert one.c is not two.c and one.c == {}
    assert dataclasses.replace(one, a=9).a == 9


def test_hashable_as_before() -> None:
    @dataclass(frozen=True)
    class Key:
        a: int
        b: str = "b"

    slow = Key(1)
    fast = fast_init(Key)
    assert hash(fast(1)) == hash(slow) and fast(1) == slow and {fast(1): 1}[Key(1, "b")] == 1


@pytest.mark.parametrize("args,kwargs", [((), {}), ((1, "x", {}, (), 5), {}), ((1,), {"e": 1}), ((1,), {"a": 2})])
def test_wrong_arguments_are_refused_as_by_the_generated_init(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    slow, fast = _pair()
    with pytest.raises(TypeError):
        slow(*args, **kwargs)
    with pytest.raises(TypeError):
        fast(*args, **kwargs)


def test_a_class_it_cannot_serve_is_refused_at_decoration() -> None:
    @dataclass
    class Plain:
        a: int

    @dataclass(frozen=True)
    class Later:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True)
    class KwOnly:
        a: int = field(kw_only=True)

    for cls in (Plain, Later, KwOnly):
        with pytest.raises(TypeError):
            fast_init(cls)


def test_the_engine_records_use_it() -> None:
    for cls in (WriteResult, HistoryEntry, ReadState):
        assert cls.__init__.__qualname__ == f"{cls.__name__}.__init__"
        assert "__dict__" in cls.__init__.__code__.co_names
