"""The client's JSON in and out of the service: the request body and the answer's decoding into the result
types, by the fast paths and by the general ones alike."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest

from coordinator.client import operations
from coordinator.client.calls import Call, loads, payload_for
from coordinator.client.operations import build
from coordinator.engine import ReadResult, WriteResult
from coordinator.history import HistoryEntry
from coordinator.state.leases import Lease


def _write_answer(**changes: Any) -> dict[str, Any]:
    result = WriteResult(
        path="src/a.py", operation="edit", created=False, version=7, hash="ab" * 16, message="Edited.",
        replacements=1, snippet="1\tx\n", timings={"lock": 0.001}, warnings=("w",), changed_lines=((1, 2), (5, 5)),
        intervening=({"version": 6, "session": "s2", "lines": [1, 2]},), intervening_sessions=("s2",),
        match_lines=(3, 4), nearby_changes=((9, 9),),
    )  # fmt: skip
    return {**json.loads(json.dumps(result.to_dict())), **changes}


def _general(cls: type[Any], data: dict[str, Any]) -> Any:
    """What `build` makes by the type's own `__init__` (the answer's arrays back to tuples)."""

    def tupled(v: Any) -> Any:
        return tuple(tupled(x) for x in v) if isinstance(v, list) else v

    names = {f.name: "tuple" in str(f.type) for f in dataclasses.fields(cls)}
    return cls(**{k: tupled(v) if names[k] else v for k, v in data.items() if k in names})


@pytest.mark.parametrize(
    "data",
    [
        _write_answer(),
        _write_answer(warnings=[], changed_lines=[], intervening=[], match_lines=None),
        _write_answer(future_field=1),  # a newer service's field: left out
    ],
)
def test_build_makes_what_init_makes(data: dict[str, Any]) -> None:
    made = build(WriteResult, dict(data))
    assert operations._FIELDS[WriteResult][3]  # the type is filled directly when the answer names its fields
    assert made == _general(WriteResult, data)
    assert repr(made) == repr(_general(WriteResult, data))
    assert made.changed_lines == ((1, 2), (5, 5)) or made.changed_lines == ()
    assert isinstance(made.warnings, tuple) and isinstance(made.nearby_changes, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.version = 8  # type: ignore[misc]


def test_build_with_fields_missing_uses_the_defaults() -> None:
    data = _write_answer()
    for name in ("snippet", "timings", "discarded"):
        del data[name]
    made = build(WriteResult, data)
    assert made.snippet == "" and made.timings == {} and made.discarded == ()
    assert made == _general(WriteResult, data)


def test_build_of_other_result_types() -> None:
    lease = {"lease_id": "l1", "session": "s", "pattern": "src/**", "mode": "exclusive", "expires_at": 1.5,
             "token": 3}  # fmt: skip
    known = {f.name for f in dataclasses.fields(Lease)}
    lease = {k: v for k, v in lease.items() if k in known}
    for f in dataclasses.fields(Lease):
        lease.setdefault(f.name, None)
    assert build(Lease, lease) == _general(Lease, lease)
    for cls in (ReadResult, HistoryEntry):
        data = {f.name: [1, [2, 3]] if "tuple" in str(f.type) else f.name for f in dataclasses.fields(cls)}
        assert build(cls, data) == _general(cls, data)


def _call(body: dict[str, Any]) -> Call[Any]:
    return Call("POST", "/v1/edit", "s", body, False, lambda d: d)


def test_payload_is_the_body_as_json() -> None:
    body = {"path": "é/ü.py", "old_string": "a\n\x00\u2028</script>", "new_string": "😀", "replace_all": True,
            "n": 10**30, "f": 1e16, "edits": [{"old_string": "x", "new_string": "y"}]}  # fmt: skip
    payload = payload_for(_call(body))
    assert payload is not None
    assert json.loads(payload) == body == loads(payload)


def test_payload_writes_nan_and_escapes_lone_surrogates_as_json_dumps_does() -> None:
    nan = payload_for(_call({"ttl_s": float("nan"), "x": float("inf")}))
    assert nan is not None
    got = json.loads(nan)
    assert math.isnan(got["ttl_s"]) and got["x"] == math.inf
    lone = payload_for(_call({"path": "a\ud800b"}))
    assert lone == json.dumps({"path": "a\ud800b"}).encode()  # escaped: the service refuses it (422)
    assert payload_for(Call("GET", "/v1/leases", "s", None, True, lambda d: d)) is None


def test_loads_refuses_what_is_not_json() -> None:
    for bad in (b"", b"{", b'"\xff"', b"<html>"):
        with pytest.raises(ValueError):
            loads(bad)
