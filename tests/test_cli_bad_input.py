"""Bad input, as a user gives it: files that are no trace, SQL that fails, option values that mean nothing,
formats a command does not write, buckets, processes and iterations that are not there. Each is one line on stderr
(`Error: ...`, naming what was wrong and what would do) and exit 2, with no traceback; a range that holds no
iteration is an empty result with a note.
"""

from __future__ import annotations

import json
import re
import struct

import pytest
import zstandard

from conftest import WIDTHS, invoke, one_error_line
from tracebuild import (
    S,
    service_processes,
    step,
    three_steps,
    to_json_record,
    to_request,
    two_steps,
    write_trace,
)


def test_query_needs_a_path_and_sql():
    result = invoke(["query", "only-one-argument"], width=120)
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p / "missing.otlp", "no such file or directory"),
        (lambda p: (p / "notes.txt").write_text("just some text\n") and p / "notes.txt", "notes.txt"),
        (lambda p: (p / "doc.json").write_text('{"hello": 1}') and p / "doc.json", "doc.json"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "directory holds no trace files"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_traceback(tmp_path, make, expected):
    path = make(tmp_path)
    for command in (["report", str(path)], ["check", str(path)], ["query", str(path), "SELECT 1"]):
        result = invoke(command, width=120)
        assert result.exit_code == 2, (command, result.output)
        assert result.stderr.startswith("Error: ") and expected in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.output


def test_sql_errors_are_one_line_exit_2(tmp_path):
    result = invoke(["query", str(two_steps(tmp_path)), "SELECT nope FROM spans"], width=120)
    assert result.exit_code == 2 and result.stderr.startswith("Error: SQL: ")


def test_bad_option_values_are_usage_errors(tmp_path):
    path = str(two_steps(tmp_path))
    assert invoke(["report", path, "--iterations", "x"], width=120).exit_code == 2
    assert invoke(["report", path, "--by", "host"], width=120).exit_code == 2
    bad = invoke(["report", path, "--precedence", "idle,productive"], width=120)
    assert bad.exit_code == 2 and "--precedence" in bad.stderr


# --- formats, buckets and processes that are not there ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("command", [["check"], ["spans", "-i", "1"], ["query", "SELECT 1"]])
@pytest.mark.parametrize("suffix", [".html", ".jsonl"])
def test_the_reports_own_formats_are_refused_by_other_commands_naming_those_they_write(tmp_path, command, suffix):
    out = tmp_path / f"r{suffix}"
    trace = str(three_steps(tmp_path))
    args = [command[0], trace, *command[1:], "-o", str(out)]
    result = invoke(args, width=80)
    assert result.exit_code == 2
    text = " ".join(result.stderr.split())
    assert "format of `goodput report` only" in text and "table, json, csv, markdown" in text
    assert not out.exists()
    by_flag = invoke([command[0], trace, *command[1:], "--format", suffix[1:]], width=80)
    assert by_flag.exit_code == 2 and "--format" in by_flag.stderr
    diff = invoke(["diff", trace, trace, "-o", str(out)], width=80)
    assert diff.exit_code == 2


@pytest.mark.parametrize("width", WIDTHS)
def test_an_unknown_bucket_is_refused_naming_the_four(tmp_path, width):
    result = invoke(["spans", str(three_steps(tmp_path)), "-i", "2", "--bucket", "prod"], width=width)
    assert result.exit_code == 2
    text = " ".join(result.stderr.split())
    assert "'prod' is not a bucket" in text and "productive, overhead, idle, wasted" in text
    assert result.stdout == ""


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_an_unknown_process_is_an_error_naming_the_processes(tmp_path, width):
    result = invoke(["spans", str(service_processes(tmp_path)), "--process", "grpo-gen"], width=width)
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert "no process 'grpo-gen'" in line
    assert "grpo-driver@vm:10, grpo-generation@vm:11, grpo-generation@vm:12" in line


# --- iterations that are not there ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [["report", "-i", "99"], ["spans", "-i", "99"], ["check", "-i", "99"], ["report", "-f", "json", "-i", "99"]],
)
def test_an_iteration_asked_for_that_is_not_there_is_exit_2_everywhere_naming_those_there_are(tmp_path, args):
    result = invoke([args[0], str(three_steps(tmp_path)), *args[1:]], width=80)
    assert result.exit_code == 2, result.output
    assert one_error_line(result.stderr) == "Error: no iteration 99 in these traces; they hold iterations 1-3"
    assert result.stdout == ""


