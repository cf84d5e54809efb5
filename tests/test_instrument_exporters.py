"""The file exporters write what the rollup (and an OpenTelemetry Collector) reads: real SDK spans, real files."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conftest import read_framed_records, read_framed_spans, read_json_lines_records, read_json_lines_spans
from instrument.exporters import (
    DEFAULT_TRACE_DIR,
    FramedProtobufFileExporter,
    JsonLinesFileExporter,
    make_span_exporter,
    trace_file_path,
)
from instrument.wire import ENV_TRACE_OWNER_PID

HOST = socket.gethostname()  # the test host's name is already [A-Za-z0-9._-] on any CI runner we use


@pytest.fixture(autouse=True)
def _no_inherited_owner(monkeypatch):
    """A test run launched under an instrumented driver must not see that driver's owner pid."""
    monkeypatch.delenv(ENV_TRACE_OWNER_PID, raising=False)


def provider_for(exporter, processor=SimpleSpanProcessor, service="trainer") -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(processor(exporter))
    return provider


def finished_spans(count=2):
    """Real `ReadableSpan`s from the SDK, for calling `export` directly."""
    memory = InMemorySpanExporter()
    provider = provider_for(memory)
    tracer = provider.get_tracer("test")
    for index in range(count):
        with tracer.start_as_current_span(f"rl.grpo.span{index}"):
            pass
    provider.shutdown()
    return memory.get_finished_spans()


def emit_job(provider: TracerProvider):
    """A parent with one child, then a sibling root: three spans, so three batches through a SimpleSpanProcessor."""
    tracer = provider.get_tracer("goodput.test")
    with (
        tracer.start_as_current_span("rl.grpo.step", attributes={"rl.iteration": 3, "rl.span_group": "step"}) as step,
        tracer.start_as_current_span("rl.grpo.generation", attributes={"rl.bucket": "productive"}) as gen,
    ):
        pass
    with tracer.start_as_current_span("rl.checkpoint.finalize", attributes={"rl.is_final": True}) as ckpt:
        pass
    return step, gen, ckpt


def test_framed_file_round_trips_through_the_collector_message(tmp_path):
    path = tmp_path / "job.otlp"
    exporter = FramedProtobufFileExporter(path, service_name="trainer")
    provider = provider_for(exporter)
    step, gen, ckpt = emit_job(provider)
    provider.shutdown()

    records = read_framed_records(path)
    assert len(records) == 3  # one record per export batch, and SimpleSpanProcessor exports each span alone
    spans = {s.name: s for s in read_framed_spans(path)}
    assert list(spans) == ["rl.grpo.generation", "rl.grpo.step", "rl.checkpoint.finalize"]
    resource_attrs = {a.key: a.value.string_value for a in records[0].resource_spans[0].resource.attributes}
    assert resource_attrs["service.name"] == "trainer"
    for sdk_span in (step, gen, ckpt):
        stored = spans[sdk_span.name]
        assert int.from_bytes(stored.trace_id, "big") == sdk_span.get_span_context().trace_id
        assert int.from_bytes(stored.span_id, "big") == sdk_span.get_span_context().span_id
        assert stored.start_time_unix_nano == sdk_span.start_time
        assert stored.end_time_unix_nano == sdk_span.end_time
    assert spans["rl.grpo.generation"].parent_span_id == spans["rl.grpo.step"].span_id
    assert spans["rl.grpo.step"].parent_span_id == b""
    step_attrs = {a.key: a.value for a in spans["rl.grpo.step"].attributes}
    assert step_attrs["rl.iteration"].int_value == 3
    assert step_attrs["rl.span_group"].string_value == "step"
    assert {a.key: a.value.bool_value for a in spans["rl.checkpoint.finalize"].attributes} == {"rl.is_final": True}


