"""SPEC section 3's reading rules beyond the two plain formats: base64 ids, Tempo's wrapper and pre-1.0 names, `{}`
lines, other signals in a trace file, files that are no trace inside a directory, span events and links; and an
all-zero parent id, which means no parent whichever reader reads it.

Files are written the way their writers write them: protobuf through the `opentelemetry.proto` classes, JSON in the
shapes protobuf's own JSON mapping (`MessageToDict`: base64 ids), Grafana Tempo (`batches`) and the Collector
(`resourceMetrics` beside `resourceSpans`, hex ids) produce, and read through the real command line.
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

from conftest import invoke, json_report, run_json, span_rule_findings
from rollup import ingest
from rollup.base.errors import TraceFormatError
from rollup.read.chunks import convert_chunk, plan_chunks
from rollup.store.span_store import open_store
from test_reading_duckdb_json import careful_rows, fast_rows
from test_reading_formats import make_sdk_spans, read_back, write_project_framed, write_project_json_lines
from tracebuild import S, ns, step, to_json_record, to_request, write_trace

T0 = ns(0)
RESOURCE = Resource(
    attributes=[
        KeyValue(key="service.name", value=AnyValue(string_value="trainer")),
        KeyValue(key="service.instance.id", value=AnyValue(string_value="driver")),
    ]
)


def run_spans() -> list[S]:
    """Iteration 1 [0, 10) s: 6 s productive generation, 2 s overhead."""
    return [
        step("s1", 1, 0, 10),
        S("gen", "rl.grpo.generation", 1, 7, parent="s1", bucket="productive", group="generation"),
        S("ckpt", "rl.checkpoint.save", 7, 9, parent="s1", bucket="overhead", group="checkpoint"),
    ]


def report_json(*args: str) -> dict:
    result = invoke(["report", "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def framed(*messages) -> bytes:
    """The Collector `file` exporter's `format: proto`: a 4-byte big-endian length before each message."""
    return b"".join(struct.pack(">I", len(body)) + body for body in (m.SerializeToString() for m in messages))


def jsonl(*records: dict) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


# --- other signals, as the OTel protos spell them ---------------------------------------------------------------


def metrics_request() -> metrics_pb2.MetricsData:
    """A gauge, a monotonic sum and a histogram: what a Collector's metrics pipeline exports every few seconds."""
    point = metrics_pb2.NumberDataPoint
    metrics = [
        metrics_pb2.Metric(
            name="gpu.utilization",
            unit="1",
            gauge=metrics_pb2.Gauge(data_points=[point(time_unix_nano=T0, as_double=0.93)]),
        ),
        metrics_pb2.Metric(
            name="tokens",
            sum=metrics_pb2.Sum(
                data_points=[point(start_time_unix_nano=T0, time_unix_nano=T0 + 10**9, as_int=512)],
                aggregation_temporality=metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE,
                is_monotonic=True,
            ),
        ),
        metrics_pb2.Metric(
            name="step.seconds",
            histogram=metrics_pb2.Histogram(
                data_points=[
                    metrics_pb2.HistogramDataPoint(
                        time_unix_nano=T0, count=3, sum=1.5, bucket_counts=[1, 2], explicit_bounds=[0.5]
                    )
                ],
                aggregation_temporality=metrics_pb2.AGGREGATION_TEMPORALITY_DELTA,
            ),
        ),
    ]
    scope = metrics_pb2.ScopeMetrics(scope=InstrumentationScope(name="trainer.metrics"), metrics=metrics)
    return metrics_pb2.MetricsData(
        resource_metrics=[metrics_pb2.ResourceMetrics(resource=RESOURCE, scope_metrics=[scope])]
    )


def sum_only_metrics() -> metrics_pb2.MetricsData:
    """Sums alone parse as traces without error: their "spans" have a metric's name for a trace id and no span id."""
    message = metrics_request()
    metrics = message.resource_metrics[0].scope_metrics[0].metrics
    del metrics[0]
    del metrics[1]
    return message


