"""Following trace files while a job writes them (`goodput watch`, SPEC section 13): each poll reads what was
appended since the last one, a record still being written is read once when complete, files new in a folder are
picked up, and a file that shrank, was replaced or is read again whole is named in `reset`. Real files on disk."""

from __future__ import annotations

import gzip
import json
import os
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from instrument.exporters import FramedProtobufFileExporter, JsonLinesFileExporter
from rollup.base.errors import TraceFormatError
from rollup.base.schema import SPAN_SCHEMA
from rollup.read.chunks import Chunk, convert_chunk
from rollup.read.signals import NotATrace, skip_notice
from rollup.read.sniff import sniff_format
from rollup.read.tail import TailBatch, Tailer
from tracebuild import S, step, to_json_record, to_request, write_trace

SHAPES = ["framed", "jsonl"]


@pytest.fixture(autouse=True)
def _no_inherited_owner(monkeypatch):
    """The project's exporters write a sibling file when another process owns the path; these tests own theirs."""
    monkeypatch.delenv("GOODPUT_TRACE_OWNER_PID", raising=False)


def record_spans(index: int) -> list[S]:
    """The spans of record `index`: a step of that iteration and a productive child on another process."""
    start = 10.0 * index
    return [
        step(f"s{index}", index, start, start + 4),
        S(f"g{index}", "rl.grpo.generation", start, start + 3, parent=f"s{index}", bucket="productive",
          group="generation", process="worker", attrs={"tags": ["a", "b"], "ratio": 0.5}),
    ]  # fmt: skip


def record(index: int, shape: str) -> bytes:
    """Record `index` as the writers of `shape` put it in a file: a length-prefixed message, or a JSON line."""
    if shape == "framed":
        body = to_request(record_spans(index)).SerializeToString()
        return struct.pack(">I", len(body)) + body
    return (json.dumps(to_json_record(record_spans(index))) + "\n").encode()


def corrupt_record(shape: str) -> bytes:
    """A record that is no trace record: bytes that are no OTLP message, a line that is not JSON."""
    if shape == "framed":
        return struct.pack(">I", 6) + b"\xff" * 6
    return b'{"resourceSpans": [oops\n'


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)


def read_whole(path: Path, tmp_path: Path) -> pa.Table:
    """The spans of the finished file as the normal reader gives them (one chunk to Parquet)."""
    out = tmp_path / f"whole-{path.name}.parquet"
    convert_chunk(Chunk(str(path.resolve()), 0, -1, 0), str(out))
    return pq.read_table(out).select(SPAN_SCHEMA.names)


def rows(table: pa.Table) -> list[dict]:
    """The table's rows in span-id order, for comparing spans read in pieces with spans read whole."""
    return table.sort_by("span_id").to_pylist()


def span_ids(table: pa.Table) -> set[str]:
    return set(table.column("span_id").to_pylist())


def ids_of(*indexes: int) -> set[str]:
    return {span.span_id for index in indexes for span in record_spans(index)}


def nothing_new(batch: TailBatch) -> bool:
    return batch.spans.num_rows == 0 and not batch.notes and not batch.reset