def test_framed_file_appends_batches_and_keeps_earlier_content(tmp_path):
    path = tmp_path / "job.otlp"
    for run in range(2):  # a restarted job appends to the file it left
        exporter = FramedProtobufFileExporter(path)
        provider = provider_for(exporter, processor=BatchSpanProcessor)
        tracer = provider.get_tracer("test")
        for index in range(5):
            with tracer.start_as_current_span(f"run{run}.span{index}"):
                pass
        provider.force_flush()
        with tracer.start_as_current_span(f"run{run}.last"):
            pass
        provider.shutdown()
    assert len(read_framed_records(path)) == 2 * 2  # per run: the five flushed together, then the last at shutdown
    per_run = [*(f"span{i}" for i in range(5)), "last"]
    assert [s.name for s in read_framed_spans(path)] == [f"run{run}.{name}" for run in range(2) for name in per_run]


def test_json_lines_round_trip_with_hex_ids(tmp_path):
    path = tmp_path / "job.jsonl"
    exporter = JsonLinesFileExporter(path, service_name="trainer")
    provider = provider_for(exporter)
    step, gen, ckpt = emit_job(provider)
    provider.shutdown()

    lines = read_json_lines_records(path)
    assert len(lines) == 3
    assert all(list(line) == ["resourceSpans"] for line in lines)
    spans = {s["name"]: s for s in read_json_lines_spans(path)}
    for sdk_span in (step, gen, ckpt):
        context = sdk_span.get_span_context()
        assert spans[sdk_span.name]["traceId"] == format(context.trace_id, "032x")
        assert spans[sdk_span.name]["spanId"] == format(context.span_id, "016x")
        assert int(spans[sdk_span.name]["startTimeUnixNano"]) == sdk_span.start_time
    assert spans["rl.grpo.generation"]["parentSpanId"] == format(step.get_span_context().span_id, "016x")
    # The attributes as encoded, before read_json_lines_spans flattens them: OTLP JSON wraps every value in its type.
    raw = {s["name"]: s for ln in lines for rs in ln["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]}
    step_attrs = {a["key"]: a["value"] for a in raw["rl.grpo.step"]["attributes"]}
    assert int(step_attrs["rl.iteration"]["intValue"]) == 3
    assert step_attrs["rl.span_group"] == {"stringValue": "step"}


@pytest.mark.parametrize("exporter_class", [FramedProtobufFileExporter, JsonLinesFileExporter])
def test_nothing_exported_leaves_no_file(tmp_path, exporter_class):
    exporter = exporter_class(tmp_path / "traces")
    provider = provider_for(exporter, processor=BatchSpanProcessor)
    assert exporter.export([]) is SpanExportResult.SUCCESS
    provider.shutdown()
    assert exporter.file_path is None
    assert not (tmp_path / "traces").exists()


@pytest.mark.parametrize("spelling", ["existing_dir", "trailing_separator", "no_suffix"])
@pytest.mark.parametrize(
    ("exporter_class", "suffix"), [(FramedProtobufFileExporter, ".otlp"), (JsonLinesFileExporter, ".jsonl")]
)
def test_directory_path_gets_one_file_named_for_service_host_and_pid(tmp_path, spelling, exporter_class, suffix):
    directory = tmp_path / "traces.d" if spelling != "no_suffix" else tmp_path / "a" / "traces"
    if spelling == "existing_dir":
        directory.mkdir()  # has a suffix, but it is a directory
    path = str(directory) + os.sep if spelling == "trailing_separator" else directory
    exporter = exporter_class(path, service_name="grpo trainer/0")
    provider = provider_for(exporter)
    emit_job(provider)
    provider.shutdown()
    expected = directory / f"grpo_trainer_0-{HOST}-{os.getpid()}{suffix}"
    assert exporter.file_path == expected
    assert [p.name for p in directory.iterdir()] == [expected.name]


def test_trace_file_path_keeps_a_file_path_for_its_owner(tmp_path, monkeypatch):
    assert trace_file_path(tmp_path / "run.otlp", ".otlp", "svc") == tmp_path / "run.otlp"
    monkeypatch.setenv(ENV_TRACE_OWNER_PID, str(os.getpid()))
    assert trace_file_path(tmp_path / "run.otlp", ".otlp", "svc") == tmp_path / "run.otlp"
    assert trace_file_path(None, ".jsonl", "svc") == Path(DEFAULT_TRACE_DIR) / f"svc-{HOST}-{os.getpid()}.jsonl"


@pytest.mark.parametrize(
    ("exporter_class", "name"), [(FramedProtobufFileExporter, "run.otlp"), (JsonLinesFileExporter, "run.jsonl")]
)
def test_worker_that_inherited_a_single_file_writes_a_sibling(tmp_path, monkeypatch, exporter_class, name):
    monkeypatch.setenv(ENV_TRACE_OWNER_PID, str(os.getpid() + 1))  # the driver that chose the path is another process
    exporter = exporter_class(tmp_path / name)
    provider = provider_for(exporter)
    emit_job(provider)
    provider.shutdown()
    stem, suffix = name.split(".")
    sibling = tmp_path / f"{stem}.{HOST}-{os.getpid()}.{suffix}"
    assert exporter.file_path == sibling
    assert [p.name for p in tmp_path.iterdir()] == [sibling.name]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("exporter_class", "read_spans", "name"),
    [
        (FramedProtobufFileExporter, read_framed_spans, "c.otlp"),
        (JsonLinesFileExporter, read_json_lines_spans, "c.jsonl"),
    ],
)
def test_concurrent_exports_never_interleave(tmp_path, exporter_class, read_spans, name):
    path = tmp_path / name
    provider = provider_for(exporter_class(path))  # SimpleSpanProcessor: every thread exports on its own
    tracer = provider.get_tracer("test")
    threads_n, spans_per_thread = 8, 60
    start = threading.Barrier(threads_n)

    def work(thread_index: int) -> None:
        start.wait()
        for index in range(spans_per_thread):
            attrs = {"payload": "x" * (index * 97 % 4000)}  # records of varied size, some larger than a pipe buffer
            with tracer.start_as_current_span(f"t{thread_index}.s{index}", attributes=attrs):
                pass

    threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    provider.shutdown()
    names = [s.name if hasattr(s, "name") else s["name"] for s in read_spans(path)]
    assert sorted(names) == sorted(f"t{t}.s{i}" for t in range(threads_n) for i in range(spans_per_thread))


@pytest.mark.parametrize("exporter_class", [FramedProtobufFileExporter, JsonLinesFileExporter])
def test_export_after_shutdown_fails_quietly(tmp_path, exporter_class):
    exporter = exporter_class(tmp_path / "x.otlp")
    assert exporter.export(finished_spans()) is SpanExportResult.SUCCESS
    exporter.shutdown()
    exporter.shutdown()  # twice is harmless
    size = exporter.file_path.stat().st_size
    assert exporter.export(finished_spans()) is SpanExportResult.FAILURE
    assert exporter.force_flush() is True
    assert exporter.file_path.stat().st_size == size


@pytest.mark.parametrize("exporter_class", [FramedProtobufFileExporter, JsonLinesFileExporter])
def test_an_unwritable_path_is_logged_once_with_its_cause_and_the_spans_counted(tmp_path, caplog, exporter_class):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a regular file")
    exporter = exporter_class(blocker / "traces" / "job.otlp")
    with caplog.at_level(logging.DEBUG, logger="instrument"):
        assert exporter.export(finished_spans()) is SpanExportResult.FAILURE
        assert exporter.export(finished_spans(3)) is SpanExportResult.FAILURE  # still failing, still not raising
        warned = [r for r in caplog.records if r.name == "instrument" and r.levelno >= logging.WARNING]
        (first,) = warned
        assert "could not write 2 spans" in first.getMessage() and "not_a_dir" in first.getMessage()
        assert "Not a directory" in first.getMessage()  # the cause, as the OS says it
        assert first.exc_info is None  # and no traceback
        assert exporter.spans_not_written == 2 + 3
        caplog.clear()
        exporter.shutdown()
    (said,) = [r.getMessage() for r in caplog.records if r.name == "instrument" and r.levelno >= logging.WARNING]
    assert "5 spans of this process were not written" in said and "Not a directory" in said
    assert exporter.file_path is None


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux) to fail a write")
@pytest.mark.parametrize("exporter_class", [FramedProtobufFileExporter, JsonLinesFileExporter])
def test_failed_writes_on_a_full_disk_are_logged_once_and_counted(tmp_path, caplog, exporter_class):
    full = tmp_path / "full.otlp"
    full.symlink_to("/dev/full")  # opens fine, every write fails with ENOSPC
    exporter = exporter_class(full)
    with caplog.at_level(logging.WARNING, logger="instrument"):
        for _ in range(5):
            assert exporter.export(finished_spans()) is SpanExportResult.FAILURE
    (said,) = [r.getMessage() for r in caplog.records if r.name == "instrument"]
    assert "could not write 2 spans" in said and "No space left on device" in said
    assert exporter.spans_not_written == 5 * 2
    exporter.shutdown()


