"""The uvicorn options `serve` runs with: the fast parser and loop, no per-request logging, no concurrency
limiter of uvicorn's (the App's own limit answers `overloaded` with the service's refusal instead)."""

from __future__ import annotations

import importlib.util

import pytest

from coordinator.cli import build_parser
from coordinator.cli.serve import _uvicorn_options


def _options(*argv: str) -> dict[str, object]:
    args = build_parser().parse_args(["serve", *argv])
    return _uvicorn_options(args, {})


@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop not installed")
def test_serve_uses_httptools_and_uvloop_without_access_log_or_uvicorns_limit() -> None:
    options = _options()
    assert options["http"] == "httptools"
    assert options["loop"] == "uvloop"
    assert options["access_log"] is False
    assert "limit_concurrency" not in options
    assert options["server_header"] is False


def test_access_log_is_on_only_when_asked() -> None:
    assert _options("--access-log")["access_log"] is True
