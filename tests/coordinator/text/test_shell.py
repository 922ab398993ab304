"""The one shell parser (coordinator.text.shell): every simple command of a line, as a shell would run it.

Tables of the shapes agents emit (Codex's `bash -lc "cd repo && apply_patch <<'EOF' ..."`, Claude Code's
`cd X && git add -A && git commit -m ...`, heredocs, sed -i, tee, redirections), the wrappers, the doubts, and
properties: literal words quoted any way come back as they were (checked against bash itself), lines joined
by any separator come back command by command, a `bash -lc` of a line gives that line's commands, and no
input makes the parser raise."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.text.shell import Script, SimpleCommand, parse, simple_commands


def argvs(line: str) -> list[list[str]]:
    return [[w.text for w in c.argv] for c in simple_commands(line)]


def kinds(script: Script) -> set[str]:
    return {d.kind for d in script.doubts}


# ---- where commands are found ---------------------------------------------------------------------------

FOUND = [
    ("git status", [["git", "status"]]),
    ("a; b", [["a"], ["b"]]),
    ("a && b || c", [["a"], ["b"], ["c"]]),
    ("a\nb\n\nc", [["a"], ["b"], ["c"]]),
    ("a & b", [["a"], ["b"]]),
    ("a | b |& c", [["a"], ["b"], ["c"]]),
    ("(a; b)", [["a"], ["b"]]),
    ("{ a; b; }", [["a"], ["b"]]),
    ("if a; then b; elif c; then d; else e; fi", [["a"], ["b"], ["c"], ["d"], ["e"]]),
    ("while a; do b; done", [["a"], ["b"]]),
    ("until a; do b; done", [["a"], ["b"]]),
    ("for f in x y; do b $f; done", [["b", "$f"]]),
    ("for f in $(ls); do b; done", [["ls"], ["b"]]),
    ("case $x in a) b ;; *) c ;; esac", [["b"], ["c"]]),
    ("! a", [["a"]]),
    ("echo $(git stash)", [["git", "stash"], ["echo", "$(git stash)"]]),
    ("echo `git stash`", [["git", "stash"], ["echo", "`git stash`"]]),
    ('echo "x $(a "$(b)")"', [["b"], ["a", "$(b)"], ["echo", 'x $(a "$(b)")']]),
    ("diff <(a) >(b)", [["a"], ["b"], ["diff", "<(a)", ">(b)"]]),
    ("x=$(git stash)", [["git", "stash"]]),
    ("[[ -n $(git stash) ]]", [["git", "stash"]]),
    ("echo ${x:-$(a)}", [["a"], ["echo", "${x:-$(a)}"]]),
    ("f() { git stash; }; f", [["git", "stash"], ["f"]]),
    ("export A=1", [["export", "A=1"]]),
    ("cat < in > out", [["cat"]]),
    ("> out", [[]]),
]


@pytest.mark.parametrize(("line", "expected"), FOUND, ids=[f[0] for f in FOUND])
def test_every_simple_command_is_found(line: str, expected: list[list[str]]) -> None:
    assert argvs(line) == expected


WRAPPED = [
    ("env git stash", ("env",)),
    ("env -i FOO=1 BAR=2 git stash", ("env -i FOO=1 BAR=2",)),
    ("/usr/bin/env -u X git stash", ("/usr/bin/env -u X",)),
    ("command git stash", ("command",)),
    ("time git stash", ("time",)),
    ("time -p git stash", ("time -p",)),
    ("sudo git stash", ("sudo",)),
    ("sudo -u bob -E git stash", ("sudo -u bob -E",)),
    ("sudo --user=bob git stash", ("sudo --user=bob",)),
    ("nohup git stash", ("nohup",)),
    ("exec git stash", ("exec",)),
    ("xargs git stash", ("xargs",)),
    ("xargs -0 -n 1 -I{} git stash", ("xargs -0 -n 1 -I{}",)),
    ("nice git stash", ("nice",)),
    ("nice -n 5 git stash", ("nice -n 5",)),
    ("timeout 10 git stash", ("timeout 10",)),
    ("timeout -s KILL 5s git stash", ("timeout -s KILL 5s",)),
    ("stdbuf -oL git stash", ("stdbuf -oL",)),
    ("env FOO=1 sudo -u x nohup nice git stash", ("env FOO=1", "sudo -u x", "nohup", "nice")),
    ("sh -c 'git stash'", ("sh -c",)),
    ('bash -c "git stash"', ("bash -c",)),
    ("bash -lc 'git stash'", ("bash -lc",)),
    ("bash -e -o pipefail -c 'git stash'", ("bash -e -o pipefail -c",)),
    ("/bin/zsh -c 'git stash'", ("/bin/zsh -c",)),
    ("sudo bash -lc 'env git stash'", ("sudo", "bash -lc", "env")),
    ("bash -lc \"bash -c 'git stash'\"", ("bash -lc", "bash -c")),
    ("bash <<'EOF'\ngit stash\nEOF", ("bash",)),
    ("bash <<< 'git stash'", ("bash",)),
    ("eval 'git stash'", ("eval",)),
    ("find . -exec git stash \\;", ("find -exec",)),
    ("watch git stash", ("watch",)),  # watch joins its words and runs them by sh -c
    ("watch -n 1 'git stash'", ("watch -n 1",)),
    ("watch -x git stash", ("watch -x",)),
]


@pytest.mark.parametrize(("line", "via"), WRAPPED, ids=[w[0] for w in WRAPPED])
def test_wrappers_are_taken_off(line: str, via: tuple[str, ...]) -> None:
    found = [c for c in simple_commands(line) if c.name == "git"]
    assert [[w.text for w in c.argv] for c in found] == [["git", "stash"]]
    assert found[0].via == via


@pytest.mark.parametrize("line", ["command -v git", "command -V git", "sudo -l", "env", "nohup"])
def test_a_wrapper_that_runs_nothing_stays_the_command(line: str) -> None:
    assert argvs(line) == [line.split()]


def test_env_and_sudo_assignments_reach_the_command() -> None:
    (c,) = simple_commands("A=1 env B=2 sudo C=3 git stash")
    assert [(n, w.text) for n, w in c.assignments] == [("A", "1"), ("B", "2"), ("C", "3")]


# ---- the shapes agents emit ----------------------------------------------------------------------------

CODEX = """bash -lc "cd repo && apply_patch <<'EOF'
*** Begin Patch
*** Update File: src/app.py
@@
-x = \\$1
+x = 2
*** End Patch
EOF" """


