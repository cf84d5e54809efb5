"""Trace files in every shape the contract names, written by real writers, read back into the span schema."""

from __future__ import annotations

import base64
import copy
import gzip
import io
import json
import os
import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, StatusCode

from conftest import invoke
from instrument.exporters import FramedProtobufFileExporter, JsonLinesFileExporter
from rollup.base.errors import GoodputError, InputError, TraceFormatError
from rollup.base.schema import SPAN_SCHEMA
from rollup.read.chunks import Chunk, convert_chunk, plan_chunks
from rollup.read.plan import MIN_CHUNK_BYTES, _chunk_target
from rollup.read.sniff import sniff_format
from tracebuild import S, hex_id, write_trace

# --- spans and writers ----------------------------------------------------------------------------------------------

ATTRIBUTES = {
    "rl.span_group": "generation",
    "rl.bucket": "productive",
    "rl.iteration": 3,
    "ratio": 0.25,
    "ok": True,
    "tags": ["a", "b"],
    "counts": [1, 2],
    "weights": [0.5, 1.0],
    "flags": [True, False],
}
# The same values as stored: schema.py's rendering, written out by hand.
ATTRIBUTE_TEXT = {
    "rl.span_group": "generation",
    "rl.bucket": "productive",
    "rl.iteration": "3",
    "ratio": "0.25",
    "ok": "true",
    "tags": '["a","b"]',
    "counts": "[1,2]",
    "weights": "[0.5,1.0]",
    "flags": "[true,false]",
}


@pytest.fixture(autouse=True)
def _no_inherited_owner(monkeypatch):
    """The project's exporters write a sibling file when another process owns the path; these tests own theirs."""
    monkeypatch.delenv("GOODPUT_TRACE_OWNER_PID", raising=False)


@pytest.fixture(scope="module")
def sdk_spans():
    return make_sdk_spans()


def make_sdk_spans():
    """Real SDK spans: a root with three children, attributes of every type the SDK allows, an error status with the
    exception recorded as an event, a link from one child to another."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "trainer", "service.instance.id": "inst-1"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("goodput.test", "1.0")
    with tracer.start_as_current_span("rl.grpo.step", attributes={"rl.span_group": "step", "rl.iteration": 3}):
        linked = []
        for index in range(3):
            kind = SpanKind.SERVER if index == 1 else SpanKind.INTERNAL
            links = [Link(linked[0], {"rl.link": "previous"})] if index == 1 else []
            with tracer.start_as_current_span(
                "rl.grpo.generation", kind=kind, attributes=ATTRIBUTES, links=links, record_exception=False
            ) as span:
                linked.append(span.get_span_context())
                if index == 2:
                    span.record_exception(MemoryError("out of memory"), attributes={"rl.retry": 2})
                    span.set_status(StatusCode.ERROR, "out of memory")
    provider.shutdown()
    return list(memory.get_finished_spans())


def _text(value) -> str:
    """An event's or link's attribute value as stored (only the kinds the SDK spans above use)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def expected_rows(spans) -> list[dict]:
    """What the readers must produce for `spans`, derived from the SDK objects, not from any reader."""
    rows = []
    for span in spans:
        leaf = span.name.endswith("generation")
        rows.append(
            {
                "trace_id": format(span.context.trace_id, "032x"),
                "span_id": format(span.context.span_id, "016x"),
                "parent_span_id": format(span.parent.span_id, "016x") if span.parent else None,
                "name": span.name,
                "kind": span.kind.value + 1,  # the SDK counts from INTERNAL = 0, OTLP from UNSPECIFIED = 0
                "start_ns": span.start_time,
                "end_ns": span.end_time,
                "duration_ns": span.end_time - span.start_time,
                "status_code": span.status.status_code.value,
                "status_message": span.status.description or "",
                "attributes": ATTRIBUTE_TEXT if leaf else {"rl.span_group": "step", "rl.iteration": "3"},
                "events": [
                    {
                        "time_ns": event.timestamp,
                        "name": event.name,
                        "attributes": [(key, _text(value)) for key, value in event.attributes.items()],
                    }
                    for event in span.events
                ],
                "links": [
                    {
                        "trace_id": format(link.context.trace_id, "032x"),
                        "span_id": format(link.context.span_id, "016x"),
                        "attributes": [(key, _text(value)) for key, value in link.attributes.items()],
                    }
                    for link in span.links
                ],
                "scope_name": "goodput.test",
                "scope_version": "1.0",
                "service": "trainer",
                "process": "inst-1",
                "host_pid": None,  # the resource names neither host nor pid
                "run_id": None,
                "holding": None,  # the resource holds no GPU and names no fleet
                "bucket": "productive" if leaf else None,
                "iteration": 3,
                "span_group": "generation" if leaf else "step",
                "efficiency_category": None,
                "fleet": None,
            }
        )
    return sorted(rows, key=lambda row: row["span_id"])


def write_project_framed(path: Path, spans) -> None:
    exporter = FramedProtobufFileExporter(path)
    exporter.export(spans[:2])
    exporter.export(spans[2:])
    exporter.shutdown()


def write_project_json_lines(path: Path, spans) -> None:
    exporter = JsonLinesFileExporter(path)
    exporter.export(spans[:2])
    exporter.export(spans[2:])
    exporter.shutdown()


