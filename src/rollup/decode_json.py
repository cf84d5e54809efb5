"""OTLP JSON trace records (JSON Lines, or one document for the file) to Arrow batches of the span schema.

DuckDB parses the JSON: `json_transform` turns each record into nested Arrow lists and structs in C++, about eight
times faster than Python's `json` module on OTLP's object-heavy text (measured: 18 us a span for `json.loads` alone,
against 3-4 us for the whole transform). Arrow compute then flattens the nesting and normalizes ids, enums and 64-bit
integers column by column, and a second DuckDB query renders scalar attribute values (its double-to-text is Python's
repr); only bytes, arrays and maps go through Python, rendered exactly as the protobuf reader renders them. Python
cuts the input into lines, so every line keeps its number for error messages, decides whether an unterminated last
line is a torn write, and, when DuckDB refuses a batch, finds the line to blame.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import math
import os
import re
from array import array
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, NoReturn, Optional

import pyarrow as pa
import pyarrow.compute as pc

from .errors import TraceFormatError
from .schema import (
    ATTRIBUTE_MAP,
    PROMOTED_KEYS,
    SPAN_SCHEMA,
    ResourceInfo,
    accounting_only,
    first_invalid_span,
    render_value,
    span_record_batch,
)

_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")
BATCH_BYTES = 16 << 20  # JSON text handed to DuckDB at once
_VALUE_CACHE_LIMIT = 200_000

# Scalars typed, so DuckDB renders them (its double-to-text is Python's repr, checked on 200k doubles); the rare
# bytes, arrays and maps stay JSON text for Python to render like the protobuf reader does.
_VALUE = {
    "stringValue": "VARCHAR",
    "boolValue": "BOOLEAN",
    "intValue": "VARCHAR",
    "doubleValue": "DOUBLE",
    "bytesValue": "VARCHAR",
    "arrayValue": "JSON",
    "kvlistValue": "JSON",
}
_ATTRIBUTES = [{"key": "VARCHAR", "value": _VALUE}]
_CAMEL_VALUE_KEYS = {_SNAKE.sub("_", key).lower(): key for key in _VALUE}
# String and int first: a lean transform reads only those two (a value holding two kinds is not valid OTLP, but
# this order makes both transforms pick the same one anyway).
_RENDER_SCALARS = """
    SELECT CASE
        WHEN s IS NOT NULL THEN s
        WHEN i IS NOT NULL THEN
            CASE WHEN regexp_full_match(i, '-?[0-9]+') THEN CAST(TRY_CAST(i AS BIGINT) AS VARCHAR) END
        WHEN b IS NOT NULL THEN CASE WHEN b THEN 'true' ELSE 'false' END
        WHEN d IS NOT NULL THEN CAST(d AS VARCHAR)
    END AS text
    FROM goodput_values
"""
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
_RECORD = {
    "resourceSpans": [
        {
            "resource": {"attributes": _ATTRIBUTES},
            "scopeSpans": [{"scope": {"name": "VARCHAR", "version": "VARCHAR"}, "spans": [_SPAN]}],
        }
    ]
}
# For the accounting columns alone: no kind, status or scope, and span attribute values read only as the string or
# int the goodput attributes hold. The transform's cost grows with every field asked of every object, and the
# attribute values are most of the objects (measured: about 0.6 of the full transform's time). A batch where a
# goodput attribute holds another kind of value is transformed again in full.
_LEAN_VALUE = {"stringValue": "VARCHAR", "intValue": "VARCHAR"}
_LEAN_RECORD = {
    "resourceSpans": [
        {
            "resource": {"attributes": _ATTRIBUTES},
            "scopeSpans": [
                {
                    "spans": [
                        {
                            **{name: _SPAN[name] for name in ("traceId", "spanId", "parentSpanId", "name")},
                            "startTimeUnixNano": "VARCHAR",
                            "endTimeUnixNano": "VARCHAR",
                            "attributes": [{"key": "VARCHAR", "value": _LEAN_VALUE}],
                        }
                    ]
                }
            ],
        }
    ]
}
UTF8_BOM = b"\xef\xbb\xbf"


def _snake_name(name: str) -> str:
    return _SNAKE.sub("_", name).lower()


def _snake_case(structure: Any) -> Any:
    """The same transform structure with proto field names (`resource_spans`), which proto3 JSON also allows."""
    if isinstance(structure, dict):
        return {_snake_name(key): _snake_case(value) for key, value in structure.items()}
    if isinstance(structure, list):
        return [_snake_case(item) for item in structure]
    return structure


_SPAN_KINDS = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_INTEGER = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _integer(raw: Any) -> Optional[int]:
    """An int64 written as a JSON number or a string of digits (proto3 JSON allows both), else None."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, str) and _INTEGER.fullmatch(raw):
        raw = int(raw)
    if isinstance(raw, int) and _INT64_MIN <= raw <= _INT64_MAX:
        return raw
    return None


