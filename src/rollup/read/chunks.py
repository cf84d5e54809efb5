"""One trace file, or one chunk of it, to a Parquet file of the span schema: the unit of work of a load.

`plan_chunks` cuts a large plain file into chunks that start and end on record boundaries, cheaply (it reads only
length headers or looks for newlines), so worker processes or Ray tasks can convert them side by side;
`convert_chunk` decodes one chunk and streams its spans to Parquet batch by batch, so memory follows the batch size,
not the file size. Both are plain functions of picklable arguments. `decode_range` hands a byte range's batches to a
caller in this process instead (`read.tail`, which follows files as a job writes them).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from rollup.base.errors import GoodputError, InputError, TraceFormatError
from rollup.base.schema import SPAN_SCHEMA

from .parquet_parts import open_part, parquet_batches, remove_part, write_part
from .signals import JSON_SIGNAL_KEYS, NotATrace, not_a_trace_error
from .sniff import (
    DECOMPRESSION_ERRORS,
    NOTHING_BEFORE,
    compression_of,
    open_plain,
    read_failure,
    sniff_format,
    torn_notice,
)

if TYPE_CHECKING:  # imported where a Parquet file is read or written: a load from the cache alone never does
    import pyarrow.parquet as pq

DEFAULT_CHUNK_BYTES = 64 << 20
DEFAULT_BATCH_ROWS = 65_536
# Spans the protobuf decoder gathers as Python values before handing them to Arrow: what a worker's memory follows,
# not its speed (docs/performance.md, bench/ingest.py). Row groups stay at batch_rows.
DECODE_ROWS = 16_384
_NEWLINE_PROBE = 1 << 16


@dataclass(frozen=True)
class Chunk:
    """A byte range [start, end) of a file's plain (uncompressed) content; (0, -1) is the whole file."""

    path: str
    start: int
    end: int
    index: int

    @property
    def whole_file(self) -> bool:
        return self.start == 0 and self.end < 0


@dataclass
class ChunkResult:
    """What converting a chunk produced: how many spans it wrote, notices for the user (torn tail, empty file), the
    records of other signals it skipped (signal -> records: `signals`), and, for a load that decides itself what a
    file's faults mean (`convert_chunk(report_faults=True)`), why the file is no trace, or its corrupt record."""

    chunk: Chunk
    spans: int
    notices: list[str] = field(default_factory=list)
    other_signals: dict[str, int] = field(default_factory=dict)
    not_a_trace: NotATrace | None = None
    corrupt: GoodputError | None = None  # a corrupt record, or the file unreadable: no part was written


def plan_chunks(path: str, target_bytes: int = DEFAULT_CHUNK_BYTES, kind: str | None = None) -> list[Chunk]:
    """Chunks of about `target_bytes` for a plain framed-protobuf or JSON Lines file; one chunk for anything else.

    Cuts fall on record boundaries: after a whole length-prefixed record, after a newline. Compressed files cannot
    be entered in the middle, so they are one chunk. Raises InputError for a missing or unreadable file and
    TraceFormatError for a file that is not a trace. `kind` is `sniff.sniff_format`'s answer when the caller has it.
    """
    path = os.path.abspath(path)
    kind = kind or sniff_format(path)
    whole = [Chunk(path, 0, -1, 0)]
    if kind not in ("framed-proto", "json-lines") or compression_of(path) is not None:
        return whole
    try:
        size = os.path.getsize(path)
        if size <= target_bytes:
            return whole
        with open(path, "rb") as file:
            cut_at = _frame_cuts if kind == "framed-proto" else _line_cuts
            cuts = cut_at(file, size, target_bytes)
    except OSError as error:
        raise InputError(f"{path}: cannot be read ({error.strerror or error})") from None
    bounds = [0, *cuts, size]
    return [Chunk(path, start, end, index) for index, (start, end) in enumerate(itertools.pairwise(bounds))]