def write_official_json_lines(path: Path, spans) -> None:
    exporter = FileSpanExporter(path)
    exporter.export(spans[:3])
    exporter.export(spans[3:])
    exporter.shutdown()


def collector_framing(messages) -> bytes:
    """The Collector `file` exporter's `format: proto` framing: a 4-byte big-endian length before each message."""
    return b"".join(struct.pack(">I", len(m)) + m for m in messages)


def write_sdk_framed(path: Path, spans) -> None:
    messages = [encode_spans(spans[:1]).SerializeToString(), encode_spans(spans[1:]).SerializeToString()]
    path.write_bytes(collector_framing(messages))


def write_sdk_bare(path: Path, spans) -> None:
    path.write_bytes(encode_spans(spans).SerializeToString())


WRITERS = {
    "project-framed": write_project_framed,
    "project-jsonl": write_project_json_lines,
    "official-jsonl": write_official_json_lines,
    "sdk-framed": write_sdk_framed,
    "sdk-bare": write_sdk_bare,
}


def zstd_frames(data: bytes, pieces: int = 3) -> bytes:
    """Several zstd frames one after another, as appending writers and `pzstd` produce."""
    step = max(1, len(data) // pieces)
    compressor = zstandard.ZstdCompressor()
    return b"".join(compressor.compress(data[i : i + step]) for i in range(0, len(data), step))


COMPRESSIONS = {
    "plain": lambda data: data,
    "gzip": gzip.compress,
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
    "zstd-frames": zstd_frames,
}


def compressed_copy(path: Path, compression: str) -> Path:
    """`path`'s bytes under `compression`, in a file whose name says nothing about its content."""
    target = path.with_name(f"{path.name}.{compression}.trace")
    target.write_bytes(COMPRESSIONS[compression](path.read_bytes()))
    return target


def read_back(path: Path, out_dir: Path, target_bytes: int = 64 << 20, batch_rows: int = 65_536):
    """Plan and convert every chunk of `path`; the rows (sorted by span id) and the results."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results, tables = [], []
    for chunk in plan_chunks(str(path), target_bytes=target_bytes):
        out = out_dir / f"{path.name}-{chunk.index}.parquet"
        result = convert_chunk(chunk, str(out), batch_rows=batch_rows)
        results.append(result)
        if result.spans:
            tables.append(pq.read_table(out))
        else:
            assert not out.exists()
    table = pa.concat_tables(tables) if tables else SPAN_SCHEMA.empty_table()
    assert table.schema.equals(SPAN_SCHEMA)
    return table.sort_by("span_id"), results


def comparable(table: pa.Table) -> list[dict]:
    """Rows without the columns that depend on the SDK's defaults or the file (resource, source_file)."""
    rows = table.drop_columns(["resource", "source_file"]).to_pylist()
    for row in rows:
        row["attributes"] = dict(row["attributes"])
    return rows


# --- every shape ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("writer", WRITERS)
def test_every_writer_and_compression_reads_back_the_spans(tmp_path, sdk_spans, writer, compression):
    plain = tmp_path / "trace.data"  # a suffix: the project's exporters take a bare name for a directory
    WRITERS[writer](plain, sdk_spans)
    path = compressed_copy(plain, compression)

    table, results = read_back(path, tmp_path)

    assert comparable(table) == expected_rows(sdk_spans)
    assert table.column("source_file").unique().to_pylist() == [str(path)]
    resource = dict(table.column("resource")[0].as_py())
    assert resource["service.name"] == "trainer" and resource["telemetry.sdk.language"] == "python"
    assert [n for r in results for n in r.notices] == []


def test_formats_are_told_by_content_not_by_name(tmp_path, sdk_spans):
    shapes = {
        "project-framed": "framed-proto",
        "sdk-framed": "framed-proto",
        "sdk-bare": "bare-proto",
        "project-jsonl": "json-lines",
        "official-jsonl": "json-lines",
    }
    for writer, expected in shapes.items():
        path = tmp_path / f"{writer}.jsonl.gz"  # a misleading name on purpose
        WRITERS[writer](path, sdk_spans)
        assert sniff_format(str(path)) == expected
        assert sniff_format(str(compressed_copy(path, "gzip"))) == expected
    (tmp_path / "empty.otlp").write_bytes(b"")
    assert sniff_format(str(tmp_path / "empty.otlp")) == "empty"
    (tmp_path / "blank.jsonl").write_bytes(b"\n \n")
    assert sniff_format(str(tmp_path / "blank.jsonl")) == "empty"


def test_bare_message_that_starts_like_json_is_protobuf(tmp_path):
    """0x0a then a length of 123 reads as newline, `{`: the sniffer must not take it for JSON."""
    path = Path(__file__).parent / "corpus" / "bare-proto-starting-newline-brace.pb"
    assert path.read_bytes()[:2] == b"\n{"
    assert sniff_format(str(path)) == "bare-proto"
    table, _ = read_back(path, tmp_path)
    assert table.column("trace_id").to_pylist() == ["ab" * 16]


def test_protobuf_and_json_give_identical_rows_for_the_same_spans(tmp_path, sdk_spans):
    write_project_framed(tmp_path / "spans.otlp", sdk_spans)
    write_project_json_lines(tmp_path / "spans.jsonl", sdk_spans)

    from_proto, _ = read_back(tmp_path / "spans.otlp", tmp_path)
    from_json, _ = read_back(tmp_path / "spans.jsonl", tmp_path)

    assert from_proto.num_rows == len(sdk_spans)
    assert from_proto.drop_columns(["source_file"]).equals(from_json.drop_columns(["source_file"]))


# --- hand-written OTLP: every value shape, both formats -------------------------------------------------------------


def every_shape_message() -> trace_pb2.TracesData:
    """A TracesData holding every AnyValue shape, a root and a child, a client kind and an error status."""

    def value(**kwargs) -> common_pb2.AnyValue:
        return common_pb2.AnyValue(**kwargs)

    def array(*items) -> common_pb2.AnyValue:
        return value(array_value=common_pb2.ArrayValue(values=items))

    nested = common_pb2.KeyValueList(
        values=[
            common_pb2.KeyValue(key="inner", value=array(value(int_value=1))),
            common_pb2.KeyValue(key="raw", value=value(bytes_value=b"\x00\xff")),
        ]
    )
    attributes = [
        ("s", value(string_value="text")),
        ("i", value(int_value=-(2**63))),
        ("big", value(int_value=2**63 - 1)),
        ("d", value(double_value=0.1)),
        ("whole", value(double_value=3.0)),
        ("nan", value(double_value=float("nan"))),
        ("inf", value(double_value=float("-inf"))),
        ("b", value(bool_value=False)),
        ("bytes", value(bytes_value=b"\x01\x02\xfe")),
        ("array", array(value(string_value="x"), value(double_value=1.5), value(bool_value=True), value())),
        ("kvlist", value(kvlist_value=nested)),
        ("empty", value()),
        ("rl.iteration", value(string_value="7")),
        ("rl.bucket", value(string_value="idle")),
        ("rl.efficiency.category", value(string_value="idle/refit_bubble")),
    ]
    root = trace_pb2.Span(
        trace_id=bytes.fromhex("ABCDEF0123456789ABCDEF0123456789"),
        span_id=bytes.fromhex("00000000000000AA"),
        name="rl.idle.refit_bubble",
        kind=trace_pb2.Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=1_700_000_000_000_000_000,
        end_time_unix_nano=1_700_000_001_500_000_000,
        attributes=[common_pb2.KeyValue(key=k, value=v) for k, v in attributes],
        status=trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_ERROR, message="failed"),
    )
    child = trace_pb2.Span(
        trace_id=root.trace_id,
        span_id=bytes.fromhex("00000000000000BB"),
        parent_span_id=root.span_id,
        name="child",
        start_time_unix_nano=1_700_000_000_000_000_001,
        end_time_unix_nano=1_700_000_000_000_000_002,
        attributes=[common_pb2.KeyValue(key="rl.iteration", value=value(double_value=8.0))],
    )
    resource_attributes = [
        common_pb2.KeyValue(key="host.name", value=value(string_value="node-1")),
        common_pb2.KeyValue(key="process.pid", value=value(int_value=4242)),
        common_pb2.KeyValue(key="service.name", value=value(string_value="learner")),
    ]
    message = trace_pb2.TracesData()
    resource_spans = message.resource_spans.add()
    resource_spans.resource.attributes.extend(resource_attributes)
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "hand"
    scope_spans.spans.extend([root, child])
    return message