def json_any_value(value: Any) -> Any:
    """An OTLP JSON AnyValue object as the Python value `schema.render_value` renders; None for an empty value.

    Lenient where proto3 JSON is: numbers may be strings, doubles may be "NaN" / "Infinity", bytes base64 in either
    alphabet. A value of no known shape is treated as empty rather than failing the file.
    """
    if not isinstance(value, dict) or not value:
        return None
    if not value.keys() <= _VALUE.keys():
        value = {_CAMEL_VALUE_KEYS.get(key, key): item for key, item in value.items()}
    if "stringValue" in value:
        text = value["stringValue"]
        return text if isinstance(text, str) else None
    if "boolValue" in value:
        flag = value["boolValue"]
        return flag if isinstance(flag, bool) else None
    if "intValue" in value:
        return _integer(value["intValue"])
    if "doubleValue" in value:
        raw = value["doubleValue"]
        if isinstance(raw, bool):
            return None
        if isinstance(raw, (int, float)):
            return float(raw)
        if isinstance(raw, str):
            if raw in _NON_FINITE:
                return _NON_FINITE[raw]
            return float(raw) if _DECIMAL.fullmatch(raw) else None
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
        return {
            str(item.get("key", "")): json_any_value(item.get("value")) for item in items if isinstance(item, dict)
        }
    return None


def _enum(texts: pa.Array, names: dict[str, int]) -> pa.Array:
    """An OTLP enum column given as numbers or (proto3 JSON) names; missing is 0, an unknown name null."""

    def number(text: Optional[str]) -> Optional[int]:
        if text is None:
            return 0
        if text in names:
            return names[text]
        return _integer(text)

    encoded = pc.dictionary_encode(texts, null_encoding="encode")
    return pa.array([number(text) for text in encoded.dictionary.to_pylist()], pa.int64()).take(encoded.indices)


_connection_of_process: tuple[int, Any] = (0, None)


def _process_connection():
    """One single-threaded in-memory DuckDB connection per process, kept for every file it decodes.

    Opening a database costs ~20 ms (measured), which a directory of small files (one per Ray worker) paid once a
    file. Keyed by the process id, so a forked worker never shares its parent's connection.
    """
    import duckdb

    global _connection_of_process
    pid, connection = _connection_of_process
    if pid != os.getpid() or connection is None:
        connection = duckdb.connect(config={"threads": 1})
        _connection_of_process = (os.getpid(), connection)
    return connection


class JsonRecords:
    """A block of OTLP JSON text cut into records (one a line, or one for a document), with where each one is.

    Record i runs from `starts[i]` to the next record's start (the last one to `end`), so blank lines between
    records ride along as whitespace and the records go to Arrow as one buffer, without a copy.
    """

    def __init__(self, data: bytes, starts: list[int], end: int, line_numbers: list[int], base_offset: int) -> None:
        self.data = data
        self.starts = starts
        self.end = end
        self.line_numbers = line_numbers
        self.base_offset = base_offset  # file offset of data[0]

    def __len__(self) -> int:
        return len(self.starts)

    def text(self, index: int) -> bytes:
        stop = self.starts[index + 1] if index + 1 < len(self.starts) else self.end
        return self.data[self.starts[index] : stop]

    def offset(self, index: int) -> int:
        return self.base_offset + self.starts[index]

    def head(self, index: int, size: int = 256) -> bytes:
        return self.data[self.starts[index] : self.starts[index] + size]

    def arrow(self) -> pa.Array:
        """The records as an Arrow string array over `data` itself; ArrowInvalid when one is not UTF-8."""
        offsets = array("i", [*self.starts, self.end]) if self.end < 1 << 31 else array("q", [*self.starts, self.end])
        kind = pa.binary() if offsets.typecode == "i" else pa.large_binary()
        binary = pa.Array.from_buffers(kind, len(self.starts), [None, pa.py_buffer(offsets), pa.py_buffer(self.data)])
        return binary.cast(pa.string() if offsets.typecode == "i" else pa.large_string())


