"""A stand-in for an agent's own tool loop, as a process: Claude Code's Read, then Write of the whole file
made from what it read, with its hooks around them, exactly as Claude Code orders them:

    read the file -> PostToolUse Read (the text shown) -> PreToolUse Write -> (allowed) its own write of
    the file -> PostToolUse Write; (denied) read again and retry.

Each write appends one line naming the agent and the edit (its marker), so an oracle can tell which
acknowledged writes survived. `--hooks none` runs the same loop with no hooks (the unguarded baseline);
`http` posts each event to a running serve (Claude Code's `http` hook type); `command` runs
`edit-coordinator hook claude-code` per event (the `command` hook type); `fast` runs the fast client per
event as `init` writes it (`python -I -S .../coordinator/cli/hookclient.py claude-code --root R`, the
repository's hook service, started by the first hook that finds none).

    python -m tests.coordinator.agents.standin --hooks http --server URL --token T --session S \
        --file PATH --edits N --out RESULT.json

RESULT.json: {"acknowledged": [markers], "denied": {code-ish word: count}, "attempts": n}. With
`--hold-after-pre`, the agent stops after its first allowed PreToolUse (and waits to be killed). With
`--go-file GO`, it writes RESULT.json.ready once started and begins its loop when GO exists (the test
creates GO once every agent of the run is ready, so that they all begin together).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests import REPO_ROOT

_PAYLOADS = Path(__file__).resolve().parents[2] / "data" / "hooks" / "claude-code"


class Hooks:
    """Sends one hook event and returns (allowed, reason)."""

    def __init__(self, mode: str, server: str, token: str, root: str = "") -> None:
        self.mode, self.server, self.token, self.root = mode, server, token, root
        self.conn: Any = None

    def send(self, event: dict[str, Any]) -> tuple[bool, str]:
        if self.mode == "none":
            return True, ""
        raw = json.dumps(event).encode()
        if self.mode == "http":
            return self._http(raw)
        return self._command(raw)

    def _http(self, raw: bytes) -> tuple[bool, str]:
        import http.client
        from urllib.parse import urlsplit

        if self.conn is None:
            url = urlsplit(self.server)
            self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        self.conn.request(
            "POST",
            "/v1/hooks/claude-code",
            raw,
            {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        resp = self.conn.getresponse()
        body = json.loads(resp.read() or b"{}")
        return _decided(resp.status == 200, body, "")

    def _command(self, raw: bytes) -> tuple[bool, str]:
        argv = [sys.executable, "-m", "coordinator.cli", "hook", "claude-code", "--server", self.server]
        env = {**os.environ, "EDIT_COORDINATOR_TOKEN": self.token, "PYTHONPATH": str(REPO_ROOT)}
        if self.mode == "fast":
            client = str(REPO_ROOT / "coordinator" / "cli" / "hookclient.py")
            argv = [sys.executable, "-I", "-S", client, "claude-code", "--root", self.root]
            env = {k: v for k, v in env.items() if k not in ("EDIT_COORDINATOR_SERVER", "EDIT_COORDINATOR_TOKEN")}
        r = subprocess.run(argv, input=raw, capture_output=True, env=env, timeout=120)
        if r.returncode == 2:
            return False, r.stderr.decode()
        body = json.loads(r.stdout or b"{}")
        return _decided(r.returncode == 0, body, r.stderr.decode())


def _decided(ok: bool, body: dict[str, Any], stderr: str) -> tuple[bool, str]:
    out = body.get("hookSpecificOutput", {})
    if not ok:
        return False, stderr or json.dumps(body)
    if out.get("permissionDecision") == "deny":
        return False, str(out.get("permissionDecisionReason", ""))
    if body.get("decision") == "block":
        return False, str(body.get("reason", ""))
    return True, ""


def event(name: str, session: str, tool_use_id: str, path: Path, **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((_PAYLOADS / f"{name}.json").read_text().replace("__ROOT__", str(path.parent)))
    data.update(session_id=session, tool_use_id=tool_use_id, cwd=str(path.parent))
    data["tool_input"]["file_path"] = str(path)
    data.update(fields)
    return data


def _shown(path: Path, text: str) -> dict[str, Any]:
    lines = text.splitlines()
    return {"type": "text", "file": {"filePath": str(path), "content": text, "numLines": len(lines),
                                     "startLine": 1, "totalLines": len(lines)}}  # fmt: skip


def _reason_word(reason: str) -> str:
    for word in ("not been read", "modified since", "changed outside", "lease", "Another session", "could not"):
        if word in reason:
            return word
    return "other"


def run(args: argparse.Namespace) -> dict[str, Any]:
    hooks = Hooks(args.hooks, args.server, args.token, os.path.realpath(Path(args.file).parent))
    path = Path(args.file)
    acknowledged: list[str] = []
    denied: dict[str, int] = {}
    attempts = calls = 0
    if args.go_file:  # all agents of a run begin together, once every process has started
        Path(f"{args.out}.ready").write_text("")
        while not os.path.exists(args.go_file):
            time.sleep(0.005)
    for i in range(args.edits):
        marker = f"{args.session} edit {i}"
        for _ in range(args.retries):
            attempts += 1
            calls += 1
            tid = f"toolu_{args.session}_{calls}"
            text = path.read_text()
            hooks.send(event("post_read", args.session, tid + "r", path, tool_response=_shown(path, text)))
            new = text + marker + "\n"
            pre = event("pre_write", args.session, tid, path)
            pre["tool_input"]["content"] = new
            allowed, reason = hooks.send(pre)
            if not allowed:
                word = _reason_word(reason)
                denied[word] = denied.get(word, 0) + 1
                time.sleep(0.002)
                continue
            if args.hold_after_pre:
                Path(args.out).write_text(json.dumps({"held": True}))
                time.sleep(3600)
            time.sleep(args.think_s)  # the agent's own write comes a little after its read
            path.write_text(new)
            post = dict(pre, hook_event_name="PostToolUse", tool_response={"type": "update", "filePath": str(path)})
            hooks.send(post)
            acknowledged.append(marker)
            break
    return {"acknowledged": acknowledged, "denied": denied, "attempts": attempts}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--hooks", choices=["none", "http", "command", "fast"], required=True)
    p.add_argument("--server", default="")
    p.add_argument("--token", default="")
    p.add_argument("--session", required=True)
    p.add_argument("--file", required=True)
    p.add_argument("--edits", type=int, default=10)
    p.add_argument("--retries", type=int, default=200)
    p.add_argument("--think-s", type=float, default=0.002)
    p.add_argument("--hold-after-pre", action="store_true")
    p.add_argument("--go-file", default="", help="write OUT.ready, then begin once this file exists")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    result = run(args)
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
