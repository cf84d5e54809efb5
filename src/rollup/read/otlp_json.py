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

import bisect
import json
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import TraceFormatError
from ..schema import ATTRIBUTE_MAP, PROMOTED_KEYS, SPAN_SCHEMA, accounting_only
from .batch import ResourceInfo, first_invalid_span, span_record_batch
from .json_lines import JsonRecords
from .json_shape import (
    LEAN_RECORD,
    RECORD,
    SPAN_KINDS,
    STATUS_CODES,
    VALUE,
    json_any_value,
    json_integer,
    snake_case,
    snake_name,
)
from .values import RENDER_SCALARS_SQL, render_value

if TYPE_CHECKING:
    import duckdb

_VALUE_CACHE_LIMIT = 200_000


def _enum(texts: pa.Array, names: dict[str, int]) -> pa.Array:
    """An OTLP enum column given as numbers or (proto3 JSON) names; missing is 0, an unknown name null."""

    def number(text: str | None) -> int | None:
        if text is None:
            return 0
        if text in names:
            return names[text]
        return json_integer(text)

    encoded = pc.dictionary_encode(texts, null_encoding="encode")
    return pa.array([number(text) for text in encoded.dictionary.to_pylist()], pa.int64()).take(encoded.indices)


_connections = threading.local()


def _thread_connection() -> duckdb.DuckDBPyConnection:
    """One single-threaded in-memory DuckDB connection per thread of a process, kept for every file it decodes.

    Opening a database costs ~20 ms (measured), which a directory of small files (one per Ray worker) paid once a
    file. Per thread, since a decoder registers its relations under fixed names; keyed by the process id too, so a
    forked worker never shares its parent's connection.
    """
    import duckdb

    pid, connection = getattr(_connections, "current", (0, None))
    if pid != os.getpid() or connection is None:
        connection = duckdb.connect(config={"threads": 1})
        _connections.current = (os.getpid(), connection)
    return connection


class JsonDecoder:
    """Decodes batches of OTLP JSON records with one DuckDB connection, into span-schema record batches.

    `where(line, offset)` words a record's position for messages ("line 17"). `schema` is SPAN_SCHEMA or a
    projection of it; for the accounting columns alone, records go through the lean `LEAN_RECORD` transform.
    """

    def __init__(self, path: str, where: Callable[[int, int], str], schema: pa.Schema = SPAN_SCHEMA) -> None:
        self.path = path
        self.where = where
        self.schema = schema
        self._lean = accounting_only(schema)  # then `LEAN_RECORD` is enough
        self.connection = _thread_connection()
        self._value_cache: dict[tuple[str, str], str | None] = {}

    def close(self) -> None:
        """Nothing to release: the connection serves every decoder of this thread (see `_thread_connection`)."""

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
                    return self._spans(records, self._transform(records, LEAN_RECORD, snake), snake, lean=True)
                except _NeedsFullTransform:
                    pass
            return self._spans(records, self._transform(records, RECORD, snake), snake, lean=False)
        finally:
            self.connection.unregister("goodput_lines")

    def _transform(self, records: JsonRecords, structure: dict, snake: bool) -> pa.ListArray:
        """Each registered line's resourceSpans, typed by `structure`, as one nested Arrow list array."""
        import duckdb

        text = json.dumps(snake_case(structure) if snake else structure)
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

    def _raise_invalid_json(self, records: JsonRecords, index: int | None, error: Exception) -> NoReturn:
        if index is None:  # DuckDB refused the batch, yet every record is valid JSON: report its own words
            raise TraceFormatError(self.path, self._where(records, 0), f"not an OTLP JSON record ({error})")
        problem, line_in_record = _json_problem(records.text(index))
        where = self.where(records.line_numbers[index] + line_in_record - 1, records.offset(index))
        raise TraceFormatError(self.path, where, f"not valid JSON ({problem})")

    def _spans(self, records: JsonRecords, rss: pa.ListArray, snake: bool, lean: bool) -> pa.RecordBatch:
        """The batch from the transformed records; `lean`: they went through `LEAN_RECORD`, and
        _NeedsFullTransform says when that was not enough."""
        names = snake_name if snake else str
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
            kind = _enum(_field(spans, "kind"), SPAN_KINDS)
            status_code = _enum(_field(status, "code"), STATUS_CODES)
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
        self, lists: pa.ListArray, names: Callable[[str], str], keep: frozenset[str] | None = None
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
            rendered = self.connection.sql(RENDER_SCALARS_SQL.format(relation="goodput_values")).to_arrow_table()
            texts = rendered.column("text").combine_chunks()
        finally:
            self.connection.unregister("goodput_values")
        if len(texts) != len(keys):  # DuckDB keeps a plain projection's row order; make sure it did
            raise RuntimeError("attribute rendering lost rows")
        if len(transformed) < len(VALUE):  # a lean transform: only strings and ints, which DuckDB rendered
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
            parsed = [None if text is None else json_integer(text) for text in texts.to_pylist()]
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
