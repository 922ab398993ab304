"""The omission-marker rule (coordinator.text.placeholders): markers that replace code are refused, everything
else (Ellipsis, ordinary comments, markers already in the file, markers that replace nothing) is not."""

from __future__ import annotations

import pytest

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.text.placeholders import check_placeholder, find_marker, marker_key

MARKERS = [
    "// ... rest of code ...",
    "# existing code here",
    "(rest of methods ...)",
    "    # ... existing code ...",
    "/* rest of the file unchanged */",
    "<!-- ... remaining markup ... -->",
    "{/* ... other components ... */}",
    "# Rest of the implementation remains unchanged",
    "// ...existing code...",
    "-- rest of the queries omitted for brevity",
    "[... remaining tests unchanged ...]",
    "… rest …",
    "# ... same as before ...",
    " * rest of the methods here",
    "; remaining code unchanged",
]

NOT_MARKERS = [
    "...",
    "    ...",
    "x = ...",
    "def f(): ...",
    "# ...",
    "/* ... */",
    "# same as above",
    "// Other cases",
    "# other methods",
    "// existing users are migrated below",
    "# parse the rest of the arguments",
    "# these can go unchanged",
    "# TODO: remaining tests",
    "rest of code",  # a bare line without brackets or an ellipsis (not a comment): code, if odd code
    "print('rest of the code')",
    "    pass  # rest",
    "return rest_of_code(...)",
    "",
    "# " + "rest of code " * 5,  # too many words for a marker
]


@pytest.mark.parametrize("line", MARKERS)
def test_markers_are_recognised(line: str) -> None:
    assert marker_key(line) is not None


@pytest.mark.parametrize("line", NOT_MARKERS)
def test_code_and_ordinary_comments_are_not_markers(line: str) -> None:
    assert marker_key(line) is None


def test_marker_key_ignores_leader_case_and_wrappers() -> None:
    assert marker_key("// ... Rest of code ...") == marker_key("# rest of code ...") == "rest of code"
    assert marker_key("(existing code here)") == marker_key("# Existing code here") == "existing code here"


OLD = "def f():\n    a = 1\n    b = 2\n    return a + b\n"


def test_a_marker_that_replaces_code_is_refused_with_guidance() -> None:
    new = "def f():\n    # ... rest of code ...\n    return 0\n"
    with pytest.raises(CoordinatorError) as info:
        check_placeholder(OLD, OLD, new)
    err = info.value
    assert err.code is ErrorCode.PLACEHOLDER
    assert err.details == {"line": 2, "marker": "# ... rest of code ..."}
    assert "new_string line 2 is an omission marker ('# ... rest of code ...')" in err.message
    assert "Write the full text, with every line you mean to keep, instead of a placeholder" in err.message
    with pytest.raises(CoordinatorError) as info:
        check_placeholder(OLD, OLD, new, what="content")
    assert info.value.message.startswith("content line 2 ")


def test_a_marker_already_in_the_file_is_not_new() -> None:
    old_file = OLD + "# ... rest of code ...\n"
    new = "def f():\n    # ... rest of code ...\n    return 0\n"
    assert find_marker(old_file, OLD, new) is None
    assert find_marker(OLD, OLD, new) is not None


def test_a_marker_that_replaces_nothing_is_allowed() -> None:
    """Every line of the replaced text is still there: the marker-like comment only adds a line."""
    new = "def f():\n    a = 1\n    b = 2\n    # existing code here\n    return a + b\n"
    assert find_marker(OLD, OLD, new) is None
    assert find_marker("", "", "# existing code here\n") is None  # a new file: no code to lose


def test_the_first_new_marker_is_reported() -> None:
    new = "# rest of code unchanged\nx\n# ... remaining tests ...\n"
    found = find_marker("# rest of code unchanged\n" + OLD, OLD, new)
    assert found is not None and found.line == 3 and found.text == "# ... remaining tests ..."


def test_blank_replaced_lines_do_not_count_as_lost_code() -> None:
    assert find_marker("a\n\n\nb\n", "\n\n", "# ... rest of code ...\n") is None
    assert find_marker("a\nx = 1\nb\n", "x = 1\n", "# ... rest of code ...\n") is not None


def test_the_corpus_scan_counts_marker_lines_and_refused_history_hunks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    from tests.scripts import load_tool

    placeholder_scan = load_tool("placeholder_scan")

    src = tmp_path / "a.py"
    src.write_text(OLD)
    assert placeholder_scan.scan_lines([src]) == (1, 4, [])
    src.write_text(OLD + "# ... rest of code ...\n")
    files, lines, hits = placeholder_scan.scan_lines([src, tmp_path / "missing.py"])
    assert (files, lines) == (1, 5) and hits == [f"{src}:5: # ... rest of code ..."]

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    src.write_text(OLD)
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "one", "--allow-empty")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "two")
    src.write_text(OLD.replace("    b = 2\n", "    b = 3\n"))
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "honest")
    src.write_text("def f():\n    # ... existing code ...\n")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "placeholder")
    checked, refused = placeholder_scan.scan_history(tmp_path)
    assert checked == 2 and len(refused) == 1 and refused[0].endswith("a.py: # ... existing code ...")


@pytest.mark.parametrize("line", [*MARKERS, *NOT_MARKERS, "x = 1", "  \t", "", "return f(a, b)", "«rest»"])
def test_the_quick_skip_never_skips_a_marker(line: str) -> None:
    from coordinator.text.placeholders import _may_be_marker

    assert _may_be_marker(line) or marker_key(line) is None
    if line in MARKERS:
        assert _may_be_marker(line)


def test_the_quick_skip_never_skips_a_marker_of_any_text() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from coordinator.text.placeholders import _LEADERS, _WRAPPERS, _may_be_marker

    pieces = st.sampled_from([*_LEADERS, *_WRAPPERS, *_WRAPPERS.values(), "...", "…", " ", "\t", "rest", "of", "code"])
    words = st.sampled_from(["existing", "code", "here", "unchanged", "remaining", "rest", "the", "x", "=", "1"])

    @settings(max_examples=400, deadline=None)
    @given(st.lists(st.one_of(pieces, words), max_size=8).map(" ".join))
    def check(line: str) -> None:
        assert _may_be_marker(line) or marker_key(line) is None

    check()
