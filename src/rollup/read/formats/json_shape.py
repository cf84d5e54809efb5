"""The shape of an OTLP JSON trace record, declared once: what the careful reader transforms and DuckDB reads.

`RECORD` (every field a span row needs) and `LEAN_RECORD` (the accounting's fields alone) are `json_transform`
structures for the careful reader (`otlp_json`); `duckdb_type` spells the same declaration as the DuckDB type the
direct reader (`duckdb_json`) hands `read_json`, so the two cannot drift apart. Also here: the Python decoding of
an AnyValue and of OTLP's enums and 64-bit integers, as proto3 JSON allows them to be written.

The other names a record is written with are declared beside today's, each with the same shape, and read as them:
Grafana Tempo's trace API wraps the resource spans in `batches`; writers before OTLP 1.0 said
`instrumentationLibrarySpans` and `instrumentationLibrary` for `scopeSpans` and `scope`. Every key declared costs
the transform a little on every object, so the careful reader transforms with today's names alone first
(`todays_names_only`) and again with all of them only when a record lacks today's.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from typing import Any

from ..values import DECIMAL_TEXT, INT64_MAX, INT64_MIN

_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")

# Scalars typed, so DuckDB renders them (`values.RENDER_SCALARS_SQL`); the rare bytes, arrays and maps stay JSON text
# for Python to render like the protobuf reader does.
VALUE = {
    "stringValue": "VARCHAR",
    "boolValue": "BOOLEAN",
    "intValue": "VARCHAR",
    "doubleValue": "DOUBLE",
    "bytesValue": "VARCHAR",
    "arrayValue": "JSON",
    "kvlistValue": "JSON",
}
_ATTRIBUTES = [{"key": "VARCHAR", "value": VALUE}]
_CAMEL_VALUE_KEYS = {_SNAKE.sub("_", key).lower(): key for key in VALUE}
_EVENTS = [{"timeUnixNano": "VARCHAR", "name": "VARCHAR", "attributes": _ATTRIBUTES}]
_LINKS = [{"traceId": "VARCHAR", "spanId": "VARCHAR", "attributes": _ATTRIBUTES}]
_SPAN = {
    "traceId": "VARCHAR",
    "spanId": "VARCHAR",
    "parentSpanId": "VARCHAR",
    "name": "VARCHAR",
    "kind": "VARCHAR",
    "startTimeUnixNano": "VARCHAR",
    "endTimeUnixNano": "VARCHAR",
    "attributes": _ATTRIBUTES,
    "status": {"code": "VARCHAR", "message": "VARCHAR"},
}
LEGACY_NAMES = {"scopeSpans": "instrumentationLibrarySpans", "scope": "instrumentationLibrary"}  # before OTLP 1.0
WRAPPER = "batches"  # Tempo's trace API: {"batches": [resource spans ...]}


def _record(resource_spans: dict[str, Any]) -> dict[str, Any]:
    """A record whose resource spans (and their scope spans) are declared under today's names and the others."""
    scope_spans = resource_spans["scopeSpans"][0]
    if "scope" in scope_spans:
        scope_spans = {**scope_spans, LEGACY_NAMES["scope"]: scope_spans["scope"]}
    both = {**resource_spans, "scopeSpans": [scope_spans], LEGACY_NAMES["scopeSpans"]: [scope_spans]}
    return {"resourceSpans": [both], WRAPPER: [both]}


def todays_names_only(structure: Any) -> Any:
    """A record structure without the other names."""
    if isinstance(structure, dict):
        return {key: todays_names_only(value) for key, value in structure.items() if key not in _OTHER_NAMES}
    if isinstance(structure, list):
        return [todays_names_only(item) for item in structure]
    return structure