@pytest.mark.parametrize("count", [1, 3])
def test_a_json_line_is_the_official_exporters_line(count):
    """The JSON Lines exporter writes itself (to count a failed write rather than log a traceback per batch), but its
    line is the one `opentelemetry-exporter-otlp-json-file` writes for the same spans, byte for byte."""
    import io

    from opentelemetry.exporter.otlp.json.file import FileSpanExporter

    spans = finished_spans(count)
    official = io.StringIO()
    FileSpanExporter(stream=official).export(spans)
    assert JsonLinesFileExporter("unused.jsonl")._encode(spans) == official.getvalue().encode("utf-8")


PARTIAL_WRITE_JOB = textwrap.dedent(
    """
    import resource, signal, sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from instrument import exporters

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit, write(2) fails with EFBIG instead of killing us
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(getattr(exporters, sys.argv[2])(sys.argv[1])))
    tracer = provider.get_tracer("t")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (5000, hard))  # room for two spans and part of a third
    for index in range(4):
        with tracer.start_as_current_span(f"limited{index}", attributes={"payload": "x" * 1500}):
            pass
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space is back
    with tracer.start_as_current_span("after", attributes={"payload": "x" * 1500}):
        pass
    provider.shutdown()
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs RLIMIT_FSIZE semantics of Linux")
@pytest.mark.parametrize(
    ("exporter_class", "read_spans", "name"),
    [
        (FramedProtobufFileExporter, read_framed_spans, "p.otlp"),
        (JsonLinesFileExporter, read_json_lines_spans, "p.jsonl"),
    ],
)
def test_record_torn_by_a_failed_write_is_cut_off(tmp_path, exporter_class, read_spans, name):
    # A separate process, because the file-size limit applies to every file the process writes.
    path = tmp_path / name
    job = subprocess.run(
        [sys.executable, "-c", PARTIAL_WRITE_JOB, str(path), exporter_class.__name__],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert job.returncode == 0, job.stderr
    assert "goodput: could not write 1 span to" in job.stderr
    assert "2 spans of this process were not written" in job.stderr  # limited2 and limited3, said at shutdown
    names = [s.name if hasattr(s, "name") else s["name"] for s in read_spans(path)]
    assert names == ["limited0", "limited1", "after"]  # the torn third record is gone; later records still parse


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_writes_its_own_file(tmp_path):
    path = tmp_path / "job.otlp"
    exporter = FramedProtobufFileExporter(path)
    provider = provider_for(exporter)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("parent.before_fork"):
        pass
    child_pid = os.fork()
    if child_pid == 0:  # pragma: no cover - runs in the child, which must never return into pytest
        status = 1
        try:
            with tracer.start_as_current_span("child.work"):
                pass
            provider.shutdown()
            status = 0
        finally:
            os._exit(status)
    _, wait_status = os.waitpid(child_pid, 0)
    assert os.waitstatus_to_exitcode(wait_status) == 0
    with tracer.start_as_current_span("parent.after_fork"):
        pass
    provider.shutdown()
    assert [s.name for s in read_framed_spans(path)] == ["parent.before_fork", "parent.after_fork"]
    assert [s.name for s in read_framed_spans(tmp_path / f"job.{HOST}-{child_pid}.otlp")] == ["child.work"]


def test_make_span_exporter_file_kinds(tmp_path, monkeypatch):
    assert isinstance(make_span_exporter("otlp-file", tmp_path, "svc"), FramedProtobufFileExporter)
    monkeypatch.chdir(tmp_path)
    exporter = make_span_exporter("json-file", None, "svc")  # None: ./goodput_traces, one file per process
    assert isinstance(exporter, JsonLinesFileExporter)
    assert exporter.export(finished_spans(1)) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert exporter.file_path == Path(DEFAULT_TRACE_DIR) / f"svc-{HOST}-{os.getpid()}.jsonl"
    assert len(read_json_lines_spans(tmp_path / exporter.file_path)) == 1


def test_make_span_exporter_console():
    exporter = make_span_exporter("console", None, "svc")
    assert isinstance(exporter, ConsoleSpanExporter)
    assert exporter.service_name == "svc"


@pytest.mark.parametrize(
    ("traces_protocol", "protocol", "module"),
    [
        (None, None, "grpc"),
        (None, "grpc", "grpc"),
        (None, "http/protobuf", "http"),
        ("http/protobuf", "grpc", "http"),  # the signal-specific variable wins, as in the OTel SDK
        ("grpc", "http/protobuf", "grpc"),
    ],
)
def test_make_span_exporter_otlp_picks_the_protocol(monkeypatch, traces_protocol, protocol, module):
    variables = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": traces_protocol, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
    for name, value in variables.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    exporter = make_span_exporter("otlp", None, "svc")
    try:
        assert type(exporter).__name__ == "OTLPSpanExporter"
        assert type(exporter).__module__ == f"opentelemetry.exporter.otlp.proto.{module}.trace_exporter"
    finally:
        exporter.shutdown()


def test_make_span_exporter_otlp_rejects_an_unsupported_protocol(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="http/json"):
        make_span_exporter("otlp", None, "svc")


def test_make_span_exporter_otlp_without_the_package_says_what_to_install(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.trace_exporter", None)  # as if absent
    with pytest.raises(ImportError, match=r"pip install 'goodput\[otlp\]'"):
        make_span_exporter("otlp", None, "svc")


def test_make_span_exporter_unknown_kind_names_the_accepted_ones():
    with pytest.raises(ValueError, match="'otlp-file', 'json-file', 'otlp', 'console'"):
        make_span_exporter("zipkin", None, "svc")


class _SlowExporter(InMemorySpanExporter):
    """The SDK's in-memory exporter, taking its time to write, as a file on a busy disk does."""

    def export(self, spans):
        time.sleep(0.3)
        return super().export(spans)


def test_the_end_of_call_flush_waits_for_a_write_the_writer_thread_has_begun():
    # Under load, the writer thread had taken the ended spans from the queue and was still writing them when the
    # call's own flush saw an empty queue and returned: the call's result went back, Ray killed the actor, and the
    # file was empty. The flush now waits for that write (the SDK's export lock).
    from instrument.processor import IN_DISPATCHED_CALL, CountingBatchSpanProcessor, flush_ended_spans

    exporter = _SlowExporter()
    processor = CountingBatchSpanProcessor(exporter, schedule_delay_millis=60_000)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    token = IN_DISPATCHED_CALL.set(True)
    try:
        provider.get_tracer("test").start_span("rl.toy.reward").end()  # wakes the writer thread
        deadline = time.monotonic() + 5
        while processor._queue and time.monotonic() < deadline:  # the writer has taken it: the queue is empty
            time.sleep(0.005)
        assert not processor._queue
        flush_ended_spans(processor)
        assert [span.name for span in exporter.get_finished_spans()] == ["rl.toy.reward"]
    finally:
        IN_DISPATCHED_CALL.reset(token)
        provider.shutdown()
