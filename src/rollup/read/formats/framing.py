"""The Collector `file` exporter's framing (`format: proto`): each record a 4-byte big-endian length, then a message.

Records are read from a stream in pieces, so a corrupt length cannot make the reader allocate gigabytes up front; a
record cut short at the end of the file is the torn final write of a dying job (SPEC section 3), a notice. A record
whose message does not parse is worded in the user's terms (`wire_problem`).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator
from typing import BinaryIO

from rollup.base.errors import TraceFormatError

READ_PIECE = 16 << 20


def read_up_to(stream: BinaryIO, size: int) -> bytes:
    """Up to `size` bytes, fewer only at the end of the stream (a decompressor may return short reads)."""
    pieces, wanted = [], size
    while wanted > 0:
        piece = stream.read(min(wanted, READ_PIECE))
        if not piece:
            break
        pieces.append(piece)
        wanted -= len(piece)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def framed_records(
    stream: BinaryIO, path: str, where: Callable[[int], str], *, start: int, limit: int | None, notices: list[str]
) -> Iterator[tuple[int, bytes]]:
    """(offset, message bytes) of each length-prefixed record from `stream`, which is positioned at byte `start`.

    `limit` is the number of bytes this chunk spans, None to the end of the stream. A record whose length runs past
    the end of the stream (or a header cut short) is the torn final write of a dying job: a notice, not an error.
    """
    offset = start
    end = None if limit is None else start + limit
    while end is None or offset < end:
        header = read_up_to(stream, 4 if end is None else min(4, end - offset))
        if not header:
            return
        if len(header) < 4:
            notices.append(
                f"{path}: truncated final record at {where(offset)} skipped "
                f"(its 4-byte length header has only {len(header)} bytes)"
            )
            return
        (length,) = struct.unpack(">I", header)
        body_end = offset + 4 + length
        if end is not None and body_end > end:
            # The chunk was cut frame-aligned, so this only happens for the file's torn final record.
            body = read_up_to(stream, end - offset - 4)
        else:
            body = read_up_to(stream, length)
        if len(body) < length:
            if end is not None and body_end > end and stream.read(1):
                raise TraceFormatError(path, where(offset), "record runs past the end of its chunk (chunks misaligned)")
            notices.append(
                f"{path}: truncated final record at {where(offset)} skipped "
                f"(length {length} bytes, only {len(body)} present)"
            )
            return
        yield offset, body
        offset = body_end


_PARSER_PREAMBLE = re.compile(r"Error parsing message(?: with type '[^']*')?:?\s*")


def wire_problem(error: Exception) -> str:
    """What the protobuf parser found wrong, in its own words but without the name of the message class it was
    parsing with (upb says `Error parsing message with type 'goodput.lean.TracesData': ...`, a class of this
    reader's own that means nothing to a user): `wire format was corrupt`."""
    text = _PARSER_PREAMBLE.sub("", str(error)).strip()
    return (text[:1].lower() + text[1:]) if text else "not a protobuf message"
