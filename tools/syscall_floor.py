"""The floor of one solo edit's system calls, against the unsafe baseline, side by side (issue 14).

    python3 tools/syscall_floor.py [--seconds 3] [--rounds 3]

An edit through the coordinator (durability none) makes these calls, taken from `strace -f` of one edit
of a 200-line counters file: the lock (open the lock file, flock), the read under it (fstatat, openat,
fstat, read, read, close), the OS's write permission (faccessat), the history head and appends (pread x2,
fstat x2, write the new content to the pack, pwrite the head, pread + write the index line), the new file
(openat O_CREAT|O_EXCL in the state folder, write, fchmod, close; renameat2 RENAME_EXCHANGE; unlinkat the
old content; fstatat; pwrite the head), unlock (close), and one Redis round trip (a pipeline of the size
the engine sends, on the embedded server's unix socket). This script makes exactly those calls, with no
logic between them (the content is computed once), and times them beside the unsafe baseline's own
(read the file, replace, write it in place). The ratio it prints is the most the coordinator could reach
with this design if its Python work cost nothing.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _exchange(src_dfd: int, src: bytes, dst_dfd: int, dst: bytes) -> None:
    if _libc.renameat2(src_dfd, src, dst_dfd, dst, RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


def _unsafe(path: Path, seconds: float) -> float:
    n, text = 0, path.read_text()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        text = path.read_text()
        path.write_text(text.replace("s000 = ", "s000 = ", 1))
        n += 1
    return n / (time.perf_counter() - t0)


def _floor(root: Path, redis_sock: socket.socket | None, seconds: float) -> float:
    state = root / "state"
    data = (root / "f.txt").read_bytes()
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    locks_fd = os.open(state / "locks", os.O_RDONLY | os.O_DIRECTORY)
    tmp_fd = os.open(state / "tmp", os.O_RDONLY | os.O_DIRECTORY)
    pack = os.open(state / "pack", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    index = os.open(state / "index", os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(index, b"\n")
    head = b"\0" * 56
    request = b"*3\r\n$3\r\nSET\r\n$46\r\n" + b"k" * 46 + b"\r\n$500\r\n" + b"v" * 500 + b"\r\n"
    line = b"x" * 310 + b"\n"
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        dfd = os.dup(root_fd)
        lk = os.open("f.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=locks_fd)
        fcntl.flock(lk, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.stat("f.txt", dir_fd=dfd, follow_symlinks=False)
        fd = os.open("f.txt", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        os.fstat(fd)
        os.read(fd, 65536)
        os.read(fd, 65536)
        os.close(fd)
        os.access("f.txt", os.W_OK, dir_fd=dfd, effective_ids=True, follow_symlinks=False)
        os.pread(lk, 56, 0)
        os.pread(lk, 56, 0)
        os.fstat(pack)
        os.fstat(index)
        os.write(pack, data)
        os.pwrite(lk, head, 0)
        os.pread(index, 1, 0)
        os.write(index, line)
        tmp = b".f.txt.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=tmp_fd)
        os.write(fd, data)
        os.fchmod(fd, 0o644)
        os.close(fd)
        _exchange(tmp_fd, tmp, dfd, b"f.txt")
        os.unlink(tmp, dir_fd=tmp_fd)
        os.stat("f.txt", dir_fd=dfd, follow_symlinks=False)
        os.pwrite(lk, head, 0)
        os.close(lk)
        os.close(dfd)
        if redis_sock is not None:
            redis_sock.sendall(request)
            redis_sock.recv(65536)
        n += 1
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from coordinator.embedded import ensure_embedded_redis, stop_embedded_redis

    root = Path(tempfile.mkdtemp(prefix="ec-floor-"))
    for sub in ("state/locks", "state/tmp"):
        (root / sub).mkdir(parents=True)
    text = "".join(f"s{i:03d} = {i}\n" for i in range(200))
    (root / "f.txt").write_text(text)
    (root / "u.txt").write_text(text)
    url = ensure_embedded_redis(root / "redis")
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(url.removeprefix("unix://").split("?")[0])
    rows = []
    try:
        for _ in range(args.rounds):
            u = _unsafe(root / "u.txt", args.seconds)
            f_disk = _floor(root, None, args.seconds)
            f_all = _floor(root, sock, args.seconds)
            rows.append((u, f_disk, f_all))
            print(f"unsafe {u:,.0f}/s   floor, disk calls only {f_disk:,.0f}/s ({f_disk / u:.2f}x)   "
                  f"floor with the Redis round trip {f_all:,.0f}/s ({f_all / u:.2f}x)")  # fmt: skip
    finally:
        sock.close()
        stop_embedded_redis(root / "redis")
    med = [statistics.median(r[i] for r in rows) for i in range(3)]
    print(f"median of {args.rounds}: disk calls only {med[1] / med[0]:.2f}x unsafe, with Redis {med[2] / med[0]:.2f}x")


if __name__ == "__main__":
    main()