EVERY_SHAPE_TEXT = {
    "s": "text",
    "i": "-9223372036854775808",
    "big": "9223372036854775807",
    "d": "0.1",
    "whole": "3.0",
    "nan": "nan",
    "inf": "-inf",
    "b": "false",
    "bytes": "AQL+",
    "array": '["x",1.5,true,null]',
    "kvlist": '{"inner":[1],"raw":"AP8="}',
    "empty": None,
    "rl.iteration": "7",
    "rl.bucket": "idle",
    "rl.efficiency.category": "idle/refit_bubble",
}


def otlp_json(message: trace_pb2.TracesData, proto_names: bool = False) -> dict:
    """The message in OTLP JSON: proto3's JSON mapping (int64 as strings, enum names) with ids in upper-case hex."""
    document = MessageToDict(message, preserving_proto_field_name=proto_names)
    name = {"resourceSpans": "resource_spans", "scopeSpans": "scope_spans", "traceId": "trace_id"}
    name.update({"spanId": "span_id", "parentSpanId": "parent_span_id"})
    pick = (lambda key: name[key]) if proto_names else (lambda key: key)
    for resource_spans in document[pick("resourceSpans")]:
        for scope_spans in resource_spans[pick("scopeSpans")]:
            for span in scope_spans["spans"]:
                for key in map(pick, ("traceId", "spanId", "parentSpanId")):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex().upper()
    return document


