"""OTLP JSON Lines read by DuckDB alone, in one parallel pass, for commands that need only the accounting columns.

The careful reader (`otlp_json`, run chunk by chunk in worker processes) knows every shape and words every error.
This path knows the common shape: camelCase OTLP JSON Lines whose goodput attributes and process attributes are
strings or integers. For that it is much faster, because nothing leaves DuckDB: `read_json` splits the file across
threads and types the few fields the accounting reads as it parses, `unnest` flattens them, and the rows land in a
DuckDB table, or, for more spans than the memory limit holds, in a Parquet file of the command's own
(`memory.nodes_as_parquet`, `nodes.nodes_view`), with no Arrow round trip and no worker process.

It claims a file only when it is sure to give the careful reader's rows exactly. Any doubt (DuckDB refuses the file,
a record without `resourceSpans` such as `{}`, Tempo's `batches` or another signal's record, an id that is not
lowercase-able hex of its length such as a base64 one, a time that is not an integer in range, a goodput or process
attribute of another kind, any attribute's `intValue` that is no integer, no span at all) and it gives the file
back: the careful reader then reads it, words its notes, or words its error, as always. Pre-1.0
`instrumentationLibrarySpans` it reads as the careful reader does. The tests hold the two to the same rows.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rollup.base.nodes import NODE_COLUMNS_SQL, NODE_TABLE_COLUMNS, NODES_PARQUET, nodes_view
from rollup.base.schema import (
    ACCOUNTING_SCHEMA,
    GOODPUT_FLEET,
    NO_PARENT_ID,
    RL_BUCKET,
    RL_ITERATION,
    RL_SPAN_GROUP,
    sql_text,
)

from ..values import (
    HOLDING_KEYS,
    HOLDING_SAFE_TEXT,
    RESOURCE_KEYS,
    array_of_strings_sql,
    canonical_int_sql,
    holding_sql,
    host_pid_sql,
    process_key_sql,
    run_id_sql,
    string_or_int_sql,
)
from .json_shape import LEAN_RECORD, LEGACY_NAMES, duckdb_type

if TYPE_CHECKING:
    from pathlib import Path

    import duckdb

# OTLP JSON Lines as `bench/tracegen.py` writes a GRPO job: about 600 bytes a span; compressed, an eighth of that.
# Exporters that add more attributes write more a span: the estimate then runs high, which only sends the spans to
# Parquet sooner (`memory.nodes_as_parquet`).
JSON_BYTES_PER_SPAN = 600
COMPRESSION_RATIO = 8


def spans_estimate(size: int, compression: str | None) -> int:
    """About how many spans `size` bytes of JSON Lines of `compression` hold."""
    return size * (COMPRESSION_RATIO if compression else 1) // JSON_BYTES_PER_SPAN


# DuckDB's own default, well above an export batch; a longer line makes DuckDB refuse the file, and the careful
# reader takes it. DuckDB sizes its read buffers by it, so a larger one slows every read (docs/performance.md).
MAX_RECORD_BYTES = 16 << 20

# The careful reader's lean record, as a DuckDB type: `read_json` with the type given and `records = true` parses
# each line once, straight into these vectors (`read_ndjson_objects` and `json_transform` parse twice).
_RESOURCE_SPANS = duckdb_type(LEAN_RECORD["resourceSpans"])


def _time(text: str) -> str:
    """A span time: missing is 0 (as protobuf omits it), else its int64 value."""
    return f"CASE WHEN {text} IS NULL THEN 0 ELSE TRY_CAST({text} AS BIGINT) END"


def _time_sure(text: str, value: str) -> str:
    return f"({text} IS NULL OR {value}::VARCHAR = {text})"


_RESOURCE_KEY_LIST = ", ".join(f"'{key}'" for key in RESOURCE_KEYS)
_HOLDING_KEY_LIST = ", ".join(f"'{key}'" for key in HOLDING_KEYS)
_HOLDING_SAFE = sql_text(HOLDING_SAFE_TEXT)
# A resource attribute's text: a string or int, or an array of plain strings (`goodput.gpu.ids`), else NULL.
_RESOURCE_TEXT = f"coalesce({string_or_int_sql('a')}, {array_of_strings_sql('a')})"


def _resource_value(key: str) -> str:
    """The last non-empty rendering of a resource attribute (a later duplicate wins, as in a dict)."""
    return f"list_filter(resource_texts, lambda e: e.k = '{key}' AND e.v IS NOT NULL)[-1].v"


def _no_corrupt_int(attributes: str) -> str:
    """SQL: whether no entry of the attribute list `attributes` has an `intValue` that is no int64 (`"notanint"`,
    `1.5`): the careful reader's error (`json_columns.first_corrupt_int`, which `values.RENDER_SCALARS_SQL` would
    render as nothing), so a file with one is given back to it to be worded. Every entry, not only the promoted."""
    int_value = "a.value.intValue"
    corrupt = (
        f"{int_value} IS NOT NULL AND NOT coalesce(regexp_full_match({int_value}, '-?[0-9]+') "
        f"AND TRY_CAST({int_value} AS BIGINT) IS NOT NULL, false)"
    )
    return f"coalesce(len(list_filter({attributes}, lambda a: {corrupt})), 0) = 0"


def _first(key: str) -> str:
    """A span's first attribute entry with `key` (the one the careful reader promotes), or NULL."""
    return f"s.attributes[list_position(attribute_keys, '{key}')]"


