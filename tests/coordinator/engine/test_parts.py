"""The engine is collaborating objects (issue 27): the Coordinator owns resources and builds its parts, a
Session calls only their public methods, and call options travel with the session, never with the thread."""

from __future__ import annotations

import ast
import inspect
import threading
from pathlib import Path
from types import ModuleType

import pytest

from coordinator import Coordinator
from coordinator.agents import adapter
from coordinator.engine import CallOptions, LockBusy, native, session
from coordinator.engine.native import NativeWrites
from coordinator.engine.reading import Reader
from coordinator.engine.record import Recorder
from coordinator.engine.write import CheckThenWrite


def test_the_coordinator_inherits_no_steps_and_builds_its_parts(coord: Coordinator) -> None:
    assert Coordinator.__mro__ == (Coordinator, object)
    assert isinstance(coord.writer, CheckThenWrite) and isinstance(coord.reader, Reader)
    assert isinstance(coord.writer.recorder, Recorder)
    # One of each resource, shared by the parts: the same records, not copies.
    assert coord.writer.disk is coord.reader.disk is coord.writer.recorder.disk is coord.native.disk
    assert coord.writer.access is coord.reader.access is coord.writer.recorder.access is coord.native.access
    assert coord.writer.disk.locks is coord.locks and coord.writer.disk.history is coord.history_store
    assert coord.writer.lease_gate is coord.reader.lease_gate is coord.lease_gate
    assert isinstance(coord.native, NativeWrites)


@pytest.mark.parametrize("module", [session, native, adapter], ids=lambda m: m.__name__)
def test_a_session_calls_only_public_names_of_the_coordinator_and_its_parts(module: ModuleType) -> None:
    """The Session, the part for agents' own writes and the hook adapter above it: no private name of the
    coordinator or of its parts."""
    tree = ast.parse(inspect.getsource(module))
    private = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and "coord" in ast.unparse(node.value)
    ]
    assert private == []


def test_no_thread_local_in_the_engine() -> None:
    engine = Path(session.__file__).parent
    holders = [p.name for p in engine.glob("*.py") if "threading.local" in p.read_text()]
    assert holders == []
    assert not hasattr(Coordinator, "call_options")


def test_options_given_to_the_coordinator_session_shape_its_calls(coord: Coordinator, root: Path) -> None:
    (root / "f.txt").write_text("a\n")
    nowait = coord.session("s", options=CallOptions(wait_for_lock=False))
    nowait.read("f.txt")
    held = coord.locks.try_acquire("f.txt")
    assert held is not None
    try:
        with pytest.raises(LockBusy) as busy:
            nowait.edit("f.txt", "a", "b")
        assert (root / "f.txt").read_text() == "a\n"
    finally:
        held.release()
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(busy.value.resume()))
    worker.start()
    worker.join(timeout=30)
    assert (root / "f.txt").read_text() == "b\n" and len(out) == 1
