"""coordinator.tools: definitions in each model API's shape (valid JSON Schema, equal to what a real MCP
server lists), and the one dispatcher whose words are the MCP server's."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from coordinator import AsyncClient, Coordinator, ErrorCode, tools
from coordinator.client import LocalClient
from coordinator.tools.catalog import OPENAI_DESCRIPTION_LIMIT
from tests import REPO_ROOT

PACKAGE_ROOT = str(REPO_ROOT)
NAMES = [
    "read_file",
    "write_file",
    "edit_file",
    "multi_edit",
    "lease",
    "renew",
    "release",
    "leases",
    "history",
    "undo",
    "redo",
    "commit",
]


def _unfitted(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI flavour's parameters without the description text moved there to keep descriptions short."""
    for prop in schema.get("properties", {}).values():
        if "description" in prop:
            prop["description"] = prop["description"].split("\n\nRules of this tool, continued:\n")[0]
    return schema


@pytest.mark.parametrize("match", ["exact", "flexible"])
@pytest.mark.parametrize("flavor", ["openai", "openai-responses"])
def test_openai_descriptions_fit_in_1024_characters_and_lose_nothing(flavor: str, match: str) -> None:
    """Some OpenAI-compatible endpoints refuse a function description over 1,024 characters (edit_file's was
    4,233): each fits, and every line of the full description is in the description or in the first
    parameter's, which the description names."""
    full = {d["name"]: d for d in tools.definitions("anthropic", match=match)}
    for d in tools.definitions(flavor, match=match):  # type: ignore[arg-type]
        f = d["function"] if flavor == "openai" else d
        assert len(f["description"]) <= OPENAI_DESCRIPTION_LIMIT, (f["name"], len(f["description"]))
        original = full[f["name"]]["description"]
        if f["description"] == original:
            continue
        first = next(iter(f["parameters"]["properties"]))
        assert f"Continued in the description of the {first} parameter" in f["description"]
        seen = f["description"] + f["parameters"]["properties"][first]["description"]
        assert all(line in seen for line in original.splitlines()), f["name"]
    assert len(full["edit_file"]["description"]) > 4000  # the Anthropic shape keeps the whole text


def _schemas(flavor: str) -> dict[str, dict[str, object]]:
    defs = tools.definitions(flavor)  # type: ignore[arg-type]
    if flavor == "anthropic":
        return {d["name"]: d["input_schema"] for d in defs}
    if flavor == "openai":
        assert all(
            d["type"] == "function" and set(d["function"]) == {"name", "description", "parameters"} for d in defs
        )
        return {d["function"]["name"]: _unfitted(d["function"]["parameters"]) for d in defs}
    if flavor == "openai-responses":
        assert all(d["type"] == "function" and set(d) == {"type", "name", "description", "parameters"} for d in defs)
        return {d["name"]: _unfitted(d["parameters"]) for d in defs}
    return {d["name"]: d["inputSchema"] for d in defs}


@pytest.mark.parametrize("flavor", tools.FLAVORS)
def test_definitions_are_valid_json_schema_with_claude_code_names(flavor: str) -> None:
    schemas = _schemas(flavor)
    assert list(schemas) == NAMES
    for name, schema in schemas.items():
        jsonschema.Draft7Validator.check_schema(schema)
        assert schema["type"] == "object", name
    validator = jsonschema.Draft7Validator(schemas["edit_file"])
    assert validator.is_valid({"file_path": "a.py", "old_string": "a", "new_string": "b"})
    assert not validator.is_valid({"file_path": "a.py", "old_string": "a"})  # new_string is required
    assert not validator.is_valid({"file_path": "a.py", "old_string": "a", "new_string": "b", "extra": 1})


def test_descriptions_carry_the_rules_a_model_needs() -> None:
    described = {d["name"]: d["description"] for d in tools.definitions("anthropic")}
    edit = described["edit_file"]
    for rule in ("read", "replace_all", "not_read", "stale", "no_match", "ambiguous"):
        assert rule in edit, rule
    with pytest.raises(Exception) as info:
        tools.definitions("gemini")  # type: ignore[arg-type]
    assert getattr(info.value, "code", None) is ErrorCode.INVALID_ARGUMENT


