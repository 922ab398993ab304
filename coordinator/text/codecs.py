"""Bytes <-> text for the files the coordinator edits: encodings, BOMs, binary detection. No file I/O.

The invariant this module exists for: ``encode_text(d.text, d.encoding) == data`` for every ``data`` that
`decode_bytes` accepts, with ``d = decode_bytes(data)``. Decoding is strict (no replacement characters, no
surrogate escapes), which is what makes the round trip exact: an edit changes only the bytes it replaces.

Supported: UTF-8, UTF-8 with BOM, UTF-16 LE/BE with BOM. UTF-16 without a BOM is not guessed (its NUL bytes
make it look binary); UTF-32 is refused outright.

U+0000 is never text: a UTF-8 file with a NUL byte in its sniffed prefix is binary, and so is UTF-16 whose
decoded text holds U+0000 anywhere. That rule also settles the one ambiguous prefix: ``ff fe 00 00`` is the
UTF-32-LE byte order mark, or a UTF-16-LE BOM followed by U+0000; both readings are refused, so the round trip
holds.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from enum import StrEnum

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.frozen import fast_init

BINARY_SNIFF_BYTES = 8192
# More than this share of control bytes in the sniffed prefix means binary.
BINARY_CONTROL_RATIO = 0.10

# C0 controls that do not occur in text: everything below 0x20 except \t \n \v \f \r (0x09-0x0D) and
# ESC (0x1B, ANSI colour codes in logs). NUL alone is enough to call a file binary.
_CONTROL_BYTES = frozenset(range(0x00, 0x09)) | (frozenset(range(0x0E, 0x20)) - {0x1B})
_CONTROL_DELETE = bytes(sorted(_CONTROL_BYTES))

_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_BINARY_MESSAGE = (
    "The file appears to be binary (NUL or many control bytes near its start); this tool edits text only. "
    "Leave the file alone, or change it with a tool made for its format."
)
_SUPPORTED = "UTF-8, UTF-8 with BOM, and UTF-16 (LE or BE) with BOM"


class Encoding(StrEnum):
    """How a file's bytes map to its text. The BOM, when the encoding has one, is part of the encoding:
    it is stripped from the text and written back by `encode_text`."""

    UTF8 = "utf-8"
    UTF8_BOM = "utf-8-sig"
    UTF16_LE = "utf-16-le"
    UTF16_BE = "utf-16-be"


_BOMS: dict[Encoding, bytes] = {
    Encoding.UTF8: b"",
    Encoding.UTF8_BOM: codecs.BOM_UTF8,
    Encoding.UTF16_LE: codecs.BOM_UTF16_LE,
    Encoding.UTF16_BE: codecs.BOM_UTF16_BE,
}
# The codec for the text after the BOM ("utf-8", not "utf-8-sig": the BOM is handled here, exactly once).
_CODECS: dict[Encoding, str] = {
    Encoding.UTF8: "utf-8",
    Encoding.UTF8_BOM: "utf-8",
    Encoding.UTF16_LE: "utf-16-le",
    Encoding.UTF16_BE: "utf-16-be",
}


@fast_init
@dataclass(frozen=True)
class Decoded:
    text: str
    encoding: Encoding


# The first bytes of every byte order mark (UTF-8 EF, UTF-16 FE/FF, UTF-32 FF/00).
_BOM_LEADS = frozenset(b"\xef\xfe\xff\x00")


def _has_utf32_bom(data: bytes) -> bool:
    # Checked before UTF-16: the UTF-32 LE BOM starts with the UTF-16 LE one.
    return data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE))


def _utf16_encoding(data: bytes) -> Encoding | None:
    if _has_utf32_bom(data):
        return None
    if data.startswith(codecs.BOM_UTF16_LE):
        return Encoding.UTF16_LE
    if data.startswith(codecs.BOM_UTF16_BE):
        return Encoding.UTF16_BE
    return None


def looks_binary(data: bytes) -> bool:
    """True if ``data`` is not text this module can edit: a NUL byte, or more than 10% control bytes
    (0x00-0x08, 0x0E-0x1F except ESC), in the first 8 KiB. Data with a UTF-16 BOM is judged by decoding
    (U+0000 in its text makes it binary there), not by this heuristic, and is never called binary here."""
    if _utf16_encoding(data) is not None:
        return False
    return looks_binary_unmarked(data)


def looks_binary_unmarked(data: bytes) -> bool:
    """`looks_binary` for data known to start with no UTF-16 byte order mark."""
    sample = data[:BINARY_SNIFF_BYTES]
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    # Counted in C (bytes.translate deletes them), not byte by byte in Python: this runs on every edit.
    controls = len(sample) - len(sample.translate(None, _CONTROL_DELETE))
    return controls > BINARY_CONTROL_RATIO * len(sample)


def decode_bytes(data: bytes) -> Decoded:
    """Decode a file's bytes strictly, sniffing the BOM. Refuses binary data (BINARY_FILE) and anything
    that is not valid in a supported encoding (UNSUPPORTED_ENCODING).

    Bytes whose first byte starts no byte order mark (every BOM starts with one of `_BOM_LEADS`) are
    UTF-8 or refused: that case, nearly every edit's, is judged without the BOM sniffing."""
    if type(data) is not bytes:
        data = bytes(data)
    if data and data[0] not in _BOM_LEADS:
        if looks_binary_unmarked(data):
            raise CoordinatorError(ErrorCode.BINARY_FILE, _BINARY_MESSAGE)
        try:
            return Decoded(data.decode("utf-8"), Encoding.UTF8)
        except UnicodeDecodeError as exc:
            raise _undecodable(exc, Encoding.UTF8, 0) from exc
    if _has_utf32_bom(data):
        raise CoordinatorError(
            ErrorCode.UNSUPPORTED_ENCODING,
            f"The file starts with a UTF-32 byte order mark; supported are {_SUPPORTED}. "
            "Convert the file to UTF-8 with another tool, or leave it alone.",
            encoding="utf-32",
        )
    encoding = _utf16_encoding(data)
    if encoding is None:
        if looks_binary(data):
            raise CoordinatorError(ErrorCode.BINARY_FILE, _BINARY_MESSAGE)
        encoding = Encoding.UTF8_BOM if data.startswith(codecs.BOM_UTF8) else Encoding.UTF8
    bom = _BOMS[encoding]
    try:
        text = data[len(bom) :].decode(_CODECS[encoding])
        if bom in _UTF16_BOMS and "\x00" in text:
            raise CoordinatorError(ErrorCode.BINARY_FILE, _BINARY_MESSAGE)
    except UnicodeDecodeError as exc:
        raise _undecodable(exc, encoding, len(bom)) from exc
    return Decoded(text, encoding)


