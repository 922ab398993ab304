"""coordinator/http1.py: the package's one HTTP/1.1 answer parser, fed bytes as a transport receives them."""

from __future__ import annotations

import re

import pytest

from coordinator.http1 import MAX_HEAD_BYTES, AnswerParser
from tests import REPO_ROOT

BODY = b'{"path": "a.py", "version": 3}'
PLAIN = (
    b"HTTP/1.1 200 OK\r\ndate: Thu, 03 Dec 2026 13:00:00 GMT\r\nserver: uvicorn\r\n"
    b"Content-Type: application/json\r\ncontent-length: %d\r\n\r\n" % len(BODY)
) + BODY
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    b"5;ext=1\r\n" + BODY[:5] + b"\r\n" + b"%x\r\n" % (len(BODY) - 5) + BODY[5:] + b"\r\n0\r\nx-trailer: 1\r\n\r\n"
)


def feed_in_pieces(data: bytes, cut: int, method: str = "POST") -> tuple[int, dict[str, str], bytes, bool]:
    """The answer fed as two receives, split at `cut`, then the close if it is still incomplete."""
    parser = AnswerParser(method)
    for piece in (data[:cut], data[cut:]):
        if piece:
            answer = parser.feed(piece)
            if answer is not None:
                return answer
    return parser.feed(b"")


@pytest.mark.parametrize("data", [PLAIN, CHUNKED], ids=["content-length", "chunked"])
def test_an_answer_reads_the_same_however_it_is_split(data: bytes) -> None:
    for cut in range(len(data) + 1):
        status, headers, body, will_close = feed_in_pieces(data, cut)
        assert (status, body, will_close) == (200, BODY, False), cut
    assert headers["content-type"] == "application/json"  # names lower-cased, values kept


def test_interim_answers_are_skipped_and_the_framing_rules_hold() -> None:
    status, headers, body, _ = AnswerParser().feed(b"HTTP/1.1 100 Continue\r\n\r\n" + PLAIN)
    assert (status, body, headers["server"]) == (200, BODY, "uvicorn")
    assert AnswerParser("HEAD").feed(PLAIN.split(b"\r\n\r\n")[0] + b"\r\n\r\n")[2] == b""
    assert AnswerParser().feed(b"HTTP/1.1 204 No Content\r\n\r\n") == (204, {}, b"", False)
    closing = AnswerParser()
    assert closing.feed(b"HTTP/1.0 200 OK\r\n\r\npart one, ") is None  # framed by the close
    assert closing.feed(b"part two") is None
    assert closing.feed(b"") == (200, {}, b"part one, part two", True)
    assert AnswerParser().feed(PLAIN.replace(b"server:", b"connection: close\r\nserver:"))[3] is True
    assert AnswerParser().feed(PLAIN + b"HTTP/1.1 200")[3] is True  # bytes beyond the answer: not reusable


@pytest.mark.parametrize(
    ("received", "why"),
    [
        (b"", "closed before an answer"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n", "closed in the answer's head"),
        (PLAIN[:-3], "cut short"),
        (CHUNKED[:-10], "cut short"),
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP answer"),
        (b"HTTP/1.1 abc\r\n\r\n", "not an HTTP answer"),
    ],
)
def test_a_malformed_or_cut_answer_is_refused(received: bytes, why: str) -> None:
    parser = AnswerParser()
    with pytest.raises(ValueError, match=why):
        if parser.feed(received) is None:
            parser.feed(b"")


def test_a_head_without_end_is_refused_once_too_long() -> None:
    parser = AnswerParser()
    assert parser.feed(b"HTTP/1.1 200 OK\r\n") is None
    with pytest.raises(ValueError, match="too long"):
        parser.feed(b"x-filler: " + b"y" * MAX_HEAD_BYTES)


def test_the_package_reads_answers_with_this_parser_only() -> None:
    """Every module that reads an HTTP answer looks at its transfer-encoding: only the parser does, and the
    command hook's client (cli/fasthook.py), which must start without importing the package."""
    readers = {
        str(path.relative_to(REPO_ROOT))
        for path in (REPO_ROOT / "coordinator").rglob("*.py")
        if re.search(r"transfer-encoding", path.read_text(), re.I)
    }
    assert readers == {"coordinator/http1.py", "coordinator/cli/fasthook.py"}
