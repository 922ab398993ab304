"""Measure the ways of replacing a file atomically, syscall by syscall (issue 14, item 3).

    python3 scripts/replace_probe.py [--dir D] [--n 2000] [--size 7000] [--rounds 5]
    strace -f -c -o /tmp/x.txt python3 scripts/replace_probe.py --only VARIANT --n 2000

Variants (each writes the same bytes over an existing file, then the file is stat'ed, as the engine does):
  state-unique    temp file in a separate folder (the state folder's tmp/), a new name each time, rename
  same-unique     temp file next to the target, a new name each time, rename
  state-reused    temp file in tmp/, one name per process (O_CREAT|O_TRUNC), rename
  tmpfile-link    O_TMPFILE in tmp/, linkat to a name, rename (a crash never leaves a named temp)
  exchange        temp in tmp/, renameat2(RENAME_EXCHANGE), unlink the old content
Each variant also runs with fsync (file fsync before, folder fsync after) when --fsync is given.
Rounds interleave the variants; the figure is the median over rounds of each round's mean (microseconds).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import tempfile
import time
from collections.abc import Callable

RENAME_EXCHANGE = 2
AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)


def renameat2(olddfd: int, old: str, newdfd: int, new: str, flags: int) -> None:
    if _libc.renameat2(olddfd, old.encode(), newdfd, new.encode(), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _write(fd: int, data: bytes, fsync: bool) -> None:
    os.write(fd, data)
    os.fchmod(fd, 0o644)
    if fsync:
        os.fsync(fd)
    os.close(fd)


class Probe:
    def __init__(self, base: str, data: bytes, fsync: bool) -> None:
        self.repo = os.path.join(base, "repo")
        self.tmp = os.path.join(base, "state", "tmp")
        os.makedirs(self.repo, exist_ok=True)
        os.makedirs(self.tmp, exist_ok=True)
        self.dfd = os.open(self.repo, os.O_RDONLY | os.O_DIRECTORY)
        self.tfd = os.open(self.tmp, os.O_RDONLY | os.O_DIRECTORY)
        self.data = data
        self.fsync = fsync
        self.n = 0
        with open(os.path.join(self.repo, "f.txt"), "wb") as f:
            f.write(data)

    def _done(self) -> None:
        if self.fsync:
            os.fsync(self.dfd)
        os.stat("f.txt", dir_fd=self.dfd)

    def state_unique(self) -> None:
        self.n += 1
        name = f".f.txt.ec-{os.getpid()}-{self.n}.tmp"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600, dir_fd=self.tfd)
        _write(fd, self.data, self.fsync)
        os.replace(name, "f.txt", src_dir_fd=self.tfd, dst_dir_fd=self.dfd)
        self._done()

    def same_unique(self) -> None:
        self.n += 1
        name = f".f.txt.ec-{os.getpid()}-{self.n}.tmp"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600, dir_fd=self.dfd)
        _write(fd, self.data, self.fsync)
        os.replace(name, "f.txt", src_dir_fd=self.dfd, dst_dir_fd=self.dfd)
        self._done()

    def state_reused(self) -> None:
        name = f".ec-{os.getpid()}.tmp"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600, dir_fd=self.tfd)
        _write(fd, self.data, self.fsync)
        os.replace(name, "f.txt", src_dir_fd=self.tfd, dst_dir_fd=self.dfd)
        self._done()

    def tmpfile_link(self) -> None:
        self.n += 1
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=self.tfd)
        os.write(fd, self.data)
        os.fchmod(fd, 0o644)
        if self.fsync:
            os.fsync(fd)
        name = f".f.txt.ec-{os.getpid()}-{self.n}.tmp"
        os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=self.tfd, follow_symlinks=True)
        os.close(fd)
        os.replace(name, "f.txt", src_dir_fd=self.tfd, dst_dir_fd=self.dfd)
        self._done()

    def exchange(self) -> None:
        self.n += 1
        name = f".f.txt.ec-{os.getpid()}-{self.n}.tmp"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600, dir_fd=self.tfd)
        _write(fd, self.data, self.fsync)
        renameat2(self.tfd, name, self.dfd, "f.txt", RENAME_EXCHANGE)
        os.unlink(name, dir_fd=self.tfd)
        self._done()


VARIANTS = ("state_unique", "same_unique", "state_reused", "tmpfile_link", "exchange")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--size", type=int, default=7000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fsync", action="store_true")
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="replace-probe-", dir=args.dir)
    probe = Probe(base, os.urandom(args.size // 2).hex().encode()[: args.size], args.fsync)
    names = [args.only.replace("-", "_")] if args.only else list(VARIANTS)
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.rounds):
        for name in names:
            fn: Callable[[], None] = getattr(probe, name)
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(args.n):
                fn()
            wall[name].append((time.perf_counter() - t0) / args.n * 1e6)
            cpu[name].append((time.process_time() - c0) / args.n * 1e6)
    mode = "fsync" if args.fsync else "none"
    for name in names:
        print(f"{name:14s} durability={mode}  wall median {statistics.median(wall[name]):7.1f} us, "
              f"CPU (user+sys) median {statistics.median(cpu[name]):6.1f} us per replace")  # fmt: skip


if __name__ == "__main__":
    main()
