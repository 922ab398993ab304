"""Tests of coordinator.text.codecs: BOM sniffing, binary detection, strict decoding and the exact round trip."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.text.codecs import (
    CLEAN_MAX_BYTES,
    Decoded,
    Encoding,
    clean_splice,
    decode_bytes,
    decode_clean,
    decode_noting_clean,
    encode_text,
    looks_binary,
)
from tests.coordinator.text import examples


def refused(code: ErrorCode, data: bytes) -> CoordinatorError:
    with pytest.raises(CoordinatorError) as info:
        decode_bytes(data)
    assert info.value.code is code, info.value
    return info.value


# --- decoding by example ------------------------------------------------------------------------------


def test_plain_utf8() -> None:
    assert decode_bytes("héllo\n".encode()) == Decoded("héllo\n", Encoding.UTF8)


def test_empty_file_is_utf8_text() -> None:
    assert decode_bytes(b"") == Decoded("", Encoding.UTF8)


def test_utf8_bom_is_stripped_and_remembered() -> None:
    assert decode_bytes(b"\xef\xbb\xbfabc") == Decoded("abc", Encoding.UTF8_BOM)
    assert decode_bytes(b"\xef\xbb\xbf") == Decoded("", Encoding.UTF8_BOM)


def test_only_one_utf8_bom_is_stripped() -> None:
    assert decode_bytes(b"\xef\xbb\xbf\xef\xbb\xbfx") == Decoded("\ufeffx", Encoding.UTF8_BOM)


@pytest.mark.parametrize(
    ("bom", "codec", "encoding"),
    [
        (b"\xff\xfe", "utf-16-le", Encoding.UTF16_LE),
        (b"\xfe\xff", "utf-16-be", Encoding.UTF16_BE),
    ],
)
def test_utf16_with_bom(bom: bytes, codec: str, encoding: Encoding) -> None:
    text = "line 1\r\nzwei \U0001f30d\n"
    decoded = decode_bytes(bom + text.encode(codec))
    assert decoded == Decoded(text, encoding)
    assert "\ufeff" not in decoded.text


def test_utf16_is_not_judged_binary_despite_nul_bytes() -> None:
    data = codecs.BOM_UTF16_LE + "abc".encode("utf-16-le")
    assert b"\x00" in data
    assert not looks_binary(data)
    assert decode_bytes(data).text == "abc"


@pytest.mark.parametrize("bom", [codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE])
def test_utf32_is_unsupported(bom: bytes) -> None:
    err = refused(ErrorCode.UNSUPPORTED_ENCODING, bom + "abc".encode("utf-32-le"))
    assert "UTF-32" in err.message and "UTF-8" in err.message


def test_odd_length_utf16_is_unsupported() -> None:
    err = refused(ErrorCode.UNSUPPORTED_ENCODING, codecs.BOM_UTF16_LE + b"a\x00b")
    assert err.details["encoding"] == "utf-16-le"


def test_lone_surrogate_in_utf16_is_unsupported() -> None:
    refused(ErrorCode.UNSUPPORTED_ENCODING, codecs.BOM_UTF16_BE + b"\xd8\x00\x00a")


def test_invalid_utf8_is_unsupported_with_offset_and_advice() -> None:
    err = refused(ErrorCode.UNSUPPORTED_ENCODING, b"caf\xe9 au lait\n")  # Latin-1
    assert err.details["byte_offset"] == 3
    assert "UTF-8 with BOM" in err.message and "UTF-16" in err.message and "convert" in err.message.lower()


def test_invalid_utf8_after_bom_reports_offset_in_file() -> None:
    err = refused(ErrorCode.UNSUPPORTED_ENCODING, b"\xef\xbb\xbfab\xff")
    assert err.details["byte_offset"] == 5


@pytest.mark.parametrize(
    "data",
    [
        b"\xed\xa0\x80",  # an encoded surrogate
        b"\xc0\xaf",  # an overlong '/'
        b"abc\xe2\x82",  # truncated sequence
    ],
)
def test_strict_utf8(data: bytes) -> None:
    refused(ErrorCode.UNSUPPORTED_ENCODING, data)


# --- binary detection ---------------------------------------------------------------------------------


def test_nul_byte_means_binary() -> None:
    err = refused(ErrorCode.BINARY_FILE, b"text\x00more text")
    assert "binary" in err.message and "text only" in err.message


def test_nul_after_utf8_bom_is_binary() -> None:
    refused(ErrorCode.BINARY_FILE, b"\xef\xbb\xbfa\x00b")


def test_png_header_is_binary() -> None:
    assert looks_binary(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")


def test_control_ratio_threshold() -> None:
    # 10 control bytes in 100 is exactly 10%: still text. 11 is more than 10%: binary.
    assert not looks_binary(b"\x01" * 10 + b"a" * 90)
    assert looks_binary(b"\x01" * 11 + b"a" * 89)


def test_esc_and_whitespace_controls_do_not_count() -> None:
    colour_log = b"\x1b[31mred\x1b[0m" * 50
    assert not looks_binary(colour_log)
    assert not looks_binary(b"\t\n\x0b\x0c\r" * 100)
    assert decode_bytes(colour_log).text == colour_log.decode()


def test_del_and_high_bytes_do_not_count_as_control() -> None:
    assert not looks_binary(b"\x7f" * 100)


def test_only_the_first_8_kib_is_sniffed() -> None:
    data = b"a" * 8192 + b"\x00"
    assert not looks_binary(data)
    assert looks_binary(b"a" * 8191 + b"\x00")
    assert decode_bytes(data).text.endswith("\x00")


def test_empty_data_is_not_binary() -> None:
    assert not looks_binary(b"")


def test_utf32_looks_binary() -> None:
    assert looks_binary(codecs.BOM_UTF32_LE + "a".encode("utf-32-le"))


# --- encoding ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "expected"),
    [
        (Encoding.UTF8, b"a\xc3\xa9"),
        (Encoding.UTF8_BOM, b"\xef\xbb\xbfa\xc3\xa9"),
        (Encoding.UTF16_LE, b"\xff\xfea\x00\xe9\x00"),
        (Encoding.UTF16_BE, b"\xfe\xff\x00a\x00\xe9"),
    ],
)
def test_encode_writes_bom_back(encoding: Encoding, expected: bytes) -> None:
    assert encode_text("aé", encoding) == expected


def test_encoding_values_are_codec_names() -> None:
    assert [e.value for e in Encoding] == ["utf-8", "utf-8-sig", "utf-16-le", "utf-16-be"]
    assert Encoding("utf-16-le") is Encoding.UTF16_LE
    assert isinstance(Encoding.UTF8, str)


@pytest.mark.parametrize("encoding", list(Encoding))
def test_lone_surrogate_cannot_be_encoded(encoding: Encoding) -> None:
    with pytest.raises(CoordinatorError) as info:
        encode_text("ok \ud800 bad", encoding)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert info.value.details["char_offset"] == 3


# --- the round trip -----------------------------------------------------------------------------------

# Text without surrogates (which no strict codec accepts); everything else, controls included.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)
ENCODINGS = st.sampled_from(list(Encoding))
BOMS = st.sampled_from([b"", codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE])


def expected_refusal(data: bytes) -> ErrorCode | None:
    """The module's documented rules, restated independently: which refusal `data` must get, if any."""
    if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return ErrorCode.UNSUPPORTED_ENCODING
    for bom, codec in ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        if data.startswith(bom):
            try:
                text = data[2:].decode(codec)
            except UnicodeDecodeError:
                return ErrorCode.UNSUPPORTED_ENCODING
            return ErrorCode.BINARY_FILE if "\x00" in text else None
    sample = data[:8192]
    controls = sum(1 for byte in sample if byte < 0x20 and byte not in b"\t\n\x0b\x0c\r\x1b")
    if b"\x00" in sample or controls > 0.10 * len(sample):
        return ErrorCode.BINARY_FILE
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return ErrorCode.UNSUPPORTED_ENCODING
    return None


