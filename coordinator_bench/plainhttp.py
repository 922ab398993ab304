"""The `http-plain` column's client: what a user's own code would write against `edit-coordinator serve`.

A plain `httpx.Client` (keep-alive, default transport, one connection), a bearer token, JSON in and out,
no idempotency key and no retry: the HTTP service's own cost over the in-process engine, without the
project client's extras. Refusals come back as `CoordinatorError` with the service's code, so the same
agents and loops run against it. Results are the service's JSON, read through attributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from coordinator.errors import CoordinatorError, ErrorCode

_CODES = {c.value for c in ErrorCode}


class _Result:
    """A JSON answer read as attributes (`r.content`, `r.hash`); missing fields read as None."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        return self._data.get(name)

    @property
    def timings(self) -> dict[str, float]:
        return self._data.get("timings") or {}

    @property
    def warnings(self) -> list[Any]:
        return self._data.get("warnings") or []


class PlainHttpClient:
    """read / write / edit over HTTP with a plain httpx client (the worker `Client` calls it needs)."""

    def __init__(self, url: str, token: str, timeout_s: float = 30.0) -> None:
        self.http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )

    def _post(self, route: str, body: dict[str, Any]) -> _Result:
        r = self.http.post(route, json=body)
        data = r.json()
        if r.status_code != 200:
            code = data.get("code") if isinstance(data, dict) else None
            if code not in _CODES:
                raise RuntimeError(f"{route}: HTTP {r.status_code}: {r.text[:300]}")
            raise CoordinatorError(ErrorCode(code), str(data.get("message", "")))
        return _Result(data)

    def read(self, session: str, path: str, offset: int | None = None, limit: int | None = None) -> Any:
        body: dict[str, Any] = {"session": session, "path": path}
        if offset is not None:
            body["offset"] = offset
        if limit is not None:
            body["limit"] = limit
        return self._post("/v1/read", body)

    def write(self, session: str, path: str, content: str) -> Any:
        return self._post("/v1/write", {"session": session, "path": path, "content": content})

    def edit(self, session: str, path: str, old_string: str, new_string: str, replace_all: bool = False) -> Any:
        body: dict[str, Any] = {"session": session, "path": path, "old_string": old_string, "new_string": new_string}
        if replace_all:
            body["replace_all"] = True
        return self._post("/v1/edit", body)

    def multi_edit(self, session: str, path: str, edits: Sequence[dict[str, Any]]) -> Any:
        return self._post("/v1/multi_edit", {"session": session, "path": path, "edits": list(edits)})

    def undo(self, session: str, path: str, version: int | None = None) -> Any:
        raise CoordinatorError(ErrorCode.INVALID_ARGUMENT, "undo is not part of the plain HTTP client.")

    def close(self) -> None:
        self.http.close()
