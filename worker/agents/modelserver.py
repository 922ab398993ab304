"""A scripted model on loopback that speaks the three vendors' streaming APIs, so that the real agent CLIs run
offline and do exactly what a test asks.

Wires (shapes checked against what the pinned CLIs send and accept; docs/agents/real-agents.md):
- Anthropic Messages, `POST /v1/messages` (Claude Code sends `?beta=true` and, in `-p` mode, only
  `"stream": true`): server-sent events message_start, content_block_start/delta/stop, message_delta,
  message_stop; a tool call is a `tool_use` block whose input arrives as `input_json_delta`.
- OpenAI Responses, `POST /v1/responses` (Codex with `wire_api = "responses"`): events response.created,
  response.output_item.done (a `function_call` with JSON `arguments`, or a `custom_tool_call` with free-form
  `input` for a tool declared `"type": "custom"`, as Codex declares apply_patch), response.completed.
- Gemini, `POST /v1beta/models/M:streamGenerateContent?alt=sse` and `:generateContent`: candidates whose
  content parts are `text` or `functionCall {name, args}`.

A script is a `Policy`: given the conversation so far (the calls the model made and the results the agent sent
back), it returns the next step, a `Use` of one of the agent's own tools or a final `Say`. The policy is asked
afresh on every request, from what the request carries, so a retried or repeated request gets the same answer.
Requests that carry no tools (a title, a summary, a check of the agent's own) are answered with a short text
and recorded as side requests; `main_requests` counts the others, the model requests of the session.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

Wire = str  # "anthropic" | "openai" | "gemini"


@dataclass(frozen=True)
class Call:
    """One tool call the model made, with the result the agent sent back for it (None: not yet)."""

    id: str
    name: str
    arguments: Any  # a dict of arguments, or the free-form input of a custom tool (a string)
    output: str | None = None
    is_error: bool = False
    # Text the agent sent after the result, before the model's next turn (Claude Code 2.1.328: a hook's
    # additionalContext, as a "system" message after the tool result: "PostToolUse:Bash hook additional
    # context: ...").
    context: str = ""


@dataclass(frozen=True)
class Conversation:
    wire: Wire
    prompt: str  # the first user text (the agent's task)
    calls: tuple[Call, ...]

    @property
    def last(self) -> Call | None:
        return self.calls[-1] if self.calls else None

    def outputs(self, name: str | None = None) -> list[str]:
        """The results of the calls so far (of the tool `name` only, when given), oldest first."""
        return [c.output or "" for c in self.calls if name is None or c.name == name]


@dataclass(frozen=True)
class Use:
    """Call the tool `name` with `arguments` (a dict; a string for a custom/free-form tool)."""

    name: str
    arguments: Any


@dataclass(frozen=True)
class Say:
    """End the turn with this text."""

    text: str


Step = Use | Say
Policy = Callable[[Conversation], Step]


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    body: Any
    main: bool  # a request of the session's conversation (it carried tools), not a side request
    answer: Step | None  # None: not answered by the policy (a side route, or over the limit)
    at: float  # time.monotonic() when it arrived


# -- reading a request: the conversation it carries --------------------------------------------------------


def _text_of(content: Any) -> str:
    """The text of a tool result's content: a string, a list of text blocks, or an object with content."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            _text_of(b.get("text", b.get("content", ""))) if isinstance(b, dict) else str(b) for b in content
        )
    if isinstance(content, dict):
        for key in ("output", "content", "text", "error"):
            if key in content:
                return _text_of(content[key])
        return json.dumps(content)
    return "" if content is None else json.dumps(content)


_Calls = list[tuple[str, str, Any]]
_Results = dict[str, tuple[str, bool]]


def _anthropic(body: dict[str, Any]) -> Conversation:
    prompt, calls, results, context = "", _Calls(), _Results(), dict[str, str]()
    last = ""  # the call whose result came last: the text that follows it in a user turn is its context
    for message in body.get("messages", []):
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for b in blocks:
            kind = b.get("type")
            if kind == "text" and message.get("role") == "user" and not prompt and not calls:
                prompt = b.get("text", "") if not b.get("text", "").startswith("<system-reminder>") else prompt
            elif kind == "text" and message.get("role") in ("user", "system") and last:
                context[last] = context.get(last, "") + b.get("text", "")
            elif kind == "tool_use":
                calls.append((b["id"], b["name"], b.get("input", {})))
            elif kind == "tool_result":
                results[b["tool_use_id"]] = (_text_of(b.get("content")), bool(b.get("is_error")))
                last = b["tool_use_id"]
    return Conversation("anthropic", prompt, _joined(calls, results, context))


