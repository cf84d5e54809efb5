"""Hand-built traces for the accounting tests, written to real files in every shape the readers accept.

A span is described in seconds from the run's origin and with short labels for ids, so a test reads like the
timeline it describes; the writers turn labels into real hex ids and seconds into epoch nanoseconds.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

ORIGIN_NS = 1_700_000_000 * 10**9


def ns(seconds: float) -> int:
    return ORIGIN_NS + round(seconds * 1e9)


def hex_id(label: str, length: int) -> str:
    return hashlib.sha256(label.encode()).hexdigest()[:length]


@dataclass
class S:
    """One span: `S("gen", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive")`."""

    label: str
    name: str
    start: float
    end: float
    parent: str | None = None
    bucket: str | None = None
    iteration: int | None = None
    group: str | None = None
    process: str = "driver"
    trace: str = "t1"
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def span_id(self) -> str:
        return hex_id(self.trace + "/" + self.label, 16)

    @property
    def trace_id(self) -> str:
        return hex_id(self.trace, 32)

    @property
    def parent_id(self) -> str | None:
        return hex_id(self.trace + "/" + self.parent, 16) if self.parent else None

    def attributes(self) -> dict[str, Any]:
        out = dict(self.attrs)
        if self.bucket is not None:
            out["rl.bucket"] = self.bucket
        if self.iteration is not None:
            out["rl.iteration"] = self.iteration
        if self.group is not None:
            out["rl.span_group"] = self.group
        return out


def step(label: str, iteration: int, start: float, end: float, **kw: Any) -> S:
    """A step span (`rl.grpo.step`, group `step`) of `iteration`."""
    return S(label, "rl.grpo.step", start, end, iteration=iteration, group="step", **kw)


def span_id_of(label: str, trace: str = "t1") -> str:
    return hex_id(trace + "/" + label, 16)


Resources = dict[str, dict[str, Any]]  # process label -> its resource attributes, where not the default


def _resource(process: str, resources: Resources | None = None) -> dict[str, Any]:
    if resources and process in resources:
        return resources[process]
    return {"service.name": "toy", "service.instance.id": process, "host.name": "host", "process.pid": 1}


def _any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list):
        any_value = AnyValue()
        any_value.array_value.values.extend(_any_value(item) for item in value)
        return any_value
    return AnyValue(string_value=str(value))


def _key_values(attributes: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_any_value(v)) for k, v in attributes.items()]


def to_request(spans: Sequence[S], resources: Resources | None = None) -> ExportTraceServiceRequest:
    """One OTLP request: a ResourceSpans per process, in first-seen order."""
    request = ExportTraceServiceRequest()
    by_process: dict[str, list[S]] = {}
    for span in spans:
        by_process.setdefault(span.process, []).append(span)
    for process, members in by_process.items():
        resource_spans = ResourceSpans()
        resource_spans.resource.attributes.extend(_key_values(_resource(process, resources)))
        scope = ScopeSpans()
        scope.scope.name = "tracebuild"
        for span in members:
            scope.spans.append(
                Span(
                    trace_id=bytes.fromhex(span.trace_id),
                    span_id=bytes.fromhex(span.span_id),
                    parent_span_id=bytes.fromhex(span.parent_id) if span.parent_id else b"",
                    name=span.name,
                    kind=Span.SPAN_KIND_INTERNAL,
                    start_time_unix_nano=ns(span.start),
                    end_time_unix_nano=ns(span.end),
                    attributes=_key_values(span.attributes()),
                )
            )
        resource_spans.scope_spans.append(scope)
        request.resource_spans.append(resource_spans)
    return request


def _json_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_json_value(item) for item in value]}}
    return {"stringValue": str(value)}


def to_json_record(spans: Sequence[S], resources: Resources | None = None) -> dict[str, Any]:
    """The OTLP JSON object of `to_request`, as the OTLP file exporter writes it (hex ids, int64 as strings)."""
    by_process: dict[str, list[S]] = {}
    for span in spans:
        by_process.setdefault(span.process, []).append(span)
    resource_spans = []
    for process, members in by_process.items():
        json_spans = []
        for span in members:
            item = {
                "traceId": span.trace_id,
                "spanId": span.span_id,
                "name": span.name,
                "kind": 1,
                "startTimeUnixNano": str(ns(span.start)),
                "endTimeUnixNano": str(ns(span.end)),
                "attributes": [{"key": k, "value": _json_value(v)} for k, v in span.attributes().items()],
                "status": {},
            }
            if span.parent_id:
                item["parentSpanId"] = span.parent_id
            json_spans.append(item)
        resource = _resource(process, resources)
        resource_spans.append(
            {
                "resource": {"attributes": [{"key": k, "value": _json_value(v)} for k, v in resource.items()]},
                "scopeSpans": [{"scope": {"name": "tracebuild"}, "spans": json_spans}],
            }
        )
    return {"resourceSpans": resource_spans}


def _batches(spans: Sequence[S], batches: int) -> list[list[S]]:
    size = max(1, -(-len(spans) // max(1, batches)))
    return [list(spans[i : i + size]) for i in range(0, len(spans), size)] or [[]]


def write_trace(
    path: Path, spans: Sequence[S], shape: str = "framed", batches: int = 1, resources: Resources | None = None
) -> Path:
    """Write `spans` as `shape`: framed | bare | jsonl | json-document, optionally `+gz` (e.g. "jsonl+gz").

    `resources` gives processes other resource attributes than the default (instance id = the process label)."""
    base, _, compression = shape.partition("+")
    if base == "framed":
        data = b"".join(
            struct.pack(">I", len(body)) + body
            for body in (to_request(batch, resources).SerializeToString() for batch in _batches(spans, batches))
        )
    elif base == "bare":
        data = to_request(spans, resources).SerializeToString()
    elif base == "jsonl":
        data = "".join(json.dumps(to_json_record(b, resources)) + "\n" for b in _batches(spans, batches)).encode()
    elif base == "json-document":
        data = json.dumps(to_json_record(spans, resources), indent=2).encode()
    else:
        raise ValueError(shape)
    if compression == "gz":
        data = gzip.compress(data)
    elif compression == "zst":
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- traces the command-line tests share -----------------------------------------------------------------------------


def run_resource(process: str, run_id: str) -> dict[str, Any]:
    """The default resource of `process`, with `goodput.run.id` naming its attempt."""
    return {**_resource(process), "goodput.run.id": run_id}


def two_steps(tmp_path):
    """Iterations 1 and 2, [0, 4) and [4, 8) s: 3 s of productive generation in the first, 1 s of overhead in the
    second."""
    return write_trace(
        tmp_path / "run.otlp",
        [
            S("s1", "rl.grpo.step", 0, 4, iteration=1, group="step"),
            S("g1", "rl.grpo.generation", 0, 3, parent="s1", bucket="productive", group="generation"),
            S("s2", "rl.grpo.step", 4, 8, iteration=2, group="step"),
            S("l2", "rl.grpo.logprob", 4, 5, parent="s2", bucket="overhead", group="logprob"),
        ],
    )


def three_steps(tmp_path: Path, name: str = "run.otlp") -> Path:
    """A 12 s job of iterations 1-3, 4 s each: 3 s productive in the first, 1 s overhead in the second, 1 s idle in
    the third."""
    return write_trace(
        tmp_path / name,
        [
            S("job", "rl.grpo.job", 0, 12, group="job"),
            step("s1", 1, 0, 4, parent="job"),
            S("g1", "rl.grpo.generation", 0, 3, parent="s1", bucket="productive", group="generation"),
            step("s2", 2, 4, 8, parent="job"),
            S("l2", "rl.grpo.logprob", 4, 5, parent="s2", bucket="overhead", group="logprob"),
            step("s3", 3, 8, 12, parent="job"),
            S("w3", "rl.idle.buffer_starvation", 8, 9, parent="s3", bucket="idle", group="efficiency"),
        ],
    )


def many_small_files(folder: Path, count: int = 20) -> Path:
    """`count` files of one step each: enough jobs for the worker processes (IN_PROCESS_JOBS)."""
    for index in range(count):
        start = 10.0 * index
        write_trace(
            folder / f"worker-{index:02d}.otlp",
            [
                step(f"s{index}", index, start, start + 4, trace=f"t{index}"),
                S(f"g{index}", "rl.grpo.generation", start, start + 3, parent=f"s{index}", bucket="productive",
                  trace=f"t{index}"),
            ],
        )  # fmt: skip
    return folder


def service_processes(tmp_path: Path) -> Path:
    """A driver and two generation workers named as SPEC section 1 shows processes without an instance id
    (`service.name@host:pid`), and a nemo-lens rank that shares its name with the driver's."""

    def resource(service: str, pid: int, instance: str | None = None) -> dict:
        attributes = {"service.name": service, "host.name": "vm", "process.pid": pid}
        return {**attributes, "service.instance.id": instance} if instance else attributes

    resources = {
        "driver": resource("grpo-driver", 10),
        "gen-a": resource("grpo-generation", 11),
        "gen-b": resource("grpo-generation", 12),
        "rank-a": resource("lens", 20, "run7-rank0"),
        "rank-b": resource("lens", 21, "run7-rank0"),
    }
    spans = [
        step("s1", 1, 0, 10, process="driver"),
        S("ga", "rl.grpo.generation", 1, 5, parent="s1", bucket="productive", process="gen-a"),
        S("gb", "rl.grpo.generation", 2, 6, parent="s1", bucket="productive", process="gen-b"),
        S("ra", "rl.grpo.policy_training", 6, 8, parent="s1", bucket="productive", process="rank-a"),
        S("rb", "rl.grpo.policy_training", 6, 9, parent="s1", bucket="productive", process="rank-b"),
    ]
    return write_trace(tmp_path / "run.otlp", spans, resources=resources)


def steps_lasting(walls: Sequence[float], gen_share: float = 0.8, process: str = "driver") -> list[S]:
    """Step i lasting `walls[i]`, a second after the one before, its first `gen_share` a productive `generation`
    span."""
    spans, t = [], 0.0
    for i, wall in enumerate(walls):
        spans.append(step(f"{process}-s{i}", i, t, t + wall, process=process))
        spans.append(S(f"{process}-g{i}", "generation", t, t + wall * gen_share, parent=f"{process}-s{i}",
                       bucket="productive", process=process))  # fmt: skip
        t += wall + 1.0
    return spans