def logs_request() -> logs_pb2.LogsData:
    record = logs_pb2.LogRecord(
        time_unix_nano=T0,
        observed_time_unix_nano=T0,
        severity_number=logs_pb2.SEVERITY_NUMBER_WARN,
        severity_text="WARN",
        body=AnyValue(string_value="rank 3 is slow"),
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
    )
    scope = logs_pb2.ScopeLogs(scope=InstrumentationScope(name="trainer.logs"), log_records=[record, record])
    return logs_pb2.LogsData(resource_logs=[logs_pb2.ResourceLogs(resource=RESOURCE, scope_logs=[scope])])


def collector_json(message) -> dict:
    """A message as the Collector's JSON marshaler writes it: camelCase, int64 as strings, ids in hex."""
    document = MessageToDict(message)

    def hex_ids(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                    node[key] = base64.b64decode(value).hex()
                else:
                    hex_ids(value)
        elif isinstance(node, list):
            for item in node:
                hex_ids(item)

    hex_ids(document)
    return document


# --- 1. base64 ids, 2. Tempo's wrapper and the pre-1.0 names -----------------------------------------------------


def protobuf_json(spans: list[S]) -> dict:
    """`to_request(spans)` in protobuf's own JSON mapping: ids as padded base64, enums by name."""
    document = MessageToDict(to_request(spans))
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 24 and span["traceId"].endswith("==") and len(span["spanId"]) == 12
    return document


def tempo_document(spans: list[S]) -> dict:
    """Tempo's trace-by-id API (v1): `{"batches": [...]}` of resource spans with base64 ids and, from Tempo versions
    built on OTLP before 1.0, `instrumentationLibrarySpans` / `instrumentationLibrary`."""
    batches = protobuf_json(spans)["resourceSpans"]
    for resource_spans in batches:
        scope_spans = resource_spans.pop("scopeSpans")
        for item in scope_spans:
            item["instrumentationLibrary"] = item.pop("scope")
        resource_spans["instrumentationLibrarySpans"] = scope_spans
    return {"batches": batches}


def spans_table(path: Path, tmp_path: Path):
    table, results = read_back(path, tmp_path / f"out-{path.name}")
    assert [n for r in results for n in r.notices] == []
    return table.drop_columns(["source_file"])


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["protobuf-json-lines", "protobuf-json-document", "tempo", "tempo-lines"])
def test_base64_ids_and_tempo_shapes_read_as_the_protobuf_file(tmp_path, shape):
    spans = run_spans()
    reference = write_trace(tmp_path / "run.otlp", spans)
    path = tmp_path / f"{shape}.json"
    if shape == "protobuf-json-lines":
        path.write_text(jsonl(protobuf_json(spans[:1]), protobuf_json(spans[1:])))
    elif shape == "protobuf-json-document":
        path.write_text(json.dumps(protobuf_json(spans), indent=2))
    elif shape == "tempo":
        path.write_text(json.dumps(tempo_document(spans), indent=2))
    else:
        path.write_text(jsonl(tempo_document(spans[:2]), tempo_document(spans[2:])))

    table = spans_table(path, tmp_path)
    assert table.equals(spans_table(reference, tmp_path))
    assert table.column("scope_name").unique().to_pylist() == ["tracebuild"]  # from instrumentationLibrary too
    assert set(table.column("trace_id").to_pylist()) == {spans[0].trace_id}
    for extra in ([], ["--no-cache"]):
        assert report_json(str(path), *extra) == report_json(str(reference), *extra)


@pytest.mark.slow
def test_the_fast_path_gives_base64_and_tempo_files_back_or_reads_them_alike(tmp_path):
    spans = run_spans()
    base64_lines = tmp_path / "base64.jsonl"
    base64_lines.write_text(jsonl(protobuf_json(spans)))
    tempo_lines = tmp_path / "tempo.jsonl"
    tempo_lines.write_text(jsonl(tempo_document(spans)))
    assert fast_rows(base64_lines) is None and fast_rows(tempo_lines) is None
    legacy = to_json_record(spans)  # hex ids, but the scope spans under their pre-1.0 name
    legacy["resourceSpans"][0]["instrumentationLibrarySpans"] = legacy["resourceSpans"][0].pop("scopeSpans")
    legacy_lines = tmp_path / "legacy.jsonl"
    legacy_lines.write_text(jsonl(legacy, to_json_record([S("x", "rl.x", 1, 2, trace="t2")])))
    fast = fast_rows(legacy_lines)
    assert fast is not None and len(fast) == len(spans) + 1
    assert fast == careful_rows(legacy_lines, tmp_path / "careful")


