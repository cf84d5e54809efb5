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

from instrument.wire import NEMO_RUN_ID, RESOURCE_RUN_ID

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


# --- the emitting process and its attempt (SPEC sections 1 and 7) --------------------------------------------------

PROCESS_KEYS = ("service.instance.id", "host.name", "process.pid", "service.name")
RUN_ID_KEYS = (RESOURCE_RUN_ID, NEMO_RUN_ID)  # the first one present names the attempt
# What a process holds (SPEC section 12), in the order `holding` writes them, and when it started (SPEC section 7: an
# attempt's extent reaches back to it). Any but host.name makes a holding.
HOLDING_KEYS = ("goodput.gpu.ids", "goodput.gpus", "goodput.fleet", "rl.worker_group", "host.name", "dl.world_size",
                "dl.rank", "process.creation.time")  # fmt: skip
RESOURCE_KEYS = (*PROCESS_KEYS, *RUN_ID_KEYS, *(k for k in HOLDING_KEYS if k not in PROCESS_KEYS))  # a row's resource
UNKNOWN_SERVICE = "unknown_service"


# A host name that, alone, would read as a pid alone (digits) or as a host and a pid (it holds a colon: an IPv6
# address): `host_pid` writes it with an empty pid after it (`7:`), so that a process with `host.name` and one
# without (SPEC section 1: two processes) never get the same text. Pids are integers (OpenTelemetry's process.pid).
_HOST_READ_AS_PID = re.compile(r"[0-9]+|.*:.*", re.DOTALL)


def host_pid(resource: Mapping[str, str]) -> str | None:
    """`host:pid` of a resource (whichever of the two it has), or None: what tells apart two processes shown alike.

    A host alone that could be mistaken for a pid, or for a host and a pid, is written `host:`: `{"host.name": "7"}`
    is `7:`, `{"process.pid": 7}` is `7`; `{"host.name": "node:7"}` is `node:7:`, `node` with pid 7 is `node:7`.
    """
    host, pid = resource.get("host.name") or None, resource.get("process.pid") or None
    if host is not None and pid is not None:
        return f"{host}:{pid}"
    if host is not None:
        return f"{host}:" if _HOST_READ_AS_PID.fullmatch(host) else host
    return pid


def process_key(resource: Mapping[str, str]) -> str:
    """How SPEC section 1 shows the emitting process: `service.instance.id`, else `service.name@host:pid`.

    The process itself is this name and `host_pid` together: NeMo-RL's nemo-lens gives the driver and the rank-0
    worker of every worker group one instance id, so the store appends `[host:pid]` where a name is shared.
    """
    instance = resource.get("service.instance.id")
    if instance:
        return instance
    service = resource.get("service.name") or UNKNOWN_SERVICE
    where = host_pid(resource)
    return f"{service}@{where}" if where else service


def run_id(resource: Mapping[str, str]) -> str | None:
    """The attempt of SPEC section 7: `goodput.run.id`, else `nemo.run.id`; None for the unnamed attempt."""
    return next((resource[key] for key in RUN_ID_KEYS if resource.get(key)), None)


def host_pid_sql(resource_value: Callable[[str], str]) -> str:
    """SQL twin of `host_pid`; `resource_value(key)` is the SQL of a resource attribute's text (NULL if absent)."""
    host, pid = f"nullif({resource_value('host.name')}, '')", f"nullif({resource_value('process.pid')}, '')"
    return f"""CASE WHEN {host} IS NOT NULL AND {pid} IS NOT NULL THEN {host} || ':' || {pid}
                WHEN {host} IS NOT NULL
                    THEN {host} || CASE WHEN contains({host}, ':') OR regexp_full_match({host}, '[0-9]+')
                                        THEN ':' ELSE '' END
                ELSE {pid}
           END"""


def process_key_sql(resource_value: Callable[[str], str]) -> str:
    """SQL twin of `process_key`."""
    instance, service = resource_value("service.instance.id"), resource_value("service.name")
    where = host_pid_sql(resource_value)
    service_text = f"coalesce(nullif({service}, ''), '{UNKNOWN_SERVICE}')"
    return f"""CASE WHEN coalesce({instance}, '') <> '' THEN {instance}
                WHEN {where} IS NOT NULL THEN {service_text} || '@' || {where}
                ELSE {service_text}
           END"""


def holding(resource: Mapping[str, str]) -> str | None:
    """What the process holds, as the `holding` column keeps it: the texts of its HOLDING_KEYS attributes, as a
    compact JSON object in that order, or None when it has none of them but `host.name` (a process told nothing)."""
    if not any(key in resource for key in HOLDING_KEYS if key != "host.name"):
        return None
    found = {key: resource[key] for key in HOLDING_KEYS if key in resource}
    return json.dumps(found, separators=(",", ":"), ensure_ascii=False)


# The texts `holding_sql` writes with no escape but a quote's: no backslash or control character. A resource with
# another text there is given to the careful reader. An array's strings (`array_of_strings_sql`) hold no quote either.
HOLDING_SAFE_TEXT = r"[^\x00-\x1f\\]*"
ARRAY_STRING_SAFE_TEXT = r"[^\x00-\x1f\\\"]*"


def holding_sql(resource_value: Callable[[str], str]) -> str:
    """SQL twin of `holding`, for texts that match HOLDING_SAFE_TEXT (JSON escapes nothing in them but a quote)."""
    telling = " OR ".join(f"{resource_value(key)} IS NOT NULL" for key in HOLDING_KEYS if key != "host.name")
    parts = ", ".join(
        f"""CASE WHEN {resource_value(key)} IS NOT NULL
                 THEN '"{key}":"' || replace({resource_value(key)}, '"', '\\"') || '"' END"""
        for key in HOLDING_KEYS
    )
    return f"CASE WHEN {telling} THEN '{{' || concat_ws(',', {parts}) || '}}' END"


def array_of_strings_sql(entry: str) -> str:
    """SQL: `render_value`'s text of an attribute entry whose value is an OTLP array of strings that need no JSON
    escape (ARRAY_STRING_SAFE_TEXT; `["0","1"]`, as `goodput.gpu.ids` is written), its `arrayValue` read as JSON
    text; NULL for any other value."""
    array = f"{entry}.value.arrayValue"
    strings = f"json_extract_string({array}, '$.values[*].stringValue')"
    safe = f"list_filter({strings}, lambda x: x IS NOT NULL AND regexp_full_match(x, '{ARRAY_STRING_SAFE_TEXT}'))"
    return (
        f"CASE WHEN {array} IS NOT NULL AND json_valid({array}) "
        f"AND coalesce(json_array_length({array}, '$.values'), 0) = len({safe}) "
        f"AND coalesce(json_type({array}, '$.values'), 'ARRAY') = 'ARRAY' "
        f"THEN '[' || array_to_string(list_transform({strings}, lambda x: '\"' || x || '\"'), ',') || ']' END"
    )


def run_id_sql(resource_value: Callable[[str], str]) -> str:
    """SQL twin of `run_id`."""
    return "coalesce(" + ", ".join(f"nullif({resource_value(key)}, '')" for key in RUN_ID_KEYS) + ")"