_QUERY = f"""
WITH resource_spans AS (
    -- A record without resourceSpans is no trace record: the error hands the file to the careful reader.
    SELECT filename, unnest(resourceSpans) AS rs
    FROM read_json($paths, format = 'newline_delimited', records = true, compression = $compression,
                   maximum_object_size = {MAX_RECORD_BYTES}, filename = true,
                   columns = {{resourceSpans: '{_RESOURCE_SPANS}'}})
    WHERE resourceSpans IS NOT NULL OR error('a record without resourceSpans')
),
resources AS (
    SELECT filename,
           CASE WHEN coalesce(len(rs.scopeSpans), 0) > 0 THEN rs.scopeSpans
                ELSE rs.{LEGACY_NAMES["scopeSpans"]} END AS scope_spans,
           list_transform(rs.resource.attributes,
                          lambda a: {{'k': a.key, 'v': {_RESOURCE_TEXT}}}) AS resource_texts,
           len(list_filter(rs.resource.attributes,
                           lambda a: a.key IN ({_RESOURCE_KEY_LIST}) AND ({_RESOURCE_TEXT}) IS NULL))
               = 0
           AND len(list_filter(rs.resource.attributes,
                               lambda a: a.key IN ({_HOLDING_KEY_LIST})
                                         AND NOT regexp_full_match({_RESOURCE_TEXT}, {_HOLDING_SAFE})))
               = 0
           AND {_no_corrupt_int("rs.resource.attributes")} AS resource_ok_or_null
    FROM resource_spans
),
processes AS (
    SELECT filename, scope_spans, coalesce(resource_ok_or_null, true) AS resource_ok,
           {process_key_sql(_resource_value)} AS process,
           {host_pid_sql(_resource_value)} AS host_pid,
           {run_id_sql(_resource_value)} AS run_id,
           {_resource_value("service.name")} AS service,
           {holding_sql(_resource_value)} AS holding
    FROM resources
),
scope_spans AS (
    SELECT filename, resource_ok, process, host_pid, run_id, service, holding, unnest(scope_spans) AS ss
    FROM processes
),
spans AS (
    SELECT filename, resource_ok, process, host_pid, run_id, service, holding, unnest(ss.spans) AS s FROM scope_spans
),
promoted AS (
    SELECT filename, resource_ok, process, host_pid, run_id, service, holding, s,
           {_first(RL_BUCKET)} AS bucket_entry,
           {_first(RL_ITERATION)} AS iteration_entry,
           {_first(RL_SPAN_GROUP)} AS span_group_entry,
           {_first(GOODPUT_FLEET)} AS fleet_entry
    FROM (SELECT *, list_transform(s.attributes, lambda a: a.key) AS attribute_keys FROM spans)
),
rows AS (
    SELECT filename, resource_ok,
           lower(s.traceId) AS trace_id,
           lower(s.spanId) AS span_id,
           CASE WHEN s.parentSpanId NOT IN ('', '{NO_PARENT_ID}') THEN lower(s.parentSpanId) END AS parent_span_id,
           coalesce(s.name, '') AS name,
           s.startTimeUnixNano AS start_text, {_time("s.startTimeUnixNano")} AS start_ns,
           s.endTimeUnixNano AS end_text, {_time("s.endTimeUnixNano")} AS end_ns,
           process, host_pid, run_id, service, holding,
           bucket_entry, {string_or_int_sql("bucket_entry")} AS bucket,
           iteration_entry, {canonical_int_sql(string_or_int_sql("iteration_entry"))} AS iteration_text,
           TRY_CAST(iteration_text AS BIGINT) AS iteration,
           span_group_entry, {string_or_int_sql("span_group_entry")} AS span_group,
           fleet_entry, {string_or_int_sql("fleet_entry")} AS fleet,
           {_no_corrupt_int("s.attributes")} AS ints_ok
    FROM promoted
)
SELECT {", ".join(ACCOUNTING_SCHEMA.names)},
       {NODE_COLUMNS_SQL},
       coalesce(
           resource_ok
           AND regexp_full_match(trace_id, '[0-9a-f]{{32}}')
           AND regexp_full_match(span_id, '[0-9a-f]{{16}}')
           AND (parent_span_id IS NULL OR regexp_full_match(parent_span_id, '[0-9a-f]{{16}}'))
           AND {_time_sure("start_text", "start_ns")} AND {_time_sure("end_text", "end_ns")}
           AND ints_ok
           AND (bucket_entry IS NULL OR bucket IS NOT NULL)
           AND (span_group_entry IS NULL OR span_group IS NOT NULL)
           AND (fleet_entry IS NULL OR fleet IS NOT NULL)
           AND (iteration_entry IS NULL OR iteration_text IS NOT NULL),
           false
       ) AS sure,
       filename
FROM rows
"""


