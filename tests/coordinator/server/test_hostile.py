"""Hostile input against the real service (127.0.0.1 only): path escapes, symlink swaps racing the write,
malformed bytes, and a schemathesis run generated from the service's own OpenAPI document.

The property everywhere: a refused request changes nothing (neither inside the root nor outside it), the
answer is a 4xx with a library or service code, and the server never answers 500 or dies.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, settings

from coordinator.endpoint import HOOK_PATH
from coordinator.state.embedded import stop_embedded_redis

pytest.importorskip("uvicorn", reason="the HTTP service needs uvicorn")
try:
    import schemathesis
    import schemathesis.specs.openapi.checks  # used below; not every release imports it with the package
    from schemathesis import GenerationMode
except ImportError:  # pragma: no cover
    schemathesis = None  # type: ignore[assignment]

try:  # tests/ as a package, or as a plain folder on sys.path
    from tests.coordinator.server.test_server import ServerProcess, auth, token
except ImportError:  # pragma: no cover
    from test_server import ServerProcess, auth, token  # type: ignore[no-redef]

OUTSIDE_SECRET = "do not touch\n"


def snapshot(top: Path, skip_state: bool = True) -> dict[str, str]:
    """Every file and link under `top` (not following links), with a digest of its content or target."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        if skip_state and ".edit-coordinator" in dirnames:
            dirnames.remove(".edit-coordinator")
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = os.fsdecode(os.path.relpath(p, top))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("hostile")
    root = base / "repo"
    outside = base / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(OUTSIDE_SECRET)
    (root / "inside.txt").write_text("inside\n")
    (root / "sub").mkdir()
    (root / "sub" / "ok.txt").write_text("ok\n")
    (root / "link_file").symlink_to(outside / "secret.txt")
    (root / "link_dir").symlink_to(outside)
    (root / "rel_link").symlink_to("../outside/secret.txt")
    (root / "sub" / "up").symlink_to("..")  # inside: fine
    os.mkdir(os.fsencode(root) + b"/caf\xe9")
    with open(os.fsencode(root) + b"/caf\xe9.txt", "wb") as f:
        f.write(b"non-utf8 name\n")
    server = ServerProcess(
        root, "--max-body-bytes", str(1024 * 1024), "--lock-timeout", "2", "--max-poll-wait", "0.05", workers=1
    )
    try:
        yield {"root": root, "outside": outside, "server": server}
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


@pytest.fixture
def client(hostile: dict[str, Any]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=hostile["server"].url, timeout=30, headers=auth(token("hostile"))) as c:
        yield c


ESCAPES: list[tuple[str, set[str]]] = [
    ("../outside/secret.txt", {"outside_root"}),
    ("sub/../../outside/secret.txt", {"outside_root"}),
    ("sub/up/../../outside/secret.txt", {"outside_root"}),
    ("/etc/passwd", {"outside_root"}),
    ("link_file", {"outside_root"}),
    ("link_dir/secret.txt", {"outside_root"}),
    ("link_dir/new.txt", {"outside_root"}),
    ("link_dir/deeper/new.txt", {"outside_root"}),
    ("rel_link", {"outside_root"}),
    (".edit-coordinator/server.secret", {"outside_root"}),
    ("sub/../.edit-coordinator/redis/redis.log", {"outside_root"}),
    ("inside.txt\x00.png", {"invalid_argument"}),
    ("\x00", {"invalid_argument"}),
    ("x" * 5000, {"invalid_argument"}),
    ("d/" * 1000 + "y" * 300, {"invalid_argument"}),
    ("sub\\..\\..\\outside\\secret.txt", {"invalid_argument"}),
    ("..\\outside\\secret.txt", {"invalid_argument"}),
    ("", {"invalid_argument"}),
    ("   ", {"invalid_argument"}),
    (".", {"is_directory"}),
    ("sub", {"is_directory"}),
    ("sub/", {"is_directory"}),
    ("caf\udce9.txt", {"invalid_argument"}),  # a lone surrogate cannot even be sent as JSON text
]


