"""What each span inherits from its ancestors: effective iteration, bucketed ancestors, and whether it is a step.

A walk goes down every trace from its roots, a level at a time, following parent ids across processes and files, so a
Ray worker's span with no `rl.iteration` of its own is filed under the step that dispatched it. The same walk
records the chain of bucketed ancestors, which is what the nesting checks need.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from rollup.base.connection import drop_table_or_view, out_of_memory
from rollup.base.nodes import NODE_COLUMNS_SQL, NODE_TABLE_COLUMNS, NODES_PARQUET, nodes_view
from rollup.base.schema import ACCOUNTING_SCHEMA, sql_text
from rollup.base.tables import LINEAGE, LINEAGE_HANDED, LINEAGE_NODES, OWN_SPANS, SPANS

from .spanset import SpanSet

if TYPE_CHECKING:
    from pathlib import Path

    import duckdb

LINEAGE_VERSION = 4  # part of the cached table's name: bump it whenever LINEAGE's columns change

# What the walk adds to each span's node columns, in LINEAGE's order.
LINEAGE_COLUMNS = (
    "inverted_ns", "eff_iteration", "ancestor_iteration", "ancestor_iteration_span", "bucketed_chain", "has_parent",
)  # fmt: skip

# The walk's own tables, made and dropped by `_walk`.
_PARENTS = "lineage_parents"
_REACHED = "lineage_reached"

# Deeper than any real trace; it only stops a walk that a corrupt file could otherwise make endless.
MAX_DEPTH = 10_000


def _node_column(name: str) -> str:
    """A node column as LINEAGE holds it: an end before the start is moved to the start (SPEC section 3)."""
    return "greatest(n.end_ns, n.start_ns) AS end_ns" if name == "end_ns" else f"n.{name}"


def build_lineage(
    connection: duckdb.DuckDBPyConnection,
    nodes: str | None = None,
    *,
    parquet: Path | None = None,
    scratch: Path | None = None,
) -> None:
    """Create LINEAGE (`tables`): the columns the accounting reads, plus what each span inherits.

    Added columns: `eff_iteration` (own `rl.iteration`, else the nearest ancestor's), `ancestor_iteration` (the
    nearest ancestor's that carries one), `bucketed_chain` (ids of the ancestors with a valid bucket, root first),
    `ancestor_iteration_span` (that ancestor's id), `has_parent` (false when the parent id names no loaded span: an
    orphan), `bucketed`, `is_step`, `is_umbrella`, `inverted_ns` (how far a span's end precedes its start, else 0).
    An inverted span counts as zero-length everywhere in the accounting, so its `end_ns` here is its start.
    The ids are also integers (`tkey`, `skey`, `pkey`) so the walk and every check join on numbers rather than hex
    text. A span caught in a parent cycle is reached by no walk; it keeps its own iteration and no ancestors.

    All a span inherits is what its parent hands down, and only spans that are parents hand anything down: the
    walk (`_walk`) goes over the parents alone (one span in fifteen in a GRPO trace), and each span then takes its
    parent's in one join (LINEAGE_HANDED: a row per parent id). The spans are held once, as a table of their node
    columns (`nodes`, or one made from SPANS). Without `parquet`, LINEAGE is a view of that table joined with the
    parents' rows, and OWN_SPANS one of the node table alone: no copy of every span, no sort, and each query reads
    only the columns it needs. With `parquet`, the rows are written there (in no particular order, as no query
    relies on one: the sort back into the table's order was a sixth of a first run), and LINEAGE is a view of that
    file, so no span stays in memory.

    `nodes` names a table holding every span once with NODE_TABLE_COLUMNS (or a view of them with a `rowid`, as
    `read.duckdb_json` makes), used as it is instead of being derived from SPANS. Else, with `scratch` (a folder
    of this command's own), the node columns derived from SPANS are written there as Parquet and read through a
    view (`nodes.nodes_view`), not held as a DuckDB table.
    """
    table = nodes or LINEAGE_NODES
    kept: set[str] = set()
    nodes_file = None
    try:
        if nodes is None:
            derived = f"SELECT {', '.join(ACCOUNTING_SCHEMA.names)}, {NODE_COLUMNS_SQL} FROM {SPANS}"
            if scratch is None:
                connection.execute(f"CREATE OR REPLACE TEMP TABLE {LINEAGE_NODES} AS {derived}")
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
            FROM {table} n LEFT JOIN {LINEAGE_HANDED} h ON h.tkey = n.tkey AND h.pkey = n.pkey
        """
        if parquet is None:  # a view of the two tables, kept for it: each query reads only the columns it needs
            connection.execute(f"CREATE OR REPLACE TEMP VIEW {LINEAGE} AS {rows}")
            own = ", ".join(_node_column(c) for c in NODE_TABLE_COLUMNS)
            connection.execute(f"CREATE OR REPLACE TEMP VIEW {OWN_SPANS} AS SELECT {own} FROM {table} n")
            kept = {table, LINEAGE_HANDED}
        else:
            path = sql_text(str(parquet))
            connection.execute(f"COPY ({rows}) TO {path} (FORMAT parquet, COMPRESSION zstd)")
            connection.execute(f"CREATE OR REPLACE VIEW {LINEAGE} AS SELECT * FROM read_parquet({path})")
    finally:
        for name in {_PARENTS, _REACHED, LINEAGE_HANDED, LINEAGE_NODES} - kept:
            if name == LINEAGE_NODES and nodes_file is not None:
                connection.execute(f"DROP VIEW IF EXISTS {LINEAGE_NODES}")
                nodes_file.unlink(missing_ok=True)
            else:
                connection.execute(f"DROP TABLE IF EXISTS {name}")


def _nodes_file(connection: duckdb.DuckDBPyConnection, derived: str, folder: Path) -> Path:
    """Write the rows of `derived` (the node columns) to a Parquet file in `folder`, and make LINEAGE_NODES a view
    of it (`nodes.nodes_view`)."""
    path = folder / f"lineage-nodes-{os.urandom(4).hex()}.parquet"
    connection.execute(f"COPY ({derived}) TO {sql_text(str(path))} {NODES_PARQUET}")
    nodes_view(connection, LINEAGE_NODES, [path])
    return path


def _walk(connection: duckdb.DuckDBPyConnection, table: str) -> None:
    """Table LINEAGE_HANDED: per parent id the spans of `table` name (`tkey`, `pkey`), what a child of it
    inherits: `loaded` (a span of `table` has that id), `reached` (a walk from a root of its trace got to it: false
    in a parent cycle), and then its `eff_iteration`, the id of the span that iteration is from
    (`iteration_holder`), and `chain`, the bucketed ancestors' ids a child has (the parent's own, then the parent
    itself when bucketed).

    The parents are found first, once (`_PARENTS`): the distinct parent ids the spans name, each with the
    span that holds it, if loaded, and what is needed of that span (its id text, bucket flag, iteration and its own
    parent id). A parent's parent is a parent too, so the walk stays inside that small table: from the parents
    whose own parent is none or not loaded, a level at a time, one statement per level (a hash join of the level
    before with the parents whose parent it is), each result a table DuckDB can spill under its memory limit. The
    levels are as many as the deepest trace is deep; each parent is reached once (were ids not unique, the nearest
    visit counts).
    """
    connection.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {_PARENTS} AS
        SELECT k.tkey, k.pkey, n.rowid AS node, n.span_id, n.bucketed, n.iteration, n.pkey AS grand
        FROM (SELECT DISTINCT tkey, pkey FROM {table} WHERE pkey IS NOT NULL) k
        LEFT JOIN {table} n ON n.tkey = k.tkey AND n.skey = k.pkey
        """
    )
    connection.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {_REACHED} AS
        SELECT p.tkey, p.pkey, p.node, p.iteration AS eff_iteration,
               CASE WHEN p.iteration IS NOT NULL THEN p.span_id END AS iteration_holder,
               CASE WHEN p.bucketed THEN [p.span_id] ELSE []::VARCHAR[] END AS chain, 0 AS depth
        FROM {_PARENTS} p
        WHERE p.node IS NOT NULL AND (p.grand IS NULL OR NOT EXISTS (
            SELECT 1 FROM {_PARENTS} g WHERE g.tkey = p.tkey AND g.pkey = p.grand AND g.node IS NOT NULL
        ))
        """
    )
    # Ids are unique in a sound trace: then each parent is held by one span, reached from its own parent alone and
    # at most once, and the levels need neither the guard against a second visit nor the choice of the nearest one
    # (their sorts and hash tables were the walk's peak: docs/performance.md).
    ((shared_ids,),) = connection.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM {_PARENTS} GROUP BY tkey, pkey HAVING count(*) > 1)"
    ).fetchall()
    nearest = "DISTINCT ON (q.node)" if shared_ids else ""
    once = f"AND NOT EXISTS (SELECT 1 FROM {_REACHED} r WHERE r.node = q.node) ORDER BY q.node, f.node"
    for depth in range(1, MAX_DEPTH + 1):
        (added,) = connection.execute(
            f"""
            INSERT INTO {_REACHED}
            SELECT {nearest} q.tkey, q.pkey, q.node, coalesce(q.iteration, f.eff_iteration),
                   CASE WHEN q.iteration IS NOT NULL THEN q.span_id ELSE f.iteration_holder END,
                   CASE WHEN q.bucketed THEN list_append(f.chain, q.span_id) ELSE f.chain END, {depth}
            FROM {_REACHED} f JOIN {_PARENTS} q ON q.tkey = f.tkey AND q.grand = f.pkey
            WHERE f.depth = {depth - 1} AND q.node IS NOT NULL {once if shared_ids else ""}
            """
        ).fetchall()[0]
        if not added:
            break
    handed = "p.tkey, p.pkey, p.node IS NOT NULL AS loaded, r.node IS NOT NULL AS reached, r.eff_iteration, " \
             "r.iteration_holder, r.chain"  # fmt: skip
    joined = f"{_PARENTS} p LEFT JOIN {_REACHED} r ON r.node = p.node"
    if shared_ids:
        handed_sql = f"""
            SELECT DISTINCT ON (p.tkey, p.pkey) {handed} FROM {joined}
            ORDER BY p.tkey, p.pkey, r.depth NULLS LAST, p.node
        """
    else:
        handed_sql = f"SELECT {handed} FROM {joined}"
    connection.execute(f"CREATE OR REPLACE TEMP TABLE {LINEAGE_HANDED} AS {handed_sql}")
    connection.execute(f"DROP TABLE {_REACHED}")
    connection.execute(f"DROP TABLE {_PARENTS}")


def ensure_lineage(
    connection: duckdb.DuckDBPyConnection,
    *,
    cached: Path | None,
    nodes: str | None,
    scratch: Callable[[], Path | None],
    on_cached: Callable[[], None],
) -> SpanSet:
    """The spans with their lineage (LINEAGE) on `connection`, made once per store (`SpanStore.spans`).

    With the cache on (`cached`: where this set of files' lineage table is kept, keyed by the files, since parents
    cross files), the table is kept as Parquet there and LINEAGE is a view of that file: the next command on the same
    files reads only the columns each query needs, and never holds every span in memory; `on_cached` is called once
    a new file is in place. Without the cache (or when the cache folder cannot be written) LINEAGE is a view of this
    command's own tables (`build_lineage`, given `nodes` and a `scratch` folder, when it gives one).
    """
    if cached is not None and cached.exists():
        try:
            return _view_of(connection, cached)
        except Exception:  # an unreadable cache entry is rebuilt, never an error
            drop_table_or_view(connection, LINEAGE)  # `_view_of` makes either
    if cached is not None:
        staging = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            build_lineage(connection, nodes, parquet=staging, scratch=scratch())
            os.replace(staging, cached)
            spans = _view_of(connection, cached)
            on_cached()
            return spans
        except Exception as exc:  # a read-only or full cache folder costs the next command a walk, nothing more
            drop_table_or_view(connection, LINEAGE)  # `_view_of` makes either
            staging.unlink(missing_ok=True)
            if out_of_memory(exc) is not None:  # walking again without the file would run out again
                raise
    build_lineage(connection, nodes, scratch=scratch())
    return SpanSet(connection, LINEAGE, OWN_SPANS)


# A cached lineage file this small (about 30k spans; some 10 MB once read, well inside the least memory limit) is read
# into a table once rather than read again by every query of the command, each reading the Parquet footer again.
HELD_LINEAGE_BYTES = 1 << 20


def _view_of(connection: duckdb.DuckDBPyConnection, path: Path) -> SpanSet:
    """LINEAGE as a view of the lineage Parquet file at `path`; an error when it is not one (a file another
    version wrote, or a damaged one: its footer and its columns are read here)."""
    source = f"SELECT * FROM read_parquet({sql_text(str(path))})"
    if path.stat().st_size <= HELD_LINEAGE_BYTES:
        connection.execute(f"CREATE OR REPLACE TEMP TABLE {LINEAGE} AS {source}")
    else:
        connection.execute(f"CREATE OR REPLACE VIEW {LINEAGE} AS {source}")
    columns = [column[0] for column in connection.execute(f"SELECT * FROM {LINEAGE} LIMIT 0").description]
    if columns != [*NODE_TABLE_COLUMNS, *LINEAGE_COLUMNS]:
        raise ValueError(f"{path}: not a lineage table of this version")
    return SpanSet(connection, LINEAGE, LINEAGE, files=(str(path),))
