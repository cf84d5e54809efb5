"""Open a trace file by its content, not its name, and tell which format it holds.

Compression is recognised by magic number (gzip 1f8b, zstd 28b52ffd, including a stream of several zstd frames as
`zstd` and `pzstd` write when appending), so a `.jsonl` that is really gzipped, or a `.zst` that is plain, still
reads. The format is then told from the first bytes of the plain content:

- `parquet`: a Parquet file (magic `PAR1`), as `ingest --to` and the cache write it;
- `json-lines` / `json-document`: OTLP JSON, one object per line, or one (pretty-printed) object for the file;
- `framed-proto`: Collector `file` exporter records, each a 4-byte big-endian length then a message;
- `bare-proto`: one OTLP protobuf message making up the whole file;
- `empty`: nothing but whitespace.
"""

from __future__ import annotations

import gzip
import re
import struct
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, BinaryIO

import zstandard

from rollup.base.errors import InputError, TraceFormatError

from .signals import NotATrace

if TYPE_CHECKING:
    from google.protobuf.message import Message


FORMATS = ("framed-proto", "bare-proto", "json-lines", "json-document", "parquet", "empty")
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PARQUET_MAGIC = b"PAR1"
UTF8_BOM = b"\xef\xbb\xbf"
_WHITESPACE = b" \t\r\n"
_PROBE_BYTES = 1 << 16
_TEXT_WINDOW = 256
_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# How the SDK's ConsoleSpanExporter (`ReadableSpan.to_json`) begins each span: a name, then its context with a hex
# trace id. Not OTLP, whose objects begin with `resourceSpans`.
_CONSOLE_SPAN = re.compile(rb'\{\s*"name":\s*"[^"]*",\s*"context":\s*\{\s*"trace_id":\s*"0x[0-9a-f]{32}"')

# What a failing decompressor raises; `read_failure` turns these into a TraceFormatError.
DECOMPRESSION_ERRORS: tuple[type[BaseException], ...] = (EOFError, zlib.error, gzip.BadGzipFile, zstandard.ZstdError)


def compression_of(path: str) -> str | None:
    """'gzip', 'zstd' or None (plain), from the file's first bytes."""
    with _open_raw(path) as raw:
        magic = raw.read(4)
    if magic.startswith(GZIP_MAGIC):
        return "gzip"
    if magic.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def _open_raw(path: str) -> BinaryIO:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a trace file") from None
    except OSError as error:
        raise InputError(f"{path}: cannot be read ({error.strerror or error})") from None


@contextmanager
def open_plain(path: str) -> Iterator[BinaryIO]:
    """The file's uncompressed content as a binary stream (several gzip members, or several zstd frames, read as
    one). A compressed file cut inside its last member or frame reads as the content decompressed before the cut,
    the stream's `torn` set once its end is reached (SPEC section 3: a job or Collector killed mid-write); corruption
    before the end still raises."""
    kind = compression_of(path)
    raw = _open_raw(path)
    try:
        if kind == "gzip":
            yield GzipMembers(raw)  # type: ignore[misc]
        elif kind == "zstd":
            yield ZstdFrames(raw)  # type: ignore[misc]
        else:
            yield raw
    finally:
        raw.close()