_NON_BLANK = re.compile(rb"[^ \t\r\n]")


def json_line_batches(
    stream: BinaryIO,
    *,
    start: int,
    limit: Optional[int],
    first_line: int,
    is_document: bool,
    on_torn_line: Callable[[int, int, bytes], bool],
) -> Iterator[JsonRecords]:
    """Cut the stream (positioned at byte `start`, `limit` bytes or to the end) into blocks of whole lines.

    Blank lines are skipped. A last line without its newline is offered to `on_torn_line(line, offset, text)`, which
    returns whether to keep it. A document is one record, however many lines it spans.
    """
    if is_document:
        text = stream.read() if limit is None else stream.read(limit)
        skip = len(UTF8_BOM) if start == 0 and text.startswith(UTF8_BOM) else 0
        first = _NON_BLANK.search(text, skip)
        if first is not None:
            line = first_line + text.count(b"\n", 0, first.start())
            yield JsonRecords(text, [first.start()], len(text), [line], start)
        return
    offset, line_number, carry, remaining = start, first_line, [], limit
    while True:
        want = BATCH_BYTES if remaining is None else min(BATCH_BYTES, remaining)
        block = stream.read(want) if want > 0 else b""
        if remaining is not None:
            remaining -= len(block)
        at_end = not block
        if not at_end and b"\n" not in block:
            carry.append(block)  # a line longer than a block: gather its pieces, join them once
            continue
        text = b"".join([*carry, block]) if carry else block
        complete = len(text) if at_end else text.rfind(b"\n") + 1
        position = len(UTF8_BOM) if offset == 0 and text.startswith(UTF8_BOM) else 0
        starts, numbers = [], []
        while position < complete:
            newline = text.find(b"\n", position, complete)
            line_end = complete if newline < 0 else newline + 1
            if _NON_BLANK.search(text, position, line_end):
                starts.append(position)
                numbers.append(line_number)
            position = line_end
            line_number += 1
        if at_end and starts and not text.endswith(b"\n") and _NON_BLANK.search(text, text.rfind(b"\n") + 1):
            # The final line lacks its newline: usable if it parses, else the torn write of a dying job.
            if not on_torn_line(numbers[-1], offset + starts[-1], text[starts[-1] :]):
                complete = starts.pop()
                numbers.pop()
        if starts:
            yield JsonRecords(text, starts, complete, numbers, offset)
        if at_end:
            return
        offset += complete
        carry = [text[complete:]] if complete < len(text) else []


