"""The store's SPANS (`tables`): every span of a load's Parquet parts (and of the views `read.duckdb_json` made), each
once, processes shown alike named apart by their `[host:pid]` (SPEC section 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from rollup.base.schema import sql_text
from rollup.base.tables import SOURCE_SPANS, SPANS
from rollup.read.cache import read_set_summary, write_set_summary

if TYPE_CHECKING:
    import duckdb


def create_spans_view(
    connection: duckdb.DuckDBPyConnection,
    parts: list[str],
    schema: pa.Schema,
    tables: Sequence[str] = (),
    summary: Path | None = None,
) -> tuple[bool, int]:
    """SPANS: every span of the parts (and of the views `read.duckdb_json` made), each once, with `schema`'s
    columns.

    A view over the Parquet parts, read column by column as queries need them, so memory stays far below the
    spans' size; materialized only when duplicates must be dropped (the same span exported twice, same trace and
    span id, counts once). Processes shown alike (SPEC section 1) get their `[host:pid]` here. Returns whether
    SPANS is other than the sources as they are (then the lineage cannot walk a source table in their place), and
    how many spans were dropped as duplicates.

    Finding duplicates and shared names reads every span; `summary` (a cached set of files, see
    `cache.set_summary_path`) keeps the answer, so a re-run on the same files skips that pass."""
    if not parts and not tables:
        connection.register("empty_spans", pa.Table.from_batches([], schema=schema))
        connection.execute(f"CREATE TABLE {SPANS} AS SELECT * FROM empty_spans")
        connection.unregister("empty_spans")
        return False, 0
    columns = ", ".join(schema.names)
    sources = [f"SELECT {columns} FROM {table}" for table in tables]
    if parts:
        files = "[" + ", ".join(sql_text(p) for p in parts) + "]"
        sources.append(f"SELECT {columns} FROM read_parquet({files})")
    connection.execute(f"CREATE VIEW {SOURCE_SPANS} AS {' UNION ALL '.join(sources)}")
    known = read_set_summary(summary) if summary is not None else None
    if known is not None:
        duplicates, shared = known
    else:
        # Counted on a 64-bit hash of the pair, not the pair of strings: several times cheaper to hash and to hold.
        # A collision (rare: docs/performance.md) only sends the load down the exact DISTINCT ON path.
        # Spans that all sit in `read.duckdb_json`'s view have the ids as integers already (`tkey`, `skey`): the
        # hash of those reads two narrow columns of a table that may have spilled, not the ids' text.
        direct = len(tables) == 1 and not parts
        pair, source = ("hash(tkey, skey)", tables[0]) if direct else ("hash(trace_id, span_id)", SOURCE_SPANS)
        (duplicates,) = connection.execute(f"SELECT count(*) - count(DISTINCT {pair}) FROM {source}").fetchall()[0]
        shared = [
            name
            for (name,) in connection.execute(
                f"SELECT process FROM {SOURCE_SPANS} GROUP BY process HAVING count(DISTINCT coalesce(host_pid, '')) > 1"
            ).fetchall()
        ]
        if summary is not None:
            write_set_summary(summary, duplicates, shared)
    columns = "*"
    if shared:
        names = ", ".join(sql_text(name) for name in shared)
        columns = (
            f"* REPLACE (CASE WHEN process IN ({names}) "
            "THEN process || ' [' || coalesce(host_pid, '?') || ']' ELSE process END AS process)"
        )
    if duplicates:
        connection.execute(
            f"CREATE TABLE {SPANS} AS SELECT DISTINCT ON (trace_id, span_id) {columns} FROM {SOURCE_SPANS}"
        )
    else:
        connection.execute(f"CREATE VIEW {SPANS} AS SELECT {columns} FROM {SOURCE_SPANS}")
    return bool(duplicates or shared), int(duplicates)