def _frame_cuts(file, size: int, target_bytes: int) -> list[int]:
    """Offsets just past whole records, one roughly every `target_bytes`; a torn tail stays in the last chunk.

    Reads the 4-byte headers alone, through the file's buffer (a seek within it costs no system call), not a map of
    the file: every page a map touches counts in the process's resident memory, ~10% of a large file."""
    cuts, chunk_start = [], 0
    for offset in record_ends(file, 0, size):
        if offset - chunk_start >= target_bytes and offset < size:
            cuts.append(offset)
            chunk_start = offset
    return cuts


def record_ends(file, offset: int, size: int) -> Iterator[int]:
    """The offset just past each whole length-prefixed record from `offset` on, within the first `size` bytes of
    `file` (open, binary), walking the 4-byte headers alone; a record cut short at the end is not one."""
    while offset + 4 <= size:
        file.seek(offset)
        header = file.read(4)
        if len(header) < 4:
            return
        (length,) = struct.unpack(">I", header)
        if offset + 4 + length > size:
            return
        offset += 4 + length
        yield offset


def _line_cuts(file, size: int, target_bytes: int) -> list[int]:
    """Offsets just past a newline, one roughly every `target_bytes`."""
    cuts, position = [], 0
    while position + target_bytes < size:
        file.seek(position + target_bytes)
        cut = None
        probed = position + target_bytes
        while cut is None:
            block = file.read(_NEWLINE_PROBE)
            if not block:
                break
            newline = block.find(b"\n")
            if newline >= 0:
                cut = probed + newline + 1
            probed += len(block)
        if cut is None or cut >= size:
            break
        cuts.append(cut)
        position = cut
    return cuts


def convert_chunk(
    chunk: Chunk,
    out_path: str,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    schema: pa.Schema = SPAN_SCHEMA,
    *,
    report_faults: bool = False,
) -> ChunkResult:
    """Decode `chunk` and write its spans to `out_path` as Parquet (zstd, row groups of `batch_rows`).

    `schema` is SPAN_SCHEMA or a projection of it (`schema.ACCOUNTING_SCHEMA`): only its columns are built.

    No file is written when the chunk holds no span. A file from which no span at all can be read (and that is
    not empty, nor just one torn record) is not a trace: `signals.NotATrace` (a TraceFormatError), as is one that
    holds only other signals. A corrupt record is a TraceFormatError named by byte offset or line: whatever the
    bytes, the input's faults surface as a GoodputError. With `report_faults`, either comes back in the result
    instead (`not_a_trace`, `corrupt`), for the load to decide (`--keep-going` skips a corrupt file). Any other
    exception is a bug in goodput and surfaces as it is.
    """
    notices: list[str] = []
    other_signals: dict[str, int] = {}
    try:
        return _convert(chunk, out_path, batch_rows, schema, notices, other_signals)
    except NotATrace as error:
        if not report_faults:
            raise
        return ChunkResult(chunk, 0, notices, other_signals, not_a_trace=error)
    except (TraceFormatError, InputError) as error:  # InputError: the file went away, or unreadable, since planned
        if not report_faults:
            raise
        return ChunkResult(chunk, 0, notices, other_signals, corrupt=error)