def _openai(body: dict[str, Any]) -> Conversation:
    prompt, calls, results = "", _Calls(), _Results()
    items = body.get("input", [])
    for item in items if isinstance(items, list) else []:
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user":
            text = _text_of(item.get("content"))
            if not text.lstrip().startswith("<"):  # Codex's own context blocks (<environment_context>, ...)
                prompt = text if not calls else prompt
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            raw = item.get("arguments", item.get("input", item.get("action")))
            args = json.loads(raw) if kind == "function_call" and isinstance(raw, str) else raw
            calls.append((item["call_id"], item.get("name", "local_shell"), args))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            failed = isinstance(output, dict) and output.get("success") is False
            results[item["call_id"]] = (_text_of(output), failed)
    return Conversation("openai", prompt, _joined(calls, results))


def _gemini(body: dict[str, Any]) -> Conversation:
    prompt, calls, results, n = "", _Calls(), _Results(), itertools.count()
    pending: list[str] = []
    for content in body.get("contents", []):
        for part in content.get("parts", []):
            if "text" in part and content.get("role") == "user" and not calls:
                prompt = part["text"]
            elif "functionCall" in part:
                fc = part["functionCall"]
                cid = fc.get("id") or f"gemini-{next(n)}"
                pending.append(cid)
                calls.append((cid, fc["name"], fc.get("args", {})))
            elif "functionResponse" in part:
                fr = part["functionResponse"]
                cid = fr.get("id") or (pending.pop(0) if pending else "")
                response = fr.get("response", {})
                results[cid] = (_text_of(response), isinstance(response, dict) and "error" in response)
    return Conversation("gemini", prompt, _joined(calls, results))


def _joined(
    calls: list[tuple[str, str, Any]], results: dict[str, tuple[str, bool]], context: dict[str, str] | None = None
) -> tuple[Call, ...]:
    out = []
    for cid, name, args in calls:
        output, failed = results.get(cid, (None, False))
        out.append(Call(cid, name, args, output, failed, (context or {}).get(cid, "")))
    return tuple(out)


READERS: dict[Wire, Callable[[dict[str, Any]], Conversation]] = {
    "anthropic": _anthropic,
    "openai": _openai,
    "gemini": _gemini,
}


def _has_tools(wire: Wire, body: dict[str, Any]) -> bool:
    return bool(body.get("tools"))


# -- writing an answer ---------------------------------------------------------------------------------------


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def anthropic_events(step: Step, call_id: str, model: str) -> Iterator[bytes]:
    usage = {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {"id": f"msg_{call_id}", "type": "message", "role": "assistant", "model": model, "content": []}
    yield _sse(
        "message_start",
        {"type": "message_start", "message": {**message, "stop_reason": None, "stop_sequence": None, "usage": usage}},
    )
    if isinstance(step, Use):
        block = {"type": "tool_use", "id": call_id, "name": step.name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(step.arguments)}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": step.text}
        stop = "end_turn"
    yield _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
    yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield _sse(
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}},
    )
    yield _sse("message_stop", {"type": "message_stop"})


def anthropic_message(step: Step, call_id: str, model: str) -> dict[str, Any]:
    if isinstance(step, Use):
        content: list[dict[str, Any]] = [
            {"type": "tool_use", "id": call_id, "name": step.name, "input": step.arguments}
        ]
    else:
        content = [{"type": "text", "text": step.text}]
    return {
        "id": f"msg_{call_id}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if isinstance(step, Use) else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def openai_item(step: Step, call_id: str, custom: set[str]) -> dict[str, Any]:
    if isinstance(step, Say):
        return {
            "type": "message",
            "id": f"msg_{call_id}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": step.text, "annotations": []}],
        }
    if step.name in custom:
        text = step.arguments if isinstance(step.arguments, str) else json.dumps(step.arguments)
        return {
            "type": "custom_tool_call",
            "id": f"ctc_{call_id}",
            "status": "completed",
            "call_id": call_id,
            "name": step.name,
            "input": text,
        }
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "status": "completed",
        "call_id": call_id,
        "name": step.name,
        "arguments": json.dumps(step.arguments),
    }


