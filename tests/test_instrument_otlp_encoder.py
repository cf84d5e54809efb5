"""The fast OTLP encoder against the official one: the same message, field for field, on spans of every shape."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)
from opentelemetry.trace.span import NonRecordingSpan

from conftest import PROPERTY_TESTS
from instrument.otlp_encode import encode_request


def canonical(data: bytes) -> bytes:
    """A request re-serialized deterministically, so field order and NaN compare as bytes."""
    return ExportTraceServiceRequest.FromString(data).SerializeToString(deterministic=True)


def assert_same_as_official(spans) -> None:
    assert canonical(encode_request(spans)) == canonical(encode_spans(spans).SerializeToString())


def finished(build) -> list:
    """The spans `build(tracer_of)` ends, `tracer_of(resource, scope)` handing out tracers of several providers."""
    exporter = InMemorySpanExporter()
    providers: dict = {}

    def tracer_of(resource: dict | None = None, scope: str = "goodput.test", version: str | None = "1.0"):
        key = tuple(sorted((resource or {}).items()))
        if key not in providers:
            providers[key] = TracerProvider(resource=Resource.create(resource or {"service.name": "t"}))
            providers[key].add_span_processor(SimpleSpanProcessor(exporter))
        return providers[key].get_tracer(scope, version, schema_url="https://example.com/schema" if version else None)

    build(tracer_of)
    return list(exporter.get_finished_spans())


def test_plain_goodput_spans_encode_as_the_official_encoder_does():
    def build(tracer_of):
        tracer = tracer_of({"service.name": "driver", "service.instance.id": "driver@h:1", "goodput.run.id": "r1"})
        with tracer.start_as_current_span("rl.grpo.step", attributes={"rl.span_group": "step", "rl.iteration": 3}):
            for _ in range(3):
                with tracer.start_as_current_span(
                    "rl.grpo.generation", attributes={"rl.span_group": "generation", "rl.bucket": "productive"}
                ):
                    pass

    assert_same_as_official(finished(build))


def test_every_rare_shape_encodes_as_the_official_encoder_does():
    remote_parent = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1))

    def build(tracer_of):
        a, b = tracer_of({"service.name": "a"}), tracer_of({"service.name": "b"}, scope="other", version=None)
        with a.start_as_current_span("", kind=SpanKind.SERVER):  # an empty name
            pass
        with a.start_as_current_span("events") as span:
            span.add_event("e", {"k": 1})
            span.record_exception(ValueError("boom"))
            span.set_status(Status(StatusCode.ERROR, "it failed"))
        with a.start_as_current_span("ok") as span:
            span.set_status(Status(StatusCode.OK))
        with b.start_as_current_span("linked", links=[Link(remote_parent, {"why": "batch"})], kind=SpanKind.CLIENT):
            pass
        with b.start_as_current_span("remote-child", context=set_span_in_context(NonRecordingSpan(remote_parent))):
            pass
        state = SpanContext(0xABC, 0x123, is_remote=True, trace_state=TraceState([("vendor", "x")]))
        with b.start_as_current_span("trace-state", context=set_span_in_context(NonRecordingSpan(state))):
            pass

    assert_same_as_official(finished(build))


VALUES = st.one_of(
    st.text(max_size=8),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(min_value=-5, max_value=5), max_size=3).map(tuple),
    st.lists(st.text(max_size=3), max_size=3).map(tuple),
    st.lists(st.booleans(), max_size=3).map(tuple),
    st.lists(st.floats(allow_nan=False), max_size=3).map(tuple),
)


@pytest.mark.slow
@PROPERTY_TESTS
@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "rl.bucket", "x.y"]), VALUES, max_size=4), max_size=6))
def test_attribute_values_of_every_type_encode_as_the_official_encoder_does(attribute_sets):
    def build(tracer_of):
        tracer = tracer_of()
        for attributes in attribute_sets:
            with tracer.start_as_current_span("s", attributes=attributes):
                pass

    spans = finished(build)
    assert_same_as_official(spans)
    # The cache must not confuse values that compare equal: True and 1, 0.0 and -0.0, NaN and NaN.
    assert_same_as_official(spans)


def test_values_that_compare_equal_are_not_confused_by_the_cache():
    def build(tracer_of):
        tracer = tracer_of()
        for value in (1, True, 1.0, 0.0, -0.0, math.nan, (1,), (True,)):
            with tracer.start_as_current_span("s", attributes={"v": value}):
                pass

    assert_same_as_official(finished(build))