RECORD = _record(
    {
        "resource": {"attributes": _ATTRIBUTES},
        "scopeSpans": [
            {
                "scope": {"name": "VARCHAR", "version": "VARCHAR"},
                "spans": [{**_SPAN, "events": _EVENTS, "links": _LINKS}],
            }
        ],
    }
)
# For the accounting columns alone: no kind, status or scope, and span attribute values read only as the string or
# int the goodput attributes hold. The transform's cost grows with every field asked of every object, and the
# attribute values are most of the objects (most of the full transform's time). A batch where a
# goodput attribute holds another kind of value is transformed again in full.
LEAN_VALUE = {"stringValue": "VARCHAR", "intValue": "VARCHAR"}
LEAN_RECORD = _record(
    {
        "resource": {"attributes": _ATTRIBUTES},
        "scopeSpans": [
            {
                "spans": [
                    {
                        **{name: _SPAN[name] for name in ("traceId", "spanId", "parentSpanId", "name")},
                        "startTimeUnixNano": "VARCHAR",
                        "endTimeUnixNano": "VARCHAR",
                        "attributes": [{"key": "VARCHAR", "value": LEAN_VALUE}],
                    }
                ]
            }
        ],
    }
)


_OTHER_NAMES = frozenset({WRAPPER, *LEGACY_NAMES.values()})


def duckdb_type(structure: Any) -> str:
    """The DuckDB type of a `json_transform` structure: objects as STRUCTs, `[x]` as lists, type names as they are."""
    if isinstance(structure, dict):
        return "STRUCT(" + ", ".join(f"{key} {duckdb_type(value)}" for key, value in structure.items()) + ")"
    if isinstance(structure, list):
        (item,) = structure
        return f"{duckdb_type(item)}[]"
    return str(structure)


def snake_name(name: str) -> str:
    return _SNAKE.sub("_", name).lower()


def snake_case(structure: Any) -> Any:
    """The same transform structure with proto field names (`resource_spans`), which proto3 JSON also allows."""
    if isinstance(structure, dict):
        return {snake_name(key): snake_case(value) for key, value in structure.items()}
    if isinstance(structure, list):
        return [snake_case(item) for item in structure]
    return structure


SPAN_KINDS = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_INTEGER = re.compile(r"-?[0-9]+")


def json_integer(raw: Any) -> int | None:
    """An int64 written as a JSON number or a string of digits (proto3 JSON allows both), else None."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, str) and _INTEGER.fullmatch(raw):
        raw = int(raw)
    if isinstance(raw, int) and INT64_MIN <= raw <= INT64_MAX:
        return raw
    return None


def json_any_value(value: Any) -> Any:
    """An OTLP JSON AnyValue object as the Python value `read.values.render_value` renders; None for an empty value.

    Lenient where proto3 JSON is: numbers may be strings, doubles may be "NaN" / "Infinity", bytes base64 in either
    alphabet. A value of no known shape is treated as empty rather than failing the file.
    """
    if not isinstance(value, dict) or not value:
        return None
    if not value.keys() <= VALUE.keys():
        value = {_CAMEL_VALUE_KEYS.get(key, key): item for key, item in value.items()}
    if "stringValue" in value:
        text = value["stringValue"]
        return text if isinstance(text, str) else None
    if "boolValue" in value:
        flag = value["boolValue"]
        return flag if isinstance(flag, bool) else None
    if "intValue" in value:
        return json_integer(value["intValue"])
    if "doubleValue" in value:
        raw = value["doubleValue"]
        if isinstance(raw, bool):
            return None
        if isinstance(raw, (int, float)):
            return float(raw)
        if isinstance(raw, str):
            if raw in _NON_FINITE:
                return _NON_FINITE[raw]
            return float(raw) if DECIMAL_TEXT.fullmatch(raw) else None
        return None
    if "bytesValue" in value:
        raw = value["bytesValue"]
        if not isinstance(raw, str):
            return None
        try:
            return base64.b64decode(raw.replace("-", "+").replace("_", "/") + "=" * (-len(raw) % 4), validate=True)
        except (binascii.Error, ValueError):
            return None
    if "arrayValue" in value:
        items = value["arrayValue"].get("values") if isinstance(value["arrayValue"], dict) else None
        return [json_any_value(item) for item in items] if isinstance(items, list) else []
    if "kvlistValue" in value:
        items = value["kvlistValue"].get("values") if isinstance(value["kvlistValue"], dict) else None
        if not isinstance(items, list):
            return {}
        return {str(item.get("key", "")): json_any_value(item.get("value")) for item in items if isinstance(item, dict)}
    return None
