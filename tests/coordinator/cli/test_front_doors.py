"""The choices on every front door (--policy, --match and their variables on `edit`, `mcp`, `serve`;
--version) and the first-contact refusals: a clear usage error instead of a traceback or a silent yes."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from coordinator.cli import build_parser, main
from coordinator.cli.config import settle
from coordinator.cli.files import _session_id
from coordinator.cli.mcp import _open_session
from coordinator.server.models import ServerConfig
from coordinator.tokens import claimed_session, mint_token
from coordinator.version import __version__

SECRET = b"s" * 48


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("ROOT", "POLICY", "MATCH", "REDIS_URL", "SERVER", "TOKEN", "SESSION"):
        monkeypatch.delenv(f"EDIT_COORDINATOR_{name}", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"edit-coordinator {__version__}"


@pytest.mark.parametrize("command", [["edit", "f", "--old", "a", "--new", "b"], ["mcp"], ["serve"]])
def test_policy_and_match_on_every_front_door(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = ["--root", str(tmp_path)]
    args = build_parser().parse_args([*command, *root, "--policy", "rebase", "--match", "flexible"])
    assert (args.policy, args.match) == ("rebase", "flexible")
    monkeypatch.setenv("EDIT_COORDINATOR_POLICY", "rebase")
    monkeypatch.setenv("EDIT_COORDINATOR_MATCH", "flexible")
    args = build_parser().parse_args([*command, *root])
    settle(args)
    assert (args.policy, args.match, args.durability) == ("rebase", "flexible", "fsync")
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, *root, "--policy", "lenient"])


def test_mcp_sessions_take_the_chosen_policy_and_match(tmp_path: Path) -> None:
    args = build_parser().parse_args(["mcp", "--root", str(tmp_path), "--policy", "rebase", "--match", "flexible"])
    settle(args)
    client, _bound, _ = _open_session(args)
    try:
        assert (client.coord.policy, client.coord.match) == ("rebase", "flexible")
    finally:
        client.close()
        main(["redis", "stop", "--root", str(tmp_path)])


def test_serve_config_carries_policy_and_match() -> None:
    config = ServerConfig.from_json(ServerConfig(root="/r", policy="rebase", match="flexible").to_json())
    assert (config.policy, config.match) == ("rebase", "flexible")
    with pytest.raises(ValueError, match="policy"):
        ServerConfig(root="/r", policy="lenient").validate()


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_serve_port_out_of_range_is_a_usage_error(
    port: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--root", str(tmp_path), "--port", port]) == 2
    err = capsys.readouterr().err
    assert f"[invalid_argument] --port must be 0-65535 (got {port})" in err
    assert not (tmp_path / ".edit-coordinator").exists()


def test_serve_that_cannot_listen_leaves_no_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        assert main(["serve", "--root", str(tmp_path), "--port", str(port), "--workers", "1"]) == 2
    finally:
        taken.close()
    assert "Cannot listen" in capsys.readouterr().err
    assert not (tmp_path / ".edit-coordinator").exists()


def test_serve_on_an_unreachable_redis_leaves_no_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "--root", str(tmp_path), "--port", "0", "--redis-url", "redis://127.0.0.1:1/0"])
    assert code == 5
    assert "[state_unavailable]" in capsys.readouterr().err
    assert not (tmp_path / ".edit-coordinator").exists()


@pytest.mark.parametrize("ttl", ["-5", "0"])
def test_token_ttl_must_be_positive(ttl: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "--root", str(tmp_path), "--admin", "--ttl", ttl]) == 2
    captured = capsys.readouterr()
    assert "--ttl must be at least 1 second" in captured.err
    assert captured.out == ""


def test_a_session_token_implies_its_session(tmp_path: Path) -> None:
    token = mint_token(SECRET, session="agent-7")
    assert claimed_session(token) == "agent-7"
    assert claimed_session(mint_token(SECRET, admin=True)) is None
    assert claimed_session("not.a.token") is None
    args = build_parser().parse_args(["read", "f", "--server", "http://127.0.0.1:1", "--token", token])
    assert _session_id(args) == "agent-7"
    args = build_parser().parse_args(["read", "f", "--server", "http://h:1", "--token", token, "--session", "other"])
    assert _session_id(args) == "other"
