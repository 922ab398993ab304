"""Nothing outside the root, attacked by a real process: a folder on the way to the written file is swapped
for a link to an outside folder while writes make new folders beneath it.

The swapper exchanges `repo/sub` and `repo/sub.link` (a symlink to the outside folder) with
renameat2(RENAME_EXCHANGE), one atomic system call per flip, so `repo/sub` is always either the real folder
or the link, never missing: the strongest form of the race. Folders made by path string (then checked) were
made outside ~10 % of the time here, and a `realpath` racing the flip raised a bare OSError(EINVAL).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import fakeredis
import pytest

from coordinator import Coordinator, CoordinatorError, ErrorCode

RENAME_EXCHANGE = 2
AT_FDCWD = -100

SWAPPER = """
import ctypes, os, random, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
first = True
while True:
    if libc.renameat2(-100, a, -100, b, 2) != 0:
        sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
    if first:
        print("swapping", flush=True)
        first = False
    for _ in range(random.randrange(50)):
        pass
"""


def _rename_exchange_works(folder: Path) -> bool:
    a, b = folder / "probe.a", folder / "probe.b"
    a.mkdir()
    b.symlink_to(a)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(libc, "renameat2"):
            return False
        return libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0
    finally:
        for p in (a, b):
            if p.is_symlink():
                p.unlink()
            else:
                p.rmdir()


def test_folder_swapped_for_outside_link_during_writes_makes_nothing_outside(tmp_path: Path) -> None:
    root, outside = tmp_path / "repo", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("outside\n")
    if not _rename_exchange_works(tmp_path):
        pytest.skip("renameat2(RENAME_EXCHANGE) is not available on this file system")
    (root / "sub").mkdir()
    (root / "sub.link").symlink_to(outside)
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(root / "sub"), str(root / "sub.link")],
        stdout=subprocess.PIPE,
        text=True,
    )
    outcomes: Counter[str] = Counter()
    escaped: list[str] = []
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == "swapping\n"
        with Coordinator(root, redis_client=fakeredis.FakeRedis(), durability="none") as coord:
            s = coord.session("writer")
            for i in range(1500):
                try:
                    s.write(f"sub/n{i}/d/f.txt", "x\n")
                    outcomes["written"] += 1
                except CoordinatorError as exc:
                    outcomes[exc.code.value] += 1
                except Exception as exc:  # the point: nothing but CoordinatorError escapes
                    escaped.append(repr(exc))
    finally:
        swapper.kill()
        swapper.wait()
    assert escaped == [], f"{len(escaped)} calls raised something else than CoordinatorError: {escaped[:5]}"
    assert sorted(os.listdir(outside)) == ["keep.txt"], "folders were made outside the root"
    # The race was real: the swapper ran all along (it only stops when killed) and both outcomes happened.
    assert swapper.returncode == -9
    assert outcomes["written"] > 0 and outcomes[ErrorCode.OUTSIDE_ROOT.value] > 0, outcomes
    # Whatever was acknowledged is inside, in whichever of the two names the real folder had at the end.
    real = root / "sub" if not (root / "sub").is_symlink() else root / "sub.link"
    assert len(list(real.glob("n*/d/f.txt"))) == outcomes["written"]
    assert set(outcomes) <= {"written", ErrorCode.OUTSIDE_ROOT.value}, outcomes


@pytest.mark.parametrize(
    "path",
    ["f.txt", "d/f.txt", "d/e/f.txt", "d/", "./d/f.txt", "d/../f.txt", "d//f.txt", "new/deeper/f.txt", "link/f.txt"],
)
def test_resolve_splits_and_keys_as_os_path_does(tmp_path: Path, path: str) -> None:
    """resolve's string work (the parent and name, the key) is os.path's, for relative and absolute
    paths, through a link inside the root and under the root "/" itself."""
    from coordinator.disk import fsio

    root = tmp_path / "repo"
    (root / "d" / "e").mkdir(parents=True)
    (root / "link").symlink_to("d")
    for r, p in ((str(root), path), (str(root), str(root / path)), ("/", str(root / path).lstrip("/"))):
        rp = fsio.resolve(r, p)
        real = os.path.realpath(os.path.join(r, p))
        assert (rp.abs, (rp.parent, rp.name)) == (real, os.path.split(real))
        assert rp.key == os.path.relpath(real, r)