def assert_round_trip(data: bytes) -> None:
    """Either the refusal the rules call for, or a decoding that encodes back to the very same bytes."""
    expected = expected_refusal(data)
    try:
        decoded = decode_bytes(data)
    except CoordinatorError as exc:
        assert exc.code is expected, (data, exc)
        return
    assert expected is None, (data, decoded)
    assert encode_text(decoded.text, decoded.encoding) == data


@settings(max_examples=examples(200), deadline=None)
@given(TEXT, ENCODINGS)
def test_round_trip_of_encoded_text(text: str, encoding: Encoding) -> None:
    data = encode_text(text, encoding)
    assert_round_trip(data)
    if encoding in (Encoding.UTF16_LE, Encoding.UTF16_BE) and "\x00" not in text:
        # With a UTF-16 BOM, every text without U+0000 decodes to itself (control characters included).
        assert decode_bytes(data) == Decoded(text, encoding)


@pytest.mark.parametrize("encoding", [Encoding.UTF16_LE, Encoding.UTF16_BE])
@pytest.mark.parametrize("text", ["\x00", "\x00abc", "ab\x00c", "abc\x00"])
def test_utf16_text_with_nul_is_binary(text: str, encoding: Encoding) -> None:
    # The example that made the round-trip property fail: "\x00..." as UTF-16-LE begins ff fe 00 00, the
    # UTF-32-LE byte order mark. Either reading is refused, so decode never returns a text that encodes back
    # to other bytes.
    data = encode_text(text, encoding)
    with pytest.raises(CoordinatorError) as info:
        decode_bytes(data)
    expected = {ErrorCode.BINARY_FILE}
    if data.startswith(codecs.BOM_UTF32_LE):
        expected = {ErrorCode.UNSUPPORTED_ENCODING}
    assert info.value.code in expected
    assert_round_trip(data)