def test_every_value_shape_reads_the_same_from_protobuf_and_json(tmp_path):
    message = every_shape_message()
    (tmp_path / "shapes.pb").write_bytes(message.SerializeToString())
    document = otlp_json(message)
    assert document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["kind"] == "SPAN_KIND_CLIENT"
    (tmp_path / "shapes.jsonl").write_text(json.dumps(document) + "\n")
    (tmp_path / "pretty.json").write_text(json.dumps(document, indent=2))

    from_proto, _ = read_back(tmp_path / "shapes.pb", tmp_path)
    from_json, _ = read_back(tmp_path / "shapes.jsonl", tmp_path)
    from_pretty, _ = read_back(tmp_path / "pretty.json", tmp_path)

    root, child = from_proto.to_pylist()
    assert dict(root["attributes"]) == EVERY_SHAPE_TEXT
    assert root["trace_id"] == "abcdef0123456789abcdef0123456789" and root["parent_span_id"] is None
    assert (root["kind"], root["status_code"], root["status_message"]) == (3, 2, "failed")
    assert root["duration_ns"] == 1_700_000_001_500_000_000 - 1_700_000_000_000_000_000
    assert (root["iteration"], root["bucket"], root["efficiency_category"]) == (7, "idle", "idle/refit_bubble")
    assert (child["iteration"], child["parent_span_id"]) == (8, "00000000000000aa")  # 8.0 is an integral double
    assert (root["service"], root["process"], root["scope_version"]) == ("learner", "learner@node-1:4242", "")
    without_file = from_proto.drop_columns(["source_file"])
    assert without_file.equals(from_json.drop_columns(["source_file"]))
    assert without_file.equals(from_pretty.drop_columns(["source_file"]))


def test_json_variants_the_mapping_allows(tmp_path):
    """Numbers for int64s, kind and status as numbers, lower-case ids, snake_case keys: all read alike."""
    document = otlp_json(every_shape_message())
    variant = copy.deepcopy(document)
    spans = variant["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for span in spans:
        span["traceId"] = span["traceId"].lower()
        span["startTimeUnixNano"] = int(span["startTimeUnixNano"])
        span["endTimeUnixNano"] = int(span["endTimeUnixNano"])
    spans[0]["kind"] = 3
    spans[0]["status"]["code"] = 2
    for attribute in spans[0]["attributes"]:
        if "intValue" in attribute["value"]:
            attribute["value"]["intValue"] = int(attribute["value"]["intValue"])
    snake = otlp_json(every_shape_message(), proto_names=True)  # proto3 JSON with the .proto field names
    assert "resource_spans" in snake and "string_value" in json.dumps(snake)
    (tmp_path / "camel.jsonl").write_text(json.dumps(document) + "\n")
    (tmp_path / "numbers.jsonl").write_text(json.dumps(variant) + "\n")
    (tmp_path / "snake.jsonl").write_text(json.dumps(snake) + "\n")

    reference, _ = read_back(tmp_path / "camel.jsonl", tmp_path)
    for name in ("numbers.jsonl", "snake.jsonl"):
        table, _ = read_back(tmp_path / name, tmp_path)
        assert table.drop_columns(["source_file"]).equals(reference.drop_columns(["source_file"])), name


def test_json_special_doubles_and_base64_alphabets(tmp_path):
    values = [
        {"key": "nan", "value": {"doubleValue": "NaN"}},
        {"key": "inf", "value": {"doubleValue": "Infinity"}},
        {"key": "text_double", "value": {"doubleValue": "2.5"}},
        {"key": "url_bytes", "value": {"bytesValue": "-_8"}},
        {"key": "number_int", "value": {"intValue": 12}},
        {"key": "missing", "value": {}},
        {"key": "no_value"},
    ]
    span = {"traceId": "AB" * 16, "spanId": "CD" * 8, "parentSpanId": "", "name": "s", "attributes": values}
    line = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    (tmp_path / "special.jsonl").write_text(json.dumps(line) + "\n")

    (row,) = read_back(tmp_path / "special.jsonl", tmp_path)[0].to_pylist()

    assert dict(row["attributes"]) == {
        "nan": "nan",
        "inf": "inf",
        "text_double": "2.5",
        "url_bytes": "+/8=",
        "number_int": "12",
        "missing": None,
        "no_value": None,
    }
    assert (row["parent_span_id"], row["kind"], row["start_ns"], row["service"], row["process"]) == (
        None,
        0,
        0,
        None,
        "unknown_service",
    )


# --- chunks ---------------------------------------------------------------------------------------------------------


def many_records_file(tmp_path: Path, sdk_spans, kind: str, records: int = 12) -> Path:
    path = tmp_path / f"many.{kind}"
    for _ in range(records):  # the same spans again and again: what matters here is the record layout
        (write_project_framed if kind == "otlp" else write_project_json_lines)(path, sdk_spans)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["otlp", "jsonl"])
