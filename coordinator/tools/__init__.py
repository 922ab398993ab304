"""Model-API tool definitions and dispatch (`coordinator.tools`), and the MCP server.

The public face: `definitions(flavor)`, `dispatch(target, name, arguments)`, `adispatch(...)`, `ToolResult`."""

from coordinator.tools.catalog import FLAVORS, ToolResult, adispatch, definitions, dispatch, run_tool

__all__ = ["FLAVORS", "ToolResult", "adispatch", "definitions", "dispatch", "run_tool"]
