"""Baseline A of bench/ingest.py: what a plain Python script does with a Collector-framed OTLP protobuf file.

One process, no DuckDB, no Arrow: parse every framed `ExportTraceServiceRequest` with `opentelemetry.proto`, read every
span's ids (as hex), name, start and end times and attributes into Python lists, then sum the durations per
(`rl.iteration`, `rl.bucket`). This is the floor a goodput command reading the same file is measured against.
Prints `iteration,bucket,sum_ns` rows (empty for a missing value) on stdout and the span count on stderr.

Usage: python bench/baseline_proto.py FILE
"""

from __future__ import annotations

import struct
import sys

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def attribute_value(any_value):
    """The Python value an OTLP AnyValue holds (arrays and maps as their messages: none occur in the bench trace)."""
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


def read_spans(path: str):
    trace_ids, span_ids, parent_ids, names, starts_ns, ends_ns, attributes = [], [], [], [], [], [], []
    with open(path, "rb") as file:
        while header := file.read(4):
            (length,) = struct.unpack(">I", header)
            request = ExportTraceServiceRequest.FromString(file.read(length))
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        trace_ids.append(span.trace_id.hex())
                        span_ids.append(span.span_id.hex())
                        parent_ids.append(span.parent_span_id.hex() or None)
                        names.append(span.name)
                        starts_ns.append(span.start_time_unix_nano)
                        ends_ns.append(span.end_time_unix_nano)
                        attributes.append({kv.key: attribute_value(kv.value) for kv in span.attributes})
    return trace_ids, span_ids, parent_ids, names, starts_ns, ends_ns, attributes


def main() -> None:
    trace_ids, span_ids, parent_ids, names, starts_ns, ends_ns, attributes = read_spans(sys.argv[1])
    sums_ns: dict = {}
    for start_ns, end_ns, span_attributes in zip(starts_ns, ends_ns, attributes, strict=True):
        iteration = span_attributes.get("rl.iteration")
        if not isinstance(iteration, int) or isinstance(iteration, bool):
            iteration = None
        key = (iteration, span_attributes.get("rl.bucket"))
        sums_ns[key] = sums_ns.get(key, 0) + (end_ns - start_ns)
    out = sys.stdout
    for (iteration, bucket), total_ns in sums_ns.items():
        out.write(f"{'' if iteration is None else iteration},{bucket or ''},{total_ns}\n")
    print(f"{len(span_ids)} spans", file=sys.stderr)


if __name__ == "__main__":
    main()
