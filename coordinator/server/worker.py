"""One worker process of a supervised service (see supervisor.py): `python -m coordinator.server.worker`."""

from __future__ import annotations

import json
import os
import socket

import uvicorn

from coordinator.server.supervisor import WORKER_ENV


def main() -> None:
    spec = json.loads(os.environ[WORKER_ENV])
    sock = socket.socket(fileno=spec["fd"])
    config = uvicorn.Config("coordinator.server:app_from_env", factory=True, **spec["uvicorn"])
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
