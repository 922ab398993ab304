"""The staleness rule, its one owner (`plan._view_refusal`): content decides, pure (no I/O)."""

from __future__ import annotations

import pytest

from coordinator import CoordinatorError, ErrorCode
from coordinator.disk.fsio import ResolvedPath
from coordinator.engine.plan import CurrentFile, _check_view, _view_refusal
from coordinator.history import content_hash
from coordinator.state.views import ReadState

RP = ResolvedPath(key="src/a.py", abs="/r/src/a.py", parent="/r/src", name="a.py", shown="src/a.py")


def _file(data: bytes) -> CurrentFile:
    return CurrentFile(exists=True, data=data, digest=content_hash(data))


def _view(data: bytes, mtime_ns: int = 1, size: int | None = None) -> ReadState:
    return ReadState(content_hash(data), mtime_ns, len(data) if size is None else size, 0, 0, 0.0)


def test_a_view_of_the_same_bytes_is_current_whatever_mtime_and_size_say() -> None:
    assert _view_refusal(_view(b"x = 1\n", mtime_ns=5, size=999), _file(b"x = 1\n"), RP) is None
    _check_view(_view(b"x = 1\n"), _file(b"x = 1\n"), RP)  # raises nothing


def test_a_view_of_other_bytes_is_stale() -> None:
    refusal = _view_refusal(_view(b"x = 1\n"), _file(b"x = 2\n"), RP)
    assert refusal is not None and refusal.code is ErrorCode.STALE
    assert refusal.details["path"] == "src/a.py" and "src/a.py" in refusal.message


def test_no_view_is_not_read_unless_the_content_could_never_be_read() -> None:
    refusal = _view_refusal(None, _file(b"x = 1\n"), RP)
    assert refusal is not None and refusal.code is ErrorCode.NOT_READ
    binary = _view_refusal(None, _file(b"\x00\x01\x02binary"), RP)
    assert binary is not None and binary.code is ErrorCode.BINARY_FILE  # not "read it first": it cannot be read


def test_check_view_raises_the_same_refusal() -> None:
    with pytest.raises(CoordinatorError) as exc:
        _check_view(_view(b"a\n"), _file(b"b\n"), RP)
    assert exc.value.code is ErrorCode.STALE