def test_snake_case_pre_1_0_names_read_too(tmp_path):
    spans = run_spans()
    record = MessageToDict(to_request(spans), preserving_proto_field_name=True)
    for resource_spans in record["resource_spans"]:
        scope_spans = resource_spans.pop("scope_spans")
        for item in scope_spans:
            item["instrumentation_library"] = item.pop("scope")
        resource_spans["instrumentation_library_spans"] = scope_spans
    path = tmp_path / "snake.jsonl"
    path.write_text(jsonl(record))
    assert spans_table(path, tmp_path).equals(spans_table(write_trace(tmp_path / "r.otlp", spans), tmp_path))


def varint(number: int) -> bytes:
    out = bytearray()
    while True:
        out.append(number & 0x7F | (0x80 if number > 0x7F else 0))
        number >>= 7
        if not number:
            return bytes(out)


def test_pre_1_0_protobuf_field_1000_reads_as_scope_spans(tmp_path):
    """OTLP 0.15-0.19 kept `instrumentation_library_spans` as deprecated field 1000 of ResourceSpans, with the same
    layout as ScopeSpans; a writer of that time that filled only it still reads."""
    spans = run_spans()
    request = to_request(spans)
    resource_spans = request.resource_spans[0]
    scope_bytes = resource_spans.scope_spans[0].SerializeToString()
    del resource_spans.scope_spans[:]
    resource_spans.MergeFromString(varint(1000 << 3 | 2) + varint(len(scope_bytes)) + scope_bytes)
    assert not request.resource_spans[0].scope_spans  # the official classes do not know field 1000
    path = tmp_path / "old.otlp"
    path.write_bytes(framed(request))
    assert spans_table(path, tmp_path).equals(spans_table(write_trace(tmp_path / "r.otlp", spans), tmp_path))


# --- 3. `{}` is an empty batch -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_empty_object_line_is_an_empty_batch(tmp_path):
    spans = run_spans()
    path = tmp_path / "run.jsonl"
    path.write_text(
        "{}\n" + jsonl(to_json_record(spans[:1])) + "{}\n" + jsonl({"resourceSpans": []}, to_json_record(spans[1:]))
    )
    reference = write_trace(tmp_path / "run.otlp", spans)
    for extra in ([], ["--no-cache"]):
        result = invoke(["report", "--format", "json", str(path), *extra])
        assert result.exit_code == 0, result.output
        assert result.stderr == ""  # nothing to say about an empty batch
        assert json.loads(result.stdout) == report_json(str(reference))


def test_a_file_of_empty_batches_alone_is_still_not_a_trace(tmp_path):
    path = tmp_path / "empty-batches.jsonl"
    path.write_text("{}\n{}\n")
    result = invoke(["report", str(path)])
    assert result.exit_code == 2
    assert f"Error: {path}: not a trace file: no span could be read from it" in result.stderr
    assert "Traceback" not in result.output


# --- 4. other signals in the same file -----------------------------------------------------------------------------


def mixed_json_lines(tmp_path: Path) -> Path:
    """A Collector whose traces, metrics and logs pipelines share one `file` exporter (format: json)."""
    spans = run_spans()
    lines = [
        collector_json(metrics_request()),
        to_json_record(spans[:2]),
        collector_json(logs_request()),
        collector_json(metrics_request()),
        to_json_record(spans[2:]),
    ]
    assert "resourceMetrics" in lines[0] and "resourceLogs" in lines[2]
    path = tmp_path / "otel.jsonl"
    path.write_text(jsonl(*lines))
    return path


