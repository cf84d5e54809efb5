"""What each span inherits from its ancestors: effective iteration, bucketed ancestors, and whether it is a step.

A walk goes down every trace from its roots, a level at a time, following parent ids across processes and files, so a
Ray worker's span with no `rl.iteration` of its own is filed under the step that dispatched it. The same walk
records the chain of bucketed ancestors, which is what the nesting checks need.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .connection import out_of_memory
from .nodes import NODE_COLUMNS_SQL, NODE_TABLE_COLUMNS, NODES_PARQUET, nodes_view
from .schema import ACCOUNTING_SCHEMA, sql_text

if TYPE_CHECKING:
    from pathlib import Path

    import duckdb

    from .store import SpanStore

LINEAGE_VERSION = 4  # part of the cached table's name: bump it whenever `spans_ex` changes

# What the walk adds to each span's node columns, in `spans_ex`'s order.
LINEAGE_COLUMNS = (
    "inverted_ns", "eff_iteration", "ancestor_iteration", "ancestor_iteration_span", "bucketed_chain", "has_parent",
)  # fmt: skip

# Without the cache, a view of the spans' own columns beside `spans_ex` (`own_spans`).
OWN_SPANS = "spans_own"

# Deeper than any real trace; it only stops a walk that a corrupt file could otherwise make endless.
MAX_DEPTH = 10_000


def _node_column(name: str) -> str:
    """A node column as `spans_ex` holds it: an end before the start is moved to the start (SPEC section 3)."""
    return "greatest(n.end_ns, n.start_ns) AS end_ns" if name == "end_ns" else f"n.{name}"


def build_lineage(
    connection: duckdb.DuckDBPyConnection,
    nodes: str | None = None,
    *,
    parquet: Path | None = None,
    scratch: Path | None = None,
) -> None:
    """Create `spans_ex`: the columns the accounting reads, plus what each span inherits.

    Added columns: `eff_iteration` (own `rl.iteration`, else the nearest ancestor's), `ancestor_iteration` (the
    nearest ancestor's that carries one), `bucketed_chain` (ids of the ancestors with a valid bucket, root first),
    `ancestor_iteration_span` (that ancestor's id), `has_parent` (false when the parent id names no loaded span: an
    orphan), `bucketed`, `is_step`, `is_umbrella`, `inverted_ns` (how far a span's end precedes its start, else 0).
    An inverted span counts as zero-length everywhere in the accounting, so its `end_ns` here is its start.
    The ids are also integers (`tkey`, `skey`, `pkey`) so the walk and every check join on numbers rather than hex
    text. A span caught in a parent cycle is reached by no walk; it keeps its own iteration and no ancestors.

    All a span inherits is what its parent hands down, and only spans that are parents hand anything down: the
    walk (`_walk`) goes over the parents alone (one span in fifteen in a GRPO trace), and each span then takes its
    parent's in one join (`lineage_handed`: a row per parent id). The spans are held once, as a table of their node
    columns (`nodes`, or one made from `spans`). Without `parquet`, `spans_ex` is a view of that table joined with
    the parents' rows: no copy of every span, no sort, and each query reads only the columns it needs. With
    `parquet`, the rows are written there (zstd; in no particular order, as no query relies on one: sorting them
    back into the table's order took 5 of the 30 s of a first run at 4M spans), and `spans_ex` is a view of that
    file, so no span stays in memory.

    `nodes` names a table holding every span once with NODE_TABLE_COLUMNS (or a view of them with a `rowid`, as
    `read.duckdb_json` makes), used as it is instead of being derived from `spans`. Else, with `scratch` (a folder
    of this command's own), the node columns derived from `spans` are written there as Parquet and read through a
    view (`nodes_view`), not held as a DuckDB table.
    """
    table = nodes or "lineage_nodes"
    kept: set[str] = set()
    nodes_file = None
    try:
        if nodes is None:
            derived = f"SELECT {', '.join(ACCOUNTING_SCHEMA.names)}, {NODE_COLUMNS_SQL} FROM spans"
            if scratch is None:
                connection.execute(f"CREATE OR REPLACE TEMP TABLE lineage_nodes AS {derived}")
            else:
                nodes_file = _nodes_file(connection, derived, scratch)
        _walk(connection, table)
        rows = f"""
            SELECT {", ".join(_node_column(c) for c in NODE_TABLE_COLUMNS)},
                   greatest(n.start_ns - n.end_ns, 0) AS inverted_ns,
                   CASE WHEN h.reached THEN coalesce(n.iteration, h.eff_iteration) ELSE n.iteration END
                       AS eff_iteration,
                   CASE WHEN h.reached THEN h.eff_iteration END AS ancestor_iteration,
                   CASE WHEN h.reached THEN h.iteration_holder END AS ancestor_iteration_span,
                   CASE WHEN h.reached THEN h.chain ELSE []::VARCHAR[] END AS bucketed_chain,
                   coalesce(h.loaded, false) AS has_parent
            FROM {table} n LEFT JOIN lineage_handed h ON h.tkey = n.tkey AND h.pkey = n.pkey
        """
        if parquet is None:  # a view of the two tables, kept for it: each query reads only the columns it needs
            connection.execute(f"CREATE OR REPLACE TEMP VIEW spans_ex AS {rows}")
            own = ", ".join(_node_column(c) for c in NODE_TABLE_COLUMNS)
            connection.execute(f"CREATE OR REPLACE TEMP VIEW {OWN_SPANS} AS SELECT {own} FROM {table} n")
            kept = {table, "lineage_handed"}
        else:
            path = sql_text(str(parquet))
            connection.execute(f"COPY ({rows}) TO {path} (FORMAT parquet, COMPRESSION zstd)")
            connection.execute(f"CREATE OR REPLACE VIEW spans_ex AS SELECT * FROM read_parquet({path})")
    finally:
        for name in {"lineage_parents", "lineage_reached", "lineage_handed", "lineage_nodes"} - kept:
            if name == "lineage_nodes" and nodes_file is not None:
                connection.execute("DROP VIEW IF EXISTS lineage_nodes")
                nodes_file.unlink(missing_ok=True)
            else:
                connection.execute(f"DROP TABLE IF EXISTS {name}")


def _nodes_file(connection: duckdb.DuckDBPyConnection, derived: str, folder: Path) -> Path:
    """Write the rows of `derived` (the node columns) to a Parquet file in `folder`, and make `lineage_nodes` a view
    of it (`nodes_view`)."""
    path = folder / f"lineage-nodes-{os.urandom(4).hex()}.parquet"
    connection.execute(f"COPY ({derived}) TO {sql_text(str(path))} {NODES_PARQUET}")
    nodes_view(connection, "lineage_nodes", [path])
    return path


def _walk(connection: duckdb.DuckDBPyConnection, table: str) -> None:
    """Table `lineage_handed`: per parent id the spans of `table` name (`tkey`, `pkey`), what a child of it
    inherits: `loaded` (a span of `table` has that id), `reached` (a walk from a root of its trace got to it: false
    in a parent cycle), and then its `eff_iteration`, the id of the span that iteration is from
    (`iteration_holder`), and `chain`, the bucketed ancestors' ids a child has (the parent's own, then the parent
    itself when bucketed).

    The parents are found first, once (`lineage_parents`): the distinct parent ids the spans name, each with the
    span that holds it, if loaded, and what is needed of that span (its id text, bucket flag, iteration and its own
    parent id). A parent's parent is a parent too, so the walk stays inside that small table: from the parents
    whose own parent is none or not loaded, a level at a time, one statement per level (a hash join of the level
    before with the parents whose parent it is), each result a table DuckDB can spill under its memory limit. The
    levels are as many as the deepest trace is deep; each parent is reached once (were ids not unique, the nearest
    visit counts).
    """
    connection.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE lineage_parents AS
        SELECT k.tkey, k.pkey, n.rowid AS node, n.span_id, n.bucketed, n.iteration, n.pkey AS grand
        FROM (SELECT DISTINCT tkey, pkey FROM {table} WHERE pkey IS NOT NULL) k
        LEFT JOIN {table} n ON n.tkey = k.tkey AND n.skey = k.pkey
        """
    )
    connection.execute(
        """
        CREATE OR REPLACE TEMP TABLE lineage_reached AS
        SELECT p.tkey, p.pkey, p.node, p.iteration AS eff_iteration,
               CASE WHEN p.iteration IS NOT NULL THEN p.span_id END AS iteration_holder,
               CASE WHEN p.bucketed THEN [p.span_id] ELSE []::VARCHAR[] END AS chain, 0 AS depth
        FROM lineage_parents p
        WHERE p.node IS NOT NULL AND (p.grand IS NULL OR NOT EXISTS (
            SELECT 1 FROM lineage_parents g WHERE g.tkey = p.tkey AND g.pkey = p.grand AND g.node IS NOT NULL
        ))
        """
    )
    # Ids are unique in a sound trace: then each parent is held by one span, reached from its own parent alone and
    # at most once, and the levels need neither the guard against a second visit nor the choice of the nearest one
    # (their sorts and hash tables were the walk's peak: 16M spans, 0.64 GB under 500MB).
    ((shared_ids,),) = connection.execute(
        "SELECT count(*) FROM (SELECT 1 FROM lineage_parents GROUP BY tkey, pkey HAVING count(*) > 1)"
    ).fetchall()
    nearest = "DISTINCT ON (q.node)" if shared_ids else ""
    once = "AND NOT EXISTS (SELECT 1 FROM lineage_reached r WHERE r.node = q.node) ORDER BY q.node, f.node"
    for depth in range(1, MAX_DEPTH + 1):
        (added,) = connection.execute(
            f"""
            INSERT INTO lineage_reached
            SELECT {nearest} q.tkey, q.pkey, q.node, coalesce(q.iteration, f.eff_iteration),
                   CASE WHEN q.iteration IS NOT NULL THEN q.span_id ELSE f.iteration_holder END,
                   CASE WHEN q.bucketed THEN list_append(f.chain, q.span_id) ELSE f.chain END, {depth}
            FROM lineage_reached f JOIN lineage_parents q ON q.tkey = f.tkey AND q.grand = f.pkey
            WHERE f.depth = {depth - 1} AND q.node IS NOT NULL {once if shared_ids else ""}
            """
        ).fetchall()[0]
        if not added:
            break
    handed = "p.tkey, p.pkey, p.node IS NOT NULL AS loaded, r.node IS NOT NULL AS reached, r.eff_iteration, " \
             "r.iteration_holder, r.chain"  # fmt: skip
    joined = "lineage_parents p LEFT JOIN lineage_reached r ON r.node = p.node"
    if shared_ids:
        handed_sql = f"""
            SELECT DISTINCT ON (p.tkey, p.pkey) {handed} FROM {joined}
            ORDER BY p.tkey, p.pkey, r.depth NULLS LAST, p.node
        """
    else:
        handed_sql = f"SELECT {handed} FROM {joined}"
    connection.execute(f"CREATE OR REPLACE TEMP TABLE lineage_handed AS {handed_sql}")
    connection.execute("DROP TABLE lineage_reached")
    connection.execute("DROP TABLE lineage_parents")


def own_spans(connection: duckdb.DuckDBPyConnection) -> str:
    """The relation to read each span's own columns from (NODE_TABLE_COLUMNS, as `spans_ex` holds them): the view
    `OWN_SPANS` where `spans_ex` is a view joining this command's node table with the parents' rows, so that a query
    of a span's own columns builds no hash table of a million parents (16M spans: the charge's batches 2.5 s and
    60 MB less), else `spans_ex` itself."""
    (views,) = connection.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = ?", [OWN_SPANS]
    ).fetchall()[0]
    return OWN_SPANS if views else "spans_ex"


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
            build_lineage(connection, store.nodes_table, parquet=staging, scratch=store.scratch())
            os.replace(staging, cached)
            _view_of(connection, cached)
            store.lineage_cached()
            return
        except Exception as exc:  # a read-only or full cache folder costs the next command a walk, nothing more
            connection.execute("DROP VIEW IF EXISTS spans_ex")
            staging.unlink(missing_ok=True)
            if out_of_memory(exc) is not None:  # walking again without the file would run out again
                raise
    build_lineage(connection, store.nodes_table, scratch=store.scratch())


def _view_of(connection: duckdb.DuckDBPyConnection, path: Path) -> None:
    """`spans_ex` as a view of the lineage Parquet file at `path`; an error when it is not one (a file another
    version wrote, or a damaged one: its footer and its columns are read here)."""
    connection.execute(f"CREATE OR REPLACE VIEW spans_ex AS SELECT * FROM read_parquet({sql_text(str(path))})")
    columns = [column[0] for column in connection.execute("SELECT * FROM spans_ex LIMIT 0").description]
    if columns != [*NODE_TABLE_COLUMNS, *LINEAGE_COLUMNS]:
        raise ValueError(f"{path}: not a lineage table of this version")
