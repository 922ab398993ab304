"""The 16-coroutine workload the asyncio tests share (in-process in test_aio, over HTTP in
test_async_remote): each coroutine increments its own line of a shared file `rounds` times."""

from __future__ import annotations

from pathlib import Path

from coordinator import AsyncClient, CoordinatorError, ErrorCode

FILES = 4
LINES = 8
COROUTINES = 16


def prepare(root: Path, prefix: str = "") -> list[str]:
    """FILES counters files of LINES lines `s<j> = 0` under `root`; returns their names."""
    names = [f"{prefix}f{i}.txt" for i in range(FILES)]
    for name in names:
        (root / name).write_text("".join(f"s{j} = 0\n" for j in range(LINES)))
    return names


async def increment_own_line(client: AsyncClient, session: str, name: str, line: str, rounds: int) -> int:
    """Read `name`, add 1 to the line that starts with `line`, until `rounds` edits are acknowledged.
    A refusal is retried: another coroutine moved the file (stale), the same session already changed the
    line (no_match), or the lock was busy. Returns the acknowledged edits."""
    s = client.session(session)
    done = 0
    while done < rounds:
        r = await s.read(name)
        value = next(int(x.split(" = ")[1]) for x in r.content.splitlines() if x.startswith(line))
        try:
            await s.edit(name, f"{line}{value}\n", f"{line}{value + 1}\n")
        except CoordinatorError as exc:
            assert exc.code in (ErrorCode.STALE, ErrorCode.NO_MATCH, ErrorCode.LOCK_TIMEOUT), exc
            continue
        done += 1
    return done


def assert_every_increment_landed(root: Path, names: list[str], rounds: int) -> None:
    """Coroutine i edits line i % LINES of file i % FILES: each line holds its writers' rounds."""
    for k, name in enumerate(names):
        text = (root / name).read_text()
        for j in range(LINES):
            writers = sum(1 for i in range(COROUTINES) if i % FILES == k and i % LINES == j)
            assert f"s{j} = {writers * rounds}\n" in text, (name, j, text)
