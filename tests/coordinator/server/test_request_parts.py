"""The App's per-request parts on their own: headers, the answer's JSON form, the special paths."""

from __future__ import annotations

import dataclasses
import json

import pytest

from coordinator.engine.results import WriteResult, evolve
from coordinator.server import app as app_module
from coordinator.server.requests import header_map
from coordinator.server.routes import ROUTE_BY_PATH


def test_header_map_lower_cases_names_and_keeps_the_first_of_a_repeated_header() -> None:
    raw = [(b"Authorization", b"Bearer one"), (b"x-a", b"1"), (b"authorization", b"Bearer two"), (b"X-A", b"2")]
    for headers in (raw, tuple(raw), iter(raw)):
        assert header_map({"headers": headers}) == {"authorization": "Bearer one", "x-a": "1"}
    assert header_map({}) == {}
    assert header_map({"headers": [(b"k", b"\xe9")]}) == {"k": "\xe9"}  # latin-1, as before


def test_plain_result_is_its_fields_in_order() -> None:
    result = WriteResult(path="a", operation="edit", created=False, version=2, hash=None, message="m")
    names = [f.name for f in dataclasses.fields(WriteResult)]
    for r in (result, evolve(result, snippet="x", version=3)):
        plain = app_module._plain(r)
        assert list(plain) == names
        assert plain == {n: getattr(r, n) for n in names}
    # An instance carrying anything besides its fields is read field by field.
    odd = evolve(result)
    object.__setattr__(odd, "extra", 1)
    assert list(app_module._plain(odd)) == names
    assert json.loads(app_module.dumps(app_module._plain(result)))["version"] == 2


def test_special_paths_are_no_routes() -> None:
    assert not set(app_module._SPECIAL_PATHS) & ROUTE_BY_PATH.keys()


def test_the_hook_route_is_in_the_route_table_and_the_openapi_document() -> None:
    """`POST /v1/hooks/{agent}` is declared once (endpoint.HOOK_PATH): ROUTES and the OpenAPI document carry
    it, server/hooks.py answers the paths it names, and the hook module uses only the App's public face."""
    import re

    from coordinator.endpoint import HOOK_PATH
    from coordinator.server import hooks
    from coordinator.server.routes import ROUTES, openapi_document
    from tests import REPO_ROOT

    (hook,) = [r for r in ROUTES if r.path == HOOK_PATH]
    assert (hook.method, hook.name, hook.auth, hook.viewer) == ("POST", "hook", "any", False)
    post = openapi_document()["paths"][HOOK_PATH]["post"]
    assert [(p["name"], p["in"]) for p in post["parameters"]] == [("agent", "path"), ("answer", "query")]
    assert hooks.is_hook_path(HOOK_PATH.format(agent="claude-code")) and HOOK_PATH not in ROUTE_BY_PATH
    assert not re.search(r"\bapp\._", (REPO_ROOT / "coordinator" / "server" / "hooks.py").read_text())


def test_a_session_in_the_query_string_is_taken_by_the_session_ids_rule_alone() -> None:
    from coordinator.errors import CoordinatorError
    from coordinator.server.requests import query_session

    assert query_session({"query_string": b"session=agent-7"}) == "agent-7"
    for bad in (b"session=agent-7%0A", b"session=a%00b", b"session=" + b"s" * 201):
        with pytest.raises(CoordinatorError):  # %0A at the end passed re.match's `$`
            query_session({"query_string": bad})