def _convert(
    chunk: Chunk, out_path: str, batch_rows: int, schema: pa.Schema, notices: list[str], other_signals: dict[str, int]
) -> ChunkResult:
    path = chunk.path
    kind = sniff_format(path)
    if kind == "empty":  # nothing but whitespace; or a compressed file cut before its first whole block
        with open_plain(path) as stream:
            while stream.read(1 << 20):
                pass
            torn = torn_notice(path, stream, nothing_before=True)
        return ChunkResult(chunk, 0, [torn or f"{path}: empty file skipped"])
    writer: pq.ParquetWriter | None = None
    pending: list[pa.RecordBatch] = []
    pending_rows = written = 0
    try:
        for batch in _guarded(_batches(chunk, kind, batch_rows, notices, schema, other_signals), path):
            if not batch.num_rows:
                continue
            pending.append(batch)
            pending_rows += batch.num_rows
            if pending_rows >= batch_rows:
                writer = writer or open_part(out_path, schema)
                table = pa.Table.from_batches(pending, schema=schema)
                full = pending_rows - pending_rows % batch_rows
                written += write_part(writer, table.slice(0, full), batch_rows, out_path)
                rest = table.slice(full)
                pending, pending_rows = rest.to_batches(), rest.num_rows
        if pending_rows:
            writer = writer or open_part(out_path, schema)
            written += write_part(writer, pa.Table.from_batches(pending, schema=schema), batch_rows, out_path)
        if writer is not None:
            writer.close()
    except BaseException:
        if writer is not None:
            with contextlib.suppress(Exception):  # the original error is the one to report
                writer.close()
        remove_part(out_path)
        raise
    # A file cut before its first complete record (its notice says so, `_batches`) is a torn final record with
    # nothing before it: skipped with that warning, as SPEC section 3 says a torn final record is, not "not a
    # trace" (its start is a trace record's) nor an error (a job killed in its first export, one worker of many).
    if not written and chunk.whole_file and (other_signals or not notices):
        raise not_a_trace_error(path, kind, other_signals)
    return ChunkResult(chunk, written, notices, other_signals)


def decode_range(
    path: str,
    kind: str,
    start: int,
    end: int,
    notices: list[str],
    other_signals: dict[str, int],
    *,
    lines_before: int | None = None,
    schema: pa.Schema = SPAN_SCHEMA,
) -> Iterator[pa.RecordBatch]:
    """The spans of bytes [start, end) of `path`'s plain content (`end` -1: to its end) as batches of `schema`,
    decoded exactly as `convert_chunk` decodes a chunk, for a reader that follows a file as it grows (`read.tail`).

    The range starts and ends on record boundaries. `lines_before`, the newlines before `start` of a JSON Lines
    file, words a bad line's number without counting the lines before the range again. Faults surface as in
    `convert_chunk`: a GoodputError, a TraceFormatError naming the byte offset or line of a corrupt record.
    """
    chunk = Chunk(path, start, end, 0)
    batches = _batches(chunk, kind, DEFAULT_BATCH_ROWS, notices, schema, other_signals, lines_before)
    yield from _guarded(batches, path)


def _batches(
    chunk: Chunk,
    kind: str,
    batch_rows: int,
    notices: list[str],
    schema: pa.Schema,
    other_signals: dict[str, int],
    lines_before: int | None = None,
) -> Iterator[pa.RecordBatch]:
    path = chunk.path
    if kind == "parquet":
        yield from parquet_batches(path, batch_rows, schema)
        return
    compressed = compression_of(path) is not None
    start = chunk.start
    limit = None if chunk.end < 0 else chunk.end - chunk.start
    before, records_read = len(notices), [0]  # complete records decoded, to word a cut before the first one
    with open_plain(path) as stream:
        if start:
            stream.seek(start)
        if kind in ("framed-proto", "bare-proto"):
            from .formats.framing import framed_records, read_up_to
            from .formats.otlp_proto import decode_records

            def where(offset: int) -> str:
                return f"byte {offset}" + (" of the decompressed content" if compressed else "")

            if kind == "framed-proto":
                records = framed_records(stream, path, where, start=start, limit=limit, notices=notices)
            else:
                records = iter([(0, read_up_to(stream, limit if limit is not None else 1 << 62))])
            counted = _counted(records, records_read)
            yield from decode_records(counted, path, where, min(batch_rows, DECODE_ROWS), schema, other_signals)
        else:
            yield from _json_batches(
                stream, chunk, kind, compressed, notices, schema, other_signals, lines_before, records_read
            )
        nothing_before = start == 0 and not records_read[0]
        torn = torn_notice(path, stream, nothing_before)
        if nothing_before and torn is not None:
            notices[before:] = [torn]  # the cut stream says it all: one warning, not one for its torn record too
        elif nothing_before and len(notices) > before:
            notices[-1] += f": {NOTHING_BEFORE}"
        elif torn is not None:
            notices.append(torn)


def _counted(records: Iterator[tuple[int, bytes]], count: list[int]) -> Iterator[tuple[int, bytes]]:
    for record in records:
        count[0] += 1
        yield record