def mixed_framed(tmp_path: Path) -> Path:
    """The same Collector with `format: proto`: metrics first (a gauge does not even parse as traces), sums alone
    (which do, with spans that cannot be), logs, and the traces between them."""
    spans = run_spans()
    path = tmp_path / "otel.otlp"
    path.write_bytes(
        framed(metrics_request(), to_request(spans[:2]), sum_only_metrics(), logs_request(), to_request(spans[2:]))
    )
    return path


@pytest.mark.slow
@pytest.mark.parametrize("writer", [mixed_json_lines, mixed_framed])
def test_other_signals_in_a_trace_file_are_skipped_with_one_note(tmp_path, writer):
    path = writer(tmp_path)
    reference = write_trace(tmp_path / "traces-only.otlp", run_spans())
    for extra in ([], ["--no-cache"], []):  # the third: from the cache, same note
        result = invoke(["report", "--format", "json", str(path), *extra])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == report_json(str(reference))
        assert result.stderr.splitlines() == [
            f"{path}: 3 OTLP logs and metrics records skipped: other signals than traces share this file"
        ]


@pytest.mark.slow
def test_other_signals_counted_once_per_file_across_chunks(tmp_path):
    """A large file is cut into chunks: still one note for the file, with every chunk's records counted."""
    spans = [step(f"s{i}", i, i * 10, i * 10 + 9) for i in range(1, 40)]
    lines = []
    for index in range(0, len(spans), 3):
        lines += [to_json_record(spans[index : index + 3]), collector_json(metrics_request())]
    path = tmp_path / "otel.jsonl"
    path.write_text(jsonl(*lines))
    entries = ingest([path], to_dir=tmp_path / "dataset", max_chunk_bytes=4096)
    assert len(plan_chunks(str(path), target_bytes=4096)) > 3
    assert entries[0].spans == len(spans)
    assert entries[0].notices == [f"{path}: 13 OTLP metrics records skipped: other signals than traces share this file"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, content, words",
    [
        ("metrics.jsonl", lambda: jsonl(collector_json(metrics_request())), "an OTLP metrics file, not a trace"),
        ("logs.jsonl", lambda: jsonl(collector_json(logs_request()), {}), "an OTLP logs file, not a trace"),
        ("metrics.otlp", lambda: framed(metrics_request(), sum_only_metrics()), "an OTLP metrics file, not a trace"),
        ("logs.otlp", lambda: framed(logs_request()), "an OTLP logs file, not a trace"),
        ("bare-metrics.pb", lambda: metrics_request().SerializeToString(), "an OTLP metrics file, not a trace"),
        ("bare-sums.pb", lambda: sum_only_metrics().SerializeToString(), "an OTLP metrics file, not a trace"),
        ("both.otlp", lambda: framed(logs_request(), metrics_request()), "an OTLP logs and metrics file, not a trace"),
    ],
)
def test_a_file_of_other_signals_alone_is_refused_as_such(tmp_path, name, content, words):
    path = tmp_path / name
    data = content()
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    for extra in ([], ["--no-cache"]):
        result = invoke(["report", str(path), *extra])
        assert result.exit_code == 2, result.output
        assert result.stderr.strip() == f"Error: {path}: {words}"


