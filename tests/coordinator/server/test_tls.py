"""`serve` over TLS, and the clients that reach it with a CA file: real processes, real certificates.

A private CA and a server certificate for 127.0.0.1 are made once per module with the `openssl` command
(skipped, saying so, where there is none). The service runs with 2 workers (the supervisor's path) on the
embedded Redis.

Properties guarded here: `HttpClient`, `AsyncClient.remote`, the file commands and `mcp --server` all work
over https:// given the CA file (flag or environment variable); without it, or with another CA's file, or
for a host name the certificate does not cover, the call is refused with `tls_untrusted` and a message that
says to pass the CA file, and nothing is written; http:// to the TLS port and https:// to a plain port are
`invalid_argument` naming the scheme to use; `serve` refuses a certificate without its key (and the
reverse), unreadable files and a mismatched pair before it starts anything.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest

from coordinator import AsyncClient, CoordinatorError, ErrorCode, HttpClient
from coordinator.cli.serve import tls_options
from coordinator.state.embedded import stop_embedded_redis
from tests import REPO_ROOT
from tests.coordinator.server.test_server import LOOPBACK, ServerProcess, token

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="the service tests use Linux process tools"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="the test certificates are made with `openssl`"),
]


# ---------------------------------------------------------------------------------------------------------
# Certificates
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate that signed `cert`
    cert: Path  # the server's certificate: IP 127.0.0.1 only (so "localhost" is a host it does not cover)
    key: Path
    other_ca: Path  # a CA that signed nothing here
    other_key: Path  # the other CA's key (no pair with `cert`)
    encrypted_key: Path  # `key`, encrypted with a password


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)


def _make_ca(folder: Path, name: str) -> None:
    _openssl(folder, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    _make_ca(d, "ca")
    _make_ca(d, "other-ca")
    _openssl(d, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             "server.key", "-out", "server.csr", "-subj", f"/CN={LOOPBACK}")  # fmt: skip
    (d / "ext.cnf").write_text(
        f"subjectAltName=IP:{LOOPBACK}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(d, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    _openssl(d, "pkey", "-in", "server.key", "-aes256", "-passout", "pass:secret", "-out", "server-encrypted.key")
    return Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "other-ca.pem", d / "other-ca.key",
               d / "server-encrypted.key")  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# A TLS server process
# ---------------------------------------------------------------------------------------------------------
class TlsServer(ServerProcess):
    """`serve --tls-cert --tls-key` on 127.0.0.1; ready once /v1/health answers over https with the CA."""

    def __init__(self, root: Path, pki: Pki, *args: str, workers: int = 2) -> None:
        self.ca = pki.ca
        super().__init__(root, "--tls-cert", str(pki.cert), "--tls-key", str(pki.key), *args, workers=workers)

    def _wait_ready(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while not self.url_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start:\n{self.log.read_text()}")
            time.sleep(0.02)
        url = self.url_file.read_text().strip()
        assert url.startswith(f"https://{LOOPBACK}:"), url
        trust = ssl.create_default_context(cafile=str(self.ca))
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/v1/health", timeout=2, verify=trust).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not healthy:\n{self.log.read_text()}")


@pytest.fixture(scope="module")
def tls_served(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsServer]:
    root = tmp_path_factory.mktemp("tls-served") / "repo"
    root.mkdir()
    server = TlsServer(root, pki)
    try:
        yield server
    finally:
        server.stop()
        stop_embedded_redis(root / ".edit-coordinator")


def new_file(server: ServerProcess, text: str = "alpha\nbeta\n") -> str:
    name = f"t_{uuid.uuid4().hex[:10]}.txt"
    (server.root / name).write_text(text)
    return name


def refusal(fn, *args, **kwargs) -> CoordinatorError:  # type: ignore[no-untyped-def]
    with pytest.raises(CoordinatorError) as ei:
        fn(*args, **kwargs)
    return ei.value


# ---------------------------------------------------------------------------------------------------------
# Clients
# ---------------------------------------------------------------------------------------------------------
def test_https_with_the_ca_file_reads_and_edits(tls_served: TlsServer, pki: Pki) -> None:
    name = new_file(tls_served)
    with HttpClient(tls_served.url, token=token("agent-tls"), ca_file=pki.ca) as client:
        assert client.health()["status"] == "ok"
        s = client.session("agent-tls")
        assert s.read(name).content == "alpha\nbeta\n"
        assert s.edit(name, "beta", "gamma").replacements == 1
    assert (tls_served.root / name).read_text() == "alpha\ngamma\n"


def test_async_client_remote_passes_the_ca_file_through(tls_served: TlsServer, pki: Pki) -> None:
    name = new_file(tls_served)

    async def main() -> None:
        async with AsyncClient.remote(tls_served.url, token=token("agent-aio"), ca_file=str(pki.ca)) as client:
            s = client.session("agent-aio")
            await s.read(name)
            await s.edit(name, "alpha", "omega")

    anyio.run(main)
    assert (tls_served.root / name).read_text() == "omega\nbeta\n"


@pytest.mark.parametrize("trust", ["system", "other-ca"])
def test_an_untrusted_certificate_is_refused_with_the_ca_hint(tls_served: TlsServer, pki: Pki, trust: str) -> None:
    name = new_file(tls_served)
    ca_file = None if trust == "system" else pki.other_ca
    with HttpClient(tls_served.url, token=token("agent-x"), ca_file=ca_file) as client:
        for call in (lambda: client.read("agent-x", name), lambda: client.write("agent-x", name, "overwritten\n")):
            err = refusal(call)
            assert err.code == ErrorCode.INVALID_ARGUMENT and err.details.get("service_code") == "tls_untrusted", err
            assert "CA file" in err.message and "--ca-file" in err.message and "Nothing was sent" in err.message
    assert (tls_served.root / name).read_text() == "alpha\nbeta\n"


def test_a_host_name_the_certificate_does_not_cover_is_refused(tls_served: TlsServer, pki: Pki) -> None:
    port = int(tls_served.url.rsplit(":", 1)[1])
    try:
        socket.getaddrinfo("localhost", port)
    except OSError:
        pytest.skip("localhost does not resolve here")
    with HttpClient(f"https://localhost:{port}", token=token("agent-h"), ca_file=pki.ca) as client:
        err = refusal(client.read, "agent-h", new_file(tls_served))
    assert err.details.get("service_code") == "tls_untrusted" and "host name" in err.message, err
    assert "localhost" in err.message  # OpenSSL's reason names the host that did not match


def test_plain_http_to_the_tls_port_names_https(tls_served: TlsServer) -> None:
    name = new_file(tls_served)
    plain = tls_served.url.replace("https://", "http://")
    with HttpClient(plain, token=token("agent-p")) as client:
        for call in (lambda: client.read("agent-p", name), lambda: client.write("agent-p", name, "x\n")):
            err = refusal(call)
            assert err.code == ErrorCode.INVALID_ARGUMENT, err
            assert "serves TLS" in err.message and "https://" in err.message
    assert (tls_served.root / name).read_text() == "alpha\nbeta\n"


def test_https_to_a_plain_port_names_http() -> None:
    """A listener that answers in plain HTTP (no handshake): the client says to use http://."""
    with socket.create_server((LOOPBACK, 0)) as listener:
        port = listener.getsockname()[1]

        def answer_plainly() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")

        t = threading.Thread(target=answer_plainly, daemon=True)
        t.start()
        with HttpClient(f"https://{LOOPBACK}:{port}", token="t", retries=0) as client:
            err = refusal(client.read, "s", "a.txt")
        t.join(10)
    assert err.code == ErrorCode.INVALID_ARGUMENT and "http://" in err.message, err


