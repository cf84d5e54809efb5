"""Following trace files while a job still writes them, for `goodput watch` (SPEC section 13): each poll reads only
what was appended to each file since the last one, and the files new in the folders named.

Plain framed protobuf and JSON Lines grow by whole records at their end, so each such file is read from the offset
up to which its records were consumed to the end of its last complete record; a record still being written is left
for the next poll and read once, when whole. The other shapes (compressed files, one JSON document, Parquet, bare
protobuf) cannot be entered in the middle, and are read again whole when they change; so is a file that shrank or
was replaced. Either way the poll names the files whose earlier spans are to be dropped (`TailBatch.reset`).

A fault of one file (not a trace, a corrupt record, no permission) is a note said once, never an exception: the
watch goes on with the other files, and with that one once it changes.
"""

from __future__ import annotations

import os
import re
import stat as file_mode
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from rollup.base.errors import GoodputError, InputError, TraceFormatError
from rollup.base.schema import SPAN_SCHEMA

from .chunks import decode_range, record_ends
from .paths import expand_paths
from .signals import NotATrace, not_a_trace_error, skip_notice, skipped_notice
from .sniff import UTF8_BOM, compression_of, open_plain, sniff_format

# The shapes that grow by whole records at their end, and so are read where the last poll stopped (when plain).
INCREMENTAL_FORMATS = ("framed-proto", "json-lines")
# A framed record's 4-byte length header and one byte of it: a shorter file cannot be told from junk (its header is
# still being written), nor hold a span, so it is looked at again when it grows.
SHORTEST_TRACE_BYTES = 5
_SCAN_BYTES = 1 << 20
# How the decoders place a corrupt record (`TraceFormatError.where`): its first byte, or its line.
_RECORD_PLACE = re.compile(r"(byte|line) (\d+)")


@dataclass
class TailBatch:
    """What one poll found: the new spans, the files whose spans read before are to be dropped first (a file that
    shrank, was replaced or is read again whole: its spans from its start are in `spans`; one that disappeared), the
    notes for the user (each said once), and how many trace files are followed."""

    spans: pa.Table
    reset: list[str]
    notes: list[str]
    files: int
    more: bool = False  # a file has more to read now than this poll took (`Tailer.poll_bytes`): poll again


@dataclass
class _Followed:
    """What the tailer keeps of one file between polls: which file it is (device and inode), what was seen of it,
    and how far its records were consumed."""

    path: str
    named: bool
    device: int
    inode: int
    size: int = -1  # at the last look
    mtime_ns: int = -1
    kind: str | None = None  # `sniff.FORMATS`, once told
    incremental: bool = False  # plain framed protobuf or JSON Lines: read from `offset` on
    offset: int = 0  # just past the last complete record consumed
    lines: int = 0  # newlines before `offset` (JSON Lines): a bad line's number, without counting them again
    trace: bool = False  # told to be a trace file
    behind: bool = False  # records past `offset` were left for the next poll (`Tailer.poll_bytes`)
    handed_out: bool = False  # some of its spans were in a poll's `spans`
    held_size: int | None = None  # no trace, or a corrupt record: not read again until its size is another
    unreadable: bool = False  # no permission, or gone: tried again at every poll
    signals_noted: bool = False
    said: set[str] = field(default_factory=set)

    def replaced(self, seen: os.stat_result) -> bool:
        """Whether the file is another one than followed so far: another inode, or shorter than it was."""
        return (seen.st_dev, seen.st_ino) != (self.device, self.inode) or seen.st_size < self.size

    def due(self, seen: os.stat_result) -> bool:
        """Whether the file is to be read at this poll: it grew (one read incrementally), it changed (any other)."""
        if self.held_size is not None:
            if seen.st_size == self.held_size:
                return False
            self.held_size = None
        if self.unreadable:
            return True
        if self.incremental:
            return self.behind or seen.st_size != self.size
        return (seen.st_size, seen.st_mtime_ns) != (self.size, self.mtime_ns)


@dataclass
class _Found:
    """What a poll gathers as it goes."""

    batches: list[pa.RecordBatch] = field(default_factory=list)
    reset: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    budget: int | None = None  # the bytes this poll may still read of files read from where they stopped
    more: bool = False