class _Members(ABC):
    """A readable stream of the content of compressed members (gzip) or frames (zstd) one after another, which says
    when the input ends inside one (`torn`) rather than passing a torn file for a complete one, or failing it.

    zstandard's `stream_reader(read_across_frames=True)` returns a frame cut short as if it had ended, and Python's
    `gzip` raises on one, losing the records decompressed before the cut; neither is what a torn tail needs."""

    _INPUT_BYTES = 1 << 16
    what = "member"

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._member = self._new_member()
        self._in_member = False
        self._buffer = bytearray()
        self._done = False
        self.torn = False  # the input ended inside a member: what came before it is all there is

    @abstractmethod
    def _new_member(self) -> Any:
        """A decompressor for the next member (frame) of the stream."""

    def _ended(self, member: Any) -> bool:
        return bool(member.eof)

    def _padding(self, data: bytes) -> bool:
        """Whether `data`, met where a member would begin, is padding to skip rather than a member."""
        return False

    def read(self, size: int = -1) -> bytes:
        while not self._done and (size < 0 or len(self._buffer) < size):
            self._fill()
        if size < 0 or size >= len(self._buffer):
            data, self._buffer = bytes(self._buffer), bytearray()
        else:
            data = bytes(self._buffer[:size])
            del self._buffer[:size]
        return data

    def _fill(self) -> None:
        data = self._raw.read(self._INPUT_BYTES)
        if not data:
            self.torn = self._in_member
            self._done = True
            return
        while data:
            if not self._in_member and self._padding(data):
                return
            self._in_member = True
            self._buffer += self._member.decompress(data)
            if not self._ended(self._member):
                return
            data = self._member.unused_data
            self._member = self._new_member()
            self._in_member = False


class ZstdFrames(_Members):
    """One or more zstd frames, one after another (`zstd` and `pzstd` append frames)."""

    what = "frame"

    def __init__(self, raw: BinaryIO) -> None:
        self._decompressor = zstandard.ZstdDecompressor()
        super().__init__(raw)

    def _new_member(self) -> Any:
        return self._decompressor.decompressobj()


class GzipMembers(_Members):
    """One or more gzip members, one after another (each checked against its CRC as it ends)."""

    def _new_member(self) -> Any:
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)

    def _padding(self, data: bytes) -> bool:
        """Zeros after a member are padding (tape blocks), as gzip and Python's `gzip` skip them."""
        return not data.strip(b"\x00")


# How a torn record's notice ends when it was the file's first: nothing of the file is read (SPEC section 3's torn
# final record, with nothing before it: a job killed while it wrote its first export). The warning says so itself:
# the file is not empty, and "the records before the cut are used" would promise records there are not.
CUT_BEFORE_FIRST = "before its first complete record, so nothing in it is read"  # every such notice says it
NOTHING_BEFORE = f"the file was cut {CUT_BEFORE_FIRST}"


def torn_notice(path: str, stream: Any, nothing_before: bool = False) -> str | None:
    """The notice for a compressed file cut inside its last member or frame (`_Members.torn`), else None;
    `nothing_before`: no complete record came before the cut."""
    if not getattr(stream, "torn", False):
        return None
    kind = "zstd" if isinstance(stream, ZstdFrames) else "gzip"
    cut = f"{path}: the {kind} stream ends inside its last {stream.what} (the file was cut short, by a job or Collector"
    if nothing_before:
        return f"{cut} still writing or killed) {CUT_BEFORE_FIRST}"
    return f"{cut} still writing or killed): the records decompressed before the cut are used"


def read_failure(path: str, error: BaseException) -> Exception:
    """The GoodputError for a failed read of `path`'s content: a corrupt compressed stream or an I/O error."""
    if isinstance(error, OSError) and not isinstance(error, gzip.BadGzipFile):
        return InputError(f"{path}: cannot be read ({error.strerror or error})")
    return TraceFormatError(path, "", f"compressed data is corrupt or cut short ({error})")


def sniff_format(path: str) -> str:
    """The format of the trace file at `path`: one of FORMATS.

    Raises InputError for a missing or unreadable file and NotATrace (a TraceFormatError) for a file that is none
    of them.
    """
    try:
        with open_plain(path) as stream:
            return _sniff_stream(stream, path)
    except DECOMPRESSION_ERRORS + (OSError,) as error:
        raise read_failure(path, error) from None