def test_chunks_are_record_aligned_and_add_up_to_the_whole_file(tmp_path, sdk_spans, kind):
    path = many_records_file(tmp_path, sdk_spans, kind)
    data = path.read_bytes()
    chunks = plan_chunks(str(path), target_bytes=len(data) // 5)

    assert len(chunks) >= 4 and [c.index for c in chunks] == list(range(len(chunks)))
    assert chunks[0].start == 0 and chunks[-1].end == len(data)
    assert all(a.end == b.start for a, b in zip(chunks, chunks[1:], strict=False))
    if kind == "otlp":
        boundaries, offset = set(), 0
        while offset < len(data):
            boundaries.add(offset)
            offset += 4 + struct.unpack_from(">I", data, offset)[0]
        assert all(c.start in boundaries for c in chunks)
    else:
        assert all(data[c.start - 1 : c.start] == b"\n" for c in chunks[1:])

    chunked, _ = read_back(path, tmp_path / "chunked", target_bytes=len(data) // 5)
    whole = tmp_path / "whole.parquet"
    result = convert_chunk(Chunk(str(path), 0, -1, 0), str(whole))
    assert result.spans == chunked.num_rows == 12 * len(sdk_spans)
    assert (
        pq.read_table(whole)
        .sort_by([("span_id", "ascending"), ("start_ns", "ascending")])
        .equals(chunked.sort_by([("span_id", "ascending"), ("start_ns", "ascending")]))
    )


def test_small_and_compressed_files_are_one_chunk(tmp_path, sdk_spans):
    path = many_records_file(tmp_path, sdk_spans, "otlp")
    assert plan_chunks(str(path)) == [Chunk(str(path), 0, -1, 0)]
    packed = compressed_copy(path, "gzip")
    assert plan_chunks(str(packed), target_bytes=100) == [Chunk(str(packed), 0, -1, 0)]


def test_row_groups_follow_batch_rows(tmp_path, sdk_spans):
    path = many_records_file(tmp_path, sdk_spans, "otlp")
    out = tmp_path / "out.parquet"
    result = convert_chunk(Chunk(str(path), 0, -1, 0), str(out), batch_rows=10)
    metadata = pq.ParquetFile(out).metadata
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert sum(sizes) == result.spans == 48 and sizes == [10, 10, 10, 10, 8]
    assert metadata.row_group(0).column(0).compression == "ZSTD"


def test_parquet_spans_are_recognised_and_pass_through(tmp_path, sdk_spans):
    write_project_framed(tmp_path / "spans.otlp", sdk_spans)
    convert_chunk(Chunk(str(tmp_path / "spans.otlp"), 0, -1, 0), str(tmp_path / "spans.parquet"))
    assert sniff_format(str(tmp_path / "spans.parquet")) == "parquet"
    table, _ = read_back(tmp_path / "spans.parquet", tmp_path / "again")
    assert table.equals(pq.read_table(tmp_path / "spans.parquet").sort_by("span_id"))


# --- torn, empty, not a trace, corrupt ------------------------------------------------------------------------------


def framed_file(tmp_path: Path, sdk_spans) -> tuple[Path, list[int]]:
    """A three-record framed file and the byte offset of each record."""
    messages = [encode_spans(sdk_spans[i : i + 2]).SerializeToString() for i in (0, 2)] + [
        encode_spans(sdk_spans[:1]).SerializeToString()
    ]
    data = collector_framing(messages)
    path = tmp_path / "three.otlp"
    path.write_bytes(data)
    offsets, offset = [], 0
    for message in messages:
        offsets.append(offset)
        offset += 4 + len(message)
    return path, offsets


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 30])
def test_truncated_final_framed_record_is_skipped_with_a_notice(tmp_path, sdk_spans, cut):
    """A torn length header (1-3 bytes) or a record whose length runs past the end of the file."""
    path, offsets = framed_file(tmp_path, sdk_spans)
    data = path.read_bytes()
    path.write_bytes(data[: offsets[2] + cut] if cut < 4 else data[:-cut])

    table, results = read_back(path, tmp_path)

    assert table.num_rows == 4
    (notice,) = [n for r in results for n in r.notices]
    assert str(path) in notice and f"truncated final record at byte {offsets[2]}" in notice