def test_codex_apply_patch_in_bash_lc() -> None:
    cd, patch = simple_commands(CODEX)
    assert [w.text for w in cd.argv] == ["cd", "repo"] and cd.cwd == "." and cd.redirects == ()
    assert [w.text for w in patch.argv] == ["apply_patch"]
    assert patch.cwd == "repo" and patch.via == ("bash -lc",)
    (heredoc,) = patch.redirects
    assert heredoc.op == "<<" and heredoc.heredoc_quoted and heredoc.heredoc_delimiter == "EOF"
    assert heredoc.heredoc == "*** Begin Patch\n*** Update File: src/app.py\n@@\n-x = $1\n+x = 2\n*** End Patch\n"
    assert heredoc.target is None and not heredoc.writes_file


def test_claude_code_cd_then_git() -> None:
    line = 'cd /work/repo/sub && git add -A && git commit -m "Fix: the parser\'s $HOME (see #3)"'
    cd, add, commit = simple_commands(line)
    assert add.cwd == commit.cwd == "/work/repo/sub" and cd.cwd == "."
    assert commit.args == ("commit", "-m", "Fix: the parser's $HOME (see #3)")
    assert commit.argv[3].expands and not add.argv[2].expands


def test_heredoc_into_a_file() -> None:
    (cat,) = simple_commands("cat > src/a.py <<'EOF'\nprint(\"$x\")\n\tindented\nEOF\n")
    write, heredoc = cat.redirects
    assert (write.op, write.target and write.target.text, write.writes_file) == (">", "src/a.py", True)
    assert heredoc.heredoc == 'print("$x")\n\tindented\n' and heredoc.heredoc_quoted


def test_heredoc_unquoted_and_tab_stripped() -> None:
    (cat,) = simple_commands("cat <<-END >>log\n\tline $(date)\n\t\tdeep\n\tEND\necho after")[1:2] or [None]
    script = parse("cat <<-END >>log\n\tline $(date)\n\t\tdeep\n\tEND\necho after")
    assert [c.name for c in script.commands] == ["date", "cat", "echo"]
    heredoc, append = script.commands[1].redirects
    assert heredoc.heredoc == "line $(date)\ndeep\n" and not heredoc.heredoc_quoted and heredoc.op == "<<-"
    assert append.op == ">>" and append.writes_file and append.target is not None and append.target.text == "log"
    assert cat is not None


