"""cProfile output, summarised: where the time of a profiled cell goes, by category and by function.

Workers of a profiled cell dump one stats file each; they are merged, and every function's own time
(tottime) is put in one bucket by where it lives: waiting on Redis, the rename that publishes a write,
other file system calls, the file lock, hashing, the engine's Python, the simulated agent and its records,
think time, and the rest. cProfile inflates Python-level time relative to system calls, so the shares
point at what to look at next rather than measure it exactly.
"""

from __future__ import annotations

import pstats
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# (bucket, test on (file, function name)); the first match wins.
_BUCKETS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("think / sleep", (), ("sleep",)),
    ("Redis round trips (socket wait)", (), ("recv_into", "recv", "sendall", "send", "poll", "select", "can_read")),
    ("redis-py (Python)", ("/redis/", "hiredis"), ()),
    ("rename over the file (os.replace)", (), ("posix.replace", "posix.rename")),
    ("fsync", (), ("posix.fsync", "posix.fdatasync")),
    ("file lock (flock, and waiting for the waiter thread)", (), ("fcntl.flock", "flock", "acquire' of '_thread")),
    ("other file system calls", (), (
        "posix.open", "posix.read", "posix.write", "posix.close", "posix.stat", "posix.fstat", "posix.lstat",
        "posix.link", "posix.unlink", "posix.pread", "posix.pwrite", "posix.listdir", "posix.scandir",
        "posix.mkdir", "posix.utime", "posix.fchmod", "posix.fchown", "posix.chmod", "io.open", "_io.open",
        "posix.getcwd", "posix.readlink", "method 'read' of '_io", "method 'write' of '_io",
    )),
    ("hashing (xxhash)", ("xxhash",), ("xxh3", "xxh64", "xxh128")),
    ("JSON encoding (agent records, engine index)", ("/json/",), ("json",)),
    ("engine (coordinator/*.py)", ("/coordinator/",), ()),
    ("baseline client (coordinator_bench/*.py)", ("/coordinator_bench/",), ()),
    ("simulated agent (worker/*.py)", ("/worker/",), ()),
    ("regular expressions", ("/re/", "sre_"), ("_sre", "re.")),
)  # fmt: skip


def bucket_of(filename: str, func: str) -> str:
    for name, files, funcs in _BUCKETS:
        if any(f in filename for f in files) or any(f in func for f in funcs):
            return name
    return "other (interpreter, stdlib)"


def _label(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~" or not filename:
        return func
    parts = Path(filename).parts
    short = "/".join(parts[-2:]) if len(parts) >= 2 else filename
    return f"{func} ({short}:{line})"


def summarize_stats(paths: Iterable[Path], top: int = 12) -> dict[str, Any] | None:
    """Merge the stats files and summarise them; None when there are none."""
    files = [str(p) for p in paths if Path(p).exists()]
    if not files:
        return None
    stats = pstats.Stats(files[0])
    for f in files[1:]:
        stats.add(f)
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_cc, _nc, tt, _ct, _callers) in raw.values()) or 1e-12
    buckets: dict[str, float] = {}
    for key, (_cc, _nc, tt, _ct, _callers) in raw.items():
        b = bucket_of(key[0], key[2])
        buckets[b] = buckets.get(b, 0.0) + tt
    rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:top]

    def callers(key: tuple[str, int, str], n: int = 5) -> list[dict[str, Any]]:
        """Who calls `key` most (by call count): where a system call comes from in the engine."""
        found = raw[key][4] or {}
        ranked = sorted(found.items(), key=lambda kv: kv[1][1] if isinstance(kv[1], tuple) else kv[1], reverse=True)
        return [
            {
                "function": _label(k),
                "calls": v[1] if isinstance(v, tuple) else v,
                "tottime_s": v[2] if isinstance(v, tuple) else None,
            }
            for k, v in ranked[:n]
        ]

    return {
        "processes": len(files),
        "total_s": total,
        "buckets": [
            {"bucket": b, "seconds": s, "share": s / total}
            for b, s in sorted(buckets.items(), key=lambda kv: kv[1], reverse=True)
        ],
        "top": [
            {
                "function": _label(key),
                "calls": nc,
                "tottime_s": tt,
                "cumtime_s": ct,
                "share": tt / total,
                "callers": callers(key) if key[0] == "~" else [],
            }
            for key, (_cc, nc, tt, ct, _callers) in rows
        ],
    }