def test_a_large_metrics_file_cut_into_chunks_is_refused_as_such(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(jsonl(*[collector_json(metrics_request())] * 40))
    assert len(plan_chunks(str(path), target_bytes=4096)) > 1
    with pytest.raises(TraceFormatError, match="an OTLP metrics file, not a trace"):
        ingest([path], to_dir=tmp_path / "dataset", max_chunk_bytes=4096)


# --- 5. inside a directory, a file that is not a trace is skipped ---------------------------------------------------


NOT_TRACES = {
    "README.md": b"# Run 17\n\nGRPO on 8 GPUs; traces below.\n",
    "NOTES.txt": b"\nlr 1e-6\nkl 0.01\n",  # a blank first line: 0x0a, as a bare protobuf message starts
    "TODO\n": b"TODO\nmore\n",
    "config.json": b'{"lr": 1e-06, "kl": 0.01}\n',
    "hparams.json": json.dumps({"lr": 1e-6, "model": {"name": "qwen"}}, indent=2).encode(),
    "metrics.jsonl": jsonl(collector_json(metrics_request())).encode(),
    "metrics.otlp": framed(metrics_request()),
}


def run_folder(tmp_path: Path, names=NOT_TRACES) -> Path:
    folder = tmp_path / "run"
    write_trace(folder / "driver.otlp", run_spans()[:2])
    write_trace(folder / "worker.jsonl", run_spans()[2:], "jsonl")
    for name in names:
        (folder / name.strip()).write_bytes(NOT_TRACES[name])
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--no-cache"]])
def test_files_that_are_no_trace_in_a_directory_are_skipped_with_a_note(tmp_path, extra):
    folder = run_folder(tmp_path)
    reference = write_trace(tmp_path / "all.otlp", run_spans())
    for _ in range(2):  # the second time from the cache, which remembers the verdict
        result = invoke(["report", "--format", "json", str(folder), *extra])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == report_json(str(reference))
        notes = result.stderr.strip().splitlines()
        assert sorted(notes) == sorted(
            [
                f"{folder / 'README.md'}: skipped: not a trace file: neither OTLP JSON nor OTLP protobuf",
                f"{folder / 'NOTES.txt'}: skipped: not a trace file: neither OTLP JSON nor OTLP protobuf",
                f"{folder / 'TODO'}: skipped: not a trace file: neither OTLP JSON nor OTLP protobuf",
                f"{folder / 'config.json'}: skipped: line 1: JSON without a resourceSpans list: not an OTLP trace "
                "record",
                f"{folder / 'hparams.json'}: skipped: line 1: JSON without a resourceSpans list: not an OTLP trace "
                "record",
                f"{folder / 'metrics.jsonl'}: skipped: an OTLP metrics file, not a trace",
                f"{folder / 'metrics.otlp'}: skipped: an OTLP metrics file, not a trace",
            ]
        )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(name.strip() for name in NOT_TRACES))
def test_the_same_file_named_directly_is_still_an_error(tmp_path, name):
    folder = run_folder(tmp_path)
    assert invoke(["report", str(folder)]).exit_code == 0  # the directory's verdicts are cached now
    for extra in ([], ["--no-cache"]):
        result = invoke(["report", str(folder / "driver.otlp"), str(folder / name), *extra])
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"Error: {folder / name}: ") and "skipped" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_a_glob_skips_like_a_directory(tmp_path):
    folder = run_folder(tmp_path, ["README.md", "metrics.jsonl"])
    result = invoke(["report", "--format", "json", str(folder / "*")])
    assert result.exit_code == 0, result.output
    assert len(result.stderr.strip().splitlines()) == 2 and "README.md: skipped" in result.stderr


