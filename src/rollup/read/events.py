"""Span events and links: the list columns `events` and `links` of the span row (`schema.EVENT`, `schema.LINK`).

Most spans have neither, so a reader hands over only the spans that do, by row, and every other span gets an empty
list; a load for the accounting alone never builds them. Attribute values are rendered as a span's are
(`values.render_value`), ids as lowercase hex, so `SELECT ... FROM spans, unnest(events)` finds a `record_exception`
event alike whichever file it came from.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate
from typing import Any

import pyarrow as pa

from rollup.base.schema import EVENT, LINK

EVENTS = pa.list_(EVENT)
LINKS = pa.list_(LINK)
_INT64_LIMIT = 1 << 63

RenderAttributes = Callable[[Any], list[tuple[str, str | None]]]  # a repeated KeyValue field to (key, text) pairs


def sparse_lists(rows: int, items_by_row: Mapping[int, Sequence[dict[str, Any]]], list_type: pa.ListType) -> pa.Array:
    """A list column of `rows` rows: each row of `items_by_row` holds its items (dicts of the item struct's fields),
    every other row an empty list."""
    if not items_by_row:  # the usual batch: zero offsets, no Python loop over its rows
        zeros = pa.Array.from_buffers(pa.int32(), rows + 1, [None, pa.py_buffer(bytes(4 * (rows + 1)))])
        return pa.ListArray.from_arrays(zeros, pa.array([], list_type.value_type), type=list_type)
    counts = [0] * rows
    flat: list[dict[str, Any]] = []
    for row in sorted(items_by_row):
        items = items_by_row[row]
        counts[row] = len(items)
        flat.extend(items)
    offsets = pa.array(array("i", accumulate(counts, initial=0)), pa.int32())
    return pa.ListArray.from_arrays(offsets, pa.array(flat, list_type.value_type), type=list_type)


def proto_events(encoded: Sequence[bytes], rendered: RenderAttributes) -> list[dict[str, Any]]:
    """A span's encoded `Span.Event` messages as EVENT items; DecodeError or ValueError when one is damaged."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    events = []
    for raw in encoded:
        event = Span.Event.FromString(raw)
        if event.time_unix_nano >= _INT64_LIMIT:
            raise ValueError(f"an event time of {event.time_unix_nano} ns is past the year 2262")
        events.append({"time_ns": event.time_unix_nano, "name": event.name, "attributes": rendered(event.attributes)})
    return events


def proto_links(encoded: Sequence[bytes], rendered: RenderAttributes) -> list[dict[str, Any]]:
    """A span's encoded `Span.Link` messages as LINK items; DecodeError when one is damaged."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    links = []
    for raw in encoded:
        link = Span.Link.FromString(raw)
        ids = {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()}
        links.append({**ids, "attributes": rendered(link.attributes)})
    return links
