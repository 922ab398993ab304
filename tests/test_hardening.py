"""Hardening of the file rules: printable messages for undecodable names, the OS's own write permission
(as a non-root user, in a child process that drops root), hard links to files outside the root, and
which refusal comes first for content that can never be read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import fakeredis
import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode


def _coord(root: Path) -> Coordinator:
    return Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none")


def _utf8(exc: CoordinatorError) -> str:
    """Everything a model or terminal gets from the refusal, encoded strictly (raises on a lone surrogate)."""
    text = json.dumps(exc.to_dict(), ensure_ascii=False) + str(exc) + exc.message
    text.encode("utf-8")
    return text


# --- messages are valid UTF-8 ----------------------------------------------------------------------------
def test_did_you_mean_an_undecodable_name_is_valid_utf8(root: Path) -> None:
    with open(os.fsencode(root) + b"/caf\xe9.txt", "wb") as f:
        f.write(b"x\n")
    with _coord(root) as c, pytest.raises(CoordinatorError) as exc:
        c.session("s").read("cafe.txt")
    assert exc.value.code == ErrorCode.FILE_NOT_FOUND
    _utf8(exc.value)
    assert "Did you mean caf\\xe9.txt?" in exc.value.message, exc.value.message
    assert exc.value.details["suggestion"] == "caf\\xe9.txt"


def test_link_to_an_undecodable_name_gives_valid_utf8_refusals(root: Path) -> None:
    """The resolved key (from the link's target) carries the undecodable byte into details."""
    with open(os.fsencode(root) + b"/caf\xe9.bin", "wb") as f:
        f.write(b"\x00\x01\x02binary")
    os.symlink(b"caf\xe9.bin", os.fsencode(root) + b"/to_bin")
    os.symlink(b"gone\xff.txt", os.fsencode(root) + b"/to_missing")
    with _coord(root) as c:
        s = c.session("s")
        with pytest.raises(CoordinatorError) as exc:
            s.read("to_bin")
        assert exc.value.code == ErrorCode.BINARY_FILE
        _utf8(exc.value)
        for call in (lambda: s.read("to_missing"), lambda: s.edit("to_missing", "a", "b")):
            with pytest.raises(CoordinatorError) as exc:
                call()
            assert exc.value.code == ErrorCode.FILE_NOT_FOUND
            _utf8(exc.value)
            assert exc.value.details["path"] == "gone\\xff.txt"  # the byte is shown escaped, not dropped


def test_a_message_changed_after_the_error_was_made_stays_valid_utf8() -> None:
    exc = CoordinatorError(ErrorCode.STALE, "x")
    exc.message += " last written by caf\udce9"
    exc.details["path"] = "caf\udce9.txt"
    exc.message.encode("utf-8")
    json.dumps(exc.to_dict(), ensure_ascii=False).encode("utf-8")
    assert exc.message.endswith("caf\\xe9")


def test_a_lease_pattern_outside_the_root_does_not_name_the_root(root: Path) -> None:
    from coordinator.leases import normalize_pattern

    with pytest.raises(CoordinatorError) as exc:
        normalize_pattern("/elsewhere/src/**", str(root))
    assert exc.value.code == ErrorCode.OUTSIDE_ROOT
    assert str(root) not in exc.value.message and "outside the repository" in exc.value.message