def openai_events(step: Step, call_id: str, model: str, custom: set[str]) -> Iterator[bytes]:
    response = {"id": f"resp_{call_id}", "object": "response", "model": model, "status": "in_progress", "output": []}
    yield _sse("response.created", {"type": "response.created", "response": response})
    item = openai_item(step, call_id, custom)
    yield _sse("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item})
    yield _sse("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item})
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    done = {**response, "status": "completed", "output": [item], "usage": usage}
    yield _sse("response.completed", {"type": "response.completed", "response": done})


def gemini_chunk(step: Step, call_id: str) -> dict[str, Any]:
    if isinstance(step, Use):
        part: dict[str, Any] = {"functionCall": {"name": step.name, "args": step.arguments, "id": call_id}}
    else:
        part = {"text": step.text}
    return {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "gemini-2.5-pro",
    }


def _custom_tools(body: dict[str, Any]) -> set[str]:
    return {t.get("name", "") for t in body.get("tools", []) if isinstance(t, dict) and t.get("type") == "custom"}


# -- the server ----------------------------------------------------------------------------------------------


@dataclass
class ModelServer:
    """A scripted model on 127.0.0.1 (a thread of the calling process). Use as a context manager; `url` is
    its base URL once started. Every request is recorded in `requests`, in arrival order."""

    policy: Policy
    side_text: str = "ok"
    limit: int | None = None  # main requests beyond this many are answered 400 (an agent that will not stop)
    requests: list[Recorded] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _httpd: ThreadingHTTPServer | None = None
    _calls: Iterator[int] = field(default_factory=itertools.count)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ModelServer:
        server = self

        class Handler(_Handler):
            model = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="model-server", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def port(self) -> int:
        assert self._httpd is not None, "the model server is not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def main_requests(self) -> int:
        return sum(1 for r in self.recorded() if r.main)

    def recorded(self) -> list[Recorded]:
        with self._lock:
            return list(self.requests)

    def conversations(self) -> list[Conversation]:
        """The conversation each main request carried, in order (the last holds every result sent back)."""
        out = []
        for r in self.recorded():
            wire = _wire_of(r.path)
            if r.main and wire is not None:
                out.append(READERS[wire](r.body))
        return out

    def answer(self, method: str, path: str, body: Any) -> tuple[Wire | None, Step | None, str]:
        """The step for one request (and a fresh call id), recorded."""
        at = time.monotonic()
        wire = _wire_of(path)
        main = wire is not None and isinstance(body, dict) and _has_tools(wire, body)
        step: Step | None = None
        over = main and self.limit is not None and self.main_requests >= self.limit
        if wire is not None and isinstance(body, dict) and not over:
            step = self.policy(READERS[wire](body)) if main else Say(self.side_text)
        with self._lock:
            self.requests.append(Recorded(method, path, body, main, step, at))
            call_id = f"call_{next(self._calls)}"
        return wire, step, call_id


def _wire_of(path: str) -> Wire | None:
    p = urlsplit(path).path
    if p.endswith("/messages"):
        return "anthropic"
    if p.endswith("/responses"):
        return "openai"
    if ":generateContent" in p or ":streamGenerateContent" in p:
        return "gemini"
    return None


class _Handler(BaseHTTPRequestHandler):
    model: ModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.model.answer("GET", self.path, None)
        path = urlsplit(self.path).path
        if path.endswith("/models"):
            self._json(200, {"object": "list", "data": [], "models": []})
        else:
            self._json(404, {"error": {"message": f"no such route {path}", "type": "not_found"}})

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(size) if size else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = raw.decode(errors="replace")
        wire, step, call_id = self.model.answer("POST", self.path, body)
        path = urlsplit(self.path).path
        if wire is not None and step is None:
            message = f"the scripted model's limit of {self.model.limit} requests is reached"
            self._json(
                400,
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": message,
                        "code": 400,
                        "status": "INVALID_ARGUMENT",
                    },
                },
            )
            return
        if wire is None or step is None or not isinstance(body, dict):
            if path.endswith(":countTokens"):
                self._json(200, {"totalTokens": 10})
            else:
                self._json(404, {"error": {"message": f"no such route {path}", "type": "not_found"}})
            return
        model = str(body.get("model", "scripted"))
        if wire == "anthropic":
            if body.get("stream"):
                self._stream(anthropic_events(step, call_id, model))
            else:
                self._json(200, anthropic_message(step, call_id, model))
        elif wire == "openai":
            self._stream(openai_events(step, call_id, model, _custom_tools(body)))
        elif ":streamGenerateContent" in path:
            self._stream(iter([_sse(None, gemini_chunk(step, call_id))]))
        else:
            self._json(200, gemini_chunk(step, call_id))

    def _json(self, status: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _stream(self, events: Iterator[bytes]) -> None:
        raw = b"".join(events)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)