@pytest.mark.slow
@pytest.mark.parametrize("command", ["report", "check"])
def test_a_range_that_holds_no_iteration_is_an_empty_result_with_a_note_naming_those_there_are(tmp_path, command):
    spans = [step(f"s{i}", i, i, i + 1) for i in (1, 2, 3, 7, 9, 10)]
    path = str(write_trace(tmp_path / "run.otlp", spans))
    result = invoke([command, path, "--iterations", "4:6", "-f", "json"], width=80)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["iterations" if command == "report" else "findings"] == []
    assert result.stderr == "note: no iteration in the range 4:6 in these traces; they hold iterations 1-3, 7, 9-10\n"
    result = invoke([command, path, "--iterations", "11:", "-f", "json"], width=80)
    assert result.exit_code == 0 and "no iteration in the range 11: in these traces" in result.stderr
    result = invoke([command, path, "--iterations", "3:7", "-f", "json"], width=80)
    assert result.exit_code == 0 and result.stderr == ""


def test_many_iterations_are_named_by_their_first_runs_and_their_last(tmp_path):
    spans = [step(f"s{i}", i, i, i + 1) for i in range(0, 40, 2)]  # 0, 2, ..., 38: twenty runs of one
    result = invoke(["spans", str(write_trace(tmp_path / "run.otlp", spans)), "-i", "5"], width=80)
    assert one_error_line(result.stderr) == (
        "Error: no iteration 5 in these traces; they hold iterations 0, 2, 4, 6, 8, 10, ..., 38 (20 in all)"
    )


def test_no_iteration_at_all_is_named_as_such(tmp_path):
    path = write_trace(tmp_path / "run.otlp", [S("a", "rl.grpo.generation", 0, 1, bucket="productive")])
    result = invoke(["spans", str(path), "-i", "1"], width=80)
    assert result.exit_code == 2
    assert "they hold no iteration" in one_error_line(result.stderr)


