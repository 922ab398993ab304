"""The public descriptions of the operations stay as they were: the OpenAPI document, the MCP server's tool
list and `coordinator.tools.definitions()` are compared, byte for byte, with the copies in
tests/data/contract/ (the version string masked).

They are made from one declaration per operation (coordinator/client/operations.py); a change to a
declaration that alters what a caller sees shows up here first. An operation added on purpose: regenerate
the copies with `python3 -m tests.project.test_contract` and review the diff."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from coordinator.version import __version__
from tests import REPO_ROOT

CONTRACT = REPO_ROOT / "tests" / "data" / "contract"
MASK = "<version>"
MATCHES = ("exact", "flexible")


def _masked(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (MASK if k == "version" and v == __version__ else _masked(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_masked(v) for v in node]
    return node


def _text(document: Any) -> str:
    return json.dumps(_masked(document), indent=2, ensure_ascii=False) + "\n"


def openapi() -> str:
    from coordinator.server.routes import openapi_document

    return _text(openapi_document())


def mcp_tools() -> str:
    """What the MCP server answers to tools/list, asked through the SDK's own client (in memory), for a
    session that matches exactly and one that matches flexibly."""
    import mcp

    from coordinator.tools.mcp_server import SessionTools, build_server

    async def listed(match: str) -> Any:
        session = SimpleNamespace(client=SimpleNamespace(match=match))  # all build_server asks of a session
        async with mcp.Client(build_server(SessionTools(session))) as client:
            result = await client.list_tools()
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    async def both() -> dict[str, Any]:
        return {match: await listed(match) for match in MATCHES}

    return _text(anyio.run(both))


def definitions() -> str:
    from coordinator import tools

    return _text({f"{flavor}/{match}": tools.definitions(flavor, match=match) for flavor in tools.FLAVORS
                  for match in MATCHES})  # fmt: skip


DOCUMENTS = {"openapi.json": openapi, "mcp_tools.json": mcp_tools, "definitions.json": definitions}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_the_published_descriptions_are_unchanged(name: str) -> None:
    kept = (CONTRACT / name).read_text()
    now = DOCUMENTS[name]()
    assert now == kept, f"{name} differs from tests/data/contract/{name}"


def test_the_version_is_masked_where_it_appears() -> None:
    text = openapi()
    assert f'"version": "{MASK}"' in text and f'"{__version__}"' not in text


def write_all(folder: Path = CONTRACT) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, make in DOCUMENTS.items():
        (folder / name).write_text(make())


if __name__ == "__main__":
    write_all(Path(sys.argv[1]) if len(sys.argv) > 1 else CONTRACT)
