"""Attribute values as text, and the process a resource names: each rule in Python beside its SQL twin.

Every reader renders an attribute value to the same text (an int as its decimal digits, a bool as `true`/`false`, a
double as Python's shortest repr, bytes as base64, arrays and maps as compact JSON), so one map type holds them all
and a span gives the same row whichever file it came from. An empty value is null. Inside arrays and maps, bytes are
base64 strings and NaN / infinities are OTLP JSON's "NaN" / "Infinity" / "-Infinity" strings, so the text stays
valid JSON for DuckDB's json functions.

The JSON readers have DuckDB render the common scalar kinds in SQL; those expressions live here, beside the Python
they must agree with, and the tests run both on the same inputs.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
DECIMAL_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_NON_FINITE_JSON = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _jsonable(value: Any) -> Any:
    """A decoded attribute value as plain JSON data: bytes as base64, non-finite doubles as OTLP JSON's strings."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return _NON_FINITE_JSON[repr(value)]
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    return value


def render_value(value: Any) -> str | None:
    """The text an attribute value is stored as (module docstring), from its decoded Python value.

    `value` is what an OTLP AnyValue holds: str, bool, int, float, bytes, a list (arrayValue), a dict (kvlistValue)
    or None (an empty value, stored as null). Readers of either format decode to these and call this, so the same
    span gives the same text whichever file it came from.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return json.dumps(_jsonable(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# The SQL twin of `render_value` for the scalar kinds OTLP JSON types directly, over a relation with columns `s`
# (stringValue), `i` (intValue as written), `b` (boolValue) and `d` (doubleValue): DuckDB's double-to-text is Python's
# repr (checked on 200k doubles). String and int first: a lean read asks only for those two (a value holding two
# kinds is not valid OTLP, but this order makes both reads pick the same one anyway).
RENDER_SCALARS_SQL = """
    SELECT CASE
        WHEN s IS NOT NULL THEN s
        WHEN i IS NOT NULL THEN
            CASE WHEN regexp_full_match(i, '-?[0-9]+') THEN CAST(TRY_CAST(i AS BIGINT) AS VARCHAR) END
        WHEN b IS NOT NULL THEN CASE WHEN b THEN 'true' ELSE 'false' END
        WHEN d IS NOT NULL THEN CAST(d AS VARCHAR)
    END AS text
    FROM {relation}
"""


def canonical_int_sql(text: str) -> str:
    """SQL: `text` when it is an int64 in its canonical digits (what `render_value` makes of that int), else NULL."""
    return f"CASE WHEN TRY_CAST({text} AS BIGINT)::VARCHAR = {text} THEN {text} END"


def string_or_int_sql(entry: str) -> str:
    """SQL: an attribute entry's text as `render_value` renders a string or a canonically written int value; NULL
    for any other kind (a reader that is sure only of these then leaves the record to one that renders them all)."""
    return (
        f"CASE WHEN {entry}.value.stringValue IS NOT NULL THEN {entry}.value.stringValue "
        f"ELSE {canonical_int_sql(f'{entry}.value.intValue')} END"
    )


def integral_value(text: str | None) -> int | None:
    """`rl.iteration` as an int when its text is an integer or a number without fraction, within int64; else None."""
    if text is None:
        return None
    if INTEGER_TEXT.fullmatch(text):
        number = int(text)
    elif DECIMAL_TEXT.fullmatch(text):
        as_float = float(text)
        if not as_float.is_integer():
            return None
        number = int(as_float)
    else:
        return None
    return number if INT64_MIN <= number <= INT64_MAX else None


# --- the emitting process (SPEC section 1) ------------------------------------------------------------------------

PROCESS_KEYS = ("service.instance.id", "host.name", "process.pid", "service.name")
UNKNOWN_SERVICE = "unknown_service"


def process_key(resource: Mapping[str, str]) -> str:
    """The emitting process of SPEC section 1, from a resource's rendered attributes."""
    instance = resource.get("service.instance.id")
    if instance:
        return instance
    host, pid = resource.get("host.name"), resource.get("process.pid")
    if host and pid:
        return f"{host}:{pid}"
    return resource.get("service.name") or UNKNOWN_SERVICE


def process_key_sql(resource_value: Callable[[str], str]) -> str:
    """SQL twin of `process_key`; `resource_value(key)` is the SQL of a resource attribute's text (NULL if absent)."""
    instance, host, pid, service = (resource_value(key) for key in PROCESS_KEYS)
    return f"""CASE WHEN coalesce({instance}, '') <> '' THEN {instance}
                WHEN coalesce({host}, '') <> '' AND coalesce({pid}, '') <> '' THEN {host} || ':' || {pid}
                ELSE coalesce(nullif({service}, ''), '{UNKNOWN_SERVICE}')
           END"""