@settings(max_examples=examples(200), deadline=None)
@given(BOMS, st.binary(max_size=60))
def test_round_trip_of_arbitrary_bytes(bom: bytes, body: bytes) -> None:
    assert_round_trip(bom + body)


@settings(max_examples=examples(200), deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs", "Cc")), max_size=60))
def test_utf8_text_without_controls_always_decodes(text: str) -> None:
    data = text.encode("utf-8")
    decoded = decode_bytes(data)
    assert encode_text(decoded.text, decoded.encoding) == data
    if not text.startswith("\ufeff"):
        assert decoded == Decoded(text, Encoding.UTF8)


# --- clean content: decoded without the sniff ---------------------------------------------------------


def _judged(data: bytes) -> tuple[str, object]:
    try:
        return "ok", decode_bytes(data)
    except CoordinatorError as exc:
        return "refused", exc.code


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_decode_noting_clean_decodes_as_decode_bytes_and_clean_means_no_control_byte(data: bytes) -> None:
    try:
        decoded, clean = decode_noting_clean(data)
    except CoordinatorError as exc:
        assert _judged(data) == ("refused", exc.code)
        return
    assert ("ok", decoded) == _judged(data)
    if clean:
        assert data and data[0] not in b"\xef\xfe\xff\x00" and decoded.encoding is Encoding.UTF8
        assert not any(b in data for b in [*range(0x09), *range(0x0E, 0x1B), *range(0x1C, 0x20)])
        assert decode_clean(data) == decoded


def test_content_with_one_control_byte_far_past_the_sniff_is_not_clean() -> None:
    data = b"x = 1\n" * 2000 + b"\x01\n"  # past the sniffed 8 KiB: text to decode_bytes, but not clean
    decoded, clean = decode_noting_clean(data)
    assert decoded == decode_bytes(data) and not clean
    assert decode_noting_clean(b"x = 1\n" * 2000) == (decode_bytes(b"x = 1\n" * 2000), True)


def test_content_over_the_clean_limit_is_never_clean() -> None:
    data = b"a" * (CLEAN_MAX_BYTES + 1)
    assert decode_noting_clean(data) == (Decoded(data.decode(), Encoding.UTF8), False)


@pytest.mark.parametrize(
    ("new_data", "part", "clean"),
    [
        (b"ab NEW cd", "NEW", True),
        (b"ab N\x01W cd", "N\x01W", False),  # a control character put in
        (b"ab \x1b[0m cd", "\x1b[0m", True),  # ESC is text (colour codes)
        ("\ufeffab cd".encode(), "\ufeff", False),  # starts with a byte order mark
        (b"", "", False),  # empty
        (b"a" * (CLEAN_MAX_BYTES + 1), "a", False),  # too big to be judged clean
        (b"ab " + b"N" * 2000 + b" cd", "N" * 2000, False),  # a part too long to search
        (b"ab cd", "", True),  # nothing put in
    ],
)
def test_clean_splice(new_data: bytes, part: str, clean: bool) -> None:
    assert clean_splice(new_data, part) is clean