def _json_batches(
    stream,
    chunk: Chunk,
    kind: str,
    compressed: bool,
    notices: list[str],
    schema: pa.Schema,
    other_signals: dict[str, int],
    lines_before: int | None = None,
    records_read: list[int] | None = None,
) -> Iterator[pa.RecordBatch]:
    from .formats.json_lines import json_line_batches
    from .formats.otlp_json import JsonDecoder

    path = chunk.path
    known_lines: list[int | None] = [0 if chunk.start == 0 else lines_before]

    def line_number(relative: int) -> int:
        before = known_lines[0]
        if before is None:
            before = known_lines[0] = _count_newlines(path, chunk.start)
        return before + relative

    def where(relative_line: int, offset: int) -> str:
        return f"line {line_number(relative_line)}"

    decoder = JsonDecoder(path, where, schema, other_signals, at_file_start=chunk.start == 0)

    def on_torn_line(relative_line: int, offset: int, text: bytes, first: bool) -> bool:
        if decoder.is_valid_json(text):
            return True
        if not _starts_like_a_record(text):  # not the torn start of a trace record: plain garbage, or a text file
            error = NotATrace if first and chunk.start == 0 else TraceFormatError
            raise error(path, where(relative_line, offset), "not valid JSON, nor an OTLP trace record")
        at = f"byte {offset}" + (" of the decompressed content" if compressed else "")
        notices.append(
            f"{path}: truncated final record at {at} (line {line_number(relative_line)}) skipped "
            f"(no newline and not valid JSON)"
        )
        return False

    try:
        limit = None if chunk.end < 0 else chunk.end - chunk.start
        for records in json_line_batches(
            stream,
            start=chunk.start,
            limit=limit,
            first_line=1,
            is_document=kind == "json-document",
            on_torn_line=on_torn_line,
        ):
            if records_read is not None:
                records_read[0] += len(records)
            yield decoder.decode(records)
    finally:
        decoder.close()


# How an OTLP JSON record begins: of traces (also in Tempo's wrapper), or of another signal sharing the file.
_RECORD_STARTS = tuple(
    b'{"' + key.encode() + b'"' for key in ("resourceSpans", "resource_spans", "batches", *JSON_SIGNAL_KEYS)
)


def _starts_like_a_record(text: bytes) -> bool:
    """Whether `text` begins as an OTLP JSON record does (or is a prefix of that beginning)."""
    head = re.sub(rb"\s+", b"", text[:64])
    return any(start.startswith(head[: len(start)]) or head.startswith(start) for start in _RECORD_STARTS)


def _count_newlines(path: str, end: int) -> int:
    """Newlines in the first `end` bytes of a plain file: the line number a chunk starts after (errors only)."""
    count, remaining = 0, end
    with open(path, "rb") as file:
        while remaining > 0:
            block = file.read(min(remaining, 16 << 20))
            if not block:
                break
            count += block.count(b"\n")
            remaining -= len(block)
    return count


def _guarded(batches: Iterator[pa.RecordBatch], path: str) -> Iterator[pa.RecordBatch]:
    """The decoder's batches, with what hostile input makes the reading itself raise turned into a GoodputError.

    The decoders word every problem of a record they meet (TraceFormatError with its offset or line); left here are
    the failures of reading the bytes at all: a corrupt compressed stream, an I/O error, nesting too deep for the
    parser, a record too large for memory. Any other exception is a bug in goodput, not a property of the file
    (an internal RuntimeError, a pyarrow or DuckDB API that changed): it goes on as it is, so the CLI reports it
    as the internal error it is (exit 3) instead of blaming the file.
    """
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except GoodputError:
            raise
        except DECOMPRESSION_ERRORS as error:
            raise read_failure(path, error) from None
        except OSError as error:
            raise read_failure(path, error) from None
        except RecursionError:
            raise TraceFormatError(path, "", "a value is nested too deeply to decode") from None
        except MemoryError:
            raise TraceFormatError(path, "", "a record is too large to decode in memory") from None
        yield batch