def test_a_directory_with_no_trace_at_all_is_an_error(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "README.md").write_bytes(NOT_TRACES["README.md"])
    (folder / "metrics.jsonl").write_bytes(NOT_TRACES["metrics.jsonl"])
    result = invoke(["report", str(folder)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: no trace file found: {folder / 'README.md'}: skipped: not a trace file")
    assert "(and 1 more)" in result.stderr


def test_a_corrupt_trace_in_a_directory_is_still_an_error(tmp_path):
    folder = run_folder(tmp_path, ["README.md"])
    path = write_trace(folder / "driver.otlp", run_spans()[:2], batches=2)
    data = bytearray(path.read_bytes())
    second = 4 + struct.unpack_from(">I", data)[0]
    data[second + 4 : second + 8] = b"\xff\xff\xff\xff"  # an invalid tag where the second record's message starts
    path.write_bytes(bytes(data))
    result = invoke(["report", str(folder)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {path}: byte {second}: record of ")


# --- 6. span events and links ----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("writer", [write_project_framed, write_project_json_lines])
def test_record_exception_events_and_links_can_be_queried(tmp_path, writer):
    sdk_spans = make_sdk_spans()
    writer(tmp_path / "run" / "trace.data", sdk_spans)
    failed = next(span for span in sdk_spans if span.events)
    linked = next(span for span in sdk_spans if span.links)
    sql = (
        "SELECT s.span_id, e.name, e.time_ns, e.attributes['exception.type'] AS type, "
        "e.attributes['exception.message'] AS message, e.attributes['rl.retry'] AS retry "
        "FROM spans s, unnest(s.events) AS u(e)"
    )
    result = invoke(["query", "--format", "json", str(tmp_path / "run"), sql])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {
            "span_id": format(failed.context.span_id, "016x"),
            "name": "exception",
            "time_ns": failed.events[0].timestamp,
            "type": "MemoryError",
            "message": "out of memory",
            "retry": "2",
        }
    ]
    sql = "SELECT l.trace_id, l.span_id, l.attributes['rl.link'] AS why FROM spans, unnest(links) AS u(l)"
    result = invoke(["query", "--format", "json", str(tmp_path / "run"), sql])
    assert result.exit_code == 0, result.output
    target = linked.links[0].context
    assert json.loads(result.stdout) == [
        {"trace_id": format(target.trace_id, "032x"), "span_id": format(target.span_id, "016x"), "why": "previous"}
    ]
    counts = "SELECT count(*) AS spans, count(*) FILTER (len(events) = 0 AND len(links) = 0) AS bare FROM spans"
    result = invoke(["query", "--format", "json", str(tmp_path / "run"), counts])
    assert json.loads(result.stdout) == [{"spans": len(sdk_spans), "bare": len(sdk_spans) - 2}]


def event_message() -> trace_pb2.TracesData:
    """A span with an event whose attributes hold every scalar kind and an array, and a link."""
    values = [
        KeyValue(key="s", value=AnyValue(string_value="text")),
        KeyValue(key="i", value=AnyValue(int_value=-7)),
        KeyValue(key="d", value=AnyValue(double_value=0.25)),
        KeyValue(key="b", value=AnyValue(bool_value=True)),
        KeyValue(
            key="a", value=AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1), AnyValue(string_value="x")]))
        ),
    ]
    span = trace_pb2.Span(
        trace_id=bytes.fromhex("ab" * 16),
        span_id=bytes.fromhex("cd" * 8),
        name="rl.grpo.generation",
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + 10**9,
        events=[trace_pb2.Span.Event(time_unix_nano=T0 + 5, name="exception", attributes=values)],
        links=[
            trace_pb2.Span.Link(
                trace_id=bytes.fromhex("12" * 16), span_id=bytes.fromhex("34" * 8), attributes=values[:1]
            )
        ],
    )
    scope = trace_pb2.ScopeSpans(scope=InstrumentationScope(name="hand"), spans=[span])
    return trace_pb2.TracesData(resource_spans=[trace_pb2.ResourceSpans(resource=RESOURCE, scope_spans=[scope])])


@pytest.mark.parametrize("shape", ["collector-json", "protobuf-json"])
def test_events_and_links_read_the_same_from_protobuf_and_json(tmp_path, shape):
    message = event_message()
    (tmp_path / "e.pb").write_bytes(message.SerializeToString())
    document = collector_json(message) if shape == "collector-json" else MessageToDict(message)
    (tmp_path / "e.jsonl").write_text(jsonl(document))
    from_proto = spans_table(tmp_path / "e.pb", tmp_path)
    assert from_proto.equals(spans_table(tmp_path / "e.jsonl", tmp_path))
    (row,) = from_proto.to_pylist()
    assert row["events"] == [
        {
            "time_ns": T0 + 5,
            "name": "exception",
            "attributes": [("s", "text"), ("i", "-7"), ("d", "0.25"), ("b", "true"), ("a", '[1,"x"]')],
        }
    ]
    assert row["links"] == [{"trace_id": "12" * 16, "span_id": "34" * 8, "attributes": [("s", "text")]}]