class Tailer:
    """Follows the trace files that `paths` name, as the command line names them (files, folders: every file below,
    hidden ones left out; globs). A path that names nothing yet is waited for: its files are read once they appear.
    Each `poll` hands out the spans new since the one before; the spans of a poll alone are held in memory, so
    with `poll_bytes` a poll reads about that many bytes of records at most (at least one record), and says when
    there is `more`: a large run already written is taken in a part at a time."""

    def __init__(
        self, paths: Sequence[str | os.PathLike[str]], schema: pa.Schema = SPAN_SCHEMA, poll_bytes: int | None = None
    ) -> None:
        self.paths = [os.fspath(path) for path in paths]
        self.schema = schema  # SPAN_SCHEMA or a projection of it: only its columns are built (`chunks.convert_chunk`)
        self.poll_bytes = poll_bytes
        self._files: dict[str, _Followed] = {}
        self._said: set[str] = set()

    def poll(self) -> TailBatch:
        """Look at every file the paths name now, and read what is new in each."""
        found = _Found(budget=self.poll_bytes)
        listed = self._listed(found)
        for path in [path for path in self._files if path not in listed]:
            self._forget(path, found)
        for path, named in listed.items():
            if found.budget is not None and found.budget <= 0:
                found.more = found.more or self._due(path)  # left as it is for the next poll
                continue
            self._look(path, named, found)
        spans = pa.Table.from_batches(found.batches, schema=self.schema)
        files = sum(followed.trace for followed in self._files.values())
        return TailBatch(spans, found.reset, found.notes, files, found.more)

    def _listed(self, found: _Found) -> dict[str, bool]:
        """The files the paths name now (absolute, resolved, as the normal reader names them), and whether each
        was named itself; a path that names none yet gets its note."""
        listed: dict[str, bool] = {}
        for text in self.paths:
            try:
                files = expand_paths([text])
            except InputError as error:
                note = _waiting_note(text, error)
                if note not in self._said:
                    self._said.add(note)
                    found.notes.append(note)
                continue
            for path, named in files:
                listed[str(path)] = listed.get(str(path), False) or named
        return listed

    def _forget(self, path: str, found: _Found) -> None:
        """Stop following `path` (gone, or another file now): its spans handed out are to be dropped."""
        followed = self._files.pop(path, None)
        if followed is not None and followed.handed_out:
            found.reset.append(path)

    def _due(self, path: str) -> bool:
        """Whether the next poll has something to read of `path`."""
        try:
            seen = os.stat(path)
        except OSError:
            return path in self._files
        followed = self._files.get(path)
        return followed is None or followed.replaced(seen) or followed.due(seen)

    def _look(self, path: str, named: bool, found: _Found) -> None:
        try:
            seen = os.stat(path)
        except OSError:  # gone since it was listed
            self._forget(path, found)
            return
        followed = self._files.get(path)
        if followed is not None and followed.replaced(seen):
            self._forget(path, found)
            followed = None
        if followed is None:
            followed = self._files[path] = _Followed(path, named, seen.st_dev, seen.st_ino)
        followed.named = named
        if not followed.due(seen):
            return
        followed.size, followed.mtime_ns, followed.unreadable = seen.st_size, seen.st_mtime_ns, False
        if not file_mode.S_ISREG(seen.st_mode):  # a pipe or a device: opening it could wait forever
            self._note(followed, f"{path}: skipped: not a regular file", found)
        elif followed.incremental:
            self._read_appended(followed, found)
        else:
            self._read_from_start(followed, found)

    def _read_from_start(self, followed: _Followed, found: _Found) -> None:
        """Tell the file's format and read it from its start: incrementally from then on when it grows by records,
        else whole, now and whenever it changes."""
        self._drop(followed, found)
        if followed.size < SHORTEST_TRACE_BYTES:  # empty so far, most likely being created
            return
        path = followed.path
        try:
            kind = sniff_format(path)
            compressed = compression_of(path) is not None
        except NotATrace as error:
            self._not_a_trace(followed, error, found)
            return
        except TraceFormatError as error:  # a compressed stream corrupt from its start
            self._note(followed, str(error), found)
            followed.held_size = followed.size
            return
        except GoodputError as error:  # no permission
            self._unreadable(followed, error, found)
            return
        if kind == "empty":
            return
        followed.kind, followed.trace = kind, True
        if kind in INCREMENTAL_FORMATS and not compressed:
            followed.incremental, followed.offset, followed.lines = True, 0, 0
            self._read_appended(followed, found)
            return
        notices: list[str] = []
        other_signals: dict[str, int] = {}
        rows = self._read_range(followed, 0, -1, 0, notices, other_signals, found)
        if found.budget is not None:
            found.budget -= followed.size
        if rows == 0 and (other_signals or not notices):
            self._not_a_trace(followed, not_a_trace_error(path, kind, other_signals), found)

    def _read_appended(self, followed: _Followed, found: _Found) -> None:
        """Read the complete records appended since the offset consumed; a record cut at the end waits."""
        path, start = followed.path, followed.offset
        allowed = followed.size - start if found.budget is None else max(found.budget, 1)
        try:
            while True:
                size = min(followed.size, start + allowed)
                end, newlines = self._records_end(followed, start, size)
                if end > start or size == followed.size:
                    break
                allowed *= 2  # the next record is larger than the budget: it is read whole all the same
        except OSError as error:
            self._unreadable(followed, InputError(f"{path}: cannot be read ({error.strerror or error})"), found)
            return
        followed.behind = size < followed.size
        found.more = found.more or followed.behind
        if found.budget is not None:
            found.budget -= end - start
        if end > start:
            self._read_range(followed, start, end, newlines, [], {}, found)

    @staticmethod
    def _records_end(followed: _Followed, start: int, size: int) -> tuple[int, int]:
        """(end, newlines): just past the last whole record from `start` within the first `size` bytes (the file's
        size as last seen, or less for a poll's budget: a last line cut there is never taken as whole)."""
        if followed.kind == "framed-proto":
            return _framed_end(followed.path, start, size), 0
        return _lines_end(followed.path, start, size, at_end=size == followed.size)

    def _read_range(
        self,
        followed: _Followed,
        start: int,
        end: int,
        newlines: int,
        notices: list[str],
        other_signals: dict[str, int],
        found: _Found,
    ) -> int | None:
        """Decode bytes [start, end) of the file (`end` -1: all of it), `newlines` of them, into `found`, and
        advance its offset past what was consumed. The spans' count when the range was read whole; else None: the
        file is no trace, cannot be read, or holds a corrupt record (noted, the spans before it kept, the offset
        left at it)."""
        batches: list[pa.RecordBatch] = []
        whole = True
        lines_before = followed.lines if followed.kind == "json-lines" else None
        stop = (end, followed.lines + newlines)
        try:
            for batch in decode_range(followed.path, followed.kind or "", start, end, notices, other_signals,
                                      lines_before=lines_before, schema=self.schema):  # fmt: skip
                batches.append(batch)
        except NotATrace as error:  # its first record is none (a JSON Lines file of something else)
            self._not_a_trace(followed, error, found)
            return None
        except TraceFormatError as error:
            whole = False
            self._note(followed, str(error), found)
            followed.held_size = followed.size
            place = _record_start(followed, start, error)
            if place is not None:
                stop = place
                batches = _decoded(followed, start, place[0], self.schema) if place[0] > start else []
            elif followed.incremental:  # where the good records end is unknown: keep none, lest one come twice
                stop, batches = (start, followed.lines), []
        except GoodputError as error:  # gone or unreadable since it was looked at
            self._unreadable(followed, error, found)
            return None
        if followed.incremental:
            followed.offset, followed.lines = stop
        for notice in notices:
            self._note(followed, notice, found)
        if other_signals and not followed.signals_noted:
            followed.signals_noted = True
            self._note(followed, skipped_notice(followed.path, other_signals), found)
        rows = sum(batch.num_rows for batch in batches)
        found.batches.extend(batch for batch in batches if batch.num_rows)
        followed.handed_out = followed.handed_out or rows > 0
        return rows if whole else None

    def _drop(self, followed: _Followed, found: _Found) -> None:
        """The file is read from its start again: the spans it gave before are to be dropped."""
        if followed.handed_out:
            found.reset.append(followed.path)
            followed.handed_out = False
        followed.incremental, followed.offset, followed.lines = False, 0, 0

    def _not_a_trace(self, followed: _Followed, error: NotATrace, found: _Found) -> None:
        """Not a trace: said as the normal reader says it (a file found in a folder is skipped; one named is an
        error, here a note), and not read again until its size changes."""
        self._note(followed, str(error) if followed.named else skip_notice(error), found)
        followed.trace = followed.incremental = False
        followed.held_size = followed.size

    def _unreadable(self, followed: _Followed, error: GoodputError, found: _Found) -> None:
        """Cannot be read now (no permission, gone): a note, and another try at the next poll (a failed open costs
        nothing, and a chmod need not change what else is seen of the file)."""
        self._note(followed, str(error), found)
        followed.unreadable = True

    def _note(self, followed: _Followed, note: str, found: _Found) -> None:
        """Say `note` of this file, once while it is the same file."""
        if note not in followed.said:
            followed.said.add(note)
            found.notes.append(note)