def load_json_lines(
    connection: duckdb.DuckDBPyConnection,
    paths: Sequence[str],
    compression: str | None,
    table: str,
    folder: Path | None = None,
    on_progress: Callable[[float], None] | None = None,
) -> dict[str, int]:
    """Read the JSON Lines files `paths` (all of one `compression`, `sniff.compression_of`'s answer) into `table`:
    ACCOUNTING_SCHEMA's columns and the lineage's node keys after them (`nodes.NODE_TABLE_COLUMNS`), so the walk
    can start from it. Without `folder`, `table` is a DuckDB table, created or appended to. With it, `table` is a
    view of the Parquet files these loads write there, one a query (`{table}-N.parquet`), with a `rowid`
    (`nodes.nodes_view`), made again over one file more when it exists.

    Returns the spans read from each file it claims; every other file is left out, for the careful reader. All files
    go through one query; when DuckDB refuses one, which spoils that query, each half is tried again, so a few bad
    files among thousands cost a few queries more, not thousands; when it runs out of memory (`memory`), no file is
    claimed. `on_progress(fraction)` is called from a helper thread while DuckDB reads.
    """
    paths = list(paths)
    try:
        claimed = _load(connection, paths, compression, table, folder, on_progress)
    except _OutOfMemory:
        return {}  # every half would run out too: the careful reader, batch by batch, reads them all
    if claimed is not None:
        return claimed
    if len(paths) == 1:
        return {}
    half = len(paths) // 2
    return {
        **load_json_lines(connection, paths[:half], compression, table, folder),
        **load_json_lines(connection, paths[half:], compression, table, folder),
    }


def _pieces(table: str, folder: Path) -> list[Path]:
    """The Parquet files `table`'s loads wrote into `folder`, in the order they were written."""
    return sorted(folder.glob(f"{table}-*.parquet"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))