# --- appended records ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_appends_over_many_polls_give_exactly_the_spans_of_the_whole_file(tmp_path, shape):
    path = tmp_path / f"run.{shape}"
    append(path, record(0, shape))
    tailer = Tailer([path])
    pieces = [tailer.poll()]
    for index in range(1, 6):
        append(path, record(index, shape) + record(index + 10, shape) if index % 2 else record(index, shape))
        pieces.append(tailer.poll())
    pieces.append(tailer.poll())

    tailed = pa.concat_tables([piece.spans for piece in pieces])
    assert tailed.schema == SPAN_SCHEMA
    assert rows(tailed) == rows(read_whole(path, tmp_path))
    assert tailed.num_rows == 2 * (6 + 3)  # two spans a record: records 0-5, and 11, 13, 15
    assert set(tailed.column("source_file").to_pylist()) == {str(path.resolve())}
    assert all(piece.files == 1 and not piece.notes and not piece.reset for piece in pieces)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_poll_held_to_a_budget_reads_whole_records_a_part_at_a_time_and_says_there_is_more(tmp_path, shape):
    """A run already written, polled with a budget of a bit over two records: each poll takes the whole records
    that fit (at least one, however small the budget), says `more` while some are left, and the parts together
    are the file; a second file waits its turn once a poll's budget is spent."""
    folder = tmp_path / "run"
    folder.mkdir()
    path, other = folder / f"run.{shape}", folder / f"other.{shape}"
    for index in range(7):
        append(path, record(index, shape))
    append(other, record(20, shape))
    size = len(record(0, shape))
    for budget, most in [(2 * size + size // 2, 2), (1, 1)]:
        tailer = Tailer([folder], poll_bytes=budget)
        pieces = [tailer.poll()]
        while pieces[-1].more:
            assert len(pieces) < 20
            pieces.append(tailer.poll())
        assert all(0 < piece.spans.num_rows <= 2 * most for piece in pieces)  # two spans a record
        assert len(pieces) == -(-8 // most)
        tailed = pa.concat_tables([piece.spans for piece in pieces])
        whole = pa.concat_tables([read_whole(path, tmp_path), read_whole(other, tmp_path)])
        assert sorted(map(str, rows(tailed))) == sorted(map(str, rows(whole)))
        assert nothing_new(tailer.poll())
        append(path, record(30, shape))  # and it goes on following the file where it stopped
        assert span_ids(tailer.poll().spans) == ids_of(30)
        path.write_bytes(b"".join(record(index, shape) for index in range(7)))  # as it was, for the next budget


@pytest.mark.parametrize("exporter_class", [FramedProtobufFileExporter, JsonLinesFileExporter])
def test_what_the_project_exporters_write_between_polls_is_read_as_the_whole_file(tmp_path, exporter_class):
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tail-test")
    for iteration in range(4):
        with (
            tracer.start_as_current_span("rl.grpo.step", attributes={"rl.iteration": iteration}),
            tracer.start_as_current_span("rl.grpo.generation", attributes={"rl.bucket": "productive"}),
        ):
            pass
    spans = memory.get_finished_spans()
    path = tmp_path / f"run{exporter_class.suffix}"
    exporter = exporter_class(path)
    tailer = Tailer([path])
    pieces = [tailer.poll()]
    for first in range(0, len(spans), 3):
        exporter.export(spans[first : first + 3])
        pieces.append(tailer.poll())
    exporter.shutdown()

    assert pieces[0].notes == ["waiting for " + str(path) + " to appear"]
    tailed = pa.concat_tables([piece.spans for piece in pieces])
    assert tailed.num_rows == len(spans) == 8
    assert rows(tailed) == rows(read_whole(path, tmp_path))


@pytest.mark.parametrize(
    ("shape", "cut"),
    [("framed", 2), ("framed", 40), ("jsonl", 1), ("jsonl", 60)],
    ids=["framed-inside-the-header", "framed-inside-the-message", "jsonl-first-byte", "jsonl-mid-line"],
)
def test_a_record_written_in_two_halves_is_read_once_when_it_is_complete(tmp_path, shape, cut):
    path = tmp_path / f"run.{shape}"
    append(path, record(0, shape))
    tailer = Tailer([path])
    first = tailer.poll()
    torn = record(1, shape)
    append(path, torn[:cut])
    while_torn = tailer.poll()
    append(path, torn[cut:])
    complete = tailer.poll()
    after = tailer.poll()

    assert span_ids(first.spans) == ids_of(0)
    assert nothing_new(while_torn)  # a torn tail waited for is no note
    assert span_ids(complete.spans) == ids_of(1) and complete.spans.num_rows == 2
    assert nothing_new(after)
    assert rows(pa.concat_tables([first.spans, complete.spans])) == rows(read_whole(path, tmp_path))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_file_whose_first_record_is_still_being_written_is_waited_for_without_a_note(tmp_path, shape):
    path = tmp_path / f"run.{shape}"
    data = record(0, shape)
    path.write_bytes(b"")
    tailer = Tailer([path])
    empty = tailer.poll()
    for cut in (3, 30):  # a length header not all written yet; then a message cut short (a line without its end)
        append(path, data[len(path.read_bytes()) : cut])
        assert nothing_new(tailer.poll())
    append(path, data[30:])
    complete = tailer.poll()

    assert nothing_new(empty) and empty.files == 0
    assert span_ids(complete.spans) == ids_of(0) and complete.files == 1


def test_a_json_line_without_its_newline_that_parses_is_read_and_its_newline_adds_nothing(tmp_path):
    path = tmp_path / "run.jsonl"
    append(path, record(0, "jsonl") + record(1, "jsonl")[:-1])
    tailer = Tailer([path])
    both = tailer.poll()
    append(path, b"\n")
    newline = tailer.poll()
    append(path, record(2, "jsonl"))
    third = tailer.poll()

    assert span_ids(both.spans) == ids_of(0, 1) and not both.notes
    assert nothing_new(newline)
    assert span_ids(third.spans) == ids_of(2)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_consumed_part_of_a_file_is_never_read_again(tmp_path, shape):
    path = tmp_path / f"run.{shape}"
    append(path, record(0, shape))
    tailer = Tailer([path])
    tailer.poll()
    inode = path.stat().st_ino
    with open(path, "r+b") as file:  # same size, same inode: a byte in the consumed part that would not decode
        file.seek(4 if shape == "framed" else 0)  # the message's first tag; the line's opening brace
        file.write(b"\xff" if shape == "framed" else b"x")
    append(path, record(1, shape))
    after = tailer.poll()

    assert path.stat().st_ino == inode
    assert span_ids(after.spans) == ids_of(1) and after.spans.num_rows == 2
    assert not after.notes and not after.reset
    with pytest.raises(TraceFormatError):  # read whole, the overwritten byte is a fault: the tailer never saw it
        read_whole(path, tmp_path)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_poll_with_nothing_new_gives_an_empty_table_of_the_span_schema_and_no_notes(tmp_path, shape):
    path = tmp_path / f"run.{shape}"
    append(path, record(0, shape))
    tailer = Tailer([tmp_path])
    read = tailer.poll()
    again = tailer.poll()

    assert read.spans.num_rows == 2
    assert again.spans.num_rows == 0 and again.spans.schema == SPAN_SCHEMA
    assert again.notes == [] and again.reset == [] and again.files == 1


# --- files and folders -----------------------------------------------------------------------------------------------


def test_new_files_in_a_watched_folder_are_picked_up_and_a_non_trace_is_noted_once(tmp_path):
    folder = tmp_path / "run"
    write_trace(folder / "driver.otlp", record_spans(0))
    tailer = Tailer([folder])
    first = tailer.poll()
    write_trace(folder / "nested" / "worker.jsonl", record_spans(1), "jsonl")
    readme = folder / "README.md"
    readme.write_text("Traces of the nightly run.\n", encoding="utf-8")
    (folder / ".hidden.otlp").write_bytes(record(2, "framed"))
    second = tailer.poll()
    third = tailer.poll()
    readme.write_text("Traces of the nightly run, and more words.\n", encoding="utf-8")
    fourth = tailer.poll()

    with pytest.raises(NotATrace) as not_a_trace:
        sniff_format(str(readme))
    assert span_ids(first.spans) == ids_of(0) and first.files == 1
    assert span_ids(second.spans) == ids_of(1)  # the hidden file left out, as the normal reader does
    assert second.notes == [skip_notice(not_a_trace.value)]
    assert second.notes[0].startswith(f"{readme.resolve()}: skipped: ")
    assert second.files == 2
    assert nothing_new(third)
    assert nothing_new(fourth) and fourth.files == 2  # read again (it changed size), and still said once


def test_a_json_lines_file_of_something_else_in_the_folder_is_skipped_with_a_note(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "loss": 0.5}\n', encoding="utf-8")
    tailer = Tailer([tmp_path])
    first = tailer.poll()
    second = tailer.poll()

    assert first.spans.num_rows == 0 and first.files == 0
    (note,) = first.notes
    assert note.startswith(f"{metrics.resolve()}: skipped: line 1: ")
    assert nothing_new(second)


def test_a_folder_that_does_not_exist_yet_is_waited_for_and_read_once_it_holds_a_trace(tmp_path):
    folder = tmp_path / "run"
    tailer = Tailer([folder])
    missing = tailer.poll()
    still_missing = tailer.poll()
    folder.mkdir()
    empty = tailer.poll()
    write_trace(folder / "driver.jsonl", record_spans(0), "jsonl")
    there = tailer.poll()

    assert missing.notes == [f"waiting for {folder} to appear"]
    assert missing.spans.num_rows == 0 and missing.files == 0
    assert nothing_new(still_missing)
    assert empty.notes == [f"waiting for files in {folder}"]
    assert span_ids(there.spans) == ids_of(0) and there.files == 1 and not there.notes


def test_a_glob_that_matches_nothing_yet_is_waited_for(tmp_path):
    pattern = str(tmp_path / "*.otlp")
    tailer = Tailer([pattern])
    waiting = tailer.poll()
    write_trace(tmp_path / "a.otlp", record_spans(0))
    write_trace(tmp_path / "b.jsonl", record_spans(1), "jsonl")
    matched = tailer.poll()

    assert waiting.notes == [f"waiting for {pattern} to appear"]
    assert span_ids(matched.spans) == ids_of(0) and matched.files == 1


@pytest.mark.parametrize("shape", SHAPES)
def test_a_file_replaced_under_the_watcher_is_read_again_from_its_start(tmp_path, shape):
    path = tmp_path / f"run.{shape}"
    append(path, record(0, shape) + record(1, shape))
    tailer = Tailer([path])
    before = tailer.poll()
    replacement = tmp_path / "replacement.tmp"
    replacement.write_bytes(record(2, shape) + record(3, shape) + record(4, shape))
    os.replace(replacement, path)
    after = tailer.poll()

    assert span_ids(before.spans) == ids_of(0, 1)
    assert after.reset == [str(path.resolve())]
    assert rows(after.spans) == rows(read_whole(path, tmp_path))
    assert span_ids(after.spans) == ids_of(2, 3, 4)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_file_truncated_and_rewritten_shorter_is_read_again_from_its_start(tmp_path, shape):
    path = tmp_path / f"run.{shape}"
    append(path, record(0, shape) + record(1, shape) + record(2, shape))
    tailer = Tailer([path])
    tailer.poll()
    inode = path.stat().st_ino
    with open(path, "wb") as file:
        file.write(record(7, shape))
    after = tailer.poll()
    append(path, record(8, shape))
    grown = tailer.poll()

    assert path.stat().st_ino == inode
    assert after.reset == [str(path.resolve())]
    assert span_ids(after.spans) == ids_of(7)
    assert span_ids(grown.spans) == ids_of(8) and not grown.reset


def test_a_file_that_disappears_is_reset_and_no_longer_counted(tmp_path):
    kept, removed = tmp_path / "kept.otlp", tmp_path / "removed.jsonl"
    write_trace(kept, record_spans(0))
    write_trace(removed, record_spans(1), "jsonl")
    tailer = Tailer([tmp_path])
    both = tailer.poll()
    removed.unlink()
    after = tailer.poll()

    assert both.files == 2
    assert after.reset == [str(removed.resolve())]
    assert after.spans.num_rows == 0 and after.files == 1 and not after.notes


# --- read whole ------------------------------------------------------------------------------------------------------


def test_a_gzip_file_that_grows_is_read_again_whole(tmp_path):
    path = tmp_path / "run.jsonl.gz"
    write_trace(path, record_spans(0), "jsonl+gz")
    tailer = Tailer([path])
    first = tailer.poll()
    unchanged = tailer.poll()
    write_trace(path, record_spans(0) + record_spans(1) + record_spans(2), "jsonl+gz", batches=3)
    grown = tailer.poll()

    assert span_ids(first.spans) == ids_of(0) and not first.reset
    assert nothing_new(unchanged)
    assert grown.reset == [str(path.resolve())]
    assert rows(grown.spans) == rows(read_whole(path, tmp_path))
    assert span_ids(grown.spans) == ids_of(0, 1, 2)


def test_a_gzip_file_cut_short_is_read_up_to_the_cut_with_the_normal_readers_note(tmp_path):
    path = tmp_path / "run.jsonl.gz"
    lines = b"".join(record(index, "jsonl") for index in range(40))
    compressed = gzip.compress(lines)
    path.write_bytes(compressed[: len(compressed) * 3 // 4])
    tailer = Tailer([path])
    cut = tailer.poll()
    out = tmp_path / "whole.parquet"
    whole = convert_chunk(Chunk(str(path.resolve()), 0, -1, 0), str(out))

    assert 0 < cut.spans.num_rows < 80
    assert rows(cut.spans) == rows(pq.read_table(out).select(SPAN_SCHEMA.names))
    assert cut.notes == whole.notices
    assert any("the gzip stream ends inside its last member" in note for note in cut.notes)


def test_a_json_document_is_read_again_whole_when_it_changes(tmp_path):
    path = tmp_path / "run.json"
    write_trace(path, record_spans(0), "json-document")
    tailer = Tailer([path])
    first = tailer.poll()
    write_trace(path, record_spans(0) + record_spans(1), "json-document")
    second = tailer.poll()

    assert span_ids(first.spans) == ids_of(0)
    assert second.reset == [str(path.resolve())] and span_ids(second.spans) == ids_of(0, 1)


# --- faults ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_a_corrupt_record_in_an_appended_range_is_a_note_and_the_spans_before_it_are_kept(tmp_path, shape):
    path = tmp_path / f"run.{shape}"
    append(path, record(0, shape))
    tailer = Tailer([path])
    first = tailer.poll()
    append(path, record(1, shape) + record(2, shape) + corrupt_record(shape) + record(3, shape))
    corrupt = tailer.poll()
    unchanged = tailer.poll()
    append(path, record(4, shape))
    grown = tailer.poll()

    with pytest.raises(TraceFormatError) as whole_read:
        read_whole(path, tmp_path)
    assert span_ids(first.spans) == ids_of(0)
    assert span_ids(corrupt.spans) == ids_of(1, 2)
    assert corrupt.notes == [str(whole_read.value)]  # the normal reader's one line: the file, the byte or line
    where = f"byte {len(record(0, shape) + record(1, shape) + record(2, shape))}" if shape == "framed" else "line 4"
    assert corrupt.notes[0].startswith(f"{path.resolve()}: {where}: ")
    assert corrupt.files == 1
    assert nothing_new(unchanged)
    assert nothing_new(grown)  # tried again once it grew: the same record stops it, and is said once


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its permissions")
def test_a_file_that_cannot_be_read_is_a_note_and_is_read_once_it_can_be(tmp_path):
    path = tmp_path / "run.otlp"
    write_trace(path, record_spans(0))
    path.chmod(0)
    tailer = Tailer([path])
    denied = tailer.poll()
    still_denied = tailer.poll()
    path.chmod(0o644)
    allowed = tailer.poll()

    assert denied.notes == [f"{path.resolve()}: cannot be read (Permission denied)"]
    assert denied.spans.num_rows == 0
    assert nothing_new(still_denied)
    assert span_ids(allowed.spans) == ids_of(0) and not allowed.notes
