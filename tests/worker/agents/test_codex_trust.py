"""`init codex --check` sees what the real Codex sees: a project it does not trust, hooks it does not trust
(their keys and hashes from `codex app-server`'s hooks/list). At 0effb2a it could see neither, and Codex
skipped the hooks without a word."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.agents.install import AgentUnavailable, ensure
from worker.agents.runner import trust_codex_hooks

pytestmark = pytest.mark.agents


def _check(repo: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "coordinator.cli", "init", "codex", "--check", "--root", str(repo)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)


def test_init_codex_check_reports_codex_trust(tmp_path: Path) -> None:
    try:
        codex = ensure("codex")
    except AgentUnavailable as exc:
        pytest.skip(str(exc))
    repo, home = tmp_path / "repo", tmp_path / "codex-home"
    repo.mkdir()
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env = {**os.environ, "CODEX_HOME": str(home), "PATH": f"{codex.parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run([sys.executable, "-m", "coordinator.cli", "init", "codex", "--root", str(repo)], check=True,
                   capture_output=True, env=env)  # fmt: skip
    (home / "config.toml").write_text("")
    untrusted = _check(repo, env)
    assert untrusted.returncode == 1 and "Codex does not trust the project" in untrusted.stdout, untrusted.stdout
    (home / "config.toml").write_text(f'[projects."{repo}"]\ntrust_level = "trusted"\n')
    hooks = _check(repo, env)
    written = len(json.loads((repo / ".codex" / "hooks.json").read_text())["hooks"])  # one per event init hooks
    assert f"Codex does not trust {written} of the hooks" in hooks.stdout and hooks.returncode == 1, hooks.stdout
    assert "trusted_hash" in hooks.stdout and "Codex does not trust the project" not in hooks.stdout
    assert trust_codex_hooks(codex, repo, env) == written == 5
    trusted = _check(repo, env)
    assert trusted.returncode == 0 and "Codex does not trust" not in trusted.stdout, trusted.stdout