@pytest.mark.parametrize(
    ("line", "names"),
    [
        ("cat <<EOF | bash\ngit stash\nEOF", ["cat", "bash"]),
        ("cat > notes.md <<'EOF' && git add -A\nhi\nEOF", ["cat", "git"]),
        ("cat <<EOF && git stash || git add -A\nhi\nEOF", ["cat", "git", "git"]),
        ('git status && cat <<EOF | sh -c "git add -A"\nhi\nEOF', ["git", "cat", "git"]),
        ("python3 - <<'EOF' | tee out.log\nprint(1)\nEOF\nrm -f x", ["python3", "tee", "rm"]),
    ],
)
def test_commands_after_a_heredocs_start_are_seen(line: str, names: list[str]) -> None:
    """tree-sitter-bash hangs the rest of a here-document's first line on the here-document's node: those
    commands were dropped (`cat > f <<EOF && git add -A` gave only `cat`)."""
    script = parse(line)
    assert [c.name for c in script.commands] == names
    (fed,) = [c for c in script.commands if any(r.op == "<<" for r in c.redirects)]
    assert fed.name in ("cat", "python3")  # the here-document stays its command's, not the ones after it
    if "| bash" in line:
        assert any(d.kind == "input" for d in script.commands[1].doubts)


def test_words_after_a_heredocs_start_the_grammar_misreads_are_named() -> None:
    script = parse("cat <<EOF; git stash\nhi\nEOF\n")
    assert any("`git stash` after a here-document" in d.detail for d in script.doubts)


def test_empty_heredoc() -> None:
    (cat,) = simple_commands("cat > f <<EOF\nEOF")
    assert cat.redirects[1].heredoc == ""


@pytest.mark.parametrize(
    ("line", "ops"),
    [
        ("a > f", [(">", "f", None, True)]),
        ("a >> f", [(">>", "f", None, True)]),
        ("a >| f", [(">|", "f", None, True)]),
        ("a &> f", [("&>", "f", None, True)]),
        ("a &>> f", [("&>>", "f", None, True)]),
        ("a 2> err", [(">", "err", 2, True)]),
        ("a 2>&1", [(">&", "1", 2, False)]),
        ("a >&f", [(">&", "f", None, True)]),
        ("a < in", [("<", "in", None, False)]),
        ("a > 'my file'", [(">", "my file", None, True)]),
        ("a > f 2>&1", [(">", "f", None, True), (">&", "1", 2, False)]),
        ("a <<< 'text'", [("<<<", "text", None, False)]),
    ],
)
def test_redirections(line: str, ops: list[tuple[str, str, int | None, bool]]) -> None:
    (c,) = simple_commands(line)
    assert [(r.op, r.target.text if r.target else None, r.fd, r.writes_file) for r in c.redirects] == ops


def test_redirection_after_a_list_is_the_last_commands() -> None:
    a, b, c = simple_commands("a && b > f; c")
    assert a.redirects == () and [r.target.text for r in b.redirects if r.target] == ["f"] and c.redirects == ()
    x, y = simple_commands("x | y 2>&1 >> log")
    assert x.redirects == () and [r.op for r in y.redirects] == [">&", ">>"]


def test_redirection_of_a_group_reaches_each_command() -> None:
    a, b = simple_commands("{ a; b > own; } > all")
    assert [r.target.text for r in a.redirects if r.target] == ["all"]
    assert [r.target.text for r in b.redirects if r.target] == ["own", "all"]


def test_redirection_of_a_shell_string_reaches_its_commands() -> None:
    (a,) = simple_commands("bash -c 'a' > out")
    assert [r.target.text for r in a.redirects if r.target] == ["out"]


def test_sed_tee_and_stray_words() -> None:
    sed, tee = simple_commands("sed -i.bak -e 's/a/b/' src/x.py | tee -a log.txt")
    assert sed.args == ("-i.bak", "-e", "s/a/b/", "src/x.py") and tee.args == ("-a", "log.txt")
    (echo,) = simple_commands("echo a >f b")
    assert echo.args == ("a", "b") and [r.target.text for r in echo.redirects if r.target] == ["f"]