class JsonDecoder:
    """Decodes batches of OTLP JSON records with one DuckDB connection, into span-schema record batches.

    `where(line, offset)` words a record's position for messages ("line 17"). `schema` is SPAN_SCHEMA or a
    projection of it; for the accounting columns alone, records go through the lean `_LEAN_RECORD` transform.
    """

    def __init__(self, path: str, where: Callable[[int, int], str], schema: pa.Schema = SPAN_SCHEMA) -> None:
        self.path = path
        self.where = where
        self.schema = schema
        self._lean = accounting_only(schema)  # then `_LEAN_RECORD` is enough
        self.connection = _process_connection()
        self._value_cache: dict[tuple[str, str], Optional[str]] = {}

    def close(self) -> None:
        """Nothing to release: the connection serves every decoder of this process (see `_process_connection`)."""

    def is_valid_json(self, text: bytes) -> bool:
        """Whether DuckDB's parser, the one the records go through, accepts `text`."""
        import duckdb

        try:
            rows = self.connection.execute("SELECT json_valid(?)", [text.decode("utf-8")]).fetchall()
        except (UnicodeDecodeError, duckdb.Error):
            return False
        return bool(rows and rows[0][0])

    def decode(self, records: JsonRecords) -> pa.RecordBatch:
        """The spans of `records` as one batch of the decoder's schema; TraceFormatError names the line of a bad
        record."""
        texts = self._utf8(records)
        heads = [records.head(index) for index in range(len(records))]
        snake = any(b'"resource_spans"' in head for head in heads)
        snake = snake and not any(b'"resourceSpans"' in head for head in heads)
        self.connection.register("goodput_lines", pa.table({"line_no": pa.array(range(len(records))), "line": texts}))
        try:
            if self._lean:
                try:
                    return self._spans(records, self._transform(records, _LEAN_RECORD, snake), snake, lean=True)
                except _NeedsFullTransform:
                    pass
            return self._spans(records, self._transform(records, _RECORD, snake), snake, lean=False)
        finally:
            self.connection.unregister("goodput_lines")

    def _transform(self, records: JsonRecords, structure: dict, snake: bool) -> pa.ListArray:
        """Each registered line's resourceSpans, typed by `structure`, as one nested Arrow list array."""
        import duckdb

        text = json.dumps(_snake_case(structure) if snake else structure)
        field = "resource_spans" if snake else "resourceSpans"
        try:
            # No ORDER BY: on one thread DuckDB keeps a projection's input order (checked below); sorting the
            # nested rows would copy them all.
            result = self.connection.sql(
                f"SELECT line_no, json_transform(line, '{text}').{field} AS rss FROM goodput_lines"
            ).to_arrow_table()
        except duckdb.Error as error:
            first_invalid = self.connection.sql(
                "SELECT min(line_no) FROM goodput_lines WHERE NOT json_valid(line)"
            ).fetchall()[0][0]
            self._raise_invalid_json(records, first_invalid, error)
        line_numbers = result.column("line_no").combine_chunks()
        rss = result.column("rss").combine_chunks()
        if not line_numbers.equals(pa.array(range(len(records)), line_numbers.type)):
            rss = rss.take(pc.sort_indices(line_numbers))
        return rss

    def _utf8(self, records: JsonRecords) -> pa.Array:
        try:
            return records.arrow()
        except pa.ArrowInvalid:
            for index in range(len(records)):
                try:
                    records.text(index).decode("utf-8")
                except UnicodeDecodeError as error:
                    raise TraceFormatError(
                        self.path, self._where(records, index), f"not UTF-8 text ({error.reason} at byte {error.start})"
                    ) from None
            raise

    def _where(self, records: JsonRecords, index: int) -> str:
        return self.where(records.line_numbers[index], records.offset(index))

    def _raise_invalid_json(self, records: JsonRecords, index: Optional[int], error: Exception) -> NoReturn:
        if index is None:  # DuckDB refused the batch, yet every record is valid JSON: report its own words
            raise TraceFormatError(self.path, self._where(records, 0), f"not an OTLP JSON record ({error})")
        problem, line_in_record = _json_problem(records.text(index))
        where = self.where(records.line_numbers[index] + line_in_record - 1, records.offset(index))
        raise TraceFormatError(self.path, where, f"not valid JSON ({problem})")

    def _spans(self, records: JsonRecords, rss: pa.ListArray, snake: bool, lean: bool) -> pa.RecordBatch:
        """The batch from the transformed records; `lean`: they went through `_LEAN_RECORD`, and
        _NeedsFullTransform says when that was not enough."""
        names = _snake_name if snake else str
        missing = pc.is_null(rss)
        if pc.any(missing).as_py():
            index = pc.index(missing, True).as_py()
            raise TraceFormatError(
                self.path, self._where(records, index), "JSON without a resourceSpans list: not an OTLP trace record"
            )
        rs_line = pc.list_parent_indices(rss)
        resource_spans = rss.flatten()
        try:
            resource_maps = self._attributes(_field(_field(resource_spans, names("resource")), "attributes"), names)
        except _BadSpan as bad:
            where = self._where(records, rs_line[bad.row].as_py())
            raise TraceFormatError(self.path, where, f"{bad.problem}, in a resource") from None
        resources = [ResourceInfo.from_entries(entries) for entries in resource_maps.to_pylist()]
        scope_lists = _field(resource_spans, names("scopeSpans"))
        scope_resource = pc.list_parent_indices(scope_lists)
        scope_spans = scope_lists.flatten()
        span_lists = _field(scope_spans, "spans")
        span_scope = pc.list_parent_indices(span_lists)
        spans = span_lists.flatten()
        span_resource = scope_resource.take(span_scope)
        span_line = rs_line.take(span_resource)
        trace_ids = pc.utf8_lower(_field(spans, names("traceId")))
        span_ids = pc.utf8_lower(_field(spans, names("spanId")))
        parents = pc.utf8_lower(_field(spans, names("parentSpanId")))
        parents = pc.if_else(pc.equal(parents, ""), pa.scalar(None, pa.string()), parents)
        if lean:  # columns the accounting does not read were not even transformed
            kind = status_code = status_message = scope_name = scope_version = None
        else:
            status, scope = _field(spans, "status"), _field(scope_spans, "scope")
            kind = _enum(_field(spans, "kind"), _SPAN_KINDS)
            status_code = _enum(_field(status, "code"), _STATUS_CODES)
            status_message = _field(status, "message").fill_null("")
            scope_name = _field(scope, "name").fill_null("").take(span_scope)
            scope_version = _field(scope, "version").fill_null("").take(span_scope)
        try:
            batch = span_record_batch(
                trace_id=trace_ids.fill_null(""),
                span_id=span_ids.fill_null(""),
                parent_span_id=parents,
                name=_field(spans, "name").fill_null(""),
                kind=kind,
                start_ns=self._times(_field(spans, names("startTimeUnixNano")), span_line, records),
                end_ns=self._times(_field(spans, names("endTimeUnixNano")), span_line, records),
                status_code=status_code,
                status_message=status_message,
                attributes=self._attributes(_field(spans, "attributes"), names, PROMOTED_KEYS if lean else None),
                resources=resources,
                resource_index=span_resource,
                scope_name=scope_name,
                scope_version=scope_version,
                source_file=self.path,
                schema=self.schema,
            )
        except _BadSpan as bad:
            raise TraceFormatError(self.path, self._where(records, span_line[bad.row].as_py()), bad.problem) from None
        invalid = first_invalid_span(batch)
        if invalid is not None:
            row, problem = invalid
            raise TraceFormatError(self.path, self._where(records, span_line[row].as_py()), problem)
        return batch

    def _attributes(
        self, lists: pa.ListArray, names: Callable[[str], str], keep: Optional[frozenset[str]] = None
    ) -> pa.MapArray:
        """OTLP JSON attribute lists as maps of rendered text: scalars rendered by DuckDB, the rest by Python.

        With `keep`, each map holds only those keys (a projection that leaves the full maps out). Value kinds the
        transform did not ask for read as missing; a kept entry left without text then raises _NeedsFullTransform.
        """
        lengths = pc.list_value_length(lists).fill_null(0)
        offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(lengths.cast(pa.int32()))])
        entries = lists.flatten()
        keys = _field(entries, "key").fill_null("")
        if keep is not None:  # only these keys are wanted: drop the others before rendering anything
            wanted = pc.is_in(keys, value_set=pa.array(sorted(keep), pa.string()))
            offsets = pa.concat_arrays(
                [pa.array([0], pa.int32()), pc.cumulative_sum(wanted.cast(pa.int32()))]
            ).take(offsets)
            entries, keys = entries.filter(wanted), keys.filter(wanted)
        values = _field(entries, "value")
        transformed = {field.name for field in values.type}

        def kind(name: str, type_: pa.DataType) -> pa.Array:
            return _field(values, names(name)) if names(name) in transformed else pa.nulls(len(values), type_)

        scalars = pa.table(
            {
                "s": kind("stringValue", pa.string()),
                "b": kind("boolValue", pa.bool_()),
                "i": kind("intValue", pa.string()),
                "d": kind("doubleValue", pa.float64()),
            }
        )
        self.connection.register("goodput_values", scalars)
        try:
            texts = self.connection.sql(_RENDER_SCALARS).to_arrow_table().column("text").combine_chunks()
        finally:
            self.connection.unregister("goodput_values")
        if len(texts) != len(keys):  # DuckDB keeps a plain projection's row order; make sure it did
            raise RuntimeError("attribute rendering lost rows")
        if len(transformed) < len(_VALUE):  # a lean transform: only strings and ints, which DuckDB rendered
            if texts.null_count:
                raise _NeedsFullTransform
            return pa.MapArray.from_arrays(offsets, keys, texts, type=ATTRIBUTE_MAP)
        others = {name: _field(values, names(name)) for name in ("bytesValue", "arrayValue", "kvlistValue")}
        unrendered = pc.and_(pc.is_null(texts), pc.is_valid(pc.coalesce(*others.values())))
        if pc.any(unrendered).as_py():
            texts = self._render_others(texts, unrendered, others, offsets)
        return pa.MapArray.from_arrays(offsets, keys, texts, type=ATTRIBUTE_MAP)

    def _render_others(
        self, texts: pa.Array, unrendered: pa.Array, others: dict[str, pa.Array], offsets: pa.Array
    ) -> pa.Array:
        """Bytes, arrays and maps, rendered in Python (each distinct JSON text once)."""
        rows = pc.indices_nonzero(unrendered).to_pylist()
        columns = {name: column.take(pa.array(rows, pa.int64())).to_pylist() for name, column in others.items()}
        rendered = []
        for position, row in enumerate(rows):
            name, raw = next((name, items[position]) for name, items in columns.items() if items[position] is not None)
            key = (name, raw)
            if key not in self._value_cache:
                if len(self._value_cache) > _VALUE_CACHE_LIMIT:
                    self._value_cache.clear()
                try:
                    value = raw if name == "bytesValue" else json.loads(raw)
                    self._value_cache[key] = render_value(json_any_value({name: value}))
                except (ValueError, RecursionError) as error:
                    span = bisect.bisect_right(offsets.to_pylist(), row) - 1
                    raise _BadSpan(span, f"an attribute value does not decode ({error})") from None
            rendered.append(self._value_cache[key])
        return pc.replace_with_mask(texts, unrendered, pa.array(rendered, pa.string()))

    def _times(self, texts: pa.Array, span_line: pa.Array, records: JsonRecords) -> pa.Array:
        """Span times written as digits or numbers (proto3 JSON's uint64); missing is 0, as protobuf omits it."""
        try:
            times = pc.cast(texts, pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            parsed = [None if text is None else _integer(text) for text in texts.to_pylist()]
            unusable = (
                row for row, value in enumerate(parsed) if texts[row].is_valid and (value is None or value >= 1 << 63)
            )
            bad = next(unusable, None)
            if bad is not None:
                raise _BadSpan(bad, f"a span time {texts[bad].as_py()!r} is not an integer nanosecond count") from None
            times = pa.array(parsed, pa.int64())
        return times.fill_null(0)


class _NeedsFullTransform(Exception):
    """A goodput attribute holds a kind of value the lean transform does not read."""


class _BadSpan(Exception):
    def __init__(self, row: int, problem: str) -> None:
        super().__init__(problem)
        self.row = row
        self.problem = problem


def _field(array: pa.Array, name: str) -> pa.Array:
    """A struct array's child `name` with the struct's own nulls applied (a missing object reads as nulls)."""
    return pc.struct_field(array, name)


def _json_problem(text: bytes) -> tuple[str, int]:
    """What Python's parser says is wrong with `text`, and on which of its lines (1 when it cannot say)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return f"{error.msg} (column {error.colno})", error.lineno
    except (ValueError, RecursionError) as error:
        return str(error) or type(error).__name__, 1
    return "rejected by the JSON parser", 1
