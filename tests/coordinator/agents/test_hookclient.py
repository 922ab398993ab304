"""The command hook's fast client (coordinator/cli/fasthook.py) as `init` writes it: the script hookclient.py
run by path with -I -S, forwarding the event's bytes to the repository's hook service. Its decisions are
the full command hook's; it loads none of json, re, typing, urllib; it fails closed on an answer it cannot
read; with no service it takes the full path, which starts one."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.agents import FRONT_ENDS
from coordinator.cli import fasthook, hookservice
from coordinator.disk.layout import STATE_DIR_NAME, hook_service_dir
from coordinator.endpoint import MAX_UNIX_PATH_BYTES
from coordinator.server.hooks import plain_answer
from coordinator.state.embedded import embedded_status
from tests import REPO_ROOT
from tests.coordinator.agents.hooking import payload

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="unix sockets and Linux process tools")
CLIENT = REPO_ROOT / "coordinator" / "cli" / "hookclient.py"


def fast(
    root: Path, data: Any, *flags: str, env: dict[str, str] | None = None, more: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[bytes]:
    """The fast client as the agent runs it: `python -I -S .../hookclient.py claude-code --root ROOT`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    argv = [sys.executable, "-I", "-S", *flags, str(CLIENT), "claude-code", "--root", str(root), *more]
    return subprocess.run(argv, input=raw, env={**base, **(env or {})}, capture_output=True, timeout=120)


