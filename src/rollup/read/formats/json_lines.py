"""OTLP JSON text cut into records: one a line (JSON Lines), or one for a whole document, each with its line number.

The careful reader (`otlp_json`) hands DuckDB blocks of whole records and names a bad one by its line; a last line
without its newline is offered to the caller, who decides whether it is a torn write (SPEC section 3).
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterator
from typing import BinaryIO

import pyarrow as pa

# JSON text handed to DuckDB at once. A worker's memory follows it (DuckDB holds about ten times the text while it
# transforms it), its speed does not (docs/performance.md, bench/ingest.py).
BATCH_BYTES = 4 << 20
UTF8_BOM = b"\xef\xbb\xbf"


class JsonRecords:
    """A block of OTLP JSON text cut into records (one a line, or one for a document), with where each one is.

    Record i runs from `starts[i]` to the next record's start (the last one to `end`), so blank lines between
    records ride along as whitespace and the records go to Arrow as one buffer, without a copy.
    """

    def __init__(self, data: bytes, starts: list[int], end: int, line_numbers: list[int], base_offset: int) -> None:
        self.data = data
        self.starts = starts
        self.end = end
        self.line_numbers = line_numbers
        self.base_offset = base_offset  # file offset of data[0]

    def __len__(self) -> int:
        return len(self.starts)

    def text(self, index: int) -> bytes:
        stop = self.starts[index + 1] if index + 1 < len(self.starts) else self.end
        return self.data[self.starts[index] : stop]

    def offset(self, index: int) -> int:
        return self.base_offset + self.starts[index]

    def head(self, index: int, size: int = 256) -> bytes:
        return self.data[self.starts[index] : self.starts[index] + size]

    def arrow(self) -> pa.Array:
        """The records as an Arrow string array over `data` itself; ArrowInvalid when one is not UTF-8."""
        offsets = array("i", [*self.starts, self.end]) if self.end < 1 << 31 else array("q", [*self.starts, self.end])
        kind = pa.binary() if offsets.typecode == "i" else pa.large_binary()
        binary = pa.Array.from_buffers(kind, len(self.starts), [None, pa.py_buffer(offsets), pa.py_buffer(self.data)])
        return binary.cast(pa.string() if offsets.typecode == "i" else pa.large_string())


_NON_BLANK = re.compile(rb"[^ \t\r\n]")


def json_line_batches(
    stream: BinaryIO,
    *,
    start: int,
    limit: int | None,
    first_line: int,
    is_document: bool,
    on_torn_line: Callable[[int, int, bytes, bool], bool],
) -> Iterator[JsonRecords]:
    """Cut the stream (positioned at byte `start`, `limit` bytes or to the end) into blocks of whole lines.

    Blank lines are skipped. A last line without its newline is offered to `on_torn_line(line, offset, text, first)`
    (`first`: it is the first record of the stream), which returns whether to keep it. A document is one record,
    however many lines it spans.
    """
    if is_document:
        text = stream.read() if limit is None else stream.read(limit)
        skip = len(UTF8_BOM) if start == 0 and text.startswith(UTF8_BOM) else 0
        first = _NON_BLANK.search(text, skip)
        if first is not None:
            line = first_line + text.count(b"\n", 0, first.start())
            yield JsonRecords(text, [first.start()], len(text), [line], start)
        return
    offset, line_number, carry, remaining = start, first_line, [], limit
    records_before = False
    while True:
        want = BATCH_BYTES if remaining is None else min(BATCH_BYTES, remaining)
        block = stream.read(want) if want > 0 else b""
        if remaining is not None:
            remaining -= len(block)
        at_end = not block
        if not at_end and b"\n" not in block:
            carry.append(block)  # a line longer than a block: gather its pieces, join them once
            continue
        text = b"".join([*carry, block]) if carry else block
        complete = len(text) if at_end else text.rfind(b"\n") + 1
        position = len(UTF8_BOM) if offset == 0 and text.startswith(UTF8_BOM) else 0
        starts, numbers = [], []
        while position < complete:
            newline = text.find(b"\n", position, complete)
            line_end = complete if newline < 0 else newline + 1
            if _NON_BLANK.search(text, position, line_end):
                starts.append(position)
                numbers.append(line_number)
            position = line_end
            line_number += 1
        # A final line that lacks its newline is usable if it parses, else the torn write of a dying job.
        torn = at_end and starts and not text.endswith(b"\n") and _NON_BLANK.search(text, text.rfind(b"\n") + 1)
        first_record = not records_before and len(starts) == 1
        if torn and not on_torn_line(numbers[-1], offset + starts[-1], text[starts[-1] :], first_record):
            complete = starts.pop()
            numbers.pop()
        if starts:
            records_before = True
            yield JsonRecords(text, starts, complete, numbers, offset)
        if at_end:
            return
        offset += complete
        carry = [text[complete:]] if complete < len(text) else []