def test_client_refuses_a_bad_ca_file_before_any_call(pki: Pki, tmp_path: Path) -> None:
    for bad in (tmp_path / "missing.pem", tmp_path, pki.key):
        err = refusal(HttpClient, f"https://{LOOPBACK}:1", token="t", ca_file=bad)
        assert err.code == ErrorCode.INVALID_ARGUMENT and str(bad) in err.message, err
    err = refusal(HttpClient, f"http://{LOOPBACK}:1", token="t", ca_file=pki.ca)
    assert err.code == ErrorCode.INVALID_ARGUMENT and "https://" in err.message
    err = refusal(HttpClient, f"https://{LOOPBACK}:1", token="t", ca_file=pki.ca, transport=httpx.MockTransport(print))
    assert err.code == ErrorCode.INVALID_ARGUMENT and "transport" in err.message


# ---------------------------------------------------------------------------------------------------------
# The command line and the MCP server
# ---------------------------------------------------------------------------------------------------------
def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    for name in ("EDIT_COORDINATOR_CA_FILE", "EDIT_COORDINATOR_TLS_CERT", "EDIT_COORDINATOR_TLS_KEY"):
        if name not in (env or {}):
            full.pop(name, None)
    return subprocess.run([sys.executable, "-m", "coordinator.cli", *args], capture_output=True, text=True,
                          env=full, cwd=cwd or REPO_ROOT, timeout=120)  # fmt: skip


