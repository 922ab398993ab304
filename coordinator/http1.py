"""The one HTTP/1.1 answer parser of the package, without I/O: a transport feeds it the bytes it receives.

    parser = AnswerParser(method)
    while (answer := parser.feed(sock.recv(RECV_BYTES))) is None:
        pass                      # an empty `feed(b"")` means the connection closed
    status, headers, body, will_close = answer

Every client reads its answers through it: the keep-alive transports (client/transport.py, blocking;
client/async_http.py, asyncio streams) and `endpoint.request_once` (one request per connection). The command
hook's client (cli/fasthook.py) keeps a minimal reader of its own because it must start without importing
the package; tests/coordinator/client/test_http1.py checks that no other module reads answers.

What it reads: a status line and headers (names lower-cased; 1xx interim answers such as 100 Continue
skipped; 101 is final), then a body framed by `content-length`, by chunked transfer coding (chunk
extensions and trailers ignored), or by the end of the connection; no body for HEAD, 204 and 304.
`will_close` is true when the service said `connection: close`, spoke HTTP/1.0, ended the body with the
connection, or sent bytes beyond the answer (the connection is then not reusable). A malformed or cut
answer raises ValueError (the transport closes the connection and reports it as a protocol error).
Standard library only, and nothing of the package: a ground module.
"""

from __future__ import annotations

__all__ = ["MAX_HEAD_BYTES", "RECV_BYTES", "Answer", "AnswerParser"]

RECV_BYTES = 65536  # what a transport asks of the socket per receive
MAX_HEAD_BYTES = 65536  # an answer's status line and headers together
MAX_HEADERS = 200

Answer = tuple[int, dict[str, str], bytes, bool]  # status, headers, body, will_close

_NO_BODY = (204, 304)


class AnswerParser:
    """One answer's parse (see the module docstring). `feed` returns the answer once it is complete."""

    __slots__ = ("_buffer", "_close_delimited", "_head", "_length", "_method")

    def __init__(self, method: str = "GET") -> None:
        self._method = method
        self._buffer: bytes | bytearray = b""
        self._head: tuple[int, dict[str, str], bool] | None = None  # status, headers, will_close
        self._length = -1  # the body's length once known; -1: chunked or to the close
        self._close_delimited = False

    def feed(self, data: bytes) -> Answer | None:
        """Add received bytes (b"": the connection closed); the answer when complete, else None. Raises
        ValueError when the answer is malformed, or cut short by the close."""
        if not data:
            return self._closed()
        buffer = self._buffer
        if not buffer:
            buffer = self._buffer = data  # the usual case: the whole answer in one receive, never copied
        else:  # later receives grow one bytearray (amortised: no copy of all that came before)
            if type(buffer) is bytes:
                buffer = self._buffer = bytearray(buffer)
            buffer += data
        head = self._head
        if head is None:
            start = self._read_head(buffer)
            if start < 0:
                return None
            head = self._head
            assert head is not None
            buffer = self._buffer = buffer[start:]
        if self._close_delimited:
            return None
        status, headers, will_close = head
        if self._length >= 0:
            if len(buffer) < self._length:
                return None
            return status, headers, bytes(buffer[: self._length]), will_close or len(buffer) > self._length
        found = _chunked(buffer)
        if found is None:
            return None
        body, end = found
        return status, headers, body, will_close or end < len(buffer)

    def _read_head(self, buffer: bytes | bytearray) -> int:
        """Parse the final answer's head from `buffer`: where its body starts, or -1 while it is incomplete."""
        start = 0
        while True:
            end = buffer.find(b"\r\n\r\n", start)
            size = 4
            if end < 0:
                end, size = buffer.find(b"\n\n", start), 2
            if end < 0:
                if len(buffer) - start > MAX_HEAD_BYTES:
                    raise ValueError("the answer's head is too long")
                return -1
            lines = buffer[start:end].split(b"\n")
            version, status = _status_line(lines[0])
            start = end + size
            if status >= 200 or status == 101:
                break  # the final answer (a 1xx before it is interim: skipped)
        headers = _headers(lines)
        will_close = headers.get("connection", "").lower() == "close" or version == b"HTTP/1.0"
        self._head = (status, headers, will_close)
        if self._method == "HEAD" or status in _NO_BODY:
            self._length = 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._length = -1
        elif "content-length" in headers:
            self._length = int(headers["content-length"])
            if self._length < 0:
                raise ValueError("the answer's content-length is negative")
        else:
            self._close_delimited = True
        return start

    def _closed(self) -> Answer:
        if self._head is None:
            if not self._buffer:
                raise ValueError("the connection closed before an answer")
            raise ValueError("the connection closed in the answer's head")
        if not self._close_delimited:
            raise ValueError("the answer was cut short")
        status, headers, _ = self._head
        return status, headers, bytes(self._buffer), True


def _status_line(line: bytes | bytearray) -> tuple[bytes | bytearray, int]:
    version, _, rest = line.rstrip(b"\r").partition(b" ")
    if not version.startswith(b"HTTP/") or not rest[:3].isdigit():
        raise ValueError(f"not an HTTP answer: {line[:80]!r}")
    return version, int(rest[:3])


def _headers(lines: list[bytes] | list[bytearray]) -> dict[str, str]:
    if len(lines) > MAX_HEADERS + 1:
        raise ValueError("the answer has too many headers")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return headers


def _chunked(buffer: bytes | bytearray) -> tuple[bytes, int] | None:
    """A chunked body from the start of `buffer`: (body, where it ends), or None while it is incomplete."""
    chunks: list[bytes | bytearray] = []
    pos = 0
    while True:
        eol = buffer.find(b"\n", pos)
        if eol < 0:
            return None
        size = int(buffer[pos:eol].split(b";", 1)[0].strip() or b"x", 16)
        pos = eol + 1
        if size == 0:
            while True:  # trailers, up to the blank line
                eol = buffer.find(b"\n", pos)
                if eol < 0:
                    return None
                blank = buffer[pos:eol] in (b"", b"\r")
                pos = eol + 1
                if blank:
                    return b"".join(chunks), pos
        if len(buffer) < pos + size + 1:
            return None
        chunks.append(buffer[pos : pos + size])
        eol = buffer.find(b"\n", pos + size)
        if eol < 0:
            return None
        pos = eol + 1
