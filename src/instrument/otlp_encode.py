"""OTLP protobuf encoding of finished spans, written straight to wire bytes: the official encoder's message, faster.

The framed-protobuf exporter encodes on the call path when a dispatched Ray call ends (see `ray_dispatch`), so its
cost is latency the caller sees. The official `encode_spans` builds a protobuf object per span, attribute and value
through Python helpers (about 22 us a span, measured); a training job's spans repeat the same few attributes
(`rl.span_group=generation`, `rl.bucket=productive`, ...), so here each distinct attribute is encoded once, by the
official encoder, and cached as bytes, and the span around it is a handful of byte strings (a few us a span). Spans
with anything rare (events, links, a trace state, dropped counts) are encoded by the official encoder whole. The
tests hold the result to the official encoder's message, field for field.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common._internal import (
    _encode_attributes,
    _encode_instrumentation_scope,
    _encode_resource,
)
from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import _encode_span
from opentelemetry.sdk.trace import ReadableSpan

_ATTRIBUTE_CACHE_LIMIT = 100_000
_attribute_bytes: dict[Any, bytes] = {}
_context_bytes: dict[int, tuple[Any, bytes]] = {}  # a resource's or scope's encoded message, by the object's id
_name_bytes: dict[str, bytes] = {}
_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200  # SpanFlags
_EMPTY_STATUS = b"\x7a\x00"
_LOCAL_PARENT_FLAGS = b"\x85\x01" + _pack_fixed32(_HAS_IS_REMOTE)
_REMOTE_PARENT_FLAGS = b"\x85\x01" + _pack_fixed32(_HAS_IS_REMOTE | _IS_REMOTE)
_KIND = {value: b"\x30" + bytes([value + 1]) for value in range(5)}  # OTLP counts from UNSPECIFIED, the SDK from 0
# Tag, trace id (two big-endian halves), tag, span id [, tag, parent span id]; then tag, start, tag, end (fixed64).
_IDS = struct.Struct(">HQQHQ").pack
_IDS_AND_PARENT = struct.Struct(">HQQHQHQ").pack
_TIMES = struct.Struct("<BQBQ").pack
_LOW_64 = (1 << 64) - 1


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SPAN_TAG_AND_SIZE = [b"\x12" + _varint(size) for size in range(4_096)]  # a span's field header, by its size


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    return tag + _varint(len(payload)) + payload


def _cache_key(key: str, value: Any) -> Any:
    """What tells two attribute values apart for the cache: True is not 1, -0.0 is not 0.0, NaN is itself. For a
    string, int or bool it is `(key, class, value)`, which `_span` looks up first without calling anything."""
    if isinstance(value, float):
        return key, float, struct.pack("<d", value)
    if isinstance(value, (tuple, list)):
        return key, tuple, tuple(_cache_key("", item) for item in value)
    return key, type(value), value


def _attribute(key: str, value: Any) -> bytes:
    """One span attribute as an encoded `KeyValue` field of a span (tag 9)."""
    try:
        cache_key = _cache_key(key, value)
        cached = _attribute_bytes.get(cache_key)
    except TypeError:  # an unhashable value: encode it every time
        cache_key, cached = None, None
    if cached is None:
        encoded = b"".join(
            _field(b"\x4a", key_value.SerializeToString()) for key_value in _encode_attributes({key: value}) or ()
        )
        if cache_key is not None:
            if len(_attribute_bytes) >= _ATTRIBUTE_CACHE_LIMIT:
                _attribute_bytes.clear()
            _attribute_bytes[cache_key] = encoded
        return encoded
    return cached


def _status(span: ReadableSpan) -> bytes:
    status = span.status
    code, message = status.status_code.value, status.description
    if not code and not message:
        return _EMPTY_STATUS
    body = (_field(b"\x12", message.encode()) if message else b"") + (b"\x18" + _varint(code) if code else b"")
    return _field(b"\x7a", body)


def _is_plain(span: ReadableSpan) -> bool:
    """Whether the span has nothing but what the fast path writes: no events, links, trace state or dropped counts.

    The SDK's public properties copy (events, links) or wrap (attributes) on every read, so its fields are read
    directly where they exist, the properties otherwise.
    """
    context = span.context
    if context is None or span.start_time is None or span.end_time is None or context.trace_state:
        return False
    events, links = getattr(span, "_events", None), getattr(span, "_links", None)
    if events is None or links is None:
        return not (span.events or span.links or span.dropped_attributes or span.dropped_events or span.dropped_links)
    attributes = getattr(span, "_attributes", None)
    return not (
        events or links or getattr(events, "dropped", 0) or getattr(links, "dropped", 0)
        or getattr(attributes, "dropped", 0)
    )  # fmt: skip


def _span_field(span: ReadableSpan) -> bytes:
    """One span as the `spans` field (tag 2) of a ScopeSpans: its `Span` message behind tag and length. The official
    encoder's message for a span with events, links, a trace state or dropped counts; the rest is built here from
    as few objects as will do, since this runs as a dispatched call returns."""
    if not _is_plain(span):
        return _field(b"\x12", _encode_span(span).SerializeToString())
    context, parent = span.context, span.parent
    name = _name_bytes.get(span.name)
    if name is None:
        if len(_name_bytes) >= _ATTRIBUTE_CACHE_LIMIT:
            _name_bytes.clear()
        name = _name_bytes[span.name] = _field(b"\x2a", span.name.encode()) if span.name else b""
    trace_id = context.trace_id
    if parent is None:
        ids = _IDS(0x0A10, trace_id >> 64, trace_id & _LOW_64, 0x1208, context.span_id)
        flags = _LOCAL_PARENT_FLAGS
    else:
        ids = _IDS_AND_PARENT(0x0A10, trace_id >> 64, trace_id & _LOW_64, 0x1208, context.span_id, 0x2208,
                              parent.span_id)  # fmt: skip
        flags = _REMOTE_PARENT_FLAGS if parent.is_remote else _LOCAL_PARENT_FLAGS
    parts = [ids, name, _KIND[span.kind.value], _TIMES(0x39, span.start_time, 0x41, span.end_time)]
    attributes = getattr(span, "_attributes", None)
    attributes = span.attributes if attributes is None else getattr(attributes, "_dict", attributes)
    if attributes:
        cached = _attribute_bytes.get
        for key, value in attributes.items():
            try:
                encoded = cached((key, value.__class__, value))
            except TypeError:  # an unhashable value (the SDK makes sequences tuples, but a caller's may slip by)
                encoded = None
            parts.append(encoded or _attribute(key, value))
    parts.append(_status(span))
    parts.append(flags)
    size = sum(map(len, parts))
    parts.insert(0, _SPAN_TAG_AND_SIZE[size] if size < len(_SPAN_TAG_AND_SIZE) else b"\x12" + _varint(size))
    return b"".join(parts)


def _context(kind: str, sdk_object: Any) -> bytes:
    """A resource (`kind` "resource") or scope as its encoded message, cached by the SDK object's identity (a
    Resource hashes by dumping itself to JSON, slower than encoding a span); the entry keeps the object alive, so
    its id cannot be reused for another while it is cached."""
    entry = _context_bytes.get(id(sdk_object))
    if entry is None or entry[0] is not sdk_object:
        if len(_context_bytes) >= 1_000:
            _context_bytes.clear()
        message = _encode_resource(sdk_object) if kind == "resource" else _encode_instrumentation_scope(sdk_object)
        entry = _context_bytes[id(sdk_object)] = (sdk_object, message.SerializeToString() if message else b"")
    return entry[1]


def encode_request(spans: Sequence[ReadableSpan]) -> bytes:
    """The `ExportTraceServiceRequest` the official `encode_spans(spans)` makes, serialized."""
    by_object: dict[int, tuple[Any, dict[Any, list[bytes]]]] = {}  # a Resource is slow to hash: group by identity
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope or None
        entry = by_object.get(id(resource))
        if entry is None:
            entry = by_object[id(resource)] = (resource, {})
        entry[1].setdefault(scope, []).append(_span_field(span))
    groups: list[tuple[Any, dict[Any, list[bytes]]]] = []
    for resource, scopes in by_object.values():  # then as the official encoder does: equal resources share an entry
        twin = next((other for other in groups if len(by_object) > 1 and other[0] == resource), None)
        if twin is None:
            groups.append((resource, scopes))
            continue
        for scope, encoded_spans in scopes.items():
            twin[1].setdefault(scope, []).extend(encoded_spans)
    request = []
    for resource, scopes in groups:
        body = [_field(b"\x0a", _context("resource", resource))]
        for scope, encoded_spans in scopes.items():
            scope_spans = [_field(b"\x0a", _context("scope", scope))] if scope is not None else []
            scope_spans.extend(encoded_spans)
            if scope is not None and scope.schema_url:
                scope_spans.append(_field(b"\x1a", scope.schema_url.encode()))
            body.append(_field(b"\x12", b"".join(scope_spans)))
        if resource.schema_url:
            body.append(_field(b"\x1a", resource.schema_url.encode()))
        request.append(_field(b"\x0a", b"".join(body)))
    return b"".join(request)