def _waiting_note(text: str, error: InputError) -> str:
    """What a path that names no file yet is waiting for; or, for what is no file nor folder, why not."""
    path = Path(text).expanduser()
    if path.is_dir():
        return f"waiting for files in {text}"
    if path.exists():
        return str(error)
    return f"waiting for {text} to appear"


def _framed_end(path: str, offset: int, size: int) -> int:
    """Just past the last whole length-prefixed record from `offset` within the first `size` bytes. Walks the
    4-byte headers alone through the file's buffer, never the records (`chunks.record_ends`)."""
    with open(path, "rb") as file:
        return max(record_ends(file, offset, size), default=offset)


def _lines_end(path: str, offset: int, size: int, at_end: bool = True) -> tuple[int, int]:
    """(end, newlines): just past the last complete JSON line from `offset` within the first `size` bytes, and the
    newlines before it. At the file's end (`at_end`), a last line without its newline is complete when it parses
    as JSON (a writer that ends its file without one); else it is still being written."""
    newlines, end, position = 0, offset, offset
    with open(path, "rb") as file:
        file.seek(offset)
        while position < size:
            block = file.read(min(_SCAN_BYTES, size - position))
            if not block:
                break
            count = block.count(b"\n")
            if count:
                newlines += count
                end = position + block.rindex(b"\n") + 1
            position += len(block)
        if end < position and at_end:
            file.seek(end)
            rest = file.read(position - end)
            text = rest.removeprefix(UTF8_BOM) if end == 0 else rest
            if text.strip() and _complete_json(path, text):
                end = position
    return end, newlines


