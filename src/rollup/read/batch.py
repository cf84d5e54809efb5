"""Decoded span columns to Arrow batches of the span row (`schema.SPAN_SCHEMA`, or a projection of it).

Both readers decode a record into plain columns and hand them here, so their batches agree column for column: the
resource's `service` and `process`, the promoted goodput columns, the id checks that tell a trace from bytes that
merely parse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from rollup.base.arrays import FALSE
from rollup.base.schema import (
    ATTRIBUTE_MAP,
    GOODPUT_FLEET,
    NO_PARENT_ID,
    RL_BUCKET,
    RL_EFFICIENCY_CATEGORY,
    RL_ITERATION,
    RL_SPAN_GROUP,
    SPAN_SCHEMA,
)

from .values import holding, host_pid, integral_value, process_key, run_id


@dataclass(frozen=True)
class ResourceInfo:
    """One resource: its rendered attributes in order, and the columns they give (`service`, `process`,
    `host_pid`, `run_id`, `holding`)."""

    entries: tuple[tuple[str, str | None], ...]
    service: str | None
    process: str
    host_pid: str | None
    run_id: str | None
    holding: str | None

    @classmethod
    def from_entries(cls, entries: Sequence[tuple[str, str | None]]) -> ResourceInfo:
        as_dict = {key: value for key, value in entries if value is not None}
        return cls(
            tuple(entries), as_dict.get("service.name"), process_key(as_dict), host_pid(as_dict), run_id(as_dict),
            holding(as_dict),
        )  # fmt: skip


def map_array(sets: Sequence[Sequence[tuple[str, str | None]]]) -> pa.MapArray:
    """An ATTRIBUTE_MAP array with one map per entry of `sets` (each a sequence of (key, text) pairs)."""
    offsets, keys, values = [0], [], []
    for entries in sets:
        for key, value in entries:
            keys.append(key)
            values.append(value)
        offsets.append(len(keys))
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), pa.array(values, pa.string()), type=ATTRIBUTE_MAP
    )


class InvalidSpan(NamedTuple):
    """A row whose ids are not OTLP ids: which row, which column, the value as normalized, what was expected."""

    row: int
    column: str
    value: Any
    expected: str

    @property
    def problem(self) -> str:
        return f"a span has {self.column} {self.value!r}, expected {self.expected}"


def first_invalid_span(batch: pa.RecordBatch, *, check_hex: bool = True) -> InvalidSpan | None:
    """The first row whose ids are not OTLP ids (16-byte trace id, 8-byte span and parent ids), None when all are.

    Requiring real ids is what tells a trace from bytes that merely parse as some protobuf or JSON object. Ids made
    from bytes by `bytes.hex()` need only their length checked (`check_hex=False`); ids read as text need both.
    """
    checks = [
        ("trace_id", 32, "a 16-byte trace id"),
        ("span_id", 16, "an 8-byte span id"),
        ("parent_span_id", 16, "an 8-byte parent span id or none"),
    ]
    found: InvalidSpan | None = None
    for name, length, expected in checks:
        column = batch.column(name)
        ok = pc.equal(pc.binary_length(column), pa.scalar(length, pa.int32()))  # typed: see arrays.FALSE
        if check_hex:
            ok = pc.and_kleene(ok, pc.match_substring_regex(column, "^[0-9a-f]*$"))
        if name == "parent_span_id":
            ok = pc.or_kleene(ok, pc.is_null(column))
        bad = pc.invert(ok.fill_null(FALSE))
        if pc.any(bad).as_py():
            row = pc.index(bad, True).as_py()
            if found is None or row < found.row:
                found = InvalidSpan(row, name, column[row].as_py(), expected)
    return found


def _small_int(values: Any) -> pa.Array:
    """An int8 column from OTLP enum numbers; a number outside int8 (an unknown future enum) becomes null."""
    wide = values if isinstance(values, pa.Array) else pa.array(values, pa.int64())
    wide = wide.cast(pa.int64())
    fits = pc.and_(pc.greater_equal(wide, pa.scalar(-128, pa.int64())), pc.less_equal(wide, pa.scalar(127, pa.int64())))
    return pc.if_else(fits, wide, pa.scalar(None, pa.int64())).cast(pa.int8())


def _as_array(values: Any, type_: pa.DataType) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values if values.type == type_ else values.cast(type_)
    return pa.array(values, type_)


def _promoted_text(attributes: pa.MapArray, key: str) -> pa.Array:
    """The value of `key` in each row's map (the first, if a map repeats it), null where absent.

    Vectorized over the flattened entries: `pc.map_lookup` costs about 0.7 us a row, this a few ns.
    """
    offsets, keys, values = attributes.offsets, attributes.keys, attributes.items
    matches = pc.equal(keys, pa.scalar(key, pa.string())).fill_null(False)
    seen = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(matches.cast(pa.int64()))])
    before = seen.take(offsets[:-1])
    through = seen.take(offsets[1:])
    first_match = pc.if_else(pc.greater(through, before), before, pa.scalar(None, pa.int64()))
    return values.filter(matches).take(first_match)


def _parent_ids(values: Any) -> pa.Array:
    """Parent span ids with the all-zero id as null, so a span naming it is a root in every view (SPEC section 4)."""
    ids = _as_array(values, pa.string())
    is_zero = pc.equal(ids, pa.scalar(NO_PARENT_ID, pa.string()))
    if not pc.any(is_zero).as_py():
        return ids
    return pc.if_else(is_zero, pa.scalar(None, pa.string()), ids)


def _iterations(texts: pa.Array) -> pa.Array:
    """rl.iteration texts as int64, parsing each distinct text once (a batch holds few distinct iterations)."""
    encoded = pc.dictionary_encode(texts)
    parsed = pa.array([integral_value(text) for text in encoded.dictionary.to_pylist()], pa.int64())
    return parsed.take(encoded.indices)


def span_record_batch(
    *,
    trace_id: Any,
    span_id: Any,
    parent_span_id: Any,
    name: Any,
    kind: Any,
    start_ns: Any,
    end_ns: Any,
    status_code: Any,
    status_message: Any,
    attributes: pa.MapArray,
    resources: Sequence[ResourceInfo],
    resource_index: Any,
    scope_name: Any,
    scope_version: Any,
    source_file: str,
    schema: pa.Schema = SPAN_SCHEMA,
    events: pa.Array | None = None,
    links: pa.Array | None = None,
) -> pa.RecordBatch:
    """One batch of `schema` (SPAN_SCHEMA or a projection of it) from decoded columns (Python lists or Arrow arrays).

    Only the columns `schema` names are built, so a projection skips the rest (the maps above all). `attributes`
    must hold at least the promoted keys. Resources come once each, with a per-span index into them, since every
    span of a process shares one. `events` and `links` (list columns, `read.events`) are needed only when `schema`
    has them.
    """
    start = _as_array(start_ns, pa.int64())
    end = _as_array(end_ns, pa.int64())
    index = _as_array(resource_index, pa.int32())
    columns: dict[str, Callable[[], pa.Array]] = {
        "trace_id": lambda: _as_array(trace_id, pa.string()),
        "span_id": lambda: _as_array(span_id, pa.string()),
        "parent_span_id": lambda: _parent_ids(parent_span_id),
        "name": lambda: _as_array(name, pa.string()),
        "kind": lambda: _small_int(kind),
        "start_ns": lambda: start,
        "end_ns": lambda: end,
        "duration_ns": lambda: pc.subtract(end, start),
        "status_code": lambda: _small_int(status_code),
        "status_message": lambda: _as_array(status_message, pa.string()),
        "attributes": lambda: attributes,
        "events": lambda: events,
        "links": lambda: links,
        "resource": lambda: map_array([resource.entries for resource in resources]).take(index),
        "scope_name": lambda: _as_array(scope_name, pa.string()),
        "scope_version": lambda: _as_array(scope_version, pa.string()),
        "service": lambda: pa.array([resource.service for resource in resources], pa.string()).take(index),
        "process": lambda: pa.array([resource.process for resource in resources], pa.string()).take(index),
        "host_pid": lambda: pa.array([resource.host_pid for resource in resources], pa.string()).take(index),
        "run_id": lambda: pa.array([resource.run_id for resource in resources], pa.string()).take(index),
        "holding": lambda: pa.array([resource.holding for resource in resources], pa.string()).take(index),
        "bucket": lambda: _promoted_text(attributes, RL_BUCKET),
        "iteration": lambda: _iterations(_promoted_text(attributes, RL_ITERATION)),
        "span_group": lambda: _promoted_text(attributes, RL_SPAN_GROUP),
        "efficiency_category": lambda: _promoted_text(attributes, RL_EFFICIENCY_CATEGORY),
        "fleet": lambda: _promoted_text(attributes, GOODPUT_FLEET),
        "source_file": lambda: pa.repeat(pa.scalar(source_file, pa.string()), len(start)),
    }
    return pa.RecordBatch.from_arrays([columns[field.name]() for field in schema], schema=schema)