# ---- the folder a literal cd leaves ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "cwds"),
    [
        ("a", ["."]),
        ("cd x && a", [".", "x"]),
        ("cd x; cd ../y/./z; a", [".", "x", "y/z"]),
        ("cd /abs/p && a", [".", "/abs/p"]),
        ("cd 'my dir' && a", [".", "my dir"]),
        ("cd -P x && a", [".", "x"]),
        ("(cd x; a); b", [".", "x", "."]),
        ("{ cd x; a; }; b", [".", "x", "x"]),
        ("cd x | a; b", [".", ".", "."]),
        ("echo $(cd x; a); b", [".", "x", ".", "."]),
        ("bash -c 'cd x; a'; b", [".", "x", "."]),
        ("env -C sub a; b", ["sub", "."]),
        ("cd $HOME && a", [".", None]),
        ("cd && a", [".", None]),
        ("cd - && a", [".", None]),
        ("cd ~/x && a", [".", None]),
        ("cd $X; cd /abs; a", [".", None, "/abs"]),
        ("pushd x && a && popd && b", [".", "x", "x", None]),
    ],
)
def test_cwd_follows_literal_cd(line: str, cwds: list[str | None]) -> None:
    assert [c.cwd for c in simple_commands(line)] == cwds


# ---- words ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "text", "glob", "expands"),
    [
        ("plain", "plain", False, False),
        ("'single $x'", "single $x", False, False),
        ('"double \\"q\\" \\$x \\\\"', 'double "q" $x \\', False, False),
        ('"line\none"', "line\none", False, False),
        ("a\\ b", "a b", False, False),
        ("$'tab\\there\\n'", "tab\there\n", False, False),
        ("pre'mid'\"post\"", "premidpost", False, False),
        ("*.py", "*.py", True, False),
        ("src/[ab].py", "src/[ab].py", True, False),
        ("f?.py", "f?.py", True, False),
        ("'*.py'", "*.py", False, False),
        ("\\*.py", "*.py", False, False),
        ("{a,b}.py", "{a,b}.py", True, False),
        ("{1..3}", "{1..3}", True, False),
        ("$x", "$x", False, True),
        ("${x}y", "${x}y", False, True),
        ('"$x"', "$x", False, True),
        ("$(a)", "$(a)", False, True),
        ("~/x", "~/x", False, True),
        ("'~/x'", "~/x", False, False),
        ("$((1+2))", "$((1+2))", False, True),
        (":/", ":/", False, False),
        ("':(top)x.py'", ":(top)x.py", False, False),
    ],
)
def test_words(raw: str, text: str, glob: bool, expands: bool) -> None:
    c = simple_commands(f"cmd {raw}")[-1]
    (w,) = c.argv[1:]
    assert (w.text, w.glob, w.expands, w.literal) == (text, glob, expands, not (glob or expands))
    assert w.raw == raw


BASH = shutil.which("bash")
TRICKY = ["a b", "it's", 'say "hi"', "back\\slash", "$HOME", "`x`", "tab\there", "new\nline", "*", "-rf", "é ü", ""]


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_literal_words_match_bash_itself() -> None:
    """Words quoted every way a program quotes them mean to the parser what they mean to bash."""
    quotings = [
        shlex.quote,
        lambda s: '"' + "".join("\\" + ch if ch in '"\\$`' else ch for ch in s) + '"',
        lambda s: "$'" + "".join(f"\\x{ord(ch):02x}" if ord(ch) < 128 else ch for ch in s) + "'",
    ]
    for quote in quotings:
        line = "printf '%s\\0' " + " ".join(quote(w) for w in TRICKY)
        real = subprocess.run([BASH, "-c", line], capture_output=True, check=True).stdout.decode().split("\0")[:-1]
        (c,) = simple_commands(line)
        assert real == TRICKY
        assert [w.text for w in c.argv[2:]] == real, line
        assert all(w.literal for w in c.argv[2:])


WORD = st.text(st.characters(codec="utf-8", exclude_characters="\0", exclude_categories=("Cs",)), max_size=12)
NAME = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True).filter(
    lambda n: (
        n
        not in {"if", "then", "else", "elif", "fi", "do", "done", "case", "esac", "for", "while", "until"}
        | {"in", "function", "select", "time", "coproc", "eval", "source", "cd", "pushd", "popd", "exec"}
        | {"env", "sudo", "doas", "command", "builtin", "nohup", "nice", "ionice", "stdbuf", "timeout", "xargs"}
        | {"find", "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "posh", "export", "declare", "local"}
        | {"readonly", "typeset", "unset", "watch"}
    )
)
COMMAND = st.tuples(NAME, st.lists(WORD, max_size=4))


@settings(max_examples=300, deadline=None)
@given(st.lists(COMMAND, min_size=1, max_size=5), st.lists(st.sampled_from([";", "&&", "||", "|", "\n", "&"])))
def test_joined_commands_come_back_one_by_one(commands: list[tuple[str, list[str]]], seps: list[str]) -> None:
    line = ""
    for i, (name, args) in enumerate(commands):
        sep = seps[i % len(seps)] if seps else ";"
        line += (f" {sep} " if i else "") + " ".join([name, *(shlex.quote(a) for a in args)])
    script = parse(line)
    assert [[w.text for w in c.argv] for c in script.commands] == [[n, *a] for n, a in commands]
    assert all(w.literal for c in script.commands for w in c.argv)
    assert script.certain
    wrapped = parse(f"bash -lc {shlex.quote(line)}")
    assert [c.argv for c in wrapped.commands] == [c.argv for c in script.commands]
    assert all(c.via == ("bash -lc",) for c in wrapped.commands)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=80))