def test_events_are_decoded_only_for_loads_that_keep_them(tmp_path):
    """A load for the accounting alone never parses events: a damaged one goes unnoticed there, while a full load
    names its record."""
    message = event_message()
    message.resource_spans[0].scope_spans[0].spans[0].events[0].name = "x"
    data = bytearray(message.SerializeToString())
    event = message.resource_spans[0].scope_spans[0].spans[0].events[0].SerializeToString()
    at = bytes(data).index(event)
    data[at : at + 2] = b"\xff\xff"  # the event's first tag made invalid, its length kept
    path = tmp_path / "damaged.pb"
    path.write_bytes(bytes(data))
    with open_store([path], use_cache=False, accounting=True) as store:
        assert store.sql("SELECT count(*) AS n FROM spans").column("n").to_pylist() == [1]
        assert "events" not in store.sql("SELECT * FROM spans").column_names
    with pytest.raises(TraceFormatError, match="byte 0: a span event does not decode"):
        convert_chunk(plan_chunks(str(path))[0], str(tmp_path / "out.parquet"))
    result = invoke(["query", str(path), "SELECT 1"])
    assert result.exit_code == 2 and "a span event does not decode" in result.stderr


def test_span_parquet_of_an_older_version_is_told_as_such(tmp_path):
    path = write_trace(tmp_path / "run.otlp", run_spans())
    (entry,) = ingest([path], to_dir=tmp_path / "dataset")
    (part,) = entry.parts
    table = pq.read_table(part).drop_columns(["events", "links"])
    pq.write_table(table, tmp_path / "old.parquet")
    result = invoke(["report", str(tmp_path / "old.parquet")])
    assert result.exit_code == 2
    assert "a goodput span table of an older version (no events, links): ingest its traces again" in result.stderr


# --- 7. an all-zero parent id is no parent ----------------------------------------------------------------------------


ZERO_PARENT_SPANS = [
    step("step1", 1, 0, 10),
    S("gen", "rl.grpo.generation", 1, 4, bucket="productive", iteration=1, process="worker"),
]


def write_with_zero_parent(path: Path, shape: str) -> Path:
    """ZERO_PARENT_SPANS with `gen`'s parent id written as sixteen zeros, as some emitters write a root's."""
    if shape == "framed":
        request = to_request(ZERO_PARENT_SPANS)
        request.resource_spans[1].scope_spans[0].spans[0].parent_span_id = bytes(8)
        body = request.SerializeToString()
        path.write_bytes(struct.pack(">I", len(body)) + body)
    else:
        record = to_json_record(ZERO_PARENT_SPANS)
        record["resourceSpans"][1]["scopeSpans"][0]["spans"][0]["parentSpanId"] = "0" * 16
        path.write_text(json.dumps(record) + "\n")
    return path


# Each reader: protobuf; JSON Lines read by DuckDB itself (no cache to fill); JSON Lines read by the careful reader.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("shape", "cache"), [("framed", []), ("jsonl", ["--no-cache"]), ("jsonl", [])], ids=["proto", "duckdb", "json"]
)
def test_an_all_zero_parent_id_means_no_parent(tmp_path, monkeypatch, shape, cache):
    monkeypatch.setenv("GOODPUT_CACHE_DIR", str(tmp_path / "cache"))
    path = write_with_zero_parent(tmp_path / f"run.{shape}", shape)
    assert span_rule_findings(path, *cache) == []  # no orphan-span: the span is a root
    (listed,) = [
        row
        for row in run_json(["spans", str(path), "-i", "1", *cache], expect_exit=0)
        if row["name"] == "rl.grpo.generation"
    ]
    assert listed["parent_span_id"] is None
    roots = run_json(
        ["query", str(path), "SELECT name FROM spans WHERE parent_span_id IS NULL ORDER BY name", *cache],
        expect_exit=0,
    )
    assert roots == [{"name": "rl.grpo.generation"}, {"name": "rl.grpo.step"}]
    (one,) = json_report(path, *cache)["iterations"]
    assert (one["productive_s"], one["span_seconds"]["productive"]) == (4.0 - 1.0, 4.0 - 1.0)
