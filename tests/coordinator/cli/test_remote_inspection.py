"""Inspection commands against a remote `serve`: `leases list` and `history PATH` with `--server URL --token T`
run as real processes, show the service's state (a lease taken, an edit made over HTTP), and a wrong token
gives a clear `unauthorized` refusal that never contains the token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from coordinator.client import HttpClient
from coordinator.errors import CoordinatorError
from coordinator.server.metrics import HISTORY_TTL_S
from coordinator.state.embedded import stop_embedded_redis
from coordinator.tokens import mint_token
from tests import REPO_ROOT
from tests.coordinator.server.test_server import SECRET, ServerProcess, auth, token

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("remote") / "repo"
    root.mkdir()
    server = ServerProcess(root)
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


def _cli(
    served: ServerProcess,
    *args: str,
    tok: str,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    home: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """The command as a real process, run from an unrelated folder (or `cwd`): nothing local can answer."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    full_env = {**base, "PYTHONPATH": str(REPO_ROOT), **(env or {}), **({"HOME": home} if home else {})}
    argv = [sys.executable, "-m", "coordinator.cli", *args]
    if env is None:
        argv += ["--server", served.url, "--token", tok]
    elsewhere = served.root.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return subprocess.run(argv, cwd=cwd or elsewhere, env=full_env, capture_output=True, text=True, timeout=60)


def test_leases_list_shows_a_lease_taken_on_the_server(served: ServerProcess) -> None:
    with HttpClient(served.url, token=token("holder-1")) as client:
        taken = client.lease("holder-1", "src/remote_leased.py", ttl_s=120)
    r = _cli(served, "leases", "list", tok=token(admin=True))
    assert r.returncode == 0, r.stderr
    assert taken[0].id in r.stdout and "holder-1" in r.stdout and "src/remote_leased.py" in r.stdout


def test_leases_list_takes_the_variables(served: ServerProcess) -> None:
    with HttpClient(served.url, token=token("holder-2")) as client:
        client.lease("holder-2", "docs/by_env.md", ttl_s=120)
    env = {"EDIT_COORDINATOR_SERVER": served.url, "EDIT_COORDINATOR_TOKEN": token(admin=True)}
    r = _cli(served, "leases", "list", "--json", tok="", env=env)
    assert r.returncode == 0, r.stderr
    assert "docs/by_env.md" in r.stdout and "holder-2" in r.stdout


def test_history_shows_an_edit_made_over_http(served: ServerProcess) -> None:
    (served.root / "notes.txt").write_text("alpha\nbeta\n")
    with HttpClient(served.url, token=token("editor-9")) as client:
        client.read("editor-9", "notes.txt")
        client.edit("editor-9", "notes.txt", "beta", "gamma")
    for tok in (token(admin=True), token("reader-3")):  # another session's token sees it too (docs/http.md)
        r = _cli(served, "history", "notes.txt", tok=tok)
        assert r.returncode == 0, r.stderr
        assert "editor-9" in r.stdout and "edit" in r.stdout and "notes.txt" in r.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["leases", "list"],
        ["history", "notes.txt"],
        ["status"],
        ["top", "--iterations", "1"],
        ["watch", "--timeout", "0.2"],
    ],
)
def test_a_wrong_token_is_refused_without_echoing_it(served: ServerProcess, command: list[str]) -> None:
    malformed = "wrong-token-" + "q" * 30
    foreign = mint_token(b"another-secret-" + b"y" * 40, admin=True)  # well formed, signed by another secret
    for wrong in (malformed, foreign):
        r = _cli(served, *command, tok=wrong)
        assert r.returncode == 8, r.stderr  # the token's own exit status, not "could not be reached" (5)
        assert "[unauthorized]" in r.stderr
        assert wrong not in r.stderr and wrong not in r.stdout