def full(root: Path, data: Any) -> subprocess.CompletedProcess[bytes]:
    """The full command hook against the same hook service (`--server unix://...sock --token T`)."""
    service = hook_service_dir(root / STATE_DIR_NAME)
    token = (service / "token").read_text().strip()
    base = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
    argv = [sys.executable, "-m", "coordinator.cli", "hook", "claude-code", "--server", f"unix://{service / 'sock'}",
            "--token", token]  # fmt: skip
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return subprocess.run(
        argv, input=raw, env={**base, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True,
        timeout=120,
    )  # fmt: skip


def test_the_clients_constants_are_the_packages() -> None:
    from coordinator.agents import front_end
    from coordinator.agents.core import ALLOW, GUARD_EVENTS, fails_closed
    from coordinator.disk.layout import hook_failures_file

    assert set(fasthook.AGENTS) == set(FRONT_ENDS)
    assert set(fasthook.GUARD_EVENTS) == GUARD_EVENTS
    assert all(fasthook.guards(e) == fails_closed(e) for e in (None, "PreToolUse", "BeforeTool", "Stop", "x"))
    assert {a: front_end(a).render(None, ALLOW).stdout.encode() for a in FRONT_ENDS} == fasthook.GO_ON
    assert f"/{hook_failures_file(STATE_DIR_NAME)}" == fasthook.FAILURE_LOG
    from coordinator.agents.core import AGENT_PID_HEADER, FORWARDED_ENV, env_header, forwarded, settings_from_headers
    from coordinator.cli.hook import session_headers

    assert fasthook.FORWARDED_ENV == FORWARDED_ENV
    assert fasthook.AGENT_PID_HEADER == AGENT_PID_HEADER
    env = {"EDIT_COORDINATOR_AUTO_COMMIT": "1", "OTHER": "x"}
    lines = dict(x.split(": ", 1) for x in fasthook.session_headers().splitlines())  # this process's: none
    grandparent = fasthook.parent_of(os.getppid())
    expected = {k: v for k, v in ((env_header(n), os.environ.get(n)) for n in FORWARDED_ENV) if v}
    assert lines == expected | ({AGENT_PID_HEADER: str(grandparent)} if grandparent > 1 else {})
    assert session_headers() == lines  # the full hook sends the same
    assert settings_from_headers({env_header(k): v for k, v in env.items()}) == forwarded(env)
    assert forwarded(env) == (("EDIT_COORDINATOR_AUTO_COMMIT", "1"),)
    assert forwarded({"EDIT_COORDINATOR_AUTO_COMMIT": "1\r\nX-Evil: 1"}) == ()
    # Claude Code's http hooks send an unset variable as an empty header: no setting, the config decides
    assert settings_from_headers({env_header("EDIT_COORDINATOR_AUTO_COMMIT"): ""}) == ()
    folder = f"/{STATE_DIR_NAME}/{hook_service_dir('').name}/"
    assert folder == fasthook.SERVICE_FOLDER
    assert fasthook.MAX_UNIX_PATH_BYTES == MAX_UNIX_PATH_BYTES


# -- a stand-in service on the socket: what the client sends and how it reads what comes back --------------


class StandIn:
    """A unix-socket listener in the hook service's place that records each request and sends `answer`."""

    def __init__(self, root: Path, answer: bytes | None) -> None:
        folder = hook_service_dir(root / STATE_DIR_NAME)
        folder.mkdir(parents=True)
        (folder / "token").write_text("tok-123\n")
        self.answer, self.requests, self.stop = answer, list[bytes](), threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(folder / "sock"))
        self.listener.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + body)
                if self.answer is None:  # a service that takes the request and never answers
                    self.stop.wait(10)
                    continue
                conn.sendall(self.answer)

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[StandIn]:
    body = b'0 - 12\n{"ok": true}warned\n'
    s = StandIn(tmp_path, b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    yield s
    s.close()


def test_the_fast_path_forwards_the_bytes_and_imports_nothing_of_json_re_typing_urllib(tmp_path, stand_in):
    raw = b'{"hook_event_name": "PreToolUse", "odd": "\\u00e9 kept as sent"}'
    done = fast(tmp_path, raw, "-X", "importtime")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b'{"ok": true}'
    imported = {line.split("|")[-1].strip() for line in done.stderr.decode().splitlines() if "import time:" in line}
    assert {"_socket", "fasthook"} <= imported  # the listing is real; the client came in as a module (cached)
    assert not imported & {"json", "re", "typing", "urllib", "urllib.parse", "socket", "os", "site", "coordinator"}
    assert done.stderr.decode().splitlines()[-1] == "warned"
    (request,) = stand_in.requests
    assert request.startswith(b"POST /v1/hooks/claude-code?answer=plain HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer tok-123\r\n" in request and request.endswith(b"\r\n\r\n" + raw)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b"", "closed before an answer"),
        (b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\noops", "answered 500"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 40\r\n\r\n0 - 0\n", "cut short"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\ngarbage!", "not a hook answer"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\n0 - 0\n\r\n0\r\n\r\n", "transfer encoding"),
    ],
)
def test_an_answer_it_cannot_read_blocks_the_call(tmp_path, answer, said):
    s = StandIn(tmp_path, answer)
    try:
        done = fast(tmp_path, b"{}")
    finally:
        s.close()
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.startswith(b"edit-coordinator hook: ") and said.encode() in done.stderr, done.stderr


def test_event_name_is_found_in_the_bytes():
    assert fasthook.event_name(b'{"session_id": "s", "hook_event_name" :\n "Stop", "x": 1}') == "Stop"
    assert fasthook.event_name(json.dumps({"hook_event_name": "PreToolUse"}).encode()) == "PreToolUse"
    for raw in (b"{}", b'{"hook_event_name": 3}', b'{"hook_event_name": "a\\"b"}', b"not json"):
        assert fasthook.event_name(raw) is None, raw