def _sniff_stream(stream: BinaryIO, path: str) -> str:
    head = stream.read(_PROBE_BYTES)
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    text_start = head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head
    stripped = text_start.lstrip(_WHITESPACE)
    while not stripped:
        more = stream.read(_PROBE_BYTES)
        if not more:
            return "empty"
        head += more
        stripped = more.lstrip(_WHITESPACE)
    if stripped[:1] in (b"{", b"[") and _looks_like_text(head):
        if _CONSOLE_SPAN.match(stripped):
            raise NotATrace(
                path, "", "ConsoleSpanExporter output (the OpenTelemetry SDK's console exporter prints each span as "
                "its own JSON object), not OTLP: export with goodput's json-file or otlp-file exporter"
            )  # fmt: skip
        return _json_shape(stream, head)
    return _proto_shape(stream, head, path)


def _looks_like_text(head: bytes) -> bool:
    """Whether the file starts as UTF-8 without control characters: JSON does; OTLP protobuf never does, since its
    first 256 bytes hold field tags such as 0x12. (A later bad byte in a JSON file is the decoder's to report.)

    Needed because a bare protobuf message starts with 0x0a, a newline, often followed by a length byte of 0x7b,
    which is `{`.
    """
    window = head[:_TEXT_WINDOW]
    if _CONTROL_BYTES.search(window):
        return False
    try:
        window.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start >= len(window) - 3  # only a character cut by the window's end
    return True


def _json_shape(stream: BinaryIO, head: bytes) -> str:
    """json-lines when the first non-blank line looks like a whole object (or is the only line), else json-document.

    Cheap on purpose: the decoder parses every record anyway and reports a bad one by its line, so a JSON Lines
    file with a corrupt first line gets its error either way.
    """
    while True:
        start = len(head) - len(head.lstrip(_WHITESPACE))
        if head.startswith(UTF8_BOM):
            start = len(head) - len(head[len(UTF8_BOM) :].lstrip(_WHITESPACE))
        line_end = head.find(b"\n", start)
        if line_end >= 0:
            break
        more = stream.read(_PROBE_BYTES)
        if not more:
            return "json-lines"  # one line, maybe torn: the decoder decides
        head += more
    first_line = head[start:line_end].strip()
    if first_line.startswith(b"{") and first_line.endswith(b"}") and len(first_line) > 1:
        return "json-lines"
    return "json-document"


def _proto_shape(stream: BinaryIO, head: bytes, path: str) -> str:
    """framed-proto when the first length header frames a message (of traces, or of another signal the decoder
    skips), bare-proto when the file starts like one. Text never does: a message's first bytes hold field tags
    such as 0x12, so a text file that starts with a blank line is not taken for one."""
    from .formats.framing import read_up_to
    from .formats.otlp_proto import LeanTracesData
    from .signals import proto_signal

    if len(head) >= 5:
        (length,) = struct.unpack_from(">I", head)
        body = head[4 : 4 + length]
        if len(body) < length:
            body += read_up_to(stream, length - len(body))
        if len(body) == length and (_holds_a_span(LeanTracesData, body) or proto_signal(body) is not None):
            return "framed-proto"
        if head[0] == 0x0A and not _looks_like_text(head):
            return "bare-proto"
        if len(body) < length and head[4] == 0x0A and not _looks_like_text(head):
            return "framed-proto"  # the first record is torn: the decoder reports it as a truncated final record
    elif head[:1] == b"\x0a":
        return "bare-proto"
    raise NotATrace(path, "", "not a trace file: neither OTLP JSON nor OTLP protobuf")


def _holds_a_span(message_class: type[Message], body: bytes) -> bool:
    """Whether `body` parses as a trace message with at least one span bearing real ids."""
    from google.protobuf.message import DecodeError

    try:
        message = message_class.FromString(body)
    except (DecodeError, RecursionError, ValueError):
        return False
    for resource_spans in message.resource_spans:
        for scope_spans in resource_spans.scope_spans or resource_spans.instrumentation_library_spans:
            for span in scope_spans.spans:
                return len(span.trace_id) == 16 and len(span.span_id) == 8
    return False