def _load(
    connection: duckdb.DuckDBPyConnection,
    paths: list[str],
    compression: str | None,
    table: str,
    folder: Path | None,
    on_progress: Callable[[float], None] | None,
) -> dict[str, int] | None:
    """One query over `paths` into `table` (`load_json_lines`); the files it claims, or None when DuckDB refused
    the query."""
    if folder is not None:
        return _load_parquet(connection, paths, compression, table, folder, on_progress)
    import duckdb

    staging = f"{table}_staging"
    params = {"paths": paths, "compression": compression or "none"}
    try:
        with _progress_polling(connection, on_progress):
            connection.execute(f"CREATE TEMP TABLE {staging} AS {_QUERY}", params)
        claimed, files = _claims(connection, staging)
    except duckdb.Error as error:
        connection.execute(f"DROP TABLE IF EXISTS {staging}")
        if isinstance(error, duckdb.OutOfMemoryException):
            raise _OutOfMemory from None
        return None
    if not claimed:
        connection.execute(f"DROP TABLE {staging}")
        return claimed
    if len(claimed) < files:
        kept = {"kept": list(claimed)}
        connection.execute(f"DELETE FROM {staging} WHERE filename NOT IN (SELECT unnest($kept))", kept)
    (exists,) = connection.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [table]).fetchall()[0]
    if exists:
        connection.execute(f"INSERT INTO {table} SELECT {', '.join(NODE_TABLE_COLUMNS)} FROM {staging}")
        connection.execute(f"DROP TABLE {staging}")
    else:  # the first (usually the only) load: no copy
        connection.execute(f"ALTER TABLE {staging} DROP COLUMN sure")
        connection.execute(f"ALTER TABLE {staging} DROP COLUMN filename")
        connection.execute(f"ALTER TABLE {staging} RENAME TO {table}")
    return claimed


def _load_parquet(
    connection: duckdb.DuckDBPyConnection,
    paths: list[str],
    compression: str | None,
    table: str,
    folder: Path,
    on_progress: Callable[[float], None] | None,
) -> dict[str, int] | None:
    """`_load` into a Parquet file in `folder`, of which (and of the earlier ones) `table` is then a view."""
    import duckdb

    pieces = _pieces(table, folder)
    piece = folder / f"{table}-{len(pieces)}.parquet"
    staging = folder / f"{table}-{len(pieces)}.partial"
    params = {"paths": paths, "compression": compression or "none"}
    try:
        with _progress_polling(connection, on_progress):
            connection.execute(f"COPY ({_QUERY}) TO {sql_text(str(staging))} {NODES_PARQUET}", params)
        claimed, files = _claims(connection, f"read_parquet({sql_text(str(staging))})")
        if claimed and len(claimed) < files:  # rare: the claimed files' rows alone, into a file of their own
            connection.execute(
                f"COPY (SELECT * FROM read_parquet({sql_text(str(staging))}) WHERE list_contains($kept, filename)) "
                f"TO {sql_text(str(piece))} {NODES_PARQUET}",
                {"kept": list(claimed)},
            )
        elif claimed:
            os.replace(staging, piece)
    except duckdb.Error as error:
        piece.unlink(missing_ok=True)
        if isinstance(error, duckdb.OutOfMemoryException):
            raise _OutOfMemory from None
        return None
    finally:
        staging.unlink(missing_ok=True)
    if claimed:
        nodes_view(connection, table, [*pieces, piece])
    return claimed


def _claims(connection: duckdb.DuckDBPyConnection, source: str) -> tuple[dict[str, int], int]:
    """The files whose every span `source` (a table, or a `read_parquet` of one query's rows) is sure of, each with
    its spans; and how many files it holds."""
    per_file = connection.execute(
        f"SELECT filename, count(*), count(*) FILTER (NOT sure) FROM {source} GROUP BY filename"
    ).fetchall()
    return {name: spans for name, spans, unsure in per_file if not unsure}, len(per_file)


class _OutOfMemory(Exception):
    """DuckDB's read ran out of the memory it may use (`memory`): no file of the query is claimed."""


class _progress_polling:
    """While the block runs, report DuckDB's own estimate of the running query's progress every 0.2 s."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, on_progress: Callable[[float], None] | None) -> None:
        self.connection = connection
        self.on_progress = on_progress
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> None:
        if self.on_progress is not None:
            # DuckDB tracks a query's progress only with its progress bar on; it must not draw it, though.
            self.connection.execute("SET enable_progress_bar = true")
            self.connection.execute("SET enable_progress_bar_print = false")
            self.thread = threading.Thread(target=self._poll, daemon=True)
            self.thread.start()

    def __exit__(self, *exc_info) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()

    def _poll(self) -> None:
        while not self.stop.wait(0.2):
            try:
                percent = self.connection.query_progress()
            except Exception:  # noqa: BLE001 - progress is a courtesy; it never fails a load
                return
            if percent is not None and percent >= 0 and self.on_progress is not None:
                self.on_progress(min(percent, 100.0) / 100.0)
