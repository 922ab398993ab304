"""Which files a shell command writes, and which one it prints whole (coordinator/text/shellfiles.py)."""

from __future__ import annotations

import pytest

from coordinator.text.shellfiles import Target, printed_file, write_targets


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cat > a.txt <<'EOF'\nx\nEOF", [Target("a.txt", "whole", "cat")]),
        ("echo hi > out.txt", [Target("out.txt", "whole", "echo")]),
        ("echo hi >> log.txt", [Target("log.txt", "in_place", "echo")]),
        ("sed -i 's/a/b/' f.py g.py", [Target("f.py", "in_place", "sed"), Target("g.py", "in_place", "sed")]),
        ("sed -i -e 's/a/b/' f.py", [Target("f.py", "in_place", "sed")]),
        ("perl -pi -e 's/a/b/' q.txt", [Target("q.txt", "in_place", "perl")]),
        ("cd src && printf x | tee out.txt", [Target("src/out.txt", "whole", "tee")]),
        ("tee -a log < in", [Target("log", "in_place", "tee")]),
        ("cp a b", [Target("b", "whole", "cp")]),
        ("mv x y", [Target("y", "whole", "mv"), Target("x", "remove", "mv")]),
        ("rm -f z", [Target("z", "remove", "rm")]),
        (
            "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: src/m.py\n@@\n-a\n+b\n*** Add File: n.py\n+x\n"
            "*** End Patch\nEOF",
            [Target("src/m.py", "in_place", "apply_patch"), Target("n.py", "whole", "apply_patch")],
        ),
        ("bash -lc 'echo x > f.txt'", [Target("f.txt", "whole", "echo")]),
        ("ls 2>/dev/null > /dev/null", []),
        (
            "python3 - <<'EOF'\nimport re\np = 'counter.txt'\n"
            "n = int(re.search(r'total = (\\d+)', open(p).read())[1])\n"
            "open(p, 'w').write(f'total = {n + 1}\\n')\nEOF",
            [Target("counter.txt", "script", "python3"), Target("w", "script", "python3")],
        ),
        (
            "cd src && python3 -c \"open('a.txt', 'w')\"",
            [Target("src/a.txt", "script", "python3"), Target("src/w", "script", "python3")],
        ),
        ("python3 tool.py out.txt", []),
        ("echo $X > $F", []),  # known only at run time: the tree watcher sees it
        (
            "python3 - <<'EOF'\nopen('f', 'w').write('x')\nEOF",
            [Target("f", "script", "python3"), Target("w", "script", "python3"), Target("x", "script", "python3")],
        ),
        ("cat f.txt | grep x", []),
    ],
)
def test_write_targets(command: str, expected: list[Target]) -> None:
    assert write_targets(command) == expected


@pytest.mark.parametrize(
    ("command", "expected"),
    [("cat shared.txt", "shared.txt"), ("cat a b", None), ("cat f | grep x", None), ("cat -n f", None),
     ("cat f 2>/dev/null", "f"), ("cat f > g", None), ("cd src && cat m.py", None), ("cat $F", None)],
)  # fmt: skip
def test_printed_file(command: str, expected: str | None) -> None:
    assert printed_file(command) == expected


@pytest.mark.parametrize(
    ("command", "expected"),
    [("cat a.py", ("a.py", 1, None)), ("head -n 3 a.py", ("a.py", 1, 3)), ("head -5 a.py", ("a.py", 1, 5)),
     ("sed -n '2,4p' a.py", ("a.py", 2, 3)), ("sed -n 3p a.py", ("a.py", 3, 1)), ("head a.py", None),
     ("sed -n '4,2p' a.py", None), ("sed -n 2,4p a.py b.py", None), ("head -n 3 a.py | tail -1", None)],
)  # fmt: skip
def test_printed_lines(command: str, expected: tuple[str, int, int | None] | None) -> None:
    from coordinator.text.shellfiles import printed_lines

    assert printed_lines(command) == expected
