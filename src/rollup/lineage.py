"""What each span inherits from its ancestors: effective iteration, bucketed ancestors, and whether it is a step.

One recursive query walks every trace from its roots down, following parent ids across processes and files, so a
Ray worker's span with no `rl.iteration` of its own is filed under the step that dispatched it. The same walk
records the chain of bucketed ancestors, which is what the nesting checks need.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .schema import ACCOUNTING_SCHEMA, NODE_COLUMNS_SQL, NODE_TABLE_COLUMNS, sql_text

if TYPE_CHECKING:
    import duckdb

    from .store import SpanStore

LINEAGE_VERSION = 4  # part of the cached table's name: bump it whenever `spans_ex` changes

# Deeper than any real trace; it only stops a walk that a corrupt file could otherwise make endless.
MAX_DEPTH = 10_000


def _node_column(name: str) -> str:
    """A node column as `spans_ex` holds it: an end before the start is moved to the start (SPEC section 3)."""
    return "greatest(n.end_ns, n.start_ns) AS end_ns" if name == "end_ns" else f"n.{name}"


def build_lineage(connection: duckdb.DuckDBPyConnection, nodes: str | None = None) -> None:
    """Create table `spans_ex`: the columns the accounting reads, plus what each span inherits.

    Added columns: `eff_iteration` (own `rl.iteration`, else the nearest ancestor's), `ancestor_iteration` (the
    nearest ancestor's that carries one), `bucketed_chain` (ids of the ancestors with a valid bucket, root first),
    `ancestor_iteration_span` (that ancestor's id), `has_parent` (false when the parent id names no loaded span: an
    orphan), `bucketed`, `is_step`, `is_umbrella`, `inverted_ns` (how far a span's end precedes its start, else 0).
    An inverted span counts as zero-length everywhere in the accounting, so its `end_ns` here is its start.
    Materialized once, narrow, with the ids also as integers (`tkey`, `skey`, `pkey`) so the walk and every check
    join on numbers rather than hex text; the walk carries each node's row id, so its result joins back on one
    integer. A span caught in a parent cycle is reached by no walk; it keeps its own iteration and no ancestors.

    `nodes` names a table holding every span once with NODE_TABLE_COLUMNS (as `read.duckdb_json` fills), used as it is
    instead of being derived from `spans`.
    """
    if nodes is None:
        connection.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE lineage_nodes AS
            SELECT {", ".join(ACCOUNTING_SCHEMA.names)}, {NODE_COLUMNS_SQL} FROM spans
            """
        )
    table = nodes or "lineage_nodes"
    connection.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE lineage_walk AS
        WITH RECURSIVE
        roots AS (
            SELECT n.rowid AS node, n.tkey, n.skey, n.bucketed, n.iteration, n.span_id FROM {table} n
            WHERE n.pkey IS NULL
               OR NOT EXISTS (SELECT 1 FROM {table} p WHERE p.tkey = n.tkey AND p.skey = n.pkey)
        ),
        walk(node, tkey, skey, span_id, bucketed, eff_iteration, iteration_holder, ancestor_iteration,
             ancestor_iteration_span, bucketed_chain, has_parent, depth) AS (
            SELECT node, tkey, skey, span_id, bucketed, iteration, CASE WHEN iteration IS NOT NULL THEN span_id END,
                   NULL::BIGINT, NULL::VARCHAR, []::VARCHAR[], false, 0
            FROM roots
            UNION ALL
            SELECT c.rowid, c.tkey, c.skey, c.span_id, c.bucketed,
                   coalesce(c.iteration, w.eff_iteration),
                   CASE WHEN c.iteration IS NOT NULL THEN c.span_id ELSE w.iteration_holder END,
                   w.eff_iteration, w.iteration_holder,
                   CASE WHEN w.bucketed THEN list_append(w.bucketed_chain, w.span_id) ELSE w.bucketed_chain END,
                   true, w.depth + 1
            FROM walk w JOIN {table} c ON c.tkey = w.tkey AND c.pkey = w.skey
            WHERE w.depth < {MAX_DEPTH}
        )
        SELECT node, eff_iteration, ancestor_iteration, ancestor_iteration_span, bucketed_chain, has_parent
        FROM walk
        """
    )
    connection.execute(
        f"""
        CREATE OR REPLACE TABLE spans_ex AS
        SELECT {", ".join(_node_column(c) for c in NODE_TABLE_COLUMNS)},
               greatest(n.start_ns - n.end_ns, 0) AS inverted_ns,
               coalesce(w.eff_iteration, n.iteration) AS eff_iteration,
               w.ancestor_iteration,
               w.ancestor_iteration_span,
               coalesce(w.bucketed_chain, []::VARCHAR[]) AS bucketed_chain,
               coalesce(w.has_parent, n.pkey IS NOT NULL) AS has_parent
        FROM {table} n LEFT JOIN lineage_walk w ON w.node = n.rowid
        """
    )
    connection.execute("DROP TABLE lineage_walk")
    if nodes is None:
        connection.execute("DROP TABLE lineage_nodes")


def ensure_lineage(store: SpanStore) -> None:
    """Build `spans_ex` once per store; every report, check and spans listing needs it.

    With the cache on, the table is also kept as Parquet keyed by the set of loaded files (each by path, size and
    mtime), since parents cross files: the next command on the same files reads it instead of walking again.
    """
    connection = store.connection
    (exists,) = connection.execute(
        "SELECT count(*) > 0 FROM duckdb_tables() WHERE table_name = 'spans_ex'"
    ).fetchall()[0]
    if exists:
        return
    cached = store.lineage_cache
    if cached is not None and cached.exists():
        try:
            connection.execute("CREATE TABLE spans_ex AS SELECT * FROM read_parquet(?)", [str(cached)])
            return
        except Exception:  # an unreadable cache entry is rebuilt, never an error
            connection.execute("DROP TABLE IF EXISTS spans_ex")
    build_lineage(connection, store.nodes_table)
    if cached is not None:
        staging = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            connection.execute(f"COPY spans_ex TO {sql_text(str(staging))} (FORMAT parquet, COMPRESSION zstd)")
            os.replace(staging, cached)
            store.lineage_cached()
        except Exception:  # a read-only or full cache folder costs the next command a walk, nothing more
            staging.unlink(missing_ok=True)