def test_definitions_equal_the_input_schemas_a_real_mcp_server_lists(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    env = {"PYTHONPATH": os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "coordinator.cli", "mcp", "--root", str(root), "--durability", "none", "--session", "t"],
        env=env,
        cwd=str(root),
    )

    async def listed() -> list[types.Tool]:
        with open(tmp_path / "mcp.log", "a") as err:
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write, read_timeout_seconds=30) as client,
            ):
                await client.initialize()
                return list((await client.list_tools()).tools)

    try:
        served = asyncio.run(listed())
    finally:
        from coordinator.state.embedded import stop_embedded_redis

        stop_embedded_redis(root / ".edit-coordinator")
    by_name = {t.name: t for t in served}
    for flavor in tools.FLAVORS:
        schemas = _schemas(flavor)
        assert list(schemas) == [t.name for t in served]
        for name, schema in schemas.items():
            assert schema == by_name[name].input_schema, (flavor, name)
    for d in tools.definitions("anthropic"):
        assert d["description"] == by_name[d["name"]].description


def test_dispatch_reads_refuses_and_recovers_as_a_model_would(coord: Coordinator, root: Path) -> None:
    (root / "app.py").write_text("TIMEOUT = 30\n")
    s = coord.session("agent-1")
    edit = {"file_path": "app.py", "old_string": "TIMEOUT = 30", "new_string": "TIMEOUT = 60"}
    refused = tools.dispatch(s, "edit_file", edit)
    assert refused.is_error and refused.code == "not_read"
    assert refused.text.startswith("[not_read] ") and "Read it first" in refused.text
    read = tools.dispatch(s, "read_file", json.dumps({"file_path": "app.py"}))  # as OpenAI sends arguments
    assert not read.is_error and "1\tTIMEOUT = 30" in read.text
    done = tools.dispatch(s, "edit_file", edit)
    assert not done.is_error and "updated" in done.text and (root / "app.py").read_text() == "TIMEOUT = 60\n"
    # the same words through a Client session
    other = tools.dispatch(LocalClient(coord).session("agent-2"), "edit_file", edit)
    assert other.is_error and other.code == "not_read" and other.text == refused.text


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [
        ("no_such_tool", {}, "invalid_argument"),
        ("read_file", "{not json", "invalid_argument"),
        ("read_file", "[1, 2]", "invalid_argument"),
        ("read_file", {"file_path": 7}, "invalid_argument"),
        ("read_file", {"file_path": "missing.txt"}, "file_not_found"),
        ("read_file", {"file_path": "../outside.txt"}, "outside_root"),
    ],
)
def test_dispatch_never_raises(coord: Coordinator, name: str, arguments: object, code: str) -> None:
    res = tools.dispatch(coord.session("a"), name, arguments)  # type: ignore[arg-type]
    assert res.is_error and res.code == code and res.text.startswith(f"[{code}] ")


def test_dispatch_needs_a_session(coord: Coordinator) -> None:
    res = tools.dispatch(coord, "read_file", {"file_path": "x"})
    assert res.is_error and res.code == "invalid_argument" and "session" in res.text


def test_unchanged_short_answer_only_after_the_full_text(coord: Coordinator, root: Path) -> None:
    (root / "a.txt").write_text("one\n")
    # The engine already holds this session's view (another conversation with the same id read it) ...
    coord.session("s").read("a.txt")
    first = tools.dispatch(coord.session("s"), "read_file", {"file_path": "a.txt"})
    assert "1\tone" in first.text  # ... but this dispatcher has not shown it yet: the full text
    second = tools.dispatch(coord.session("s"), "read_file", {"file_path": "a.txt"})
    assert "unchanged" in second.text.lower() and "1\tone" not in second.text


def test_adispatch_runs_on_the_async_clients_pool(real_redis_root: Path) -> None:
    (real_redis_root / "a.txt").write_text("x = 1\n")

    async def main() -> list[tools.ToolResult]:
        async with AsyncClient.local(str(real_redis_root), durability="none") as client:
            s = client.session("async-agent")
            refused = await tools.adispatch(
                s, "edit_file", {"file_path": "a.txt", "old_string": "1", "new_string": "2"}
            )
            read = await tools.adispatch(s, "read_file", {"file_path": "a.txt"})
            done = await tools.adispatch(s, "edit_file", {"file_path": "a.txt", "old_string": "1", "new_string": "2"})
            return [refused, read, done]

    refused, read, done = asyncio.run(main())
    assert refused.code == "not_read" and not read.is_error and not done.is_error
    assert (real_redis_root / "a.txt").read_text() == "x = 2\n"