def _complete_json(path: str, text: bytes) -> bool:
    """Whether `text` is valid JSON to the parser the records go through, as the decoder asks of a last line."""
    from .formats.otlp_json import JsonDecoder

    return JsonDecoder(path, lambda line, offset: "").is_valid_json(text)


def _record_start(followed: _Followed, start: int, error: TraceFormatError) -> tuple[int, int] | None:
    """(offset, newlines before it) of the corrupt record `error` names, in a file of records (framed protobuf,
    JSON Lines) read from `start`; None when it cannot be told."""
    place = _RECORD_PLACE.match(error.where)
    if place is None or followed.kind not in INCREMENTAL_FORMATS:
        return None
    number = int(place.group(2))
    if place.group(1) == "byte":
        return (number, 0) if number >= start else None
    lines_before = followed.lines if followed.incremental else 0
    offset = _line_start(followed.path, start, number - 1 - lines_before)
    return None if offset is None else (offset, number - 1)


def _line_start(path: str, start: int, newlines: int) -> int | None:
    """The offset just past the `newlines`-th newline of the plain content from `start` (`start` itself for 0)."""
    if newlines < 0:
        return None
    position = start
    try:
        with open_plain(path) as stream:
            if start:
                stream.seek(start)
            while newlines:
                block = stream.read(_SCAN_BYTES)
                if not block:
                    return None
                count = block.count(b"\n")
                if count < newlines:
                    newlines -= count
                    position += len(block)
                    continue
                index = -1
                for _ in range(newlines):
                    index = block.index(b"\n", index + 1)
                return position + index + 1
    except (GoodputError, OSError, EOFError, ValueError):
        return None
    return position


def _decoded(followed: _Followed, start: int, end: int, schema: pa.Schema) -> list[pa.RecordBatch]:
    """The batches of [start, end): the records before a corrupt one, read again up to it; none should that fail
    too (the bytes changed under the reader)."""
    lines_before = followed.lines if followed.kind == "json-lines" else None
    batches: Iterator[pa.RecordBatch] = decode_range(
        followed.path, followed.kind or "", start, end, [], {}, lines_before=lines_before, schema=schema
    )
    try:
        return list(batches)
    except GoodputError:
        return []