@pytest.mark.parametrize("command", [["status"], ["top", "--iterations", "1", "--interval", "0.1"]])
def test_status_and_top_show_the_remote_sessions_leases_and_writes(served: ServerProcess, command: list[str]) -> None:
    (served.root / "status_seen.txt").write_text("one\n")
    with HttpClient(served.url, token=token("watcher-3")) as client:
        client.read("watcher-3", "status_seen.txt")
        client.edit("watcher-3", "status_seen.txt", "one", "two")
        client.lease("watcher-3", "leased_by_watcher/**", ttl_s=120)
    r = _cli(served, *command, tok=token(admin=True))
    assert r.returncode == 0, r.stderr
    assert "watcher-3" in r.stdout and "status_seen.txt" in r.stdout and "leased_by_watcher/**" in r.stdout
    assert "not available remotely" in r.stdout


def test_status_json_from_the_server(served: ServerProcess) -> None:

    r = _cli(served, "status", "--json", tok=token(admin=True))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["root"] == served.url and data["redis"]["ok"] is True and isinstance(data["conflicts"], dict)


def test_watch_prints_the_remote_events(served: ServerProcess) -> None:
    (served.root / "watched.txt").write_text("w\n")
    with HttpClient(served.url, token=token("watched-5")) as client:
        client.read("watched-5", "watched.txt")
        client.edit("watched-5", "watched.txt", "w", "ww")
    r = _cli(
        served, "watch", "--since", "0", "--path", "watched.txt", "--timeout", "1", "--json", tok=token(admin=True)
    )
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(e["path"], e["session"], e["operation"]) for e in events] == [("watched.txt", "watched-5", "edit")]
    r = _cli(served, "watch", "--last", "50", "--path", "watched.txt", "--timeout", "0.5", tok=token(admin=True))
    assert r.returncode == 0, r.stderr
    assert "watched.txt" in r.stdout and "watched-5" in r.stdout


def test_leases_break_ends_a_remote_lease(served: ServerProcess) -> None:
    with HttpClient(served.url, token=token("breakee-4")) as client:
        taken = client.lease("breakee-4", "src/to_break.py", ttl_s=120)
        r = _cli(served, "leases", "break", "--session", "breakee-4", tok=token(admin=True))
        assert r.returncode == 0, r.stderr
        assert f"broken: {taken[0].id}" in r.stdout
        assert client.leases("breakee-4") == []
    r = _cli(served, "leases", "break", "--session", "breakee-4", tok=token(admin=True))
    assert r.returncode == 1 and "nothing was broken" in r.stdout


@pytest.mark.parametrize(
    "command",
    [["status"], ["top", "--iterations", "1"], ["history", "anywhere.txt"], ["leases", "list"],
     ["watch", "--last", "5", "--timeout", "0.2"]],
)  # fmt: skip
@pytest.mark.parametrize("where", ["/", "home"])
def test_remote_inspection_needs_no_local_repository(served: ServerProcess, command: list[str], where: str) -> None:
    """From / or the home folder (where no root is ever found) a --server command asks the service alone."""
    (served.root / "anywhere.txt").write_text("a\n")
    with HttpClient(served.url, token=token("from-anywhere")) as client:
        client.read("from-anywhere", "anywhere.txt")
        client.edit("from-anywhere", "anywhere.txt", "a", "b")
    home = served.root.parent / "home-of-remote"
    home.mkdir(exist_ok=True)
    cwd = "/" if where == "/" else str(home)
    r = _cli(served, *command, tok=token(admin=True), env=None, cwd=cwd, home=str(home))
    assert r.returncode == 0, r.stderr
    assert "no repository" not in r.stderr
    if command[0] in ("history", "watch", "status", "top"):
        assert "anywhere.txt" in r.stdout and "from-anywhere" in r.stdout


def test_a_token_the_route_does_not_take_names_the_tokens_that_do(served: ServerProcess) -> None:
    """Exit 8 (the token), and the message names the roles that work: a viewer on `leases break` needs the
    admin token (no session token can break another's lease); a session token on `status` needs the admin or
    a viewer token."""
    viewer = mint_token(SECRET.encode(), viewer=True)
    r = _cli(served, "leases", "break", "--session", "nobody", tok=viewer)
    assert r.returncode == 8 and "[forbidden]" in r.stderr, r.stderr
    assert "It takes the admin token." in r.stderr and "session token" not in r.stderr.split("It takes")[1]
    r = _cli(served, "status", tok=token("some-session"))
    assert r.returncode == 8 and "[forbidden]" in r.stderr, r.stderr
    assert "the admin token or a viewer token" in r.stderr