@pytest.mark.parametrize("event", ["Stop", "SessionEnd", "PostToolUse", "SubagentStop"])
def test_an_event_that_guards_no_write_goes_on_when_the_service_fails_and_the_failure_is_logged(tmp_path, event):
    """The end of a turn answered exit 2 kept agents looping (Codex: hundreds of model requests) when the
    service failed; now only PreToolUse fails closed. The failure lands in the state folder's log."""
    from coordinator.agents import failures

    s = StandIn(tmp_path, b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\noops")
    try:
        done = fast(tmp_path, payload("stop", tmp_path, hook_event_name=event))
        guarded = fast(tmp_path, payload("pre_edit", tmp_path))
        unreadable = fast(tmp_path, b"{not json", more=("--fail-open",))
    finally:
        s.close()
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert (unreadable.returncode, unreadable.stdout, unreadable.stderr) == (0, b"", b"")
    assert guarded.returncode == 2 and b"answered 500" in guarded.stderr
    count, logged = failures.recent(tmp_path, 10)
    assert count == 3 and [f.event for f in logged] == [event, "PreToolUse", "-"]
    assert all(f.agent == "claude-code" and "answered 500" in f.what for f in logged)


def test_a_service_answering_exit_2_at_an_end_is_overruled(tmp_path):
    """Whatever a service answers (an earlier version's exit 2 at Stop), the end of a turn goes on."""
    from coordinator.agents.core import HookAnswer

    body = plain_answer(HookAnswer(2, "", "blocked\n"), "internal")
    s = StandIn(tmp_path, b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    try:
        done = fast(tmp_path, payload("stop", tmp_path))
    finally:
        s.close()
    assert (done.returncode, done.stderr) == (0, b"")


def test_a_service_that_does_not_answer_in_time_blocks_the_call(tmp_path):
    s = StandIn(tmp_path, None)
    try:
        done = fast(tmp_path, b"{}", more=("--timeout", "0.5"))
    finally:
        s.close()
    assert done.returncode == 2 and done.stdout == b"" and b"did not answer" in done.stderr, done.stderr
    assert len(s.requests) == 1  # it reached the service: not retried on the full path


def test_a_service_of_an_earlier_version_is_stopped_and_the_call_blocked(tmp_path):
    """A hook service from before `?answer=plain` (still running after an upgrade) answers in JSON: the call
    is refused (its event may have been applied, so it is not sent again) and that service is stopped."""
    s = StandIn(tmp_path, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
    folder = hook_service_dir(tmp_path / STATE_DIR_NAME)
    old = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(folder / "sock")])
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (folder / "pid").write_text(f"{bystander.pid}\n")  # a pid that is not the service's: left alone
        assert fast(tmp_path, b"{}").returncode == 2
        assert bystander.poll() is None
        (folder / "pid").write_text(f"{old.pid}\n")
        done = fast(tmp_path, b"{}")
        assert done.returncode == 2 and b"earlier version" in done.stderr and b"Retry" in done.stderr
        assert old.wait(10) == -15
    finally:
        s.close()
        for proc in (old, bystander):
            proc.kill()
            proc.wait()


def test_parse_answer_reads_the_services_plain_form():
    from coordinator.agents.core import HookAnswer

    body = plain_answer(HookAnswer(2, "out é", "the reason\n"), "stale")
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body
    assert fasthook.parse_answer(answer) == (2, b"stale", "out é".encode(), b"the reason\n")
    assert fasthook.parse_answer(b"HTTP/1.1 200 OK\r\n\r\n" + plain_answer(HookAnswer(0), ""))[:2] == (0, b"-")


def test_arguments_it_does_not_read_go_to_the_full_hook():
    assert fasthook._arguments(["claude-code", "--root", "/r", "--timeout=5"]) == ("claude-code", "/r", 5.0, False)
    assert fasthook._arguments(["codex", "--fail-open", "--root=/r"]) == ("codex", "/r", 30.0, True)
    odd = (["--help"], ["notepad", "--root", "/r"], ["claude-code"], ["claude-code", "--root", "rel"])
    more = (["claude-code", "--root", "/r", "--server", "x"], ["claude-code", "--root", "/r", "--timeout", "x"])
    for argv in (*odd, *more):
        assert fasthook._arguments(argv) is None, argv


# -- against the real hook service: the same decisions as the full path -------------------------------------


def _normal(done: subprocess.CompletedProcess[bytes], session: str, name: str) -> tuple[int, str, str]:
    def norm(b: bytes) -> str:
        text = b.decode().replace(session, "SESSION").replace(name, "FILE")
        # whether the tree watcher has recorded the outside write yet is a race: what the refusal adds after
        # its advice (who changed the file) may differ
        return re.sub(r'(on the current content\.)[^"]*', r"\1", text)

    return done.returncode, norm(done.stdout), norm(done.stderr)


def _steps(root: Path, session: str, name: str) -> list[Any]:
    f = root / name
    ids = {"session_id": session, "tool_input__file_path": str(f)}
    shown = {"file__content": "x = 1\n", "file__filePath": str(f), "file__numLines": 1, "file__totalLines": 1}
    change = {"tool_input__old_string": "x = 1", "tool_input__new_string": "x = 2"}
    return [
        payload("pre_edit", root, **ids, tool_use_id=f"{session}-1"),  # unread: deny
        payload("post_read", root, **ids, tool_use_id=f"{session}-2", **shown),
        payload("pre_edit", root, **ids, tool_use_id=f"{session}-3", **change),  # allow, takes the ticket
        payload("post_edit", root, **ids, tool_use_id=f"{session}-3", **change),
        payload("pre_edit", root, **ids, tool_use_id=f"{session}-4"),  # stale: changed outside since
        b"{not json",  # the service cannot read it: a block
    ]


def test_the_fast_path_decides_as_the_full_path_does(real_redis_root: Path) -> None:
    root = real_redis_root
    (root / ".git").mkdir()
    try:
        hookservice.start(str(root))
        answers: dict[str, list[tuple[int, str, str]]] = {}
        for way, run in (("fast", fast), ("full", full)):
            session, name = f"s-{way}", f"{way}.py"
            f = root / name
            f.write_text("x = 1\n")
            answers[way] = []
            for i, step in enumerate(_steps(root, session, name)):
                if i == 4:
                    f.write_text("x = 3\n")  # a write the hooks did not see
                answers[way].append(_normal(run(root, step), session, name))
        # the same answers, byte for byte; bad JSON is refused by both (the full hook before asking)
        assert answers["fast"][:5] == answers["full"][:5]
        assert [a[0] for a in answers["fast"]] == [0, 0, 0, 0, 0, 2] == [a[0] for a in answers["full"]]
        first, _, allowed, _, stale, unreadable = answers["fast"]
        assert "has not been read" in json.loads(first[1])["hookSpecificOutput"]["permissionDecisionReason"]
        reason = json.loads(stale[1])["hookSpecificOutput"]["permissionDecisionReason"]
        assert "modified since you last read it" in reason
        assert allowed == (0, "", "") and "could not be read" in unreadable[2] and unreadable[1] == ""
        assert (root / "fast.py").read_text() == "x = 3\n"
    finally:
        hookservice.stop(root)


def test_no_service_takes_the_full_path_which_starts_one(real_redis_root: Path) -> None:
    """No token, no socket: the full path (in the client's process, after `site`) starts the service and
    answers; the next call is the fast path to it. A refused token is minted again."""
    root = real_redis_root
    (root / ".git").mkdir()
    (root / "a.py").write_text("x = 1\n")
    event = payload("pre_edit", root, session_id="s1", tool_use_id="t1", tool_input__file_path=str(root / "a.py"))
    try:
        first = fast(root, event)
        assert first.returncode == 0, first.stderr
        assert "has not been read" in json.loads(first.stdout)["hookSpecificOutput"]["permissionDecisionReason"]
        service = hook_service_dir(root / STATE_DIR_NAME)
        assert (service / "sock").exists() and (service / "token").exists()
        (service / "token").write_text("ec1.e30.AAAA\n")  # a token the service refuses
        again = fast(root, event)
        assert again.returncode == 0 and json.loads(again.stdout) == json.loads(first.stdout), again.stderr
        assert (service / "token").read_text().strip() != "ec1.e30.AAAA"
    finally:
        hookservice.stop(root)


def test_the_unreachable_service_blocks_the_call(tmp_path: Path) -> None:
    """The socket is there but no service can be had and the hook cannot decide in its own process (its
    Redis URL points nowhere): exit 2 with the reason, like the full path."""
    folder = hook_service_dir(tmp_path / STATE_DIR_NAME)
    folder.mkdir(parents=True)
    (folder / "token").write_text("tok\n")
    (folder / "sock").write_text("")  # a stale socket file: nobody listening
    event = payload("pre_edit", tmp_path, session_id="s1", tool_use_id="t1")
    env = {"EDIT_COORDINATOR_HOOK_SERVICE": "0", "EDIT_COORDINATOR_REDIS_URL": "redis://127.0.0.1:9/0"}
    done = fast(tmp_path, event, env=env)
    assert done.returncode == 2 and done.stdout == b"", done.stderr
    assert done.stderr.startswith(b"edit-coordinator hook: ") and b"[state_unavailable]" in done.stderr


def test_the_hook_commands_own_coordinator_uses_the_project_configs_redis(tmp_path: Path) -> None:
    """With no hook service the hook decides in its own process on the Redis the project config names, as
    the service (`serve --root`) would: it used to take the embedded one, another store than the service's,
    and let the guarded call through on read state the service never had."""
    (tmp_path / ".edit-coordinator.toml").write_text('redis-url = "redis://127.0.0.1:9/0"\n')
    event = payload("pre_edit", tmp_path, session_id="s1", tool_use_id="t1")
    env = {"EDIT_COORDINATOR_HOOK_SERVICE": "0", "EDIT_COORDINATOR_REDIS_URL": ""}
    done = fast(tmp_path, event, env=env)
    assert done.returncode == 2 and b"[state_unavailable]" in done.stderr, done.stderr
    assert not (tmp_path / STATE_DIR_NAME / "redis").exists()  # no embedded server was started


def _edit_through_hooks(root: Path, session: str, name: str, env: dict[str, str]) -> None:
    f = root / name
    ids = {"session_id": session, "tool_input__file_path": str(f)}
    shown = {"file__content": "x = 1\n", "file__filePath": str(f), "file__numLines": 1, "file__totalLines": 1}
    change = {"tool_input__old_string": "x = 1", "tool_input__new_string": "x = 2"}
    assert fast(root, payload("post_read", root, **ids, tool_use_id=f"{session}-1", **shown), env=env).returncode == 0
    allowed = fast(root, payload("pre_edit", root, **ids, tool_use_id=f"{session}-2", **change), env=env)
    assert (allowed.returncode, allowed.stdout) == (0, b""), allowed
    f.write_text("x = 2\n")
    assert fast(root, payload("post_edit", root, **ids, tool_use_id=f"{session}-2", **change), env=env).returncode == 0


def test_a_sessions_own_auto_commit_setting_decides_its_commit(real_redis_root: Path, monkeypatch) -> None:
    """EDIT_COORDINATOR_AUTO_COMMIT travels with the session's hook events: the hook service, started here
    with =0 in its own environment, commits the session that says =1, and a session that says =0 is not
    committed although the config says auto-commit = true (the service's environment decides nothing)."""
    root = real_redis_root
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for name in ("on.py", "off.py", "config.py"):
        (root / name).write_text("x = 1\n")
    (root / ".gitignore").write_text(".edit-coordinator/\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "base"], check=True)

    def head() -> str:
        return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout

    def committed() -> list[str]:
        out = subprocess.run([*git, "show", "--name-only", "--format=", "HEAD"], capture_output=True, text=True)
        return out.stdout.split()

    monkeypatch.setenv("EDIT_COORDINATOR_AUTO_COMMIT", "0")  # the environment of whoever starts the service
    try:
        hookservice.start(str(root))
        monkeypatch.delenv("EDIT_COORDINATOR_AUTO_COMMIT")
        on = {"EDIT_COORDINATOR_AUTO_COMMIT": "1"}
        _edit_through_hooks(root, "s-on", "on.py", on)
        base = head()
        assert fast(root, payload("session_end", root, session_id="s-on"), env=on).returncode == 0
        assert head() != base and committed() == ["on.py"]

        (root / ".edit-coordinator.toml").write_text("auto-commit = true\n")
        off = {"EDIT_COORDINATOR_AUTO_COMMIT": "0"}
        _edit_through_hooks(root, "s-off", "off.py", off)
        base = head()
        assert fast(root, payload("session_end", root, session_id="s-off"), env=off).returncode == 0
        assert head() == base
        _edit_through_hooks(root, "s-config", "config.py", {})
        assert fast(root, payload("session_end", root, session_id="s-config")).returncode == 0
        assert head() != base and committed() == ["config.py"]
    finally:
        hookservice.stop(root)


def test_config_watch_sees_the_config_not_any_edit_of_pyproject(tmp_path: Path, monkeypatch) -> None:
    from types import SimpleNamespace

    from coordinator.server import hooks

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "a"\n[tool.edit-coordinator]\npolicy = "strict"\n')
    monkeypatch.setattr(hooks, "_STARTED_NS", time.time_ns())
    monkeypatch.setattr(hooks, "_watched", {})
    app: Any = SimpleNamespace(config=SimpleNamespace(idle_exit_s=1800.0, root=str(tmp_path)))
    assert not hooks._config_changed(app)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "b"\n[tool.edit-coordinator]\npolicy = "strict"\n')
    assert not hooks._config_changed(app)  # another table changed: not the config
    (tmp_path / ".edit-coordinator.toml").write_text("auto-commit = true\n")
    assert hooks._config_changed(app)
    assert not hooks._config_changed(app)
    user_serve: Any = SimpleNamespace(config=SimpleNamespace(idle_exit_s=0.0, root=str(tmp_path)))
    (tmp_path / ".edit-coordinator.toml").write_text("auto-commit = false\n")
    assert not hooks._config_changed(user_serve)  # a serve someone runs is not restarted


def test_the_hook_service_restarts_when_its_config_changes(real_redis_root: Path) -> None:
    root = real_redis_root
    (root / ".git").mkdir()
    (root / "a.py").write_text("x = 1\n")
    folder = hook_service_dir(root / STATE_DIR_NAME)
    read = payload("post_read", root, session_id="s1", tool_use_id="t1", tool_input__file_path=str(root / "a.py"))
    try:
        hookservice.start(str(root))
        first = int((folder / "pid").read_text())
        assert fast(root, read).returncode == 0
        (root / ".edit-coordinator.toml").write_text('policy = "rebase"\n')
        assert fast(root, read).returncode == 0  # answered, then the service stops
        deadline = time.monotonic() + 60
        while hookservice._alive(first) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not hookservice._alive(first)
        assert fast(root, read).returncode == 0  # the next hook starts the service again
        assert int((folder / "pid").read_text()) != first
    finally:
        hookservice.stop(root)


def test_an_event_over_the_services_limit_is_refused_as_too_large(tmp_path: Path) -> None:
    """At 0effb2a the service stopped reading it and the hook said "did not answer (BrokenPipeError)", which
    a model retries; now the refusal says what is wrong, before anything is sent."""
    from coordinator.server.models import ServerConfig

    assert ServerConfig(root=str(tmp_path)).max_body_bytes == fasthook.MAX_EVENT_BYTES
    s = StandIn(tmp_path, b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\n0 - 0\n")
    big = payload("pre_write", tmp_path, tool_input__content="x" * (fasthook.MAX_EVENT_BYTES + 10))
    try:
        done = fast(tmp_path, big)
    finally:
        s.close()
    assert done.returncode == 2 and b"too large" in done.stderr and b"BrokenPipe" not in done.stderr
    assert s.requests == []


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            if int(stat.rpartition(b")")[2].split()[1]) == pid:
                out.append(int(entry))
    return out


def test_a_hook_client_dies_with_its_agent(tmp_path: Path) -> None:
    """The agent runs the hook through a shell; killed while the hook waits on the service, the client
    notices within a second (its shell re-parented) and ends, instead of living on (at 0effb2a: re-parented
    to pid 1 until the service answered or its 30 s timeout)."""
    s = StandIn(tmp_path, None)  # takes the request and answers nothing for 10 s
    command = shlex.join([sys.executable, "-I", "-S", str(CLIENT), "codex", "--root", str(tmp_path)]) + " || exit 2"
    agent_code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen(['/bin/sh', '-c', {command!r}], stdin=subprocess.PIPE)\n"
        'p.stdin.write(b\'{"hook_event_name": "PreToolUse"}\'); p.stdin.close()\n'
        "print(p.pid, flush=True); time.sleep(60)\n"
    )
    agent = subprocess.Popen([sys.executable, "-c", agent_code], stdout=subprocess.PIPE)
    try:
        assert agent.stdout is not None
        shell = int(agent.stdout.readline())
        deadline = time.monotonic() + 30
        while not s.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        (client,) = _children(shell)
        agent.kill()
        agent.wait()
        deadline = time.monotonic() + 8  # well before the stand-in gives up (10 s) or the client's timeout (30 s)
        while hookservice._alive(client) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not hookservice._alive(client)
    finally:
        agent.kill()
        s.close()


def test_the_hook_service_stops_when_its_last_session_ends(real_redis_root: Path) -> None:
    """At 0effb2a the service stayed 30 min after every session had ended, and the embedded Redis for good.
    Now the SessionEnd of the last live session stops the service (a subagent ends with its session), and the
    service its embedded Redis, which no other client uses; the next hook starts both again."""
    root = real_redis_root
    (root / ".git").mkdir()
    (root / "a.py").write_text("x = 1\n")
    folder = hook_service_dir(root / STATE_DIR_NAME)

    def read(session: str) -> Any:
        return payload("post_read", root, session_id=session, tool_use_id=f"{session}-r",
                       tool_input__file_path=str(root / "a.py"))  # fmt: skip

    try:
        hookservice.start(str(root))
        first = int((folder / "pid").read_text())
        for event in (read("s1"), read("s2"), read("s1") | {"agent_id": "sub-1"}):
            assert fast(root, event).returncode == 0
        assert fast(root, payload("session_end", root, session_id="s1")).returncode == 0
        assert fast(root, read("s2")).returncode == 0  # s2 is still live: the same service answers
        assert int((folder / "pid").read_text()) == first and hookservice._alive(first)
        assert embedded_status(root / STATE_DIR_NAME) is not None
        assert fast(root, payload("session_end", root, session_id="s2")).returncode == 0
        deadline = time.monotonic() + 60
        while hookservice._alive(first) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not hookservice._alive(first)
        assert embedded_status(root / STATE_DIR_NAME) is None
        assert fast(root, read("s3")).returncode == 0  # both start again
        assert embedded_status(root / STATE_DIR_NAME) is not None
    finally:
        hookservice.stop(root)


def test_an_on_demand_service_leaves_an_embedded_redis_others_use(real_redis_root: Path) -> None:
    from coordinator.state.embedded import ensure_embedded_redis, stop_embedded_redis_if_unused
    from coordinator.state.process import unix_client

    state = real_redis_root / STATE_DIR_NAME
    url = ensure_embedded_redis(state)
    other = unix_client(Path(url.removeprefix("unix://")), 5.0)
    try:
        other.ping()  # another process's connection
        assert not stop_embedded_redis_if_unused(state) and embedded_status(state) is not None
    finally:
        other.close()
    assert stop_embedded_redis_if_unused(state) and embedded_status(state) is None
