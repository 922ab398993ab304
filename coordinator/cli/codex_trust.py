"""Whether Codex will run the hooks `init codex` wrote: Codex runs a project's hooks only when the project
is trusted (`[projects."<root>"] trust_level = "trusted"` in the user config, $CODEX_HOME/config.toml) and
each hook is (`[hooks.state."<key>"] trusted_hash = "<hash>"`); anything else is skipped without a word.

The keys and hashes are Codex's own: asked from the installed `codex` (`codex app-server`, JSON-RPC
`hooks/list`, which gives each hook's `key`, `currentHash` and `trustStatus`), never computed here. Without
`codex` on PATH only the project's trust can be checked, and the report says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import tomllib
from pathlib import Path
from typing import Any

LIST_TIMEOUT_S = 20.0


def config_path() -> Path:
    home = os.environ.get("CODEX_HOME")
    return Path(home) / "config.toml" if home else Path.home() / ".codex" / "config.toml"


def project_trusted(root: Path, config: dict[str, Any]) -> bool:
    projects = config.get("projects")
    if not isinstance(projects, dict):
        return False
    for folder in (root, *root.parents):
        entry = projects.get(str(folder))
        if isinstance(entry, dict) and entry.get("trust_level") == "trusted":
            return True
    return False


def listed_hooks(codex: str, root: Path) -> list[dict[str, Any]]:
    """`hooks/list` of `codex app-server` for `root`; OSError/ValueError when it does not answer."""
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientInfo": {"name": "edit-coordinator",
                                                                                      "version": "1"}}},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [str(root)]}},
    ]  # fmt: skip
    proc = subprocess.Popen([codex, "app-server"], cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    timer = threading.Timer(LIST_TIMEOUT_S, proc.kill)
    timer.start()
    try:
        proc.stdin.write(json.dumps(messages[0]) + "\n")
        proc.stdin.flush()
        for line in proc.stdout:
            message = json.loads(line) if line.lstrip().startswith("{") else {}
            if message.get("id") == 1:
                proc.stdin.write(json.dumps(messages[1]) + "\n" + json.dumps(messages[2]) + "\n")
                proc.stdin.flush()
            elif message.get("id") == 2:
                if "error" in message:
                    raise ValueError(str(message["error"]))
                return [h for d in message["result"]["data"] for h in d.get("hooks", [])]
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
    raise ValueError("codex app-server ended without answering hooks/list")


def problems(root: Path, is_ours: Any) -> tuple[list[str], list[str]]:
    """(problems, notes) of Codex's trust in the hooks of `root` (`is_ours(handler_command)`: ours)."""
    where = config_path()
    try:
        config = tomllib.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    found: list[str] = []
    if not project_trusted(root, config):
        found.append(
            f'Codex does not trust the project {root} ({where} has no [projects."{root}"] trust_level = '
            '"trusted"): it skips every project hook without a word. Start codex there and trust the project'
        )
        return found, []  # an untrusted project's hooks are not listed either: trust the project first
    codex = shutil.which("codex")
    if codex is None:
        return found, ["codex is not on PATH here: whether Codex trusts each hook (its hash) was not checked"]
    try:
        hooks = [h for h in listed_hooks(codex, root) if is_ours(str(h.get("command", "")))]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return found, [f"codex app-server did not list the hooks ({exc}): their trust was not checked"]
    untrusted = [h for h in hooks if h.get("trustStatus") != "trusted"]
    if untrusted:
        lines = "; ".join(f'[hooks.state."{h["key"]}"] trusted_hash = "{h.get("currentHash")}"' for h in untrusted)
        states = ", ".join(str(h.get("trustStatus")) for h in untrusted)
        found.append(
            f"Codex does not trust {len(untrusted)} of the hooks ({states}): it skips them without a word. Review "
            f"and trust them in Codex's /hooks, or add to {where}: {lines}"
        )
    return found, []