def test_file_commands_take_the_ca_file_by_flag_or_environment(tls_served: TlsServer, pki: Pki) -> None:
    name = new_file(tls_served)
    remote = ["--server", tls_served.url, "--token", token("cli-tls"), "--session", "cli-tls"]
    r = _cli("read", name, *remote, "--ca-file", str(pki.ca))
    assert r.returncode == 0 and "alpha" in r.stdout, r.stderr
    r = _cli("edit", name, "--old", "alpha", "--new", "delta", *remote, env={"EDIT_COORDINATOR_CA_FILE": str(pki.ca)})
    assert r.returncode == 0, r.stderr
    assert (tls_served.root / name).read_text() == "delta\nbeta\n"
    r = _cli("edit", name, "--old", "delta", "--new", "epsilon", *remote)
    assert r.returncode == 5, (r.returncode, r.stderr)  # the row of tls_untrusted: the service unreachable
    assert r.stderr.startswith("edit-coordinator: [tls_untrusted] ") and "--ca-file" in r.stderr
    assert (tls_served.root / name).read_text() == "delta\nbeta\n"


def test_stress_runs_through_an_https_service_with_the_ca_file(tls_served: TlsServer, pki: Pki) -> None:
    remote = ["--url", tls_served.url, "--token", token(admin=True), "--in-place", "--workers", "2"]
    r = _cli("stress", *remote, "--edits", "12", "--json", "--ca-file", str(pki.ca))
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["summary"]["client"] == "http" and report["summary"]["acknowledged"] >= 12
    assert report["oracle"]["ok"] and report["oracle"]["lost_updates"] == 0
    assert report["root"] is None  # the files are the service's: no local folder (the stand-in is gone) named
    r = _cli("stress", *remote, "--edits", "12", "--ca-file", str(pki.ca))
    assert r.returncode == 0 and "Files:" not in r.stdout, r.stdout
    r = _cli("stress", *remote, "--edits", "12", "--json")
    assert r.returncode != 0 and "--ca-file" in r.stderr, r.stderr


