"""OTLP JSON trace records (JSON Lines, or one document for the file) to Arrow batches of the span schema.

DuckDB parses the JSON: `json_transform` turns each record into nested Arrow lists and structs in C++, about eight
times faster than Python's `json` module on OTLP's object-heavy text (measured: 18 us a span for `json.loads` alone,
against 3-4 us for the whole transform). Arrow compute then flattens the nesting and normalizes ids, enums and 64-bit
integers column by column (`json_columns`), and a second DuckDB query renders scalar attribute values (its
double-to-text is Python's repr); only bytes, arrays and maps go through Python, rendered exactly as the protobuf
reader renders them. Python cuts the input into lines, so every line keeps its number for error messages, decides
whether an unterminated last line is a torn write, and, when DuckDB refuses a batch, finds the line to blame.

A record without spans is told by its top-level keys (`read.signals`): `{}` is an empty batch, another signal's
record (`resourceMetrics`, `resourceLogs`) is skipped and counted, anything else is not an OTLP trace record.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from rollup.base.connection import connect, spill_directory
from rollup.base.errors import TraceFormatError
from rollup.base.memory import WORKER_LIMIT_BYTES
from rollup.base.schema import EVENT, LINK, PROMOTED_KEYS, SPAN_SCHEMA, accounting_only

from ..batch import InvalidSpan, ResourceInfo, first_invalid_span, span_record_batch
from ..cache import spill_root
from ..events import EVENTS, LINKS
from ..signals import NotATrace, json_record_signal
from .json_columns import (
    AttributeRenderer,
    BadRow,
    NeedsFullTransform,
    enum,
    field,
    hex_ids,
    list_offsets,
    times,
)
from .json_lines import JsonRecords
from .json_positions import Path, SpanPlaces, json_problem, line_within, list_item
from .json_shape import (
    LEAN_RECORD,
    LEGACY_NAMES,
    RECORD,
    SPAN_KINDS,
    STATUS_CODES,
    WRAPPER,
    snake_case,
    snake_name,
    todays_names_only,
)

if TYPE_CHECKING:
    import duckdb


_connections = threading.local()


def _thread_connection() -> duckdb.DuckDBPyConnection:
    """One single-threaded in-memory DuckDB connection per thread of a process, kept for every file it decodes.

    Opening a database costs tens of milliseconds, which a directory of small files (one per Ray worker) paid once
    a file. Per thread, since a decoder registers its relations under fixed names; keyed by the process id too, so a
    forked worker never shares its parent's connection. It decodes one batch of records at a time, so it is held to
    a worker's small fixed limit (`memory.WORKER_LIMIT_BYTES`), spilling beside the cache should a batch need more;
    a batch holding a record larger than a batch is meant to be gets more (`_allow`).
    """
    pid, connection = getattr(_connections, "current", (0, None))
    if pid != os.getpid() or connection is None:
        spill = spill_directory(spill_root(None))
        connection = connect(spill, limit_bytes=WORKER_LIMIT_BYTES, threads=1)
        _connections.current = (os.getpid(), connection)
        _connections.limit = WORKER_LIMIT_BYTES
    return connection


# DuckDB's transform of a batch of JSON text holds about ten times the text and more (docs/performance.md).
TRANSFORM_BYTES_PER_TEXT_BYTE = 16


def _allow(connection: duckdb.DuckDBPyConnection, text_bytes: int) -> None:
    """Raise the thread connection's limit for a batch of `text_bytes` of JSON, lower it again after one: a single
    record (a pretty-printed JSON document is one) cannot be cut, so it gets what it needs."""
    wanted = max(WORKER_LIMIT_BYTES, TRANSFORM_BYTES_PER_TEXT_BYTE * text_bytes)
    if getattr(_connections, "limit", None) != wanted:
        connection.execute(f"SET memory_limit = '{wanted}B'")
        _connections.limit = wanted


class JsonDecoder:
    """Decodes batches of OTLP JSON records with one DuckDB connection, into span-schema record batches.

    `where(line, offset)` words a record's position for messages ("line 17"). `schema` is SPAN_SCHEMA or a
    projection of it; for the accounting columns alone, records go through the lean `LEAN_RECORD` transform.
    Records of other signals are counted in `other_signals` (signal -> records). While `at_file_start`, the next
    record is the file's first: if that one is no OTLP record at all, the file is not a trace (`signals.NotATrace`).
    """

    def __init__(
        self,
        path: str,
        where: Callable[[int, int], str],
        schema: pa.Schema = SPAN_SCHEMA,
        other_signals: dict[str, int] | None = None,
        at_file_start: bool = False,
    ) -> None:
        self.path = path
        self.where = where
        self.schema = schema
        self.other_signals = {} if other_signals is None else other_signals
        self.at_file_start = at_file_start
        self._lean = accounting_only(schema)  # then `LEAN_RECORD` is enough
        self.connection = _thread_connection()
        self.attributes = AttributeRenderer(self.connection)

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
        _allow(self.connection, records.end - records.starts[0])
        heads = [records.head(index) for index in range(len(records))]
        snake = any(b'"resource_spans"' in head for head in heads)
        snake = snake and not any(b'"resourceSpans"' in head for head in heads)
        self.connection.register("goodput_lines", pa.table({"line_no": pa.array(range(len(records))), "line": texts}))
        try:
            try:
                batch = self._decode(records, snake, _TODAYS_NAMES_ONLY)
            except _OtherNames:  # a record in Tempo's wrapper or with pre-1.0 names: again, knowing those
                batch = self._decode(records, snake, (RECORD, LEAN_RECORD))
        finally:
            self.connection.unregister("goodput_lines")
        self.at_file_start = False
        return batch

    def _decode(self, records: JsonRecords, snake: bool, structures: tuple[dict, dict]) -> pa.RecordBatch:
        """The batch, through the lean structure of `structures` (full, lean) when it is enough, else the full."""
        full, lean = structures
        if self._lean:
            try:
                return self._spans(records, self._transform(records, lean, snake), snake, lean=True)
            except NeedsFullTransform:
                pass
        return self._spans(records, self._transform(records, full, snake), snake, lean=False)

    def _transform(self, records: JsonRecords, structure: dict, snake: bool) -> pa.ListArray:
        """Each registered line's resource spans (under `resourceSpans`, or Tempo's `batches`), typed by
        `structure`, as one nested Arrow list array; null for a record with neither."""
        import duckdb

        text = json.dumps(snake_case(structure) if snake else structure)
        today, *wrapped = (snake_name(key) if snake else key for key in structure)  # resourceSpans[, batches]
        fields = ", ".join(
            [f"struct_extract(record, '{today}') AS rss", *(f"struct_extract(record, '{key}') AS b" for key in wrapped)]
        )
        try:
            # No ORDER BY: on one thread DuckDB keeps a projection's input order (checked below); sorting the
            # nested rows would copy them all. Nor a coalesce of the two: it would copy them too.
            result = self.connection.sql(
                f"SELECT line_no, {fields} "
                f"FROM (SELECT line_no, json_transform(line, '{text}') AS record FROM goodput_lines)"
            ).to_arrow_table()
        except duckdb.Error as error:
            first_invalid = self.connection.sql(
                "SELECT min(line_no) FROM goodput_lines WHERE NOT json_valid(line)"
            ).fetchall()[0][0]
            raise self._invalid_json(records, first_invalid, error) from None
        line_numbers = result.column("line_no").combine_chunks()
        rss = result.column("rss").combine_chunks()
        in_wrapper = result.column("b").combine_chunks() if wrapped else None
        if in_wrapper is not None and in_wrapper.null_count < len(in_wrapper):  # Tempo's {"batches": [...]}
            rss = pc.coalesce(rss, in_wrapper)
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
                    problem = f"not UTF-8 text ({error.reason} at byte {error.start})"
                    raise self._not_a_record(records, index, problem) from None
            raise

    def _where(self, records: JsonRecords, index: int) -> str:
        return self.where(records.line_numbers[index], records.offset(index))

    def _not_a_record(self, records: JsonRecords, index: int, problem: str, where: str = "") -> TraceFormatError:
        """The error for record `index`, which is no OTLP record: the file's first record makes it no trace."""
        error = NotATrace if self.at_file_start and index == 0 else TraceFormatError
        return error(self.path, where or self._where(records, index), problem)

    def _invalid_json(self, records: JsonRecords, index: int | None, error: Exception) -> TraceFormatError:
        if index is None:  # DuckDB refused the batch, yet every record is valid JSON: report its own words
            if len(records) == 1:
                return self._not_a_record(records, 0, f"not an OTLP JSON record ({error})")
            return TraceFormatError(self.path, self._where(records, 0), f"not an OTLP JSON record ({error})")
        text = records.text(index)
        problem, line_in_record = json_problem(text)
        line_in_record = min(line_in_record, text.rstrip().count(b"\n") + 1)  # "at the end" is on its last line
        where = self.where(records.line_numbers[index] + line_in_record - 1, records.offset(index))
        return self._not_a_record(records, index, f"not valid JSON ({problem})", where)

    def _records_without_spans(self, records: JsonRecords, rss: pa.Array, other_names: bool) -> dict[str, int]:
        """Records with no span list: `{}` is an empty batch, another signal's record is skipped and counted (the
        counts are returned), any other record is not an OTLP trace record. Told by their top-level keys, asked of
        DuckDB for these records alone. Raises _OtherNames for Tempo's wrapper unless `other_names` were read."""
        counts: dict[str, int] = {}
        missing = pc.is_null(rss)
        if not pc.any(missing).as_py():
            return counts
        rows = pc.indices_nonzero(missing).to_pylist()
        keys = dict(
            self.connection.execute(
                "SELECT line_no, CASE WHEN json_type(line) = 'OBJECT' THEN json_keys(line) END FROM goodput_lines "
                "WHERE line_no IN (SELECT unnest($rows))",
                {"rows": rows},
            ).fetchall()
        )
        for index in rows:
            if not other_names and WRAPPER in (keys.get(index) or ()):
                raise _OtherNames
            signal = json_record_signal(keys.get(index))
            if signal is None:
                problem = "JSON without a resourceSpans list: not an OTLP trace record"
                raise self._not_a_record(records, index, problem)
            if signal:
                counts[signal] = counts.get(signal, 0) + 1
        return counts

    def _spans(self, records: JsonRecords, rss: pa.ListArray, snake: bool, lean: bool) -> pa.RecordBatch:
        """The batch from the transformed records; `lean`: they went through `LEAN_RECORD`, and
        NeedsFullTransform says when that was not enough."""
        names = snake_name if snake else str
        other_names = names(LEGACY_NAMES["scopeSpans"]) in {child.name for child in rss.type.value_type}
        skipped = self._records_without_spans(records, rss, other_names)
        resource_spans = rss.flatten()
        try:
            resource_attributes = field(field(resource_spans, names("resource")), "attributes")
            resource_maps = self.attributes.maps(resource_attributes, names)
        except BadRow as bad:
            record, path = SpanPlaces(rss).resource(bad.row)
            raise self._bad_value(
                records, record, (*path, "resource", *bad.path), f"{bad.problem}, in a resource"
            ) from None
        resources = [ResourceInfo.from_entries(entries) for entries in resource_maps.to_pylist()]
        scope_lists = _today_or_legacy(resource_spans, "scopeSpans", names)
        if not other_names and scope_lists.null_count:  # resource spans without today's scopeSpans: pre-1.0?
            raise _OtherNames
        scope_resource = pc.list_parent_indices(scope_lists)
        scope_spans = scope_lists.flatten()
        span_lists = field(scope_spans, "spans")
        span_scope = pc.list_parent_indices(span_lists)
        spans = span_lists.flatten()
        span_resource = scope_resource.take(span_scope)
        places = SpanPlaces(rss, scope_lists, span_lists)
        parents = hex_ids(field(spans, names("parentSpanId")), 8)
        parents = pc.if_else(pc.equal(parents, ""), pa.scalar(None, pa.string()), parents)
        if lean:  # columns the accounting does not read were not even transformed
            kind = status_code = status_message = scope_name = scope_version = None
        else:
            status, scope = field(spans, "status"), _today_or_legacy(scope_spans, "scope", names)
            kind = enum(field(spans, "kind"), SPAN_KINDS)
            status_code = enum(field(status, "code"), STATUS_CODES)
            status_message = field(status, "message").fill_null("")
            scope_name = field(scope, "name").fill_null("").take(span_scope)
            scope_version = field(scope, "version").fill_null("").take(span_scope)
        try:
            batch = span_record_batch(
                trace_id=hex_ids(field(spans, names("traceId")), 16).fill_null(""),
                span_id=hex_ids(field(spans, names("spanId")), 8).fill_null(""),
                parent_span_id=parents,
                name=field(spans, "name").fill_null(""),
                kind=kind,
                start_ns=times(field(spans, names("startTimeUnixNano")), names("startTimeUnixNano")),
                end_ns=times(field(spans, names("endTimeUnixNano")), names("endTimeUnixNano")),
                status_code=status_code,
                status_message=status_message,
                attributes=self.attributes.maps(field(spans, "attributes"), names, PROMOTED_KEYS if lean else None),
                resources=resources,
                resource_index=span_resource,
                scope_name=scope_name,
                scope_version=scope_version,
                source_file=self.path,
                schema=self.schema,
                events=None if lean else self._events(field(spans, "events"), names),
                links=None if lean else self._links(field(spans, "links"), names),
            )
        except BadRow as bad:
            record, path = places.span(bad.row)
            raise self._bad_value(records, record, (*path, *bad.path), bad.problem) from None
        invalid = first_invalid_span(batch)
        if invalid is not None:
            raise self._invalid_id(records, places, invalid, spans, names)
        for signal, count in skipped.items():
            self.other_signals[signal] = self.other_signals.get(signal, 0) + count
        return batch

    def _bad_value(self, records: JsonRecords, record: int, path: Path, problem: str) -> TraceFormatError:
        """The error for a bad value at `path` in record `record`: named by the line the value is on (in a
        pretty-printed document, its own line, not the document's first nor that of another value alike)."""
        line = records.line_numbers[record] + line_within(records.text(record), path)
        return TraceFormatError(self.path, self.where(line, records.offset(record)), problem)

    def _invalid_id(
        self,
        records: JsonRecords,
        places: SpanPlaces,
        invalid: InvalidSpan,
        spans: pa.Array,
        names: Callable[[str], str],
    ) -> TraceFormatError:
        """The error for a span whose id is not an OTLP id: the id as the file writes it (not as normalized), on
        the line it is on."""
        key = {"trace_id": "traceId", "span_id": "spanId", "parent_span_id": "parentSpanId"}[invalid.column]
        written = field(spans, names(key))[invalid.row].as_py()
        record, path = places.span(invalid.row)
        problem = f"a span has {key} {written!r}, expected {invalid.expected}"
        return self._bad_value(records, record, (*path, key), problem)

    def _events(self, lists: pa.Array, names: Callable[[str], str]) -> pa.Array | None:
        """The events column (`schema.EVENT`), when the schema has it; BadRow names the span of a bad event."""
        if "events" not in self.schema.names:
            return None
        flat = lists.flatten()
        try:
            items = [
                times(field(flat, names("timeUnixNano")), names("timeUnixNano"), "a span event"),
                field(flat, "name").fill_null(""),
                self.attributes.maps(field(flat, "attributes"), names),
            ]
        except BadRow as bad:
            span, index = list_item(lists, bad.row)
            problem = bad.problem if bad.path[0] != "attributes" else f"{bad.problem}, in an event"
            raise bad.within(span, problem, "events", index) from None
        values = pa.StructArray.from_arrays(items, fields=list(EVENT))
        return pa.ListArray.from_arrays(list_offsets(lists), values, type=EVENTS)

    def _links(self, lists: pa.Array, names: Callable[[str], str]) -> pa.Array | None:
        """The links column (`schema.LINK`), ids normalized as a span's, when the schema has it."""
        if "links" not in self.schema.names:
            return None
        flat = lists.flatten()
        try:
            attributes = self.attributes.maps(field(flat, "attributes"), names)
        except BadRow as bad:
            span, index = list_item(lists, bad.row)
            raise bad.within(span, f"{bad.problem}, in a link", "links", index) from None
        ids = [hex_ids(field(flat, names("traceId")), 16), hex_ids(field(flat, names("spanId")), 8)]
        values = pa.StructArray.from_arrays([*ids, attributes], fields=list(LINK))
        return pa.ListArray.from_arrays(list_offsets(lists), values, type=LINKS)


_TODAYS_NAMES_ONLY = (todays_names_only(RECORD), todays_names_only(LEAN_RECORD))


class _OtherNames(Exception):
    """A record read with today's names alone may use the others (`json_shape.LEGACY_NAMES`, `WRAPPER`)."""


def _today_or_legacy(structs: pa.Array, name: str, names: Callable[[str], str]) -> pa.Array:
    """The child `name` of each struct, or where that is missing or empty its pre-1.0 name's (`LEGACY_NAMES`)."""
    today = field(structs, names(name))
    if names(LEGACY_NAMES[name]) not in {child.name for child in structs.type}:
        return today  # the transform did not ask for the old name: the usual case
    legacy = field(structs, names(LEGACY_NAMES[name]))
    if legacy.null_count == len(legacy):
        return today
    if pa.types.is_list(today.type):
        present = pc.greater(pc.list_value_length(today), 0).fill_null(False)
    else:
        present = pc.is_valid(today)
    return pc.if_else(present, today, legacy)