def test_the_hook_route_says_which_token_it_takes(served: ServerProcess) -> None:
    event = {"session_id": "agent-1", "hook_event_name": "PreToolUse", "tool_name": "Read",
             "tool_input": {"file_path": str(served.root / "x.txt")}, "cwd": str(served.root)}  # fmt: skip
    for tok, needle in (
        (mint_token(SECRET.encode(), viewer=True), "does not take a viewer token"),
        (token("agent-2"), "for session 'agent-2', and the hook event is from session 'agent-1'"),
    ):
        r = httpx.post(f"{served.url}/v1/hooks/claude-code", json=event, headers=auth(tok), timeout=30)
        assert needle in r.text, r.text
        assert "belongs to another session" not in r.text


def _local(served: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """The same command on the file host, as its people run it there (--root; the running embedded Redis)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    argv = [sys.executable, "-m", "coordinator.cli", *args, "--root", str(served.root)]
    return subprocess.run(argv, env={**env, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True, timeout=60)


def test_remote_and_local_inspection_say_the_same_in_the_same_columns(served: ServerProcess) -> None:
    (served.root / "same.txt").write_text("one\ntwo\n")
    (served.root / "unread.txt").write_text("a\n")
    with HttpClient(served.url, token=token("same-1")) as client:
        with pytest.raises(CoordinatorError):
            client.edit("same-1", "unread.txt", "a", "b")  # not_read: a refusal, counted by code (at the next write)
        client.read("same-1", "same.txt")
        client.edit("same-1", "same.txt", "two", "three")
    for _ in range(100):  # the service tallies a refusal in its thread pool, then flushes it with a write
        if json.loads(_local(served, "status", "--json").stdout)["conflicts"]:
            break
        with HttpClient(served.url, token=token("same-1")) as client:
            client.read("same-1", "unread.txt")  # a read is enough to flush the tally (not a version)
        time.sleep(0.1)
    r = _cli(served, "status", tok=token(admin=True))
    assert r.returncode == 0, r.stderr
    remote = r.stdout
    r = _local(served, "status")
    assert r.returncode == 0, r.stderr
    local = r.stdout
    for out in (remote, local):
        assert "Redis: ok" in out and " versions recorded (" in out and "Refusals by code" in out, out
        assert "History: ?" not in out and "Redis reachable" not in out and "not available (" not in out
    assert [ln.split()[:3] for ln in remote.splitlines()[1:2]] == [ln.split()[:3] for ln in local.splitlines()[1:2]]
    # The service reads the history's size at most once per HISTORY_TTL_S (a walk of its folder), and the
    # module's service has answered earlier tests: the same figures once its reading is fresh again.
    deadline = time.monotonic() + HISTORY_TTL_S + 10
    while True:
        remote_json = json.loads(_cli(served, "status", "--json", tok=token(admin=True)).stdout)
        local_json = json.loads(_local(served, "status", "--json").stdout)
        if remote_json["history"] == local_json["history"] or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert remote_json["history"] == local_json["history"]
    assert remote_json["conflicts"] == local_json["conflicts"] and remote_json["conflicts"]
    assert set(local_json) - {"hook_failures"} <= set(remote_json)  # one data shape (the file host's extras aside)
    history_remote = _cli(served, "history", "same.txt", tok=token(admin=True)).stdout
    history_local = _local(served, "history", "same.txt").stdout
    assert "+1 -1" in history_remote and "+1 -1" in history_local and "lines 2-2" not in history_remote
    assert history_remote.splitlines()[1:3] == history_local.splitlines()[1:3]  # the header rows, the same columns
