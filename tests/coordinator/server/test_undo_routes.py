"""Undo, redo, restore and flexible matching over HTTP: a real `edit-coordinator serve` process with the
embedded (real) Redis, driven by raw httpx calls (what the wire carries) and by `HttpClient`.

Properties guarded: three edits then three undos give the original file back and a redo steps forward;
an undo keeps another session's later write; redo follows the same token rules as undo; restore needs the
admin token and says which versions it discarded; `match: "flexible"` applies an edit that exact matching
refuses with `no_match`, and the answer says which match was used.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from coordinator import CoordinatorError, ErrorCode, HttpClient
from coordinator.server import openapi_document
from coordinator.state.embedded import stop_embedded_redis
from tests.coordinator.server.test_server import SECRET, ServerProcess, auth, token

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools")
pytest.importorskip("uvicorn", reason="the HTTP service needs uvicorn")

INDENTED = "def f():\n    x = 1\n    return x\n"
UNINDENTED_OLD = "x = 1\nreturn x"  # what a model sends when it drops the indentation
UNINDENTED_NEW = "x = 2\nreturn x"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("undo-routes") / "repo"
    root.mkdir()
    server = ServerProcess(root)
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


@pytest.fixture
def http(served: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=30) as c:
        yield c


def new_file(served: ServerProcess, text: str) -> str:
    name = f"f_{uuid.uuid4().hex[:10]}.py"
    (served.root / name).write_text(text)
    return name


def post(http: httpx.Client, endpoint: str, body: dict[str, Any], tok: str) -> httpx.Response:
    return http.post(endpoint, json=body, headers=auth(tok))


def test_three_edits_three_undos_give_the_original_then_redo_steps_forward(
    http: httpx.Client, served: ServerProcess
) -> None:
    name = new_file(served, "a = 0\n")
    me = token("h-steps")
    assert post(http, "/v1/read", {"path": name}, me).status_code == 200
    for i in (1, 2, 3):
        r = post(http, "/v1/edit", {"path": name, "old_string": f"a = {i - 1}", "new_string": f"a = {i}"}, me)
        assert r.status_code == 200, r.text
    seen = []
    for _ in range(3):
        r = post(http, "/v1/undo", {"path": name}, me)
        assert r.status_code == 200, r.text
        seen.append(((served.root / name).read_text(), r.json()["reverts"]))
    assert seen == [("a = 2\n", 3), ("a = 1\n", 2), ("a = 0\n", 1)]
    r = post(http, "/v1/redo", {"path": name}, me)
    assert r.status_code == 200, r.text
    assert (served.root / name).read_text() == "a = 1\n"
    assert r.json()["operation"] == "redo" and "Reverted your undo" in r.json()["message"]
    r = post(http, "/v1/redo", {"path": name}, me)  # the next redo steps forward again
    assert r.status_code == 200 and (served.root / name).read_text() == "a = 2\n"


def test_redo_follows_the_token_rules_of_undo(http: httpx.Client, served: ServerProcess) -> None:
    """A session token redoes only as its own session (its own undos); with nothing undone it is a clear
    refusal, and nothing is written."""
    name = new_file(served, "a = 0\n")
    mine, other = token("h-redo-a"), token("h-redo-b")
    post(http, "/v1/read", {"path": name}, mine)
    post(http, "/v1/edit", {"path": name, "old_string": "a = 0", "new_string": "a = 1"}, mine)
    r = post(http, "/v1/redo", {"path": name}, mine)
    assert (r.status_code, r.json()["code"]) == (422, "no_change") and "no undo" in r.json()["message"]
    assert post(http, "/v1/undo", {"path": name}, mine).status_code == 200
    r = post(http, "/v1/redo", {"path": name, "session": "h-redo-a"}, other)
    assert (r.status_code, r.json()["code"]) == (403, "forbidden")
    post(http, "/v1/read", {"path": name}, other)
    r = post(http, "/v1/redo", {"path": name}, other)  # h-redo-b has undone nothing
    assert (r.status_code, r.json()["code"]) == (422, "no_change")
    assert (served.root / name).read_text() == "a = 0\n"
    r = post(http, "/v1/redo", {"path": name, "session": "h-redo-a"}, token(admin=True))  # admin acts as anyone
    assert r.status_code == 200 and (served.root / name).read_text() == "a = 1\n"


def test_undo_over_http_keeps_another_sessions_later_write(served: ServerProcess) -> None:
    """The issue's u1/u2 scenario through HttpClient: u1's undo reverts a = 9 and keeps u2's b = 7."""
    name = new_file(served, "a = 0\nb = 0\n")
    with HttpClient(served.url, secret=SECRET) as c:
        c.read("h-u1", name)
        c.edit("h-u1", name, "a = 0", "a = 9")
        c.read("h-u2", name)
        c.edit("h-u2", name, "b = 0", "b = 7")
        c.read("h-u1", name)
        try:
            r = c.undo("h-u1", name)
        except CoordinatorError as exc:
            assert exc.code is ErrorCode.STALE  # the only other acceptable outcome: refused, nothing written
            assert (served.root / name).read_text() == "a = 9\nb = 7\n"
        else:
            assert (served.root / name).read_text() == "a = 0\nb = 7\n"
            assert r.reverts == 1 and "1 later write by others kept" in r.message


