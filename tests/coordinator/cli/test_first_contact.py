"""What a new user is told at first contact, followed as written: `serve` names its dashboard and the command
that gives the token it asks for; a Redis URL where nothing answers, or a root that is no folder, is said
as what to fix."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from coordinator.cli import main
from coordinator.state.embedded import stop_embedded_redis
from tests import REPO_ROOT

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools")


def _user_env(tmp_path: Path) -> dict[str, str]:
    """A user's environment: none of the project's variables (the secret is the root's own file)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    return {**base, "PYTHONPATH": str(REPO_ROOT), "HOME": str(tmp_path / "home")}


def _healthy(log: str) -> bool:
    found = re.search(r"serving .* on (http://\S+) ", log)
    try:
        return found is not None and httpx.get(f"{found.group(1)}/v1/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def test_serve_names_the_dashboard_and_the_token_command_that_opens_it(tmp_path: Path) -> None:
    """At 0effb2a `serve` printed its address and secret only: nothing said where the dashboard is or how to
    get the viewer token it asks for. The printed command, run as printed from another folder, gives a token
    the dashboard's data route takes."""
    root = tmp_path / "repo"
    root.mkdir()
    env = _user_env(tmp_path)
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "coordinator.cli", "serve", "--port", "0", "--workers", "1", "--durability", "none"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not _healthy(log.read_text()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        text = log.read_text()  # answering: every line of its start is printed
        found = re.search(r"on (http://\S+) .*\ndashboard: (\S+)/dashboard .*?: (edit-coordinator token [^;]+);", text)
        assert found, text
        url, page, command = found.groups()
        assert page == url
        words = shlex.split(command)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        given = subprocess.run([sys.executable, "-m", "coordinator.cli", *words[1:]], cwd=elsewhere, env=env,
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert given.returncode == 0, given.stderr
        viewer = given.stdout.strip()
        answer = httpx.get(f"{url}/v1/dashboard", headers={"Authorization": f"Bearer {viewer}"}, timeout=30)
        assert answer.status_code == 200, answer.text
        assert httpx.get(f"{url}/dashboard", timeout=30).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        stop_embedded_redis(root / ".edit-coordinator")


def test_a_redis_url_where_nothing_answers_says_to_fix_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """At 0effb2a the message was 'Wait a moment and try again', which no wait fixes. The exit status stays 5
    (the state could not be reached), whether the URL came from the flag, the variable or the project config."""
    (tmp_path / "f.txt").write_text("one\n")
    monkeypatch.delenv("EDIT_COORDINATOR_REDIS_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    dead = "redis://127.0.0.1:1/0"
    ways: list[tuple[list[str], dict[str, str], str]] = [
        (["--redis-url", dead], {}, ""),
        ([], {"EDIT_COORDINATOR_REDIS_URL": dead}, ""),
        ([], {}, f'redis-url = "{dead}"\n'),
    ]
    for flags, variables, config in ways:
        (tmp_path / ".edit-coordinator.toml").write_text(config)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        assert main(["read", "f.txt", "--session", "s", "--root", str(tmp_path), *flags]) == 5
        err = capsys.readouterr().err
        assert "Nothing answers at the Redis URL redis://127.0.0.1:1" in err, err
        assert "Check the URL" in err and "wait a moment" not in err.lower(), err
        for name in variables:
            monkeypatch.delenv(name)


def test_serve_with_a_root_that_is_no_folder_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """At 0effb2a a file given as --root ended `serve` in a traceback."""
    (tmp_path / "file").write_text("x")
    assert main(["serve", "--root", str(tmp_path / "file"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "[invalid_argument]" in err and "is not a folder" in err and "Traceback" not in err, err


def _token_help(argv: list[str]) -> str:
    """The --token help of the command `argv` names (its parser's own text, before wrapping)."""
    import argparse

    from coordinator.cli import build_parser

    parser: argparse.ArgumentParser = build_parser()
    for word in argv:
        (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    (token,) = (a for a in parser._actions if "--token" in a.option_strings)
    return str(token.help)


def test_each_commands_token_help_names_the_tokens_its_calls_take() -> None:
    """At 0effb2a every --token said 'bearer token for --server' and nothing of which: the words are now the
    service's own refusal's for the route the command calls."""
    from coordinator.client import operations as ops
    from coordinator.server.app import roles_that_work
    from coordinator.server.routes import ROUTE_BY_PATH

    def takes(op: type[ops.Operation[object]]) -> str:
        return roles_that_work(ROUTE_BY_PATH[op.route.path][op.route.method])

    dashboard = roles_that_work(ROUTE_BY_PATH["/v1/dashboard"]["GET"])
    assert dashboard == "the admin token or a viewer token"
    expected = {
        ("status",): [dashboard],
        ("top",): [dashboard],
        ("history",): [takes(ops.History)],
        ("watch",): [takes(ops.PollEvents)],
        ("read",): [takes(ops.Read)],
        ("mcp",): [takes(ops.Read)],
        ("leases",): [f"list: {takes(ops.Leases)}", f"break: {takes(ops.BreakLease)}"],
    }
    for argv, words in expected.items():
        text = _token_help(list(argv))
        assert all(w in text for w in words), (argv, text, words)
    assert "a viewer token" in _token_help(["history"]) and "a viewer token" not in _token_help(["read"])


def test_a_redis_that_refuses_the_urls_credentials_says_to_fix_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that wants a password, given none or a wrong one: the message said 'Wait a moment and try
    again' after its hint, though only the URL's credentials can fix it."""
    import socket

    from worker.deployments import system_redis_server

    binary = system_redis_server()
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server; .ci/run installs it)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--requirepass", "right-one", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        (tmp_path / "f.txt").write_text("one\n")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        for url in (f"redis://127.0.0.1:{port}/0", f"redis://:wrong-one@127.0.0.1:{port}/0"):
            argv = ["read", "f.txt", "--session", "s", "--root", str(tmp_path), "--redis-url", url]
            assert main(argv) == 5
            err = capsys.readouterr().err
            assert "refused this connection's credentials" in err and "redis://USER:PASSWORD@" in err, err
            assert "wait a moment" not in err.lower() and "wrong-one" not in err, err  # no password shown
        good = f"redis://:right-one@127.0.0.1:{port}/0"
        assert main(["read", "f.txt", "--session", "s", "--root", str(tmp_path), "--redis-url", good]) == 0
    finally:
        server.terminate()
        server.wait(10)