def test_any_text_parses_without_raising(text: str) -> None:
    script = parse(text)
    assert isinstance(script.commands, tuple)
    for c in script.commands:
        assert isinstance(c, SimpleCommand)


@settings(max_examples=200, deadline=None)
@given(st.text(st.sampled_from("$(`'\"{}<>;&|\\\n ab=-cd"), max_size=60))
def test_shell_punctuation_parses_without_raising(text: str) -> None:
    parse(text)
    parse(f"bash -lc {shlex.quote(text)}")


# ---- what the parser cannot judge ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("$GIT stash", "dynamic_name"),
        ("$(which git) stash", "dynamic_name"),
        ("eval 'git stash'", "eval"),
        ("eval $CMD", "dynamic_string"),
        ('bash -c "$CMD"', "dynamic_string"),
        ("bash deploy.sh", "script"),
        ("sh -e ./x.sh", "script"),
        ("source env.sh", "script"),
        (". env.sh", "script"),
        ("./run.sh", "script"),
        ("scripts/release", "script"),
        ("curl x | bash", "input"),
        ("ls | xargs rm", "input"),
        ("find . -exec rm {} +", "input"),
        ("cd $DIR && ls", "cd"),
        ("a &&& b", "parse"),
        ("echo 'unterminated", "parse"),
        ("if a; then b", "parse"),
    ],
)
def test_doubts_are_named(line: str, kind: str) -> None:
    script = parse(line)
    assert kind in kinds(script) and not script.certain
    assert all(d.detail for d in script.doubts)


@pytest.mark.parametrize("line", ["git status", "cd x && git add a.py", "/usr/bin/git log", "bash -lc 'ls -la'"])
def test_plain_lines_are_certain(line: str) -> None:
    assert parse(line).certain


def test_nesting_is_bounded() -> None:
    line = "git stash"
    for _ in range(12):
        line = f"bash -c {shlex.quote(line)}"
    assert "depth" in kinds(parse(line))
    deep = "$(" * 400 + "a" + ")" * 400
    parse(deep)  # no RecursionError escapes


def test_parse_error_still_reads_the_rest() -> None:
    script = parse("git status; ( ; git stash")
    assert "parse" in kinds(script)
    assert ["git", "stash"] in [[w.text for w in c.argv] for c in script.commands]


# ---- tree-sitter-bash's own faults, worked around ------------------------------------------------------


def test_a_newline_after_a_pipeline_ends_the_command() -> None:
    """tree-sitter-bash 0.25 joins `c` and `d` into one command in `a | b | c <newline> d && e`, silently."""
    assert argvs("cat x | grep y | wc -l\ngit stash && echo done") == [
        ["cat", "x"],
        ["grep", "y"],
        ["wc", "-l"],
        ["git", "stash"],
        ["echo", "done"],
    ]
    assert argvs("a b \\\n c | d") == [["a", "b", "c"], ["d"]]  # a line continuation is not a newline


CRASHERS = ["{\U0009cbbc", "x {\U0010ffff", "a{\U000e0001", "git commit -m '{fix} 🎉 \U00031860'"]


@pytest.mark.parametrize("line", CRASHERS)
def test_characters_that_crash_tree_sitter_bash(line: str) -> None:
    """`{` then a 4-byte UTF-8 character makes tree-sitter-bash 0.25 read out of bounds (SIGSEGV on Linux,
    tree-sitter/tree-sitter-bash#337): run in a child process, so that a regression fails the test, not the
    test run; the characters come back unchanged in the answer."""
    code = (
        "import sys\nfrom coordinator.text.shell import parse\n"
        "line = sys.stdin.read()\n"
        "for _ in range(30):\n    s = parse(line)\n"
        "print('|'.join(w.text for c in s.commands for w in c.argv))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], input=line, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-500:]
    if line.startswith("git"):
        assert done.stdout.strip() == "git|commit|-m|{fix} 🎉 \U00031860"