def test_restore_is_admin_only_and_reports_what_it_discarded(http: httpx.Client, served: ServerProcess) -> None:
    name = new_file(served, "a = 0\nb = 0\n")
    a, b, admin = token("h-rest-a"), token("h-rest-b"), token(admin=True)
    post(http, "/v1/read", {"path": name}, a)
    post(http, "/v1/edit", {"path": name, "old_string": "a = 0", "new_string": "a = 1"}, a)
    post(http, "/v1/read", {"path": name}, b)
    post(http, "/v1/edit", {"path": name, "old_string": "b = 0", "new_string": "b = 1"}, b)
    post(http, "/v1/read", {"path": name}, a)
    post(http, "/v1/edit", {"path": name, "old_string": "a = 1", "new_string": "a = 2"}, a)
    r = post(http, "/v1/admin/restore", {"path": name, "to_version": 1}, a)  # a session token: refused
    assert (r.status_code, r.json()["code"]) == (403, "forbidden")
    r = post(http, "/v1/admin/restore", {"path": name, "to_version": 1, "before_version": 2}, admin)
    assert (r.status_code, r.json()["code"]) == (422, "invalid_argument")  # exactly one of the two
    assert (served.root / name).read_text() == "a = 2\nb = 1\n"
    r = post(http, "/v1/admin/restore", {"path": name, "to_version": 1, "session": "ops"}, admin)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (served.root / name).read_text() == "a = 1\nb = 0\n"
    assert body["operation"] == "restore" and body["version"] == 4
    assert body["discarded"] == [
        {"version": 2, "session": "h-rest-b", "operation": "edit"},
        {"version": 3, "session": "h-rest-a", "operation": "edit"},
    ]
    assert "Discarded the changes of versions 2 (edit by h-rest-b), 3 (edit by h-rest-a)" in body["message"]
    with HttpClient(served.url, token=admin) as c:  # the same through HttpClient, back to before version 1
        res = c.restore(name, before_version=1)
        assert (served.root / name).read_text() == "a = 0\nb = 0\n"
        assert [d["version"] for d in res.discarded] == [1, 2, 3, 4]
        assert "Discarded the changes of versions 1 (edit by h-rest-a)" in res.message
        assert [e.operation for e in c.history(name)][:2] == ["restore", "restore"]
    with HttpClient(served.url, tokens={"x": a}) as c, pytest.raises(CoordinatorError) as info:
        c.restore(name, to_version=1)  # no admin token to send
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_flexible_match_over_http_applies_what_exact_refuses(http: httpx.Client, served: ServerProcess) -> None:
    name = new_file(served, INDENTED)
    me = token("h-flex")
    post(http, "/v1/read", {"path": name}, me)
    edit = {"path": name, "old_string": UNINDENTED_OLD, "new_string": UNINDENTED_NEW}
    r = post(http, "/v1/edit", edit, me)
    assert (r.status_code, r.json()["code"]) == (422, "no_match")
    r = post(http, "/v1/edit", {**edit, "match": "exact"}, me)
    assert (r.status_code, r.json()["code"]) == (422, "no_match")
    assert (served.root / name).read_text() == INDENTED
    r = post(http, "/v1/edit", {**edit, "match": "fuzzy"}, me)
    assert (r.status_code, r.json()["code"]) == (422, "invalid_argument")
    r = post(http, "/v1/edit", {**edit, "match": "flexible"}, me)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (served.root / name).read_text() == "def f():\n    x = 2\n    return x\n"
    assert body["match"] == "indentation" and body["match_lines"] == [2, 3]
    assert "matched lines 2-3 of the file only with the indentation shifted" in body["message"]
    # multi_edit takes the field too (here two-space indentation where the file has four).
    multi = {"path": name, "edits": [{"old_string": "  x = 2\n  return x", "new_string": "  x = 3\n  return x"}]}
    r = post(http, "/v1/multi_edit", multi, me)
    assert (r.status_code, r.json()["code"]) == (422, "no_match")
    r = post(http, "/v1/multi_edit", {**multi, "match": "flexible"}, me)
    assert r.status_code == 200 and (served.root / name).read_text() == "def f():\n    x = 3\n    return x\n"
    assert r.json()["match"] == "indentation"


def test_http_client_sends_its_match_and_policy(served: ServerProcess) -> None:
    name = new_file(served, INDENTED)
    with HttpClient(served.url, secret=SECRET) as exact, HttpClient(served.url, secret=SECRET, match="flexible") as c:
        c.read("h-flex-client", name)
        with pytest.raises(CoordinatorError) as info:
            exact.edit("h-flex-client", name, UNINDENTED_OLD, UNINDENTED_NEW)
        assert info.value.code is ErrorCode.NO_MATCH
        res = c.edit("h-flex-client", name, UNINDENTED_OLD, UNINDENTED_NEW)
        assert res.match == "indentation" and res.match_lines == (2, 3) and "indentation shifted" in res.message
    with pytest.raises(CoordinatorError) as info:
        HttpClient(served.url, secret=SECRET, match="fuzzy")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(CoordinatorError) as info:
        HttpClient(served.url, secret=SECRET, policy="yolo")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_openapi_describes_redo_restore_and_match() -> None:
    doc = openapi_document()
    assert "post" in doc["paths"]["/v1/redo"] and "post" in doc["paths"]["/v1/admin/restore"]
    assert doc["paths"]["/v1/admin/restore"]["post"]["tags"] == ["admin"]
    schemas = doc["components"]["schemas"]
    for request in ("EditRequest", "MultiEditRequest"):
        match = schemas[request]["properties"]["match"]
        assert {"enum": ["exact", "flexible"], "type": "string"} in match["anyOf"], match
    assert set(schemas["RestoreRequest"]["properties"]) == {"path", "to_version", "before_version", "session"}
    assert "discarded" in schemas["WriteResult"]["properties"]
