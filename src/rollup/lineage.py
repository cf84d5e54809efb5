"""What each span inherits from its ancestors: effective iteration, bucketed ancestors, and whether it is a step.

A walk goes down every trace from its roots, a level at a time, following parent ids across processes and files, so a
Ray worker's span with no `rl.iteration` of its own is filed under the step that dispatched it. The same walk
records the chain of bucketed ancestors, which is what the nesting checks need.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .memory import out_of_memory
from .schema import ACCOUNTING_SCHEMA, NODE_COLUMNS_SQL, NODE_TABLE_COLUMNS, sql_text

if TYPE_CHECKING:
    from pathlib import Path

    import duckdb

    from .store import SpanStore

LINEAGE_VERSION = 4  # part of the cached table's name: bump it whenever `spans_ex` changes

# What the walk adds to each span's node columns, in `spans_ex`'s order.
LINEAGE_COLUMNS = (
    "inverted_ns", "eff_iteration", "ancestor_iteration", "ancestor_iteration_span", "bucketed_chain", "has_parent",
)  # fmt: skip

# Deeper than any real trace; it only stops a walk that a corrupt file could otherwise make endless.
MAX_DEPTH = 10_000


def _node_column(name: str) -> str:
    """A node column as `spans_ex` holds it: an end before the start is moved to the start (SPEC section 3)."""
    return "greatest(n.end_ns, n.start_ns) AS end_ns" if name == "end_ns" else f"n.{name}"


def build_lineage(
    connection: duckdb.DuckDBPyConnection, nodes: str | None = None, *, parquet: Path | None = None
) -> None:
    """Create `spans_ex`: the columns the accounting reads, plus what each span inherits.

    Added columns: `eff_iteration` (own `rl.iteration`, else the nearest ancestor's), `ancestor_iteration` (the
    nearest ancestor's that carries one), `bucketed_chain` (ids of the ancestors with a valid bucket, root first),
    `ancestor_iteration_span` (that ancestor's id), `has_parent` (false when the parent id names no loaded span: an
    orphan), `bucketed`, `is_step`, `is_umbrella`, `inverted_ns` (how far a span's end precedes its start, else 0).
    An inverted span counts as zero-length everywhere in the accounting, so its `end_ns` here is its start.
    The ids are also integers (`tkey`, `skey`, `pkey`) so the walk and every check join on numbers rather than hex
    text. A span caught in a parent cycle is reached by no walk; it keeps its own iteration and no ancestors.

    The spans are held once, as a table of their node columns (`nodes`, or one made from `spans`), which the walk
    reads a few narrow columns of. What the walk found is then sorted back into that table's order and laid beside
    it (a positional join): no hash table of every span, which under a memory limit DuckDB would spill and
    re-read over and over. With `parquet`, the rows are written there (zstd) and `spans_ex` is a view of that file,
    so no span stays in memory; otherwise `spans_ex` is a view of the node table laid beside what the walk found
    (both kept), so no copy of every span is made and each query reads only the columns it needs.

    `nodes` names a table holding every span once with NODE_TABLE_COLUMNS (as `read.duckdb_json` fills), used as it
    is instead of being derived from `spans`.
    """
    table = nodes or "lineage_nodes"
    kept: set[str] = set()
    try:
        if nodes is None:
            connection.execute(
                f"""
                CREATE OR REPLACE TEMP TABLE lineage_nodes AS
                SELECT {", ".join(ACCOUNTING_SCHEMA.names)}, {NODE_COLUMNS_SQL} FROM spans
                """
            )
        _walk(connection, table)
        _in_table_order(connection, table)
        rows = f"""
            SELECT {", ".join(_node_column(c) for c in NODE_TABLE_COLUMNS)},
                   greatest(n.start_ns - n.end_ns, 0) AS inverted_ns,
                   w.eff_iteration, w.ancestor_iteration, w.ancestor_iteration_span, w.bucketed_chain, w.has_parent
            FROM {table} n POSITIONAL JOIN lineage_found w
        """
        if parquet is None:  # a view of the two tables, kept for it: each query reads only the columns it needs
            connection.execute(f"CREATE OR REPLACE TEMP VIEW spans_ex AS {rows}")
            kept = {table, "lineage_found"}
        else:
            path = sql_text(str(parquet))
            connection.execute(f"COPY ({rows}) TO {path} (FORMAT parquet, COMPRESSION zstd)")
            connection.execute(f"CREATE OR REPLACE VIEW spans_ex AS SELECT * FROM read_parquet({path})")
    finally:
        for scratch in {"lineage_parents", "lineage_walk", "lineage_found", "lineage_nodes"} - kept:
            connection.execute(f"DROP TABLE IF EXISTS {scratch}")


def _walk(connection: duckdb.DuckDBPyConnection, table: str) -> None:
    """Table `lineage_walk`: every span reached from a root of its trace (by its row id in `table`, `node`), level
    by level, with what it inherits.

    One statement per level (a hash join of that level's parents with their children), each result a table of its
    own: DuckDB can spill those to disk under its memory limit, where a recursive query's working set must stay in
    memory. The levels are as many as the deepest trace is deep.

    The parents are found first, once (`lineage_parents`): the distinct parent ids the spans name (far fewer than
    the spans), each with the span that holds it, if loaded, and what its children need of it (its id text and
    whether it is bucketed). The roots (no parent, or a parent no file holds) follow from that small table, rather
    than from a join whose hash table holds every span (which, at tens of millions of spans under a memory limit,
    spills). Each level then joins only the spans of the level before that are parents (`lineage_frontier`), so
    the join's hash table holds those alone, not every span of the level (most are leaves), the level after the
    deepest costs nothing, and the walk's own rows carry what is inherited and no more.
    """
    connection.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE lineage_parents AS
        SELECT k.tkey, k.pkey, n.rowid AS node, n.span_id, n.bucketed
        FROM (SELECT DISTINCT tkey, pkey FROM {table} WHERE pkey IS NOT NULL) k
        LEFT JOIN {table} n ON n.tkey = k.tkey AND n.skey = k.pkey
        """
    )
    connection.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE lineage_walk AS
        SELECT n.rowid AS node, n.iteration AS eff_iteration,
               CASE WHEN n.iteration IS NOT NULL THEN n.span_id END AS iteration_holder,
               NULL::BIGINT AS ancestor_iteration, NULL::VARCHAR AS ancestor_iteration_span,
               []::VARCHAR[] AS bucketed_chain, false AS has_parent, 0 AS depth
        FROM {table} n
        WHERE n.pkey IS NULL OR NOT EXISTS (
            SELECT 1 FROM lineage_parents p WHERE p.tkey = n.tkey AND p.pkey = n.pkey AND p.node IS NOT NULL
        )
        """
    )
    try:
        for depth in range(1, MAX_DEPTH + 1):
            connection.execute(
                f"""
                CREATE OR REPLACE TEMP TABLE lineage_frontier AS
                SELECT w.eff_iteration, w.iteration_holder, w.bucketed_chain, p.tkey, p.pkey, p.span_id, p.bucketed
                FROM lineage_walk w JOIN lineage_parents p ON p.node = w.node
                WHERE w.depth = {depth - 1}
                """
            )
            (added,) = connection.execute(
                f"""
                INSERT INTO lineage_walk
                SELECT c.rowid,
                       coalesce(c.iteration, w.eff_iteration),
                       CASE WHEN c.iteration IS NOT NULL THEN c.span_id ELSE w.iteration_holder END,
                       w.eff_iteration, w.iteration_holder,
                       CASE WHEN w.bucketed THEN list_append(w.bucketed_chain, w.span_id) ELSE w.bucketed_chain END,
                       true, {depth}
                FROM lineage_frontier w JOIN {table} c ON c.tkey = w.tkey AND c.pkey = w.pkey
                """
            ).fetchall()[0]
            if not added:
                break
    finally:
        connection.execute("DROP TABLE IF EXISTS lineage_frontier")


def _in_table_order(connection: duckdb.DuckDBPyConnection, table: str) -> None:
    """Table `lineage_found`: one row per row of `table`, in its order, with what the walk found for it.

    A span no walk reached (one caught in a parent cycle) keeps its own iteration and no ancestors. Each span is
    reached at most once (a parent is one span: ids are unique in `table`), so with those added there is exactly
    one row per span; were the ids not unique, the first visit counts and the rest are dropped, so the rows still
    line up.
    """
    ((walked, spans),) = connection.execute(
        f"SELECT (SELECT count(*) FROM lineage_walk), (SELECT count(*) FROM {table})"
    ).fetchall()
    if walked > spans:
        connection.execute(
            "DELETE FROM lineage_walk WHERE rowid NOT IN (SELECT min(rowid) FROM lineage_walk GROUP BY node)"
        )
        (walked,) = connection.execute("SELECT count(*) FROM lineage_walk").fetchall()[0]
    if walked < spans:
        connection.execute(
            f"""
            INSERT INTO lineage_walk (node, eff_iteration, bucketed_chain, has_parent)
            SELECT n.rowid, n.iteration, []::VARCHAR[], n.pkey IS NOT NULL FROM {table} n
            WHERE NOT EXISTS (SELECT 1 FROM lineage_walk w WHERE w.node = n.rowid)
            """
        )
    ordered = connection.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0][0]
    connection.execute("SET preserve_insertion_order = true")  # the table keeps the rows in the order sorted
    try:
        connection.execute(
            """
            CREATE OR REPLACE TEMP TABLE lineage_found AS
            SELECT eff_iteration, ancestor_iteration, ancestor_iteration_span, bucketed_chain, has_parent
            FROM lineage_walk ORDER BY node
            """
        )
    finally:
        connection.execute(f"SET preserve_insertion_order = {bool(ordered)}")
    connection.execute("DROP TABLE lineage_walk")


def lineage_is_view(connection: duckdb.DuckDBPyConnection) -> bool:
    """Whether `spans_ex` is a view (of the cached Parquet file, or of this command's node and lineage tables)
    rather than a table this command can change."""
    (views,) = connection.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'spans_ex'").fetchall()[0]
    return bool(views)


def lineage_exists(connection: duckdb.DuckDBPyConnection) -> bool:
    """Whether this connection has `spans_ex` already: a table, or a view of the cached Parquet file."""
    (exists,) = connection.execute(
        "SELECT (SELECT count(*) FROM duckdb_tables() WHERE table_name = 'spans_ex') "
        "+ (SELECT count(*) FROM duckdb_views() WHERE view_name = 'spans_ex') > 0"
    ).fetchall()[0]
    return bool(exists)


def ensure_lineage(store: SpanStore) -> None:
    """Make `spans_ex` once per store; every report, check and spans listing needs it.

    With the cache on, the table is kept as Parquet keyed by the set of loaded files (each by path, size and
    mtime), since parents cross files, and `spans_ex` is a view of that file: the next command on the same files
    reads only the columns each query needs, and never holds every span in memory. Without the cache (or when the
    cache folder cannot be written) it is a view of this command's own tables (`build_lineage`).
    """
    connection = store.connection
    if lineage_exists(connection):
        return
    cached = store.lineage_cache
    if cached is not None and cached.exists():
        try:
            _view_of(connection, cached)
            return
        except Exception:  # an unreadable cache entry is rebuilt, never an error
            connection.execute("DROP VIEW IF EXISTS spans_ex")
    if cached is not None:
        staging = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            build_lineage(connection, store.nodes_table, parquet=staging)
            os.replace(staging, cached)
            _view_of(connection, cached)
            store.lineage_cached()
            return
        except Exception as exc:  # a read-only or full cache folder costs the next command a walk, nothing more
            connection.execute("DROP VIEW IF EXISTS spans_ex")
            staging.unlink(missing_ok=True)
            if out_of_memory(exc) is not None:  # walking again without the file would run out again
                raise
    build_lineage(connection, store.nodes_table)


def _view_of(connection: duckdb.DuckDBPyConnection, path: Path) -> None:
    """`spans_ex` as a view of the lineage Parquet file at `path`; an error when it is not one (a file another
    version wrote, or a damaged one: its footer and its columns are read here)."""
    connection.execute(f"CREATE OR REPLACE VIEW spans_ex AS SELECT * FROM read_parquet({sql_text(str(path))})")
    columns = [column[0] for column in connection.execute("SELECT * FROM spans_ex LIMIT 0").description]
    if columns != [*NODE_TABLE_COLUMNS, *LINEAGE_COLUMNS]:
        raise ValueError(f"{path}: not a lineage table of this version")