def test_truncated_final_record_lands_in_the_last_chunk(tmp_path, sdk_spans):
    path = many_records_file(tmp_path, sdk_spans, "otlp")
    size = path.stat().st_size
    with path.open("ab") as file:
        file.write(struct.pack(">I", 1000) + b"\x0a\x05")
    chunks = plan_chunks(str(path), target_bytes=size // 3)
    table, results = read_back(path, tmp_path, target_bytes=size // 3)
    assert table.num_rows == 48 and len(chunks) >= 3
    assert results[-1].notices == [
        f"{path}: truncated final record at byte {size} skipped (length 1000 bytes, only 2 present)"
    ]


def test_truncated_final_json_line_is_skipped_with_a_notice(tmp_path, sdk_spans):
    write_project_json_lines(tmp_path / "t.jsonl", sdk_spans)
    data = (tmp_path / "t.jsonl").read_bytes()
    last_line_at = data.rindex(b"\n", 0, len(data) - 1) + 1
    (tmp_path / "t.jsonl").write_bytes(data[:-40])

    table, results = read_back(tmp_path / "t.jsonl", tmp_path)

    assert table.num_rows == 2
    assert [n for r in results for n in r.notices] == [
        f"{tmp_path / 't.jsonl'}: truncated final record at byte {last_line_at} (line 2) skipped "
        "(no newline and not valid JSON)"
    ]


def test_final_json_line_without_newline_is_used_when_whole(tmp_path, sdk_spans):
    write_project_json_lines(tmp_path / "t.jsonl", sdk_spans)
    data = (tmp_path / "t.jsonl").read_bytes()
    (tmp_path / "t.jsonl").write_bytes(data.rstrip(b"\n"))
    table, results = read_back(tmp_path / "t.jsonl", tmp_path)
    assert table.num_rows == len(sdk_spans) and not [n for r in results for n in r.notices]


@pytest.mark.parametrize("writer", [write_project_framed, write_project_json_lines])
def test_a_file_whose_only_record_is_torn_gives_a_notice_and_no_spans(tmp_path, sdk_spans, writer):
    """A job that died while writing its first record: nothing to read, but not an error either."""
    writer(tmp_path / "t.data", sdk_spans[:1])
    (tmp_path / "t.data").write_bytes((tmp_path / "t.data").read_bytes()[:-5])
    table, results = read_back(tmp_path / "t.data", tmp_path)
    assert table.num_rows == 0 and "truncated final record at byte 0" in results[0].notices[0]


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
@pytest.mark.parametrize("compression", ["plain", "gzip", "zstd"])
def test_empty_file_is_skipped_with_a_notice(tmp_path, content, compression):
    path = tmp_path / "empty.trace"
    path.write_bytes(COMPRESSIONS[compression](content))
    (result,) = [convert_chunk(chunk, str(tmp_path / "out.parquet")) for chunk in plan_chunks(str(path))]
    assert result.spans == 0 and result.notices == [f"{path}: empty file skipped"]
    assert not (tmp_path / "out.parquet").exists()


NOT_TRACES = {
    "json-without-resource-spans": b'{"resourceLogs": []}\n',
    "pretty-json-without-resource-spans": b'{\n  "name": "x"\n}\n',
    "json-array": b"[1, 2, 3]\n",
    "text": b"Traceback (most recent call last):\n  File 'train.py'\nOSError: disk full\n",
    "random-bytes": bytes((i * 97 + 13) % 251 for i in range(4000)),
    "unknown-protobuf-fields": b"\x08\x96\x01\x10\x01\x18\x02",
    "framed-unknown-fields": struct.pack(">I", 4) + b"\x08\x96\x01\x18" + struct.pack(">I", 2) + b"\x10\x01",
    "message-without-spans": trace_pb2.TracesData(resource_spans=[trace_pb2.ResourceSpans()]).SerializeToString(),
    "span-with-short-ids": trace_pb2.TracesData(
        resource_spans=[
            trace_pb2.ResourceSpans(
                scope_spans=[trace_pb2.ScopeSpans(spans=[trace_pb2.Span(trace_id=b"ab", span_id=b"cd")])]
            )
        ]
    ).SerializeToString(),
}


@pytest.mark.parametrize("name", NOT_TRACES)
def test_not_a_trace_is_a_trace_format_error(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(NOT_TRACES[name])
    with pytest.raises(TraceFormatError) as raised:
        for chunk in plan_chunks(str(path)):
            convert_chunk(chunk, str(tmp_path / "out.parquet"))
    assert str(path) in str(raised.value)
    assert not (tmp_path / "out.parquet").exists()


def test_corrupt_middle_framed_record_names_its_byte_offset(tmp_path, sdk_spans):
    path, offsets = framed_file(tmp_path, sdk_spans)
    data = bytearray(path.read_bytes())
    data[offsets[1] + 4 : offsets[1] + 8] = b"\xff\xff\xff\xff"  # an invalid tag where the message starts
    path.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match=f"{path}: byte {offsets[1]}: ") as raised:
        read_back(path, tmp_path)
    assert raised.value.where == f"byte {offsets[1]}"


@pytest.mark.parametrize("bad_span", [0, 1])
def test_span_without_real_ids_in_the_middle_names_its_record(tmp_path, sdk_spans, bad_span):
    """A record where some span has real ids is a trace record, and a span beside it without is corrupt (a record
    where none has is another signal's: see test_reading_rules)."""
    bad = trace_pb2.TracesData()
    bad.MergeFromString(encode_spans(sdk_spans[:2]).SerializeToString())
    bad.resource_spans[0].scope_spans[0].spans[bad_span].trace_id = b"\x01" * 15
    good = encode_spans(sdk_spans[1:]).SerializeToString()
    path = tmp_path / "bad-id.otlp"
    path.write_bytes(collector_framing([good, bad.SerializeToString(), good]))
    with pytest.raises(TraceFormatError, match=f"byte {4 + len(good)}: .*trace_id"):
        read_back(path, tmp_path)


def test_corrupt_middle_json_line_names_its_line(tmp_path, sdk_spans):
    write_project_json_lines(tmp_path / "t.jsonl", sdk_spans)
    write_project_json_lines(tmp_path / "t.jsonl", sdk_spans)
    lines = (tmp_path / "t.jsonl").read_bytes().split(b"\n")
    lines[2] = lines[2][: len(lines[2]) // 2]  # a torn record, but not the last: corrupt
    (tmp_path / "t.jsonl").write_bytes(b"\n".join(lines))
    with pytest.raises(TraceFormatError, match=f"{tmp_path / 't.jsonl'}: line 3: not valid JSON"):
        read_back(tmp_path / "t.jsonl", tmp_path)


def test_corrupt_json_line_in_a_later_chunk_names_its_file_line(tmp_path, sdk_spans):
    path = many_records_file(tmp_path, sdk_spans, "jsonl")
    lines = path.read_bytes().split(b"\n")
    lines[20] = b'{"resourceSpans": [}'
    path.write_bytes(b"\n".join(lines))
    chunks = plan_chunks(str(path), target_bytes=path.stat().st_size // 4)
    assert chunks[0].end < sum(len(line) + 1 for line in lines[:20])
    with pytest.raises(TraceFormatError, match="line 21: not valid JSON"):
        read_back(path, tmp_path, target_bytes=path.stat().st_size // 4)


def test_non_utf8_json_line_names_its_line(tmp_path, sdk_spans):
    write_project_json_lines(tmp_path / "t.jsonl", sdk_spans)
    data = (tmp_path / "t.jsonl").read_bytes()
    second = data.index(b"\n") + 1
    (tmp_path / "t.jsonl").write_bytes(data[: second + 30] + b"\xff\xfe" + data[second + 30 :])
    with pytest.raises(TraceFormatError, match="line 2: not UTF-8"):
        read_back(tmp_path / "t.jsonl", tmp_path)


def test_corrupt_pretty_document_names_the_line(tmp_path):
    text = json.dumps(otlp_json(every_shape_message()), indent=2).splitlines()
    text[10] = text[10] + " oops"
    (tmp_path / "doc.json").write_text("\n".join(text))
    with pytest.raises(TraceFormatError, match="line 11: not valid JSON"):
        read_back(tmp_path / "doc.json", tmp_path)


def incompressible_records_file(tmp_path: Path, kind: str) -> Path:
    """200 spans in 40 records, each with an attribute of random-looking text: a file that compresses little (some
    400 kB, several of zstd's 128 kB blocks), so a cut falls well inside the records."""
    spans = [
        S(f"s{i}", "rl.grpo.generation", i, i + 1, attrs={"blob": hex_id(f"blob{i}", 64) * 32}) for i in range(200)
    ]
    return write_trace(tmp_path / f"records.{kind}", spans, "framed" if kind == "otlp" else "jsonl", batches=40)


def decompressed_prefix(data: bytes, compression: str) -> bytes:
    """What a compressed stream cut short still decompresses to, by the libraries' own streaming decoders."""
    if compression == "gzip":
        out, rest = b"", data
        while rest:
            member = zlib.decompressobj(wbits=31)
            try:
                out += member.decompress(rest)
            except zlib.error:
                break
            rest = member.unused_data
        return out
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    out = b""
    while True:
        try:
            piece = reader.read(1 << 16)
        except zstandard.ZstdError:
            return out
        if not piece:
            return out
        out += piece


def whole_record_spans(plain: bytes, kind: str) -> int:
    """The spans in the whole records at the start of `plain` (a torn last record counts none)."""
    spans = 0
    if kind == "otlp":
        offset = 0
        while offset + 4 <= len(plain):
            (length,) = struct.unpack(">I", plain[offset : offset + 4])
            if offset + 4 + length > len(plain):
                break
            message = trace_pb2.TracesData.FromString(plain[offset + 4 : offset + 4 + length])
            spans += sum(len(s.spans) for r in message.resource_spans for s in r.scope_spans)
            offset += 4 + length
        return spans
    for line in plain.split(b"\n")[:-1]:
        record = json.loads(line)
        spans += sum(len(s["spans"]) for r in record["resourceSpans"] for s in r["scopeSpans"])
    return spans


@pytest.mark.parametrize("kind", ["otlp", "jsonl"])
@pytest.mark.parametrize("compression", ["gzip", "zstd", "zstd-frames"])
def test_a_compressed_file_cut_short_keeps_every_whole_record_before_the_cut(tmp_path, sdk_spans, kind, compression):
    """SPEC 3: a `.zst` or `.gz` still being written (or killed) is read up to the cut, with a warning."""
    path = incompressible_records_file(tmp_path, kind)
    data = COMPRESSIONS[compression](path.read_bytes())
    for keep in (len(data) - 3, len(data) * 2 // 3, len(data) // 3):
        cut = tmp_path / f"cut-{keep}.{compression}.trace"
        cut.write_bytes(data[:keep])
        table, results = read_back(cut, tmp_path / "out")
        assert table.num_rows == whole_record_spans(decompressed_prefix(data[:keep], compression), kind)
        if keep < len(data) - 3:  # a cut inside the records, not in gzip's trailer alone
            assert 0 < table.num_rows < 200
        notices = [n for result in results for n in result.notices]
        assert any("stream ends inside its last" in n and "before the cut are used" in n for n in notices), notices


def test_a_compressed_file_cut_short_is_a_warning_for_the_command_not_an_error(tmp_path, sdk_spans):
    path = incompressible_records_file(tmp_path, "jsonl")
    data = zstandard.ZstdCompressor().compress(path.read_bytes())
    (tmp_path / "run.jsonl.zst").write_bytes(data[: len(data) * 2 // 3])
    result = invoke(["query", str(tmp_path / "run.jsonl.zst"), "SELECT count(*) AS n FROM spans", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert "the zstd stream ends inside its last" in result.stderr
    assert json.loads(result.stdout)[0]["n"] > 0


@pytest.mark.parametrize("compression", ["gzip", "zstd", "zstd-frames"])
def test_a_compressed_file_corrupt_in_the_middle_stays_an_error(tmp_path, sdk_spans, compression):
    path = incompressible_records_file(tmp_path, "otlp")
    data = COMPRESSIONS[compression](path.read_bytes())
    middle = len(data) // 2
    broken = tmp_path / f"broken.{compression}.trace"
    broken.write_bytes(data[:middle] + bytes(b ^ 0x55 for b in data[middle : middle + 40]) + data[middle + 40 :])
    with pytest.raises(GoodputError):
        read_back(broken, tmp_path / "out")


def test_missing_or_unreadable_path_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        plan_chunks(str(tmp_path / "nope.otlp"))
    with pytest.raises(InputError):
        convert_chunk(Chunk(str(tmp_path / "nope.otlp"), 0, -1, 0), str(tmp_path / "out.parquet"))
    with pytest.raises(InputError, match="directory"):
        sniff_format(str(tmp_path))
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.otlp"
        locked.write_bytes(b"\x00")
        locked.chmod(0)
        with pytest.raises(InputError, match="cannot be read"):
            plan_chunks(str(locked))


CUT_BEFORE_FIRST = "the file was cut before its first complete record, so nothing in it is read"
KILLED = "(the file was cut short, by a job or Collector still writing or killed)"


def _one_record_cut(tmp_path: Path, name: str) -> Path:
    """A file of one record (of 40 spans with random-looking text, so that it compresses little), cut at two
    thirds: a job killed while it wrote its first export."""
    spans = [S(f"s{i}", "rl.grpo.generation", i, i + 1, attrs={"blob": hex_id(f"blob{i}", 64) * 32}) for i in range(40)]
    base, _, compression = name.partition(".")[2].partition(".")
    plain = write_trace(tmp_path / "whole", spans, "framed" if base == "otlp" else "jsonl").read_bytes()
    data = {"gz": gzip.compress, "zst": COMPRESSIONS["zstd"], "": lambda data: data}[compression](plain)
    path = tmp_path / name
    path.write_bytes(data[: len(data) * 2 // 3])
    return path


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("run.jsonl", "truncated final record at byte 0 (line 1) skipped (no newline and not valid JSON): {cut}"),
        ("run.otlp", "truncated final record at byte 0 skipped (length {length} bytes, only {present} present): {cut}"),
        ("run.jsonl.zst", "the zstd stream ends inside its last frame {killed} before its first complete record, so "
                          "nothing in it is read"),
        ("run.otlp.gz", "the gzip stream ends inside its last member {killed} before its first complete record, so "
                        "nothing in it is read"),
    ],
)  # fmt: skip
def test_a_file_cut_before_its_first_complete_record_says_so_and_is_skipped(tmp_path, name, expected):
    """SPEC 3's torn final record with nothing before it: skipped with one warning that says nothing was read (not
    "the records before the cut are used", of which there are none), not an error: one worker killed in its first
    export must not fail a report of the whole run."""
    path = _one_record_cut(tmp_path, name)
    length = struct.unpack(">I", (tmp_path / "whole").read_bytes()[:4])[0]
    result = invoke(["report", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if str(path) in line]
    text = expected.format(cut=CUT_BEFORE_FIRST, killed=KILLED, length=length, present=path.stat().st_size - 4)
    assert warnings == [f"{path}: {text}"]
    assert json.loads(result.stdout)["iterations"] == []


def test_an_unterminated_line_that_is_no_record_is_not_a_trace(tmp_path):
    """Only the torn start of a trace record is a truncated final record; other text without a newline is not."""
    (tmp_path / "note.txt").write_bytes(b"{ this is not JSON")
    with pytest.raises(TraceFormatError, match="line 1: not valid JSON, nor an OTLP trace record"):
        read_back(tmp_path / "note.txt", tmp_path)
    (tmp_path / "torn.jsonl").write_bytes(b'{"resourceSpans":[{"resou')
    table, results = read_back(tmp_path / "torn.jsonl", tmp_path)
    assert table.num_rows == 0 and "truncated final record at byte 0 (line 1)" in results[0].notices[0]


@pytest.mark.parametrize(
    ("total", "workers", "most"),
    [(4_000_000_000, 2, 256 << 20), (12_600_000_000, 2, 256 << 20), (3 << 30, 8, 64 << 20), (10**9 + 7, 3, 50 << 20)],
)
def test_capped_chunks_fill_every_round_of_the_workers(total, workers, most):
    # A big file is cut into rounds of one chunk per worker; the chunks are no bigger than the cap, and there are as
    # many as fill the last round (4 GB on two workers: 16 chunks of ~250 MB, not 15 of 256 MiB and a round for one).
    target = _chunk_target(total, workers, most)
    chunks = -(-total // target)
    rounds = -(-total // (most * workers))
    assert MIN_CHUNK_BYTES <= target <= most
    assert chunks == rounds * workers


def test_an_explicit_cap_below_the_least_chunk_still_cuts_the_file():
    # `ingest --ray` caps the chunks for the cluster's CPUs: the cap wins over the least chunk size.
    assert _chunk_target(10 << 20, 64, 2 << 20) == 2 << 20