@pytest.mark.parametrize("operation", ["read", "write", "edit", "multi_edit", "undo"])
def test_path_escapes_are_refused_and_change_nothing(
    hostile: dict[str, Any], client: httpx.Client, operation: str
) -> None:
    root, outside = hostile["root"], hostile["outside"]
    before_root, before_out = snapshot(root), snapshot(outside)
    for path, codes in ESCAPES:
        body: dict[str, Any] = {"path": path}
        if operation == "write":
            body["content"] = "PWNED\n"
        elif operation == "edit":
            body.update(old_string="", new_string="PWNED\n")
        elif operation == "multi_edit":
            body["edits"] = [{"old_string": "", "new_string": "PWNED\n"}]
        try:
            r = client.post(f"/v1/{operation}", json=body)
        except UnicodeEncodeError:
            # httpx cannot encode a lone surrogate; send the bytes a hostile client would send.
            raw = b'{"path": "caf\\udce9.txt"}'
            r = client.post(f"/v1/{operation}", content=raw, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500, (operation, path[:80], r.status_code, r.text[:300])
        assert str(root.parent) not in r.text, ("a server path in the answer", operation, path[:80], r.text[:300])
        code = r.json()["code"]
        if operation == "undo" and "is_directory" in codes:
            codes = codes | {"invalid_argument"}  # undo looks at the history first: "no recorded write"
        assert code in codes, (operation, path[:80], r.text[:300])
    assert snapshot(root) == before_root
    assert snapshot(outside) == before_out
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET


def test_absolute_path_inside_root_is_fine_and_outside_is_not(hostile: dict[str, Any], client: httpx.Client) -> None:
    root, outside = hostile["root"], hostile["outside"]
    r = client.post("/v1/read", json={"path": str(root / "inside.txt")})
    assert r.status_code == 200 and r.json()["content"] == "inside\n"
    r = client.post("/v1/read", json={"path": str(outside / "secret.txt")})
    assert (r.status_code, r.json()["code"]) == (403, "outside_root")


def _server_paths_in(text: str, hostile: dict[str, Any]) -> list[str]:
    """The server's own paths that `text` names: the root's folder, the outside folder, a /proc/<pid>."""
    found = [p for p in (str(hostile["root"].parent), str(hostile["outside"])) if p in text]
    return found + re.findall(r"/proc/\d+", text)


def test_remote_answers_name_no_server_paths(hostile: dict[str, Any], client: httpx.Client) -> None:
    """Messages and details name paths relative to the root, or say "outside the repository"."""
    root, outside = hostile["root"], hostile["outside"]
    (outside / "alternatives").mkdir(exist_ok=True)
    (outside / "bin").mkdir(exist_ok=True)
    (outside / "bin" / "real-tool-9f3").write_text("#!/bin/sh\n")
    tool = outside / "alternatives" / "tool"
    if not tool.is_symlink():
        tool.symlink_to(outside / "bin" / "real-tool-9f3")
    if not (root / "alt").is_symlink():
        (root / "alt").symlink_to(outside / "alternatives")
    cases = ["../x", "../outside/secret.txt", "alt/tool", "link_dir/secret.txt", "/proc/self/environ"]
    if os.path.isdir("/etc/alternatives") and not (root / "etc_alt").is_symlink():
        (root / "etc_alt").symlink_to("/etc/alternatives")
    if (root / "etc_alt").is_symlink():
        cases += [f"etc_alt/{name}" for name in sorted(os.listdir("/etc/alternatives"))[:3]]
    for path in cases:
        for operation, extra in (("read", {}), ("write", {"content": "x\n"}), ("undo", {})):
            r = client.post(f"/v1/{operation}", json={"path": path, **extra})
            assert r.status_code == 403 and r.json()["code"] == "outside_root", (path, r.text[:300])
            assert _server_paths_in(r.text, hostile) == [], (path, r.text[:300])
            assert "real-tool-9f3" not in r.text and "/usr/" not in r.text, (path, r.text[:300])
            assert "outside the repository" in r.json()["message"], r.text[:300]


def test_non_utf8_bytes_and_names(hostile: dict[str, Any], client: httpx.Client) -> None:
    root = hostile["root"]
    before = snapshot(root)
    for raw in (b'{"path": "caf\xe9.txt"}', b'{"path": "caf\xc3\x28.txt"}', b"\xff\xfe{\x00}"):
        r = client.post("/v1/read", content=raw, headers={"content-type": "application/json"})
        assert (r.status_code, r.json()["code"]) == (422, "invalid_argument"), r.text
    # A near miss of a file whose name is not UTF-8: the "Did you mean" hint must not break the answer.
    r = client.post("/v1/read", json={"path": "cafe.txt"})
    assert r.status_code == 404 and r.json()["code"] == "file_not_found"
    r.content.decode("utf-8")
    answer = r.json()
    json.dumps(answer, ensure_ascii=False).encode("utf-8")  # no lone surrogate, escaped or not
    assert "caf\\xe9.txt" in answer["message"], answer
    r = client.post("/v1/write", json={"path": "caf\u00e9/x.txt", "content": "ok\n"})  # a real UTF-8 name: fine
    assert r.status_code == 200
    os.unlink(root / "caf\u00e9" / "x.txt")
    os.rmdir(root / "caf\u00e9")
    assert snapshot(root) == before


def _swapper(stop: threading.Event, flip: Any) -> threading.Thread:
    def run() -> None:
        deadline = time.monotonic() + 10
        while not stop.is_set() and time.monotonic() < deadline:
            flip()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_symlink_swap_between_check_and_write_never_escapes(hostile: dict[str, Any], client: httpx.Client) -> None:
    """A file and a folder flip between real and links to outside while writes race them."""
    root, outside = hostile["root"], hostile["outside"]
    before_out = snapshot(outside)
    target = root / "swap.txt"
    target.write_text("swap\n")
    folder = root / "swapdir"
    folder.mkdir()
    aside = root / "swapdir_real"

    def flip_file() -> None:
        tmp_link = root / "swap.link.tmp"
        tmp_file = root / "swap.file.tmp"
        try:
            tmp_link.symlink_to(outside / "secret.txt")
            os.replace(tmp_link, target)
            tmp_file.write_text("swap\n")
            os.replace(tmp_file, target)
        except OSError:
            pass

    def flip_dir() -> None:
        try:
            os.rename(folder, aside)
            folder.symlink_to(outside)
            os.unlink(folder)
            os.rename(aside, folder)
        except OSError:
            pass

    stop = threading.Event()
    swappers = [_swapper(stop, flip_file), _swapper(stop, flip_dir)]
    statuses: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 3
        for i in range(400):
            if time.monotonic() > deadline:
                break
            client.post("/v1/read", json={"path": "swap.txt"})
            for r in (
                client.post("/v1/write", json={"path": "swap.txt", "content": f"w{i}\n"}),
                client.post("/v1/write", json={"path": f"swapdir/f{i}.txt", "content": "x\n"}),
                client.post("/v1/edit", json={"path": "swapdir/g.txt", "old_string": "", "new_string": "y\n"}),
            ):
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                assert r.status_code < 500, r.text
    finally:
        stop.set()
        for t in swappers:
            t.join(5)
    assert snapshot(outside) == before_out, "a write escaped the root through a swapped link"
    assert (outside / "secret.txt").read_text() == OUTSIDE_SECRET
    assert statuses.get(200, 0) > 0  # the race was real: some writes landed inside
    for p in (root / "swap.txt", root / "swap.link.tmp", root / "swap.file.tmp"):
        if p.is_symlink() or p.exists():
            p.unlink()
    if folder.is_symlink():
        folder.unlink()
    for d in (folder, aside):
        if d.is_dir():
            for f in d.iterdir():
                f.unlink()
            d.rmdir()


# ---------------------------------------------------------------------------------------------------------
# Fuzzing from the OpenAPI document
# ---------------------------------------------------------------------------------------------------------
MUTATING = {"/v1/write", "/v1/edit", "/v1/multi_edit", "/v1/undo", "/v1/redo", "/v1/admin/restore"}


def _fuzz_case(case: Any, hostile: dict[str, Any]) -> None:
    """One generated call: no 5xx, the answer matches the document, nothing changes unless it succeeded."""
    root, outside = hostile["root"], hostile["outside"]
    before_root, before_out = snapshot(root), snapshot(outside)
    headers = dict(case.headers or {})
    # Admin: every endpoint is reachable, as any session. Shutdown (tested on its own) gets a session token,
    # which it must refuse, so that the run goes on.
    who = token("fuzz") if case.path == "/v1/admin/shutdown" else token(admin=True)
    headers["Authorization"] = f"Bearer {who}"
    response = case.call(headers=headers, timeout=30)
    assert response.status_code < 500, (case.path, response.status_code, response.text[:300])
    case.validate_response(
        response,
        checks=[
            schemathesis.checks.not_a_server_error,
            schemathesis.specs.openapi.checks.status_code_conformance,
            schemathesis.specs.openapi.checks.content_type_conformance,
            schemathesis.specs.openapi.checks.response_schema_conformance,
            schemathesis.specs.openapi.checks.negative_data_rejection,
        ],
    )
    assert snapshot(outside) == before_out
    if not (response.status_code < 300 and case.path in MUTATING):
        assert snapshot(root) == before_root, (case.path, response.status_code, response.text[:300])


@pytest.mark.slow  # about 19 s: .ci/run's step 1b runs it; the hostile requests above stay in the default run
@pytest.mark.skipif(schemathesis is None, reason="schemathesis is not installed")
def test_fuzz_api_from_openapi(hostile: dict[str, Any]) -> None:
    """Every operation of the service's own OpenAPI document, with valid and invalid data.

    Driven through schemathesis' strategies and hypothesis directly (not its pytest plugin), so the test
    does not depend on pytest internals.
    """
    from hypothesis import given

    url = hostile["server"].url
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    # The token is ours (see _fuzz_case): generated Authorization values would only ever test the 401 path.
    schema.config.generation.update(with_security_parameters=False)
    # The hook route answers every refusal in a 200 body (an agent's hook takes any other status as "go
    # on"), so the negative-data check does not apply to it; tests/coordinator/agents/ test its answers.
    operations = [op for op in (result.ok() for result in schema.get_all_operations()) if op.path != HOOK_PATH]
    assert len(operations) >= 8, operations
    from hypothesis.errors import Unsatisfiable

    fuzzed = 0
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=20,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                _fuzz_case(case, hostile)

            try:
                run()
                fuzzed += 1
            except Unsatisfiable:
                # An operation with nothing to make invalid (no body, no parameters) has no negative cases.
                assert mode == GenerationMode.NEGATIVE, operation
    assert fuzzed > len(operations), fuzzed  # every operation with valid data, most with invalid data too


def test_server_survived_the_fuzzing(hostile: dict[str, Any]) -> None:
    r = httpx.get(f"{hostile['server'].url}/v1/health", timeout=5)
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert hostile["server"].proc.poll() is None
