"""`edit-coordinator serve --uds PATH`: the service on a unix socket, end to end, for every kind of client.

Real `serve` processes with the embedded (real) Redis. Guarded here: every client kind (`HttpClient`,
`AsyncClient.remote`, the standard-library connection of `coordinator.endpoint`, a command with `--server`,
an MCP server with `--server`) reads and edits through `unix:///path`; tokens are still required on the socket;
the socket file is 0600 and is removed on shutdown; a dead service's socket is replaced, a live one is refused
and keeps working; a path over 107 bytes, a file or symlink that is not a socket, a missing folder and options
that cannot go with --uds are refused before anything is made.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import certifi
import pytest

from coordinator import AsyncClient, CoordinatorError, ErrorCode, HttpClient
from coordinator.endpoint import MAX_UNIX_PATH_BYTES, parse_service_url
from coordinator.state.embedded import stop_embedded_redis
from tests import REPO_ROOT
from tests.coordinator.server.test_server import SECRET, ServerProcess, token

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools")


@pytest.fixture(scope="module")
def short_dir() -> Iterator[Path]:
    """A folder with a short path (pytest's own may come near the 107-byte limit of a socket path)."""
    folder = Path(tempfile.mkdtemp(prefix="ec-uds-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, short_dir: Path) -> Iterator[ServerProcess]:
    """One service on a unix socket, with two workers (the supervised path: the workers inherit the socket)."""
    root = tmp_path_factory.mktemp("uds") / "repo"
    root.mkdir()
    server = ServerProcess(root, workers=2, uds=str(short_dir / "serve.sock"))
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


def _serve(root: Path, *args: str) -> tuple[int, str]:
    """A `serve` that is expected to refuse at once, run in this process (it refuses before it starts
    anything; a real process would cost an interpreter start per case): (exit status, stderr)."""
    import contextlib
    import io

    from coordinator.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(["serve", "--root", str(root), "--workers", "1", *args])
    return status, err.getvalue()


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    argv = [sys.executable, "-m", "coordinator.cli", *args]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


# -- every client kind over the socket ------------------------------------------------------------------------
def test_the_socket_is_private_and_named_by_its_url(served: ServerProcess) -> None:
    assert served.uds is not None
    mode = os.lstat(served.uds).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert served.url == f"unix://{served.uds}"


def test_http_client_reads_edits_and_is_refused_like_in_process(served: ServerProcess) -> None:
    (served.root / "sync.txt").write_text("alpha\nbeta\n")
    with HttpClient(served.url, token=token(admin=True)) as client:
        assert client.read("sync-a", "sync.txt").content == "alpha\nbeta\n"
        client.read("sync-b", "sync.txt")
        assert client.edit("sync-a", "sync.txt", "beta", "gamma").replacements == 1
        with pytest.raises(CoordinatorError) as refused:
            client.edit("sync-b", "sync.txt", "alpha", "omega")  # b's view is out of date
        assert refused.value.code == ErrorCode.STALE
        assert client.health()["status"] == "ok"
    assert (served.root / "sync.txt").read_text() == "alpha\ngamma\n"


def test_tokens_are_still_required_on_the_socket(served: ServerProcess) -> None:
    (served.root / "guarded.txt").write_text("x\n")
    with (
        HttpClient(served.url, token="ec1.forged.token", retries=0) as client,
        pytest.raises(CoordinatorError) as refused,
    ):
        client.read("intruder", "guarded.txt")
    assert refused.value.details.get("service_code") == "unauthorized"
    assert "ec1.forged.token" not in refused.value.message


def test_async_client_over_the_socket(served: ServerProcess) -> None:
    paths = [f"async-{i}.txt" for i in range(4)]
    for p in paths:
        (served.root / p).write_text("count = 0\n")

    async def main() -> list[int]:
        async with AsyncClient.remote(served.url, secret=SECRET) as client:

            async def bump(i: int) -> int:
                await client.read(f"async-{i}", paths[i])
                result = await client.edit(f"async-{i}", paths[i], "count = 0", f"count = {i + 1}")
                return result.replacements

            return list(await asyncio.gather(*(bump(i) for i in range(len(paths)))))

    assert asyncio.run(main()) == [1, 1, 1, 1]
    assert [(served.root / p).read_text() for p in paths] == [f"count = {i + 1}\n" for i in range(4)]


def test_the_standard_library_connection_of_a_hook_client(served: ServerProcess) -> None:
    """`coordinator.endpoint`: http.client on the socket, no httpx (what a short-lived hook process uses)."""
    (served.root / "stdlib.txt").write_text("plain\n")
    conn = parse_service_url(served.url).http_connection(timeout=10)
    try:
        conn.request("GET", "/v1/health")
        health = conn.getresponse()
        assert health.status == 200 and json.loads(health.read())["status"] == "ok"
        body = json.dumps({"path": "stdlib.txt"})
        headers = {"authorization": f"Bearer {token('hook-1')}", "content-type": "application/json"}
        conn.request("POST", "/v1/read", body=body, headers=headers)  # the same keep-alive connection
        read = conn.getresponse()
        assert read.status == 200 and json.loads(read.read())["content"] == "plain\n"
    finally:
        conn.close()


def test_cli_commands_with_a_unix_server(served: ServerProcess, tmp_path: Path) -> None:
    (served.root / "cli.txt").write_text("one\ntwo\n")
    tok = token("cli-1")
    common = ["--server", served.url, "--token", tok, "--session", "cli-1"]
    read = _cli("read", "cli.txt", *common, cwd=tmp_path)
    assert read.returncode == 0, read.stderr
    assert "     2\ttwo" in read.stdout
    edit = _cli("edit", "cli.txt", "--old", "two", "--new", "three", *common, cwd=tmp_path)
    assert edit.returncode == 0, edit.stderr
    assert (served.root / "cli.txt").read_text() == "one\nthree\n"
    assert list(tmp_path.iterdir()) == []  # nothing local was made: the service did it all


def test_mcp_server_forwarding_to_a_unix_server(served: ServerProcess, tmp_path: Path) -> None:
    from tests.coordinator.tools.test_mcp_server import _ok, agent

    (served.root / "mcp.txt").write_text("draft\n")

    async def main() -> None:
        remote = (served.url, token("mcp-1"))
        async with agent(tmp_path, "mcp-1", tmp_path.parent / "mcp-uds.log", remote=remote) as client:
            shown = _ok(await client.call_tool("read_file", {"file_path": "mcp.txt"}))
            assert "draft" in shown
            args = {"file_path": "mcp.txt", "old_string": "draft", "new_string": "final"}
            _ok(await client.call_tool("edit_file", args))

    anyio.run(main)
    assert (served.root / "mcp.txt").read_text() == "final\n"
    assert list(tmp_path.iterdir()) == []


# -- the socket file: live, stale, hostile ------------------------------------------------------------------
def test_a_live_socket_is_refused_and_keeps_serving(served: ServerProcess, tmp_path: Path) -> None:
    assert served.uds is not None
    before = os.lstat(served.uds).st_ino
    (tmp_path / "other").mkdir()
    status, err = _serve(tmp_path / "other", "--uds", served.uds)
    assert status == 2, err
    assert "already listening" in err
    assert os.lstat(served.uds).st_ino == before
    assert not (tmp_path / "other" / ".edit-coordinator").exists()  # refused before anything was made
    with HttpClient(served.url, token=token(admin=True)) as client:
        assert client.health()["status"] == "ok"


def _leftover_socket(path: str) -> None:
    """A socket file nobody listens on, as a service that died leaves it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.close()


def test_a_dead_services_socket_is_replaced_and_removed_on_shutdown(tmp_path: Path, short_dir: Path) -> None:
    path = str(short_dir / "reborn.sock")
    _leftover_socket(path)
    root = tmp_path / "repo"
    root.mkdir()
    (root / "f.txt").write_text("v1\n")
    try:
        server = ServerProcess(root, uds=path)
        try:
            with HttpClient(server.url, token=token("after")) as client:
                assert client.read("after", "f.txt").content == "v1\n"
        finally:
            assert server.stop() == 0
        assert not os.path.lexists(path)  # removed on shutdown
    finally:
        stop_embedded_redis(root / ".edit-coordinator")


@pytest.mark.slow
def test_the_socket_of_a_killed_service_is_replaced(tmp_path: Path, short_dir: Path) -> None:
    path = str(short_dir / "killed.sock")
    root = tmp_path / "repo"
    root.mkdir()
    try:
        killed = ServerProcess(root, uds=path)
        killed.proc.send_signal(signal.SIGKILL)  # dies without cleaning up: its socket file stays behind
        killed.proc.wait(10)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        second = ServerProcess(root, uds=path)
        try:
            with HttpClient(second.url, token=token(admin=True)) as client:
                assert client.health()["status"] == "ok"
        finally:
            assert second.stop() == 0
        assert not os.path.lexists(path)
    finally:
        stop_embedded_redis(root / ".edit-coordinator")


def test_the_listener_removes_only_its_own_socket(short_dir: Path) -> None:
    from coordinator.server.listener import bind_unix

    path = str(short_dir / "own.sock")
    first = bind_unix(path, backlog=8)
    first.sock.close()  # now a leftover: the next listener may replace it
    second = bind_unix(path, backlog=8)
    assert first.remove() is False  # the path names the second's live socket now
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    assert second.remove() is True
    assert not os.path.lexists(path)


@pytest.mark.parametrize("kind", ["file", "symlink", "folder"])
def test_what_is_not_a_socket_is_refused_and_left_alone(kind: str, tmp_path: Path, short_dir: Path) -> None:
    path = short_dir / f"not-a-socket-{kind}"
    if kind == "file":
        path.write_text("keep me\n")
    elif kind == "symlink":
        path.symlink_to(tmp_path / "target")
    else:
        path.mkdir()
    status, err = _serve(tmp_path, "--uds", str(path))
    assert status == 2, err
    assert "not a socket" in err and "left alone" in err
    if kind == "file":
        assert path.read_text() == "keep me\n"
    assert path.is_symlink() if kind == "symlink" else path.exists()
    assert not (tmp_path / ".edit-coordinator").exists()


def test_a_path_over_107_bytes_is_refused(tmp_path: Path, short_dir: Path) -> None:
    long_path = str(short_dir / ("s" * (MAX_UNIX_PATH_BYTES + 1 - len(str(short_dir)) - 1)))
    assert len(long_path) == MAX_UNIX_PATH_BYTES + 1
    status, err = _serve(tmp_path, "--uds", long_path)
    assert status == 2, err
    assert "at most 107 bytes" in err
    assert not os.path.lexists(long_path) and not (tmp_path / ".edit-coordinator").exists()
    with pytest.raises(CoordinatorError) as refused:
        HttpClient(f"unix://{long_path}", token="t")
    assert refused.value.code == ErrorCode.INVALID_ARGUMENT and "107" in refused.value.message


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--host", "127.0.0.1"], "--host"),
        (["--port", "9000"], "--port"),
        (["--tls-cert", "c.pem", "--tls-key", "k.pem"], "--tls-cert/--tls-key"),
    ],
)
def test_options_that_cannot_go_with_uds(extra: list[str], expected: str, tmp_path: Path, short_dir: Path) -> None:
    status, err = _serve(tmp_path, "--uds", str(short_dir / "never.sock"), *extra)
    assert status == 2, err
    assert expected in err and "second `edit-coordinator serve`" in err
    assert not os.path.lexists(short_dir / "never.sock")


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    status, err = _serve(tmp_path, "--uds", str(tmp_path / "absent" / "s.sock"))
    assert status == 2, err
    assert "does not exist" in err


# -- client-side refusals -----------------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["unix://relative.sock", "unix:relative.sock", "ftp://host", "http://", "unix://"])
def test_malformed_service_urls_are_refused(url: str) -> None:
    with pytest.raises(CoordinatorError) as refused:
        HttpClient(url, token="t")
    assert refused.value.code == ErrorCode.INVALID_ARGUMENT
    assert "unix:///" in refused.value.message


def test_a_ca_file_with_a_unix_url_is_refused(short_dir: Path) -> None:
    with pytest.raises(CoordinatorError) as refused:
        HttpClient(f"unix://{short_dir}/x.sock", token="t", ca_file=certifi.where())
    assert refused.value.code == ErrorCode.INVALID_ARGUMENT and "no TLS" in refused.value.message


def test_nobody_listening_is_unreachable_and_nothing_was_sent(short_dir: Path) -> None:
    leftover = str(short_dir / "leftover.sock")
    _leftover_socket(leftover)
    for url in (f"unix://{leftover}", f"unix://{short_dir}/missing.sock"):
        with HttpClient(url, token="t", retries=1, backoff_s=0.0) as client, pytest.raises(CoordinatorError) as refused:
            client.write("s", "f.txt", "x")
        assert refused.value.code == ErrorCode.STATE_UNAVAILABLE
        assert "the unix socket" in refused.value.message and "not sent" in refused.value.message


# -- a service that stops by itself (the repository's hook service) -----------------------------------------
def _exits_within(server: ServerProcess, seconds: float) -> int | None:
    try:
        return server.proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return None


@pytest.mark.slow  # about 10 s for both: .ci/run's step 1b runs it (the default run stays under 10 minutes)
@pytest.mark.parametrize("cause", ["idle", "root_gone"])
def test_an_idle_exit_service_stops_by_itself(cause: str, tmp_path: Path, short_dir: Path) -> None:
    """--idle-exit: stopped after that long without a request (requests keep it up), or once its root's
    folder is gone; gracefully (exit 0), its socket removed."""
    path = str(short_dir / f"idle-{cause}.sock")
    root = tmp_path / "repo"
    root.mkdir()
    (root / "f.txt").write_text("v1\n")
    idle = "1.5" if cause == "idle" else "60"
    server = ServerProcess(root, "--idle-exit", idle, uds=path)
    try:
        with HttpClient(server.url, token=token("s")) as client:
            for _ in range(4):  # requests 0.5 s apart, 2 s in all: longer than the idle time, and still up
                assert client.read("s", "f.txt").content == "v1\n"
                time.sleep(0.5)
            assert server.proc.poll() is None
        if cause == "root_gone":
            stop_embedded_redis(root / ".edit-coordinator")
            shutil.rmtree(root)
        assert _exits_within(server, 30) == 0
        assert not os.path.lexists(path)
    finally:
        server.stop()
        if root.exists():
            stop_embedded_redis(root / ".edit-coordinator")


def test_idle_exit_needs_one_worker(tmp_path: Path) -> None:
    status, err = _serve(tmp_path, "--workers", "2", "--idle-exit", "5")
    assert status == 2 and "--idle-exit needs --workers 1" in err
