"""One declaration per operation (coordinator/client/operations.py): the service's routes, HttpClient's
requests, the clients' `run(op)` and the tool names are made from it, and write options travel as its fields."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode
from coordinator.client import LocalClient
from coordinator.client import operations as ops
from coordinator.client.calls import Calls
from coordinator.server.routes import ROUTES, request_adapter
from coordinator.tools.file_tools import tool_specs

BASE = "".join(f"line {i}\n" for i in range(1, 21))


def test_every_declared_operation_is_a_route_made_from_its_declaration() -> None:
    by_operation = {r.operation: r for r in ROUTES if r.operation is not None}
    assert set(by_operation) == set(ops.OPERATIONS)
    for op in ops.OPERATIONS:
        route = by_operation[op]
        assert (route.method, route.path, route.mutating, route.auth) == (
            op.route.method,
            op.route.path,
            op.mutates,
            op.auth,
        )
        assert route.request is (None if op.route.method == "GET" else op)


def test_a_request_body_is_validated_into_the_declaration_itself() -> None:
    edit = next(r for r in ROUTES if r.operation is ops.Edit)
    op = request_adapter(edit).validate_json(
        json.dumps({"path": "a.py", "old_string": "x", "new_string": "y", "match": "flexible"})
    )
    assert op == ops.Edit(path="a.py", old_string="x", new_string="y", match="flexible")
    for bad in (
        {"path": "a.py", "old_string": "x", "new_string": "y", "extra": 1},  # unknown field
        {"path": "", "old_string": "x", "new_string": "y"},  # empty path
        {"path": "a.py", "old_string": 1, "new_string": "y"},  # strict: no number for a string
        {"path": "a.py", "old_string": "x", "new_string": "y", "policy": "lenient"},
    ):
        with pytest.raises(pydantic.ValidationError):
            request_adapter(edit).validate_json(json.dumps(bad))


def test_every_tool_the_declarations_name_is_in_the_tool_list_and_back() -> None:
    declared = {op.tool for op in ops.OPERATIONS if op.tool is not None}
    assert declared == {spec.name for spec in tool_specs()}


def test_a_request_is_made_from_the_declaration_with_the_clients_write_options() -> None:
    calls = Calls(policy="rebase", match="flexible")
    edit = calls.run(ops.Edit(path="a.py", old_string="x", new_string="y", session="s1"))
    assert (edit.method, edit.endpoint, edit.session) == ("POST", "/v1/edit", "s1")
    assert edit.body == {
        "path": "a.py",
        "old_string": "x",
        "new_string": "y",
        "replace_all": False,
        "session": "s1",
        "policy": "rebase",
        "match": "flexible",
    }
    assert edit.idempotent and edit.key is not None
    own = calls.run(ops.Edit(path="a.py", old_string="x", new_string="y", session="s1", match="exact"))
    assert own.body is not None and own.body["match"] == "exact"  # the call's own option wins
    read = calls.run(ops.Read(path="a.py", session="s1"))
    assert read.body == {"path": "a.py", "session": "s1"}  # a read carries no write option
    assert calls.run(ops.Write(path="a.py", content="x", session="s1")).body == {
        "path": "a.py",
        "content": "x",
        "session": "s1",
        "policy": "rebase",
    }
    lease = calls.run(ops.LeaseOp(paths=["src/**"], session="s1"))
    assert lease.body == {"paths": ["src/**"], "mode": "exclusive", "ttl_s": 300.0, "session": "s1"}
    assert not lease.idempotent  # a lost grant must not be asked for again
    restore = calls.run(ops.Restore(path="a.py", to_version=2, session="s1"))
    assert restore.session is None and restore.endpoint == "/v1/admin/restore"  # the admin token carries it
    poll = calls.run(ops.PollEvents(since="0", wait_s=5.0))
    assert poll.read_timeout == 15.0 and poll.session is None
    leases = calls.run(ops.Leases(session="s1"))
    assert (leases.method, leases.body, leases.params) == ("GET", None, {"session": "s1"})
    unkeyed = Calls(idempotency_keys=False).run(ops.Write(path="a.py", content="x", session="s1"))
    assert unkeyed.key is None and not unkeyed.idempotent


def test_the_policy_of_one_call_is_its_own_on_one_client(coord: Coordinator, root: Path) -> None:
    """One LocalClient serves strict and rebasing writes alike: the policy is a field of the write."""
    (root / "f.txt").write_text(BASE)
    client = LocalClient(coord)
    for s in ("a", "b"):
        client.run(ops.Read(path="f.txt", session=s))
    client.run(ops.Edit(path="f.txt", old_string="line 2\n", new_string="line two\n", session="b"))
    stale = ops.Edit(path="f.txt", old_string="line 18\n", new_string="line eighteen\n", session="a")
    with pytest.raises(CoordinatorError) as refused:
        client.run(stale)
    assert refused.value.code == ErrorCode.STALE
    result = client.run(ops.Edit(path="f.txt", old_string="line 18\n", new_string="line eighteen\n", session="a",
                                 policy="rebase"))  # fmt: skip
    assert result.rebased
    text = (root / "f.txt").read_text()
    assert "line two\n" in text and "line eighteen\n" in text


def test_run_answers_as_the_named_methods_do(coord: Coordinator, root: Path) -> None:
    client = LocalClient(coord)
    assert client.run(ops.Write(path="n.txt", content="one\n", session="a")).created
    assert client.run(ops.Read(path="n.txt", session="a")).content == client.read("a", "n.txt").content
    (lease,) = client.run(ops.LeaseOp(paths=["n.txt"], session="a"))
    assert [x.id for x in client.run(ops.Leases(session="a"))] == [lease.id] == [x.id for x in client.leases("a")]
    assert client.run(ops.Release(session="a")) == 1
    assert [e.version for e in client.run(ops.History(path="n.txt"))] == [e.version for e in client.history("n.txt")]


def test_a_declaration_runs_over_http_and_async_as_its_request_says() -> None:
    """`HttpClient.run(op)` and `await AsyncClient.run(op)` send the declaration's route and body (the call's
    own policy included) and decode the answer into the result type; a keyed async write keeps its key."""
    import asyncio

    import httpx

    from coordinator import AsyncClient
    from coordinator.client.http import HttpClient

    seen: list[tuple[str, str, dict[str, object], str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.method, request.url.path, body, request.headers.get("idempotency-key")))
        answer = {"path": "a.txt", "operation": "edit", "created": False, "version": 4, "hash": None, "message": "ok"}
        return httpx.Response(200, json=answer)

    op = ops.Edit(path="a.txt", old_string="x", new_string="y", session="s", policy="rebase")
    with HttpClient("http://svc", token="t", transport=httpx.MockTransport(handler)) as http:
        assert http.run(op).version == 4

    async def main() -> int:
        async with AsyncClient(HttpClient("http://svc", token="t", transport=httpx.MockTransport(handler))) as c:
            result = await c.run(op, idempotency_key="k-1")
            return int(result.version)

    assert asyncio.run(main()) == 4
    assert [(m, p) for m, p, _, _ in seen] == [("POST", "/v1/edit")] * 2
    assert all(body["policy"] == "rebase" and body["session"] == "s" for _, _, body, _ in seen)
    assert seen[0][3] is not None and seen[1][3] == "k-1"


@pytest.mark.parametrize("since", ["$\n", "0\n", "1700000000000-0\n"])
def test_a_cursor_with_a_trailing_newline_is_refused(coord: Coordinator, since: str) -> None:
    """The cursor's rule is the whole string's: `$` in a pattern also matches before a final newline."""
    with pytest.raises(CoordinatorError) as e:
        LocalClient(coord).run(ops.PollEvents(since=since, wait_s=0.0))
    assert e.value.code is ErrorCode.INVALID_ARGUMENT and "since must be" in e.value.message


def test_a_token_with_a_trailing_newline_never_reaches_a_header() -> None:
    """A token is one word of visible ASCII, all of it: a final newline would end the header line early."""
    from coordinator.client.calls import headers_for

    call = Calls(idempotency_keys=False).run(ops.Read(path="a.py", session="s1"))
    assert headers_for(call, "tok")["authorization"] == "Bearer tok"
    with pytest.raises(CoordinatorError) as e:
        headers_for(call, "tok\n")
    assert e.value.code is ErrorCode.INVALID_ARGUMENT
