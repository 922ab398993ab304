"""The floor of one solo edit's system calls, against the unsafe baseline, side by side (issue 14).

    python3 scripts/syscall_floor.py [--seconds 3] [--rounds 3]

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

A third loop, "lean", adds the least Python work an edit of this design cannot do without, written
inline with no layers: the content hashes (XXH3-128 of the bytes read and of the new bytes), the decode,
the unique-match test and the replace, the encode, the head record (struct), the history index line
(json), the Redis commands packed by hiredis and their replies parsed by hiredis's reader. What it
leaves out: messages, snippets, results, the rules (confinement, placeholders, encodings, rebase), the
read state's bookkeeping. Its ratio bounds what a rewrite of the hot path in Python could reach. The
fourth loop is the coordinator itself (`Session.edit`, durability none) on its own copy of the file.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import socket
import statistics
import struct
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import hiredis
import xxhash

RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _exchange(src_dfd: int, src: bytes, dst_dfd: int, dst: bytes) -> None:
    if _libc.renameat2(src_dfd, src, dst_dfd, dst, RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


COUNTERS = "# counters\n" + "".join(f"s{i:03d} = {i}\n" for i in range(200))


def rate(step: Callable[[], object], seconds: float) -> tuple[float, int]:
    """`step` back to back for `seconds`: calls per second, and how many calls were made."""
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return n / (time.perf_counter() - t0), n


def _unsafe(path: Path, seconds: float) -> float:
    """The unsafe baseline: read the file, replace, write it in place (no lock, no check)."""

    def step() -> None:
        path.write_text(path.read_text().replace("s000 = ", "s000 = ", 1))

    return rate(step, seconds)[0]


@contextlib.contextmanager
def floor_scratch(prefix: str, copies: Sequence[str]) -> Iterator[tuple[Path, str, socket.socket]]:
    """A scratch folder for the loops: state/locks and state/tmp as the floor's calls use them, the counters
    file at each of `copies` (and at repo/f.txt, the engine's), the embedded Redis of repo/ and a raw
    connection on its unix socket. Yields (the folder, the Redis URL, the connection); stops the server and
    removes the folder at the end. The engine's own names only (`ensure_embedded_redis`), so that a
    checkout of an older revision runs it too."""
    from coordinator.state.embedded import ensure_embedded_redis, stop_embedded_redis

    root = Path(tempfile.mkdtemp(prefix=prefix))
    for sub in ("state/locks", "state/tmp", "repo"):
        (root / sub).mkdir(parents=True)
    for name in (*copies, "repo/f.txt"):
        (root / name).write_text(COUNTERS)
    state = root / "repo" / ".edit-coordinator"
    sock = socket.socket(socket.AF_UNIX)
    try:
        url = ensure_embedded_redis(state)
        sock.connect(url.removeprefix("unix://").split("?")[0])
        yield root, url, sock
    finally:
        sock.close()
        stop_embedded_redis(state)
        shutil.rmtree(root, ignore_errors=True)  # the scratch folder, with the engine's history


def _descriptors(root: Path) -> tuple[int, int, int, int, int]:
    """What an engine keeps open: the root, the locks and temporaries folders, the pack and the index
    (which ends with a line end, as the engine's does)."""
    state = root / "state"
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    locks_fd = os.open(state / "locks", os.O_RDONLY | os.O_DIRECTORY)
    tmp_fd = os.open(state / "tmp", os.O_RDONLY | os.O_DIRECTORY)
    pack = os.open(state / "pack", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    index = os.open(state / "index", os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(index, b"\n")
    return root_fd, locks_fd, tmp_fd, pack, index


def _floor(root: Path, redis_sock: socket.socket | None, seconds: float) -> float:
    """Floor edits per second over `seconds` (`floor_step`'s calls back to back)."""
    return rate(floor_step(root, redis_sock), seconds)[0]


def floor_step(root: Path, redis_sock: socket.socket | None) -> Callable[[], None]:
    """One floor edit per call: the engine's system calls for one edit, with no logic between them, and
    its one Redis round trip when `redis_sock` is given (the module docstring). The descriptors an engine
    keeps open are opened once, here."""
    data = (root / "f.txt").read_bytes()
    root_fd, locks_fd, tmp_fd, pack, index = _descriptors(root)
    head = b"\0" * 56
    request = b"*3\r\n$3\r\nSET\r\n$46\r\n" + b"k" * 46 + b"\r\n$500\r\n" + b"v" * 500 + b"\r\n"
    line = b"x" * 310 + b"\n"

    def step() -> None:
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

    return step


def _lean(root: Path, redis_sock: socket.socket, seconds: float) -> tuple[float, int]:
    """`_floor`'s calls with the least logic an edit needs between them (see the module docstring)."""
    root_fd, locks_fd, tmp_fd, pack, index = _descriptors(root)
    head_fmt = struct.Struct("<qq16sqq")
    reader = hiredis.Reader()
    values = {k: int(v) for k, _, v in (ln.partition(" = ") for ln in (root / "f.txt").read_text().splitlines()[1:])}
    slots = sorted(values)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        slot = slots[n % 200]
        old, new = f"\n{slot} = {values[slot]}\n", f"\n{slot} = {values[slot] + 1}\n"
        dfd = os.dup(root_fd)
        lk = os.open("f.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=locks_fd)
        fcntl.flock(lk, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.stat("f.txt", dir_fd=dfd, follow_symlinks=False)
        fd = os.open("f.txt", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        st = os.fstat(fd)
        data = os.read(fd, st.st_size + 1)
        os.read(fd, 65536)
        os.close(fd)
        before = xxhash.xxh3_128_hexdigest(data)
        os.access("f.txt", os.W_OK, dir_fd=dfd, effective_ids=True, follow_symlinks=False)
        text = data.decode("utf-8")
        if text.count(old) != 1:
            raise RuntimeError(f"{old!r} is not unique")
        out = text.replace(old, new, 1).encode("utf-8")
        after = xxhash.xxh3_128_hexdigest(out)
        counter, _, _, _, _ = head_fmt.unpack(os.pread(lk, head_fmt.size, 0).ljust(head_fmt.size, b"\0"))
        os.fstat(pack)
        size = os.fstat(index).st_size
        os.write(pack, out)
        os.pwrite(lk, head_fmt.pack(counter + 1, counter, bytes.fromhex(after), 0, len(out)), 0)
        entry = {"version": counter + 1, "time": time.time(), "path": "f.txt", "before": before, "after": after}
        if os.pread(index, 1, size - 1) != b"\n":
            raise RuntimeError("torn index")
        os.write(index, json.dumps(entry, separators=(",", ":")).encode() + b"\n")
        tmp = f".f.txt.ec-{os.getpid()}-{n}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=tmp_fd)
        os.write(fd, out)
        os.fchmod(fd, st.st_mode & 0o7777)
        os.close(fd)
        _exchange(tmp_fd, os.fsencode(tmp), dfd, b"f.txt")
        os.unlink(tmp, dir_fd=tmp_fd)
        new_st = os.stat("f.txt", dir_fd=dfd, follow_symlinks=False)
        os.pwrite(lk, head_fmt.pack(counter + 1, counter + 1, bytes.fromhex(after), 0, len(out)), 0)
        os.close(lk)
        os.close(dfd)
        _lean_record(redis_sock, reader, after, new_st, counter + 1)
        values[slot] += 1
        n += 1
    return n / (time.perf_counter() - t0), n


def _lean_record(sock: socket.socket, reader: hiredis.Reader, after: str, st: os.stat_result, version: int) -> None:
    """The lean loop's Redis record: the writer's view, the path's head and the event, one round trip."""
    view = struct.pack("<16sqqdc", bytes.fromhex(after), st.st_mtime_ns, st.st_size, time.time(), b"w")
    # hiredis's stub types pack_command's argument as a 1-tuple (`Tuple[str | int | ...]`), though it packs
    # a command of any length; a command typed tuple[Any, ...] (as coordinator.state.lane.Batch keeps them)
    # is what that stub accepts.
    set_view: tuple[Any, ...] = ("SET", "ec:{NyhnFWRTFTw:9xU7TfcqkhA}:r:solo", view, "EX", 86400)
    set_head: tuple[Any, ...] = ("HSET", "ec:{NyhnFWRTFTw:9xU7TfcqkhA}:meta", "version", version, "hash", after)
    add_event: tuple[Any, ...] = ("XADD", "ec:{ns}:events", "MAXLEN", "~", 10000, "*", "path", "f.txt")
    sock.sendall(hiredis.pack_command(set_view) + hiredis.pack_command(set_head) + hiredis.pack_command(add_event))
    replies: list[object] = []
    while len(replies) < 3:
        got = reader.gets()
        if got is False:
            reader.feed(sock.recv(65536))
        else:
            replies.append(got)


def _engine(root: Path, url: str, seconds: float) -> tuple[float, int]:
    """The coordinator itself (in-process, durability none) editing its own copy of the same file."""
    from coordinator import Coordinator

    with Coordinator(root / "repo", url, durability="none") as coord:
        session = coord.session("floor")
        session.read("f.txt", limit=10_000)
        lines = (root / "repo" / "f.txt").read_text().splitlines()[1:]
        values = {k: int(v) for k, _, v in (ln.partition(" = ") for ln in lines)}
        slots = sorted(values)
        made = [0]

        def step() -> None:
            slot = slots[made[0] % 200]
            session.edit("f.txt", f"\n{slot} = {values[slot]}\n", f"\n{slot} = {values[slot] + 1}\n")
            values[slot] += 1
            made[0] += 1

        return rate(step, seconds)


def _total(path: Path) -> int:
    """The sum of a counters file's values (each edit adds 1)."""
    return sum(int(ln.partition(" = ")[2]) for ln in path.read_text().splitlines()[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    made = {"f.txt": 0, "repo/f.txt": 0}
    with floor_scratch("ec-floor-", ("f.txt", "u.txt")) as (root, url, sock):
        for _ in range(args.rounds):
            u = _unsafe(root / "u.txt", args.seconds)
            f_disk = _floor(root, None, args.seconds)
            f_all = _floor(root, sock, args.seconds)
            lean, n_lean = _lean(root, sock, args.seconds)
            engine, n_engine = _engine(root, url, args.seconds)
            made["f.txt"] += n_lean
            made["repo/f.txt"] += n_engine
            rows.append((u, f_disk, f_all, lean, engine))
            print(f"unsafe {u:,.0f}/s   floor, disk calls only {f_disk:,.0f}/s ({f_disk / u:.2f}x)   "
                  f"floor with the Redis round trip {f_all:,.0f}/s ({f_all / u:.2f}x)   "
                  f"lean {lean:,.0f}/s ({lean / u:.2f}x)   engine {engine:,.0f}/s ({engine / u:.2f}x)")  # fmt: skip
        for rel, n in made.items():  # the figures count only edits that are in the file
            if _total(root / rel) != _total(root / "u.txt") + n:
                raise SystemExit(f"{rel} does not hold the {n} edits made to it: no figures")
        print(f"every edit of the lean loop ({made['f.txt']}) and of the engine ({made['repo/f.txt']}) is in its file")
    med = [statistics.median(r[i] / r[0] for r in rows) for i in range(5)]
    print(
        f"median of {args.rounds} (ratios to unsafe): disk calls only {med[1]:.2f}x, with Redis {med[2]:.2f}x, "
        f"lean {med[3]:.2f}x, the engine {med[4]:.2f}x"
    )


if __name__ == "__main__":
    main()