# Content up to this size is judged clean (see `decode_noting_clean`) in one pass; bigger content is not
# (judging it would cost a pass over the whole file on every content not seen before).
CLEAN_MAX_BYTES = 256 * 1024
_SPLICE_MAX_CHARS = 1024
_CONTROL_SEARCH = re.compile("[" + "".join(chr(b) for b in sorted(_CONTROL_BYTES)) + "]").search


def decode_noting_clean(data: bytes) -> tuple[Decoded, bool]:
    """`decode_bytes`, and whether ``data`` is *clean*: not empty, UTF-8 with no byte order mark (its
    first byte starts none), at most `CLEAN_MAX_BYTES`, and no control byte of the binary sniff anywhere.

    Clean content decodes with no sniffing at all (`decode_clean`), which is what an engine that keeps
    the hashes of clean contents uses: the sniff's pass over the first 8 KiB is the costliest part of
    decoding an ordinary file."""
    # Invariant: judged clean only when no byte of the whole content is a control byte, so the sniff's
    # verdict (binary or not) cannot depend on which prefix it would have looked at.
    plain = type(data) is bytes and data and data[0] not in _BOM_LEADS and len(data) <= CLEAN_MAX_BYTES
    if plain and len(data.translate(None, _CONTROL_DELETE)) == len(data):
        try:
            return Decoded(data.decode("utf-8"), Encoding.UTF8), True
        except UnicodeDecodeError:
            pass  # decode_bytes gives the refusal
    return decode_bytes(data), False


def decode_clean(data: bytes) -> Decoded:
    """The decoding of content known to be clean (`decode_noting_clean`): the same `Decoded` as
    `decode_bytes` gives, without the binary sniff (such content has no control byte to find). Content
    that does not decode after all (which a clean content always does) goes through `decode_bytes`."""
    try:
        return Decoded(data.decode("utf-8"), Encoding.UTF8)
    except UnicodeDecodeError:
        return decode_bytes(data)


def clean_splice(new_data: bytes, part: str) -> bool:
    """Whether ``new_data`` is clean, given that it is the UTF-8 of a clean content's text with ``part``
    put in place of one piece of it (the caller vouches for that: `WritePlan._spliced`): it is, when it
    is not empty, starts no byte order mark, is at most `CLEAN_MAX_BYTES`, and ``part`` (at most
    `_SPLICE_MAX_CHARS` long; a longer one answers False) holds no control character. Every other
    character of the text was the clean content's, and UTF-8 makes a control byte of nothing else."""
    return (
        0 < len(new_data) <= CLEAN_MAX_BYTES
        and new_data[0] not in _BOM_LEADS
        and len(part) <= _SPLICE_MAX_CHARS
        and _CONTROL_SEARCH(part) is None
    )


def _undecodable(exc: UnicodeDecodeError, encoding: Encoding, bom_len: int) -> CoordinatorError:
    where = exc.start + bom_len
    return CoordinatorError(
        ErrorCode.UNSUPPORTED_ENCODING,
        f"The file is not valid {encoding.value} (bad byte sequence at byte offset {where}: "
        f"{exc.reason}); supported are {_SUPPORTED}. Convert the file or leave it alone.",
        encoding=encoding.value,
        byte_offset=where,
    )


def encode_text(text: str, encoding: Encoding) -> bytes:
    """The exact inverse of `decode_bytes`: the BOM of ``encoding`` (if any), then the strictly encoded
    text. Text that cannot be encoded (lone surrogates) is refused with INVALID_ARGUMENT."""
    if type(encoding) is not Encoding:
        encoding = Encoding(encoding)
    try:
        body = text.encode(_CODECS[encoding])
    except UnicodeEncodeError as exc:
        raise CoordinatorError(
            ErrorCode.INVALID_ARGUMENT,
            f"The text cannot be written as {encoding.value}: character {exc.object[exc.start]!r} at "
            f"index {exc.start} ({exc.reason}), usually a lone surrogate. Remove or replace that character "
            "and try again.",
            encoding=encoding.value,
            char_offset=exc.start,
        ) from exc
    return _BOMS[encoding] + body
