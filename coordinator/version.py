"""The package version: one owner, imported by the face, the service and the MCP server alike."""

__version__ = "0.1.0"
