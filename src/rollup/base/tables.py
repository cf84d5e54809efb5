"""The names of the tables and views a store keeps on its DuckDB connection, each defined once.

A store's connection holds the loaded spans under these names; every module that reads them takes the name from
here (or from the `SpanSet` it is handed, which says which of them to read), never as a string of its own. A table
that one function makes for itself and drops before it returns is not here: it comes from `SpanSet.scratch`, which
gives it a name no other table has.
"""

from __future__ import annotations

# Every span of the loaded files, each once, with the columns the load asked for (`schema.SPAN_SCHEMA`, or the
# accounting's): what `goodput query` reads.
SPANS = "spans"
# The spans of every source (Parquet parts, the tables DuckDB read JSON Lines into), duplicates still in: `SPANS`
# is a view of it, or a table of it with each span once.
SOURCE_SPANS = "all_spans"
# The spans DuckDB read from JSON Lines files itself (`read.duckdb_json`).
DIRECT_SPANS = "direct_spans"
# The spans' node columns (`nodes.NODE_TABLE_COLUMNS`) when the lineage derives them from `SPANS`.
LINEAGE_NODES = "lineage_nodes"
# Per parent id, what a child of it inherits (`lineage.build_lineage`).
LINEAGE_HANDED = "lineage_handed"
# Each span's accounting columns and what it inherits: the relation every report, check and listing reads.
LINEAGE = "spans_ex"
# `LINEAGE`'s own columns alone (a view of the node table, no join with the parents), where it is a view of this
# command's own tables: cheaper for the queries that read no inherited column.
OWN_SPANS = "spans_own"
# One attempt's rows of `LINEAGE` (`SpanStore.spans(attempt=...)`), suffixed with the attempt's position.
ATTEMPT_SPANS = "spans_of_attempt"
