"""The spans' node columns: a span's accounting columns with its ids as integers and its kind as flags, the rows the
lineage walk goes over (`lineage`) and every check joins on, held as a DuckDB table or as Parquet files of the
command's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .schema import ACCOUNTING_SCHEMA, BUCKET_LIST_SQL, IS_STEP_SQL, IS_UMBRELLA_SQL, sql_text

if TYPE_CHECKING:
    from pathlib import Path

    import duckdb

# The integer keys and flags of a span row, from its accounting columns: what the lineage walk and the checks join
# and filter on. A table that already holds them after the accounting columns can stand in for the walk's nodes.
NODE_COLUMNS_SQL = f"""
    hash(trace_id) AS tkey,
    coalesce(try_cast('0x' || span_id AS UBIGINT), hash(span_id)) AS skey,
    CASE WHEN parent_span_id IS NOT NULL
         THEN coalesce(try_cast('0x' || parent_span_id AS UBIGINT), hash(parent_span_id)) END AS pkey,
    coalesce(bucket IN ({BUCKET_LIST_SQL}), false) AS bucketed,
    coalesce({IS_STEP_SQL}, false) AS is_step,
    coalesce({IS_UMBRELLA_SQL}, false) AS is_umbrella
"""
NODE_TABLE_COLUMNS = (*ACCOUNTING_SCHEMA.names, "tkey", "skey", "pkey", "bucketed", "is_step", "is_umbrella")


# How a command writes the spans' node columns for itself: fast to write and to read back, for one command's life.
NODES_PARQUET = "(FORMAT parquet, COMPRESSION snappy)"


def nodes_view(connection: duckdb.DuckDBPyConnection, name: str, files: Sequence[Path]) -> None:
    """(Re)make `name` a view of the Parquet `files` of NODE_TABLE_COLUMNS, with a `rowid`: each span's place in the
    files, as a table's rowid is (the walk names spans by it).

    Why Parquet rather than a DuckDB table: tens of millions of spans exceed the memory limit as a table
    (`memory.NODE_TABLE_BYTES_PER_SPAN`), and each scan of the walk and of the accounting then reads DuckDB's
    uncompressed spill file back; the Parquet file takes under a third of that, stays in the page cache, and each
    scan reads only the columns it needs (docs/performance.md)."""
    listed = "[" + ", ".join(sql_text(str(f)) for f in files) + "]"
    connection.execute(
        f"""
        CREATE OR REPLACE VIEW {name} AS
        SELECT {", ".join(NODE_TABLE_COLUMNS)}, (file_index::BIGINT << 40) + file_row_number AS rowid
        FROM read_parquet({listed})
        """
    )