def test_console_exporter_output_is_named_for_what_it_is(tmp_path):
    """The SDK's ConsoleSpanExporter prints each span as a JSON object of its own: not a corrupt OTLP file."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    path = tmp_path / "console.json"
    with path.open("w") as out:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
        for i in range(3):
            with provider.get_tracer("job").start_as_current_span(f"step{i}"):
                pass
        provider.shutdown()
    result = invoke(["report", str(path)], width=120)
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert line.startswith(f"Error: {path}: ConsoleSpanExporter output") and "not OTLP" in line
    assert "json-file or otlp-file exporter" in line and "not valid JSON" not in line


def test_an_error_in_a_pretty_printed_document_names_its_real_line_and_the_id_as_written(tmp_path):
    record = to_json_record([step("s1", 1, 0, 10), S("g", "rl.grpo.generation", 1, 2, parent="s1")])
    text = json.dumps(record, indent=2).replace(record["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["spanId"],
                                                "ABCDEF012345678Z")  # fmt: skip
    line = next(n for n, content in enumerate(text.splitlines(), 1) if "ABCDEF012345678Z" in content)
    assert line > 1
    path = tmp_path / "pretty.json"
    path.write_text(text)
    result = invoke(["report", str(path)], width=120)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == (
        f"Error: {path}: line {line}: a span has spanId 'ABCDEF012345678Z', expected an 8-byte span id"
    )


# --- a corrupt record is named where it is, in the user's words -------------------------------------------------------

BAD_TRACE_ID = "ZZZZ" + "0" * 28


def _line_of(text: str, needle: str) -> int:
    """The number of the (only) line of `text` holding `needle`."""
    (line,) = [number for number, content in enumerate(text.splitlines(), 1) if needle in content]
    return line


def _snake_case(value):
    """A record with proto field names (`resource_spans`, `string_value`), as proto3 JSON also writes it."""
    if isinstance(value, dict):
        return {re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower(): _snake_case(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_snake_case(item) for item in value]
    return value


@pytest.mark.parametrize("names", ["otlp", "proto-field-names", "tempo-batches"])
def test_a_bad_id_in_a_pretty_printed_document_is_named_at_its_own_line_not_where_its_text_first_occurs(
    tmp_path, names
):
    """The resource holds an attribute with the very text of the bad trace id, lines before the span's."""
    record = to_json_record([step("s1", 1, 0, 10), S("g", "rl.grpo.generation", 1, 2, parent="s1")],
                            {"driver": {"service.name": "svc", "note": BAD_TRACE_ID}})  # fmt: skip
    record["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["traceId"] = BAD_TRACE_ID
    key = "traceId"
    if names == "proto-field-names":
        record, key = _snake_case(record), "trace_id"
    elif names == "tempo-batches":
        record = {"batches": record["resourceSpans"]}
    text = json.dumps(record, indent=2)
    line = _line_of(text, f'"{key}": "{BAD_TRACE_ID}"')
    assert text.index(BAD_TRACE_ID) < text.index(f'"{key}": "{BAD_TRACE_ID}"')  # the resource's comes first
    path = tmp_path / "pretty.json"
    path.write_text(text)
    result = invoke(["report", str(path)], width=120)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == (
        f"Error: {path}: line {line}: a span has traceId '{BAD_TRACE_ID}', expected a 16-byte trace id"
    )


def _three_spans() -> list[S]:
    return [step("s1", 1, 0, 10), S("g", "rl.grpo.generation", 1, 2, parent="s1"), S("r", "rl.grpo.reward", 3, 4)]


def _write_json(path, records: list[dict], shape: str) -> str:
    """`records` as JSON Lines, or merged into one pretty-printed document; the text written."""
    if shape == "jsonl":
        text = "".join(json.dumps(record) + "\n" for record in records)
    else:
        text = json.dumps({"resourceSpans": [rs for record in records for rs in record["resourceSpans"]]}, indent=2)
    path.write_text(text)
    return text


# Without the cache, JSON Lines are read by DuckDB alone first (`duckdb_json`), which hands a file it doubts to the
# careful reader; the cache is filled by the careful reader alone. Both must word the error alike.
@pytest.mark.parametrize("cache", [[], ["--no-cache"]])
@pytest.mark.parametrize("shape", ["jsonl", "json-document"])
def test_a_bad_span_time_is_named_at_its_own_line(tmp_path, shape, cache):
    records = [to_json_record([span]) for span in _three_spans()]
    records[2]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = "soon"
    path = tmp_path / f"run.{shape}"
    line = _line_of(_write_json(path, records, shape), '"soon"')
    assert line > 1
    result = invoke(["report", str(path), *cache], width=120)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == (
        f"Error: {path}: line {line}: a span has startTimeUnixNano 'soon', expected an integer count of nanoseconds"
    )


def test_a_bad_event_time_in_a_pretty_printed_document_is_named_at_its_own_line(tmp_path):
    record = to_json_record(_three_spans())
    span = record["resourceSpans"][0]["scopeSpans"][0]["spans"][1]
    span["events"] = [{"timeUnixNano": str(10**18), "name": "ok"}, {"timeUnixNano": "later", "name": "exception"}]
    path = tmp_path / "events.json"
    path.write_text(text := json.dumps(record, indent=2))
    result = invoke(["query", str(path), "SELECT count(*) FROM spans"], width=120)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == (
        f"Error: {path}: line {_line_of(text, 'later')}: a span event has timeUnixNano 'later', expected an integer "
        "count of nanoseconds"
    )


def _corrupt_int(record: dict, where: str, key: str = "tokens", value="notanint") -> None:
    """Give `record` an attribute `key` whose intValue is `value`: on its second span, its resource or an event."""
    resource_spans = record["resourceSpans"][0]
    entry = {"key": key, "value": {"intValue": value}}
    if where == "resource":
        resource_spans["resource"]["attributes"].append(entry)
    elif where == "event":
        resource_spans["scopeSpans"][0]["spans"][1]["events"] = [{"name": "e", "attributes": [entry]}]
    else:
        resource_spans["scopeSpans"][0]["spans"][1]["attributes"].append(entry)


EXPECTED_INT = "expected a 64-bit integer (as a string or a number)"


@pytest.mark.parametrize("cache", [[], ["--no-cache"]])
@pytest.mark.parametrize(
    ("shape", "where", "key", "value", "said"),
    [
        ("jsonl", "span", "tokens", "notanint", "attribute 'tokens' has intValue 'notanint'"),
        ("jsonl", "span", "rl.iteration", "3x", "attribute 'rl.iteration' has intValue '3x'"),
        ("jsonl", "span", "tokens", 1.5, "attribute 'tokens' has intValue '1.5'"),
        ("jsonl", "span", "tokens", "99999999999999999999", "attribute 'tokens' has intValue '99999999999999999999'"),
        ("jsonl", "resource", "process.pid", "pid-7", "attribute 'process.pid' has intValue 'pid-7'"),
        ("json-document", "span", "tokens", "notanint", "attribute 'tokens' has intValue 'notanint'"),
        ("json-document", "resource", "gpu.count", "two", "attribute 'gpu.count' has intValue 'two'"),
    ],
)
def test_an_int_value_that_is_no_integer_is_an_error_naming_the_attribute_and_its_line(
    tmp_path, shape, where, key, value, said, cache
):
    """Not an attribute quietly left empty (which would drop a span's iteration without a word): corruption before
    the end of a file is an error (SPEC section 3), for DuckDB's direct read and the careful reader alike."""
    records = [to_json_record(_three_spans()[:1]), to_json_record(_three_spans()[1:])]  # the second: line 2 of JSONL
    _corrupt_int(records[1], where, key, value)
    path = tmp_path / f"run.{shape}"
    text = _write_json(path, records, shape)
    line = _line_of(text, json.dumps(value)) if shape == "json-document" else 2
    result = invoke(["report", str(path), *cache], width=120)
    assert result.exit_code == 2
    suffix = ", in a resource" if where == "resource" else ""
    assert one_error_line(result.stderr) == f"Error: {path}: line {line}: {said}, {EXPECTED_INT}{suffix}"


def test_an_int_value_that_is_no_integer_in_an_event_is_named_when_events_are_read(tmp_path):
    record = to_json_record(_three_spans())
    _corrupt_int(record, "event")
    path = tmp_path / "events.json"
    path.write_text(text := json.dumps(record, indent=2))
    result = invoke(["query", str(path), "SELECT count(*) FROM spans"], width=120)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == (
        f"Error: {path}: line {_line_of(text, 'notanint')}: attribute 'tokens' has intValue 'notanint', "
        f"{EXPECTED_INT}, in an event"
    )


@pytest.mark.parametrize("compression", ["plain", "zstd"])
def test_a_corrupt_protobuf_record_says_what_was_expected_not_the_readers_own_class(tmp_path, compression):
    good = to_request(_three_spans()).SerializeToString()
    garbage = b"\xff" * 40
    framed = b"".join(struct.pack(">I", len(body)) + body for body in (good, garbage, good))
    path = tmp_path / ("run.otlp.zst" if compression == "zstd" else "run.otlp")
    path.write_bytes(zstandard.ZstdCompressor().compress(framed) if compression == "zstd" else framed)
    result = invoke(["report", str(path)], width=120)
    assert result.exit_code == 2
    where = f"byte {4 + len(good)}" + (" of the decompressed content" if compression == "zstd" else "")
    assert one_error_line(result.stderr) == (
        f"Error: {path}: {where}: record of 40 bytes is not an OTLP protobuf trace record (a TracesData or "
        "ExportTraceServiceRequest message): wire format was corrupt"
    )
