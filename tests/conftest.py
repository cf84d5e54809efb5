"""Fixtures and trace-file readers shared by the test modules."""

from __future__ import annotations

import base64
import json
import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import instrument

# What every property test shares: no deadline and no too-slow check (a shared CI machine is slow at times), and
# function-scoped fixtures such as tmp_path are fine (each example writes its own files in it).
PROPERTY_TESTS = settings(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def invoke(args: list[str], width: int = 160):
    """`goodput ARGS` in this process through typer's CliRunner, at a fixed terminal width."""
    from typer.testing import CliRunner

    from cli import app

    return CliRunner().invoke(app, args, terminal_width=width)


# --- fixtures -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory):
    """Every command in the session caches under a temporary folder, never in the user's cache."""
    os.environ["GOODPUT_CACHE_DIR"] = str(tmp_path_factory.mktemp("goodput-cache"))
    yield


@pytest.fixture(scope="session")
def ray_inherited_trace_dir(tmp_path_factory) -> Path:
    """Where workers of the session's Ray cluster write when they call configure() bare (see `ray_cluster`)."""
    return tmp_path_factory.mktemp("ray-inherited-traces")


@pytest.fixture(scope="session")
def ray_cluster(ray_inherited_trace_dir):
    """One local Ray cluster for the whole session: starting one costs seconds, and the CI machine has 2 cores.

    Started the way a job starts it: configure() first, then ray.init(), so the raylet and every worker it spawns
    inherit the GOODPUT_* choice (JSON Lines files in `ray_inherited_trace_dir`, every group). The driver's own
    set-up is shut down again and its variables removed; tests configure the driver as they need.
    Ray is a test dependency, so a missing Ray fails the tests that need it rather than skipping them. It is imported
    here, not at the top, so test modules that never touch Ray do not pay for importing it.
    """
    import ray

    saved = {k: v for k, v in os.environ.items() if k.startswith("GOODPUT_")}
    instrument.configure(exporter="json-file", path=ray_inherited_trace_dir, span_groups="all", service_name="driver")
    try:
        ray.init(num_cpus=2, include_dashboard=False)
    finally:
        instrument.shutdown()
        for key in [k for k in os.environ if k.startswith("GOODPUT_")]:
            del os.environ[key]
        os.environ.update(saved)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(autouse=True)
def _restore_goodput_environment():
    """configure() leaves its choice in os.environ for child processes; keep tests from leaking it."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("GOODPUT_")}
    yield
    instrument.shutdown()
    for key in [k for k in os.environ if k.startswith("GOODPUT_")]:
        del os.environ[key]
    os.environ.update(saved)


class Memory:
    """The SDK's in-memory exporter as configure() was handed it; `spans()` flushes first."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def spans(self):
        instrument.force_flush()
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def memory_with():
    """Call with the span groups to enable: configure() with a fresh in-memory exporter, returned as a `Memory`."""

    def make(span_groups):
        exporter = InMemorySpanExporter()
        instrument.configure(exporter=exporter, span_groups=span_groups, service_name="test")
        return Memory(exporter)

    yield make
    instrument.shutdown()


@pytest.fixture
def memory(memory_with):
    """Every span group enabled, read back through `memory.spans()`."""
    return memory_with("all")


# --- trace files, read the way the formats are specified ------------------------------------------------------------


def read_framed_records(path: Path) -> list[ExportTraceServiceRequest]:
    """Walk the 4-byte big-endian length prefixes, as the Collector's file receiver does; no byte may be left over."""
    data = Path(path).read_bytes()
    records, offset = [], 0
    while offset < len(data):
        assert offset + 4 <= len(data), f"length prefix at byte {offset} runs past the end"
        (length,) = struct.unpack_from(">I", data, offset)
        offset += 4
        assert offset + length <= len(data), f"record at byte {offset - 4} runs past the end"
        records.append(ExportTraceServiceRequest.FromString(data[offset : offset + length]))
        offset += length
    return records


def read_framed_spans(path: Path) -> list[trace_pb2.Span]:
    """Every span of a length-prefixed protobuf trace file, in file order."""
    return [
        span
        for record in read_framed_records(path)
        for resource_spans in record.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]


def read_json_lines_records(path: Path) -> list[dict]:
    """One OTLP JSON `ExportTraceServiceRequest` per line; the last line must be complete (newline-terminated)."""
    text = Path(path).read_text(encoding="utf-8")
    assert text.endswith("\n"), f"{path} does not end with a complete line"
    return [json.loads(line) for line in text.splitlines()]


def _any_value(value: dict):
    """An OTLP JSON `AnyValue` as the Python value it encodes (int64 arrives as a string in OTLP JSON)."""
    if not value:
        return None
    ((kind, raw),) = value.items()
    if kind == "stringValue":
        return raw
    if kind == "boolValue":
        return raw
    if kind == "intValue":
        return int(raw)
    if kind == "doubleValue":
        return float(raw)  # a number, or "NaN" / "Infinity" / "-Infinity"
    if kind == "bytesValue":
        return base64.b64decode(raw)
    if kind == "arrayValue":
        return [_any_value(item) for item in raw.get("values", [])]
    if kind == "kvlistValue":
        return {kv["key"]: _any_value(kv.get("value", {})) for kv in raw.get("values", [])}
    raise AssertionError(f"unknown OTLP JSON value kind {kind!r}")


def read_json_lines_spans(path: Path) -> list[dict]:
    """Every span of an OTLP JSON-lines trace file, in file order, with `attributes` flattened to {key: value}."""
    spans = []
    for record in read_json_lines_records(path):
        for resource_spans in record["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    attributes = {a["key"]: _any_value(a.get("value", {})) for a in span.get("attributes", [])}
                    spans.append({**span, "attributes": attributes})
    return spans
