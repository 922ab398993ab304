"""Several uvicorn worker processes on one listening socket, supervised here.

Why our own supervisor: uvicorn's multi-worker supervisor (`uvicorn.supervisors.Multiprocess`) is internal
and its constructor changed in 0.51. Each worker here is a fresh interpreter
(`python -m coordinator.server.worker`) that inherits the bound socket (pass_fds) and runs
`uvicorn.Server(config).run(sockets=[sock])`, the public Server API. The uvicorn options travel to each
worker as JSON, TLS included (`ssl_certfile`, `ssl_keyfile`: uvicorn wraps the inherited socket itself);
`serve` checks those files before any worker starts (`serve.tls_options`), so a bad certificate is one
clear refusal, not workers that die at start.

Metrics: with `metrics_dir`, prometheus-client's multiprocess mode (server/metrics.py): the folder is
emptied and named to every worker before the first starts, and each worker that exits is marked dead there.

Rules: SIGTERM or SIGINT stops every worker gracefully (they finish running calls), then the supervisor
exits 0; a worker that dies on its own is restarted, unless workers keep dying within seconds of starting
(then everything stops and the exit status is 1); leftovers after the graceful timeout are killed.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from coordinator.server.metrics import prepare_multiprocess_dir, worker_exited

log = logging.getLogger("edit_coordinator.server")

WORKER_ENV = "EDIT_COORDINATOR_SERVER_WORKER"
_QUICK_DEATH_S = 3.0
_MAX_QUICK_DEATHS = 5


def _spawn(sock: socket.socket, uvicorn_options: dict[str, Any]) -> subprocess.Popen[bytes]:
    env = {**os.environ, WORKER_ENV: json.dumps({"fd": sock.fileno(), "uvicorn": uvicorn_options})}
    return subprocess.Popen([sys.executable, "-m", "coordinator.server.worker"], pass_fds=[sock.fileno()], env=env)


def supervise(
    workers: int,
    sock: socket.socket,
    uvicorn_options: dict[str, Any],
    graceful_s: float,
    metrics_dir: Path | None = None,
) -> int:
    """Run `workers` worker processes until SIGTERM / SIGINT; the exit status."""
    folder = prepare_multiprocess_dir(metrics_dir) if metrics_dir is not None else None
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    procs = [(_spawn(sock, uvicorn_options), time.monotonic()) for _ in range(workers)]
    quick_deaths = 0
    status = 0
    try:
        while not stop.wait(0.2):
            for i, (proc, started) in enumerate(procs):
                if proc.poll() is None:
                    continue
                if folder is not None:
                    worker_exited(folder, proc.pid)
                quick_deaths = quick_deaths + 1 if time.monotonic() - started < _QUICK_DEATH_S else 0
                if quick_deaths >= _MAX_QUICK_DEATHS:
                    log.error("workers keep exiting right after they start; stopping the service")
                    status = 1
                    stop.set()
                    break
                log.warning("worker %d exited with %s; starting another", proc.pid, proc.returncode)
                procs[i] = (_spawn(sock, uvicorn_options), time.monotonic())
    finally:
        _stop_all([p for p, _ in procs], graceful_s)
        if folder is not None:
            for proc, _ in procs:
                worker_exited(folder, proc.pid)
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status


def _stop_all(procs: list[subprocess.Popen[bytes]], graceful_s: float) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + graceful_s + 5.0
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
