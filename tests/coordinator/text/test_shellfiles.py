"""Which files a shell command writes, and which one it prints whole (coordinator/text/shellfiles.py)."""

from __future__ import annotations

import pytest

from coordinator.text.shellfiles import Printed, Target, printed_lines, write_targets


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
    [
        ("cat a.py", Printed("a.py", 1, None)),
        ("cat f 2>/dev/null", Printed("f", 1, None)),
        ("cat -n a.py", Printed("a.py", 1, None, numbered=True)),
        ("nl -ba a.py", Printed("a.py", 1, None, numbered=True)),
        ("bash -lc 'cat a.py'", Printed("a.py", 1, None)),
        ("head -n 3 a.py", Printed("a.py", 1, 3)),
        ("head -5 a.py", Printed("a.py", 1, 5)),
        ("head a.py", Printed("a.py", 1, 10)),
        ("tail -n 4 a.py", Printed("a.py", 1, 4, from_end=True)),
        ("tail -2 a.py", Printed("a.py", 1, 2, from_end=True)),
        ("tail a.py", Printed("a.py", 1, 10, from_end=True)),
        ("tail -n +3 a.py", Printed("a.py", 3, None)),
        ("sed -n '2,4p' a.py", Printed("a.py", 2, 3)),
        ("sed -n 3p a.py", Printed("a.py", 3, 1)),
        ("nl -ba a.py | sed -n '10,30p'", Printed("a.py", 10, 21, numbered=True)),
        ("cat -n a.py | head -n 5", Printed("a.py", 1, 5, numbered=True)),
        ("cat a.py | tail -3", Printed("a.py", 1, 3, from_end=True)),
    ],
)
def test_printed_lines(command: str, expected: Printed) -> None:
    assert printed_lines(command) == expected


@pytest.mark.parametrize(
    "command",
    ["cat a b", "cat a > b", "cat a && rm a", "cat f | grep x", "cd src && cat m.py; ls", "cat $F", "grep x f",
     "sed -i 's/a/b/' f", "sed -n '4,2p' a.py", "sed -n 2,4p a.py b.py", "head -n x f", "head -n 0 f",
     "head -n 3 a.py | tail -1", "nl -ba f | grep x", "cat 'unclosed", "tail -f a.py", "head -n +3 a.py"],
)  # fmt: skip
def test_other_commands_print_no_file(command: str) -> None:
    assert printed_lines(command) is None


def test_numbered_output_gives_the_files_own_lines() -> None:
    shown = printed_lines("nl -ba a.py")
    assert (
        shown is not None and shown.text("     1\tdef main():\n     2\t    return 1\n") == "def main():\n    return 1\n"
    )
    assert Printed("a.py", 1, None).text("     1\tx\n") == "     1\tx\n"  # a plain cat's output is the file