def test_mcp_forwards_over_https_with_the_ca_file(tls_served: TlsServer, pki: Pki, tmp_path: Path) -> None:
    """`mcp --server https://... --ca-file F`: an edit through the official MCP SDK client lands."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    name = new_file(tls_served)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = ["-m", "coordinator.cli", "mcp", "--server", tls_served.url, "--token", token("mcp-tls"),
            "--ca-file", str(pki.ca)]  # fmt: skip
    params = StdioServerParameters(
        command=sys.executable, args=args, env={"PYTHONPATH": str(REPO_ROOT)}, cwd=str(elsewhere)
    )
    texts: list[str] = []

    async def main() -> None:
        with open(tmp_path / "mcp.log", "w") as err:
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write, read_timeout_seconds=30) as client,
            ):
                await client.initialize()
                for tool, arguments in (
                    ("read_file", {"file_path": name}),
                    ("edit_file", {"file_path": name, "old_string": "beta", "new_string": "zeta"}),
                ):
                    result = await client.call_tool(tool, arguments)
                    texts.append(result.content[0].text)  # type: ignore[union-attr]
                    assert not result.is_error, texts[-1]

    anyio.run(main)
    assert "alpha" in texts[0] and "updated" in texts[1]
    assert (tls_served.root / name).read_text() == "alpha\nzeta\n"
    assert list(elsewhere.iterdir()) == []  # no engine, no state of its own


def test_mcp_without_the_ca_file_says_so_before_serving(tls_served: TlsServer, tmp_path: Path) -> None:
    r = _cli("mcp", "--server", tls_served.url, "--token", token("mcp-x"), cwd=tmp_path)
    assert r.returncode == 5 and "[tls_untrusted]" in r.stderr and "--ca-file" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------------------
# serve's refusals
# ---------------------------------------------------------------------------------------------------------
def test_tls_options_want_a_readable_matching_pair(pki: Pki, tmp_path: Path) -> None:
    assert tls_options(None, None) == {}
    assert tls_options(str(pki.cert), str(pki.key)) == {"ssl_certfile": str(pki.cert), "ssl_keyfile": str(pki.key)}
    cases = [
        ((str(pki.cert), None), "--tls-cert needs --tls-key"),
        ((None, str(pki.key)), "--tls-key needs --tls-cert"),
        ((str(tmp_path / "missing.pem"), str(pki.key)), "missing.pem"),
        ((str(pki.cert), str(tmp_path)), "cannot be read"),
        ((str(pki.cert), str(pki.other_key)), "cannot be used together"),
        ((str(pki.cert), str(pki.encrypted_key)), "unencrypted"),
        ((str(pki.ca), str(pki.ca)), "cannot be used together"),  # a certificate given as the key
    ]
    for (cert, key), words in cases:
        err = refusal(tls_options, cert, key)
        assert err.code == ErrorCode.INVALID_ARGUMENT and words in err.message, (cert, key, err)


def test_serve_refuses_before_starting_anything(pki: Pki, tmp_path: Path) -> None:
    """A certificate from the environment without its key: exit 2, the message names the missing option,
    and nothing was started (no state folder, hence no Redis and no secret)."""
    root = tmp_path / "repo"
    root.mkdir()
    r = _cli("serve", "--root", str(root), "--port", "0", env={"EDIT_COORDINATOR_TLS_CERT": str(pki.cert)})
    assert r.returncode == 2, r.stderr
    assert "[invalid_argument] --tls-cert needs --tls-key (or $EDIT_COORDINATOR_TLS_KEY)" in r.stderr
    r = _cli("serve", "--root", str(root), "--port", "0", "--tls-cert", str(pki.cert), "--tls-key",
             str(pki.other_key))  # fmt: skip
    assert r.returncode == 2 and "cannot be used together" in r.stderr, r.stderr
    assert list(root.iterdir()) == []


def test_serve_help_names_the_tls_options_and_their_variables() -> None:
    r = _cli("serve", "--help")
    assert r.returncode == 0
    for word in ("--tls-cert", "--tls-key", "$EDIT_COORDINATOR_TLS_CERT", "$EDIT_COORDINATOR_TLS_KEY"):
        assert word in r.stdout, word
    for command in ("read", "mcp"):
        r = _cli(command, "--help")
        assert "--ca-file" in r.stdout and "$EDIT_COORDINATOR_CA_FILE" in r.stdout, command
