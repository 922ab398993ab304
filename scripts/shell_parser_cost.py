"""What the shell parser (coordinator.text.shell) costs per command line, for the shapes agents send.

    python3 scripts/shell_parser_cost.py [--repeat 2000]

For each line: the median microseconds of tree-sitter-bash's parse alone and of `parse` whole (the parse,
the walk to simple commands with their words, redirections and folders, and any `bash -lc` string parsed
again), each timed over `--repeat` calls in batches, the two interleaved. Also `shlex.split` of the same
line, the word splitter the guard used before, for scale (it sees no commands, only words).
"""

from __future__ import annotations

import argparse
import functools
import shlex
import statistics
import time
from collections.abc import Callable

from coordinator.text.shell import parse
from coordinator.text.shell.walk import _parser

PATCH = "\n".join(f"+line {i} = value_{i}  # a patch line" for i in range(40))
LINES = {
    "git status": "git status",
    "cd X && git add -A && git commit -m MSG": 'cd /work/repo && git add -A && git commit -m "Fix the parser (#3)"',
    "cat > f <<'EOF' (40 lines)": f"cat > src/app.py <<'EOF'\n{PATCH}\nEOF",
    "bash -lc \"cd r && apply_patch <<'EOF' (40 lines)\"": (
        f"bash -lc \"cd repo && apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a.py\n{PATCH}\n"
        '*** End Patch\nEOF"'
    ),
    "sed -i ... && git diff | tee log": "sed -i 's/^total = 3$/total = 4/' src/x.py && git diff | tee -a log.txt",
    "20-command script (for/if/$( ))": "\n".join(
        f'for f in $(ls src/{i}); do if [ -f "$f" ]; then echo "$f" >> out{i}; fi; done' for i in range(20)
    ),
}


def _median_us(fn: Callable[[], object], repeat: int, batch: int = 50) -> float:
    times = []
    for _ in range(max(1, repeat // batch)):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        times.append((time.perf_counter() - start) / batch)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args()
    parser = _parser()
    print("| line | bytes | tree-sitter parse us | `parse` whole us | shlex.split us |")
    print("|---|---|---|---|---|")
    for label, line in LINES.items():
        data = line.encode()
        parse(line)  # warm
        ts = _median_us(functools.partial(parser.parse, data), args.repeat)
        whole = _median_us(functools.partial(parse, line), args.repeat)
        try:
            lex = f"{_median_us(functools.partial(shlex.split, line), args.repeat):.1f}"
        except ValueError:
            lex = "error"
        print(f"| {label} | {len(data)} | {ts:.1f} | {whole:.1f} | {lex} |")


if __name__ == "__main__":
    main()
