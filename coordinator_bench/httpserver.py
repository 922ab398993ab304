"""Start and stop `edit-coordinator serve` on a benchmark root, for the HTTP column.

The service runs as a child process (its own workers below it) on a free port, or on a unix socket
(`uds=True`: `serve --uds`), with a secret file of its own; the benchmark's agents use the admin token,
which may act as any session. The service's CPU seconds and peak RSS are read from /proc, so the CPU per
edit of the HTTP column includes the service's share.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from coordinator_bench.measure import cpu_seconds, peak_rss_mib, process_tree

_START_TIMEOUT_S = 30.0


class HttpService:
    """A running `edit-coordinator serve` for one root. Use as a context manager.

    `redis_url` None: the service starts the root's own embedded Redis. `extra_args` go to `serve` (`--watch`,
    say); `wrapper` goes before the interpreter (`valgrind --tool=callgrind ...`, with a `start_timeout_s` to
    match); `pythonpath` decides which `coordinator` the service runs (another revision's tree)."""

    def __init__(
        self,
        root: Path,
        redis_url: str | None,
        work_dir: Path,
        durability: str = "none",
        workers: int = 2,
        uds: bool = False,
        *,
        extra_args: tuple[str, ...] = (),
        wrapper: tuple[str, ...] = (),
        pythonpath: Path | None = None,
        start_timeout_s: float = _START_TIMEOUT_S,
    ) -> None:
        self.root = root
        self.uds = uds
        self.socket_path: str | None = None
        self.redis_url = redis_url
        self.work_dir = work_dir
        self.durability = durability
        self.workers = workers
        self.extra_args = extra_args
        self.wrapper = wrapper
        self.pythonpath = pythonpath
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.token = ""
        self._cpu0 = 0.0

    def start(self) -> HttpService:
        from coordinator.server import mint_token

        self.work_dir.mkdir(parents=True, exist_ok=True)
        secret_file = self.work_dir / "secret"
        secret = secrets.token_urlsafe(48)
        fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret + "\n")
        url_file = self.work_dir / "url"
        log = open(self.work_dir / "serve.log", "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [*self.wrapper, *self._command(secret_file, url_file)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self._env(), start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while not url_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = (self.work_dir / "serve.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"edit-coordinator serve did not start:\n{tail}")
            time.sleep(0.02)
        self.url = url_file.read_text().strip()
        self.token = mint_token(secret.encode(), admin=True, ttl_s=24 * 3600)
        self._wait_healthy(deadline)
        self._cpu0 = cpu_seconds(process_tree(self.proc.pid))
        return self

    def _command(self, secret_file: Path, url_file: Path) -> list[str]:
        listener = ["--port", "0"]
        if self.uds:
            self.socket_path = _socket_path(self.work_dir)
            listener = ["--uds", self.socket_path]
        redis = ["--redis-url", self.redis_url] if self.redis_url is not None else []
        return [
            sys.executable, "-m", "coordinator.cli", "serve", "--root", str(self.root), *redis,
            *listener, "--workers", str(self.workers), "--durability", self.durability,
            "--secret-file", str(secret_file), "--url-file", str(url_file),
            "--graceful-timeout", "2", "--log-level", "error", *self.extra_args,
        ]  # fmt: skip

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EDIT_COORDINATOR_")}
        if self.wrapper:
            env["PYTHONHASHSEED"] = "0"  # the same hashing in every run: instruction counts repeat
        if self.pythonpath is not None:
            env["PYTHONPATH"] = str(self.pythonpath)
        return env

    def log_text(self) -> str:
        """The service's output so far (valgrind's summary, once it has stopped)."""
        return (self.work_dir / "serve.log").read_text(errors="replace")

    def _wait_healthy(self, deadline: float) -> None:
        """Until every worker answers: a few health calls, each on a new connection."""
        import httpx

        ok = 0
        base = "http://localhost" if self.socket_path else self.url
        while ok < 4 * self.workers:
            try:
                transport = httpx.HTTPTransport(uds=self.socket_path)
                with httpx.Client(transport=transport, timeout=2.0 if not self.wrapper else 120.0) as probe:
                    r = probe.get(base + "/v1/health")
                ok += 1 if r.status_code == 200 else 0
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("edit-coordinator serve did not become healthy in time")
            time.sleep(0.01)

    def usage(self) -> dict[str, Any]:
        """CPU seconds used since the start, and the highest peak RSS among its processes (MiB)."""
        if self.proc is None:
            return {"cpu_s": None, "rss_mib": None}
        pids = process_tree(self.proc.pid)
        rss = [r for r in (peak_rss_mib(p) for p in pids) if r is not None]
        return {"cpu_s": cpu_seconds(pids) - self._cpu0, "rss_mib": max(rss) if rss else None, "processes": len(pids)}

    def stop(self) -> None:
        """SIGTERM the service, then SIGKILL whatever of its process group is left."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=8.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5.0)
        # Workers left behind by a supervisor that died first share its process group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if self.socket_path is not None and os.path.dirname(self.socket_path) != str(self.work_dir):
            shutil.rmtree(os.path.dirname(self.socket_path), ignore_errors=True)

    def __enter__(self) -> HttpService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _socket_path(work_dir: Path) -> str:
    """The service's socket in its work folder, or in a short folder of its own under /tmp when that path would
    pass the 107 bytes a unix socket's path may hold."""
    from coordinator.endpoint import MAX_UNIX_PATH_BYTES

    path = str(work_dir / "serve.sock")
    if len(os.fsencode(path)) <= MAX_UNIX_PATH_BYTES:
        return path
    return os.path.join(tempfile.mkdtemp(prefix="ec-bench-", dir="/tmp"), "serve.sock")
