"""The lineage of a few spans walked in Python (`goodput watch`): what `lineage.build_lineage` gives each span, for
the spans of one refresh and the pending spans below them, from their loaded ancestors.

A refresh brings a few hundred spans; the walk in SQL is some twenty statements, each a few milliseconds however
few the rows (bench/watch.py), where this walk is a dictionary lookup a span. It hands down what `lineage._walk`
hands down (a parent's effective iteration, the span that iteration is from, its chain of bucketed ancestors) and
says where each span's chain of loaded parents ends (the parent not read that a pending span waits for). A chain
caught in a parent cycle, or ids held by two spans, is left to the SQL walk (`Unwalked`): rare, and its rules for
them (the nearest visit counts) are the SQL's. For the SQL walk (many spans), where the chains end is worked out in
SQL too (`pending_tops`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from rollup.base.nodes import NODE_TABLE_COLUMNS
from rollup.store.lineage import MAX_DEPTH

if TYPE_CHECKING:
    import duckdb

Key = tuple[int, int]  # (tkey, skey): a span's trace and id, as the walk joins them
# What the walk reads of a span (`Node`), with its keys.
WALK_COLUMNS = ("tkey", "skey", "pkey", "span_id", "bucketed", "iteration")


@dataclass(frozen=True)
class Node:
    """What the walk reads of a span: its parent's id (None at a root), its id text, bucket flag and iteration."""

    pkey: int | None
    span_id: str
    bucketed: bool
    iteration: int | None


@dataclass(frozen=True)
class Lineage:
    """What one span inherits (LINEAGE's columns of `lineage.LINEAGE_COLUMNS` but `inverted_ns`, its own), and the
    parent id its chain of loaded parents ends at (`waits_for`: None at a root)."""

    eff_iteration: int | None
    ancestor_iteration: int | None
    ancestor_iteration_span: str | None
    bucketed_chain: tuple[str, ...]
    has_parent: bool
    waits_for: int | None


class Unwalked(Exception):
    """The walk met a parent cycle or an id held twice: the SQL walk takes these spans."""


@dataclass(frozen=True)
class _Handed:
    eff_iteration: int | None
    holder: str | None
    chain: tuple[str, ...]
    waits_for: int | None  # where the chain above this node ends (its own parent, when that is not loaded)


def walk(
    spans: dict[Key, Node], look_up: Callable[[set[Key]], dict[Key, Node]], not_loaded: Callable[[Key], bool]
) -> dict[Key, Lineage]:
    """The lineage of each of `spans` (the new spans and the pending ones below them). `look_up(keys)` gives the
    loaded spans among `keys` (those it does not give are not loaded); `not_loaded(key)` is True of a key known not
    to be loaded without asking (a parent pending spans already wait for). Raises Unwalked."""
    nodes = dict(spans)
    absent: set[Key] = set()
    wanted = {(t, n.pkey) for (t, _), n in spans.items() if n.pkey is not None}
    for _ in range(MAX_DEPTH + 1):  # every loaded ancestor, a generation at a time
        wanted = {key for key in wanted if key not in nodes and key not in absent}
        if not wanted:
            break
        known_absent = {key for key in wanted if not_loaded(key)}
        found = look_up(wanted - known_absent) if wanted - known_absent else {}
        absent |= wanted - found.keys()
        nodes.update(found)
        wanted = {(t, n.pkey) for (t, _), n in found.items() if n.pkey is not None}
    handed: dict[Key, _Handed] = {}

    def hand_down(key: Key) -> _Handed:
        """What loaded span `key` hands its children (`lineage._walk`'s reached rows), walked up iteratively."""
        path: list[Key] = []
        on_path: set[Key] = set()
        at = key
        while at not in handed:
            if at in on_path or len(path) > MAX_DEPTH:
                raise Unwalked("a parent cycle")
            path.append(at)
            on_path.add(at)
            parent = nodes[at].pkey
            up = None if parent is None else (at[0], parent)
            if up is None or up not in nodes:  # the top of the loaded chain: hands its own
                node = nodes[at]
                handed[at] = _Handed(
                    node.iteration,
                    node.span_id if node.iteration is not None else None,
                    (node.span_id,) if node.bucketed else (),
                    parent,
                )
                path.pop()
                break
            at = up
        for below in reversed(path):
            node = nodes[below]
            assert node.pkey is not None
            above = handed[(below[0], node.pkey)]
            handed[below] = _Handed(
                node.iteration if node.iteration is not None else above.eff_iteration,
                node.span_id if node.iteration is not None else above.holder,
                (*above.chain, node.span_id) if node.bucketed else above.chain,
                above.waits_for,
            )
        return handed[key]

    out: dict[Key, Lineage] = {}
    for key, node in spans.items():
        parent = None if node.pkey is None else (key[0], node.pkey)
        if parent is None or parent not in nodes:
            out[key] = Lineage(node.iteration, None, None, (), False, node.pkey)
            continue
        above = hand_down(parent)
        own = node.iteration if node.iteration is not None else above.eff_iteration
        out[key] = Lineage(own, above.eff_iteration, above.holder, above.chain, True, above.waits_for)
    return out


# --- the rows walked, as Arrow -------------------------------------------------------------------------------------


def nodes(table: pa.Table) -> dict[Key, Node]:
    """The spans of `table` (`WALK_COLUMNS`) as the walk's nodes, by key (a key given twice is kept once)."""
    columns = [table.column(name).to_pylist() for name in WALK_COLUMNS]
    return {(t, s): Node(p, span_id, bool(b), i) for t, s, p, span_id, b, i in zip(*columns, strict=True)}


def nodes_of(table: pa.Table, keys: set[Key]) -> dict[Key, Node]:
    """The spans of `table` whose key is among `keys`, as nodes. Raises Unwalked for a key held by two spans."""
    columns = [table.column(name).to_pylist() for name in WALK_COLUMNS]
    found: dict[Key, Node] = {}
    for t, s, p, span_id, b, i in zip(*columns, strict=True):
        if (t, s) in keys:
            if (t, s) in found:
                raise Unwalked("an id held twice")
            found[(t, s)] = Node(p, span_id, bool(b), i)
    return found


def keys_of(table: pa.Table) -> list[Key]:
    return list(zip(table.column("tkey").to_pylist(), table.column("skey").to_pylist(), strict=True))


def keys_table(keys: list[Key], second: str = "skey") -> pa.Table:
    """`keys` as a table of `tkey` and `second` (`skey`, or `top`: the parent waited for), to join by in SQL."""
    return pa.table({"tkey": pa.array([t for t, _ in keys], pa.uint64()),
                     second: pa.array([s for _, s in keys], pa.uint64())})  # fmt: skip


def lineage_rows(fresh: pa.Table, changed: pa.Table | None, found: dict[Key, Lineage], schema: pa.Schema) -> pa.Table:
    """The watcher's rows (`schema`, the spans table's) of the new spans `fresh` (their node columns) and of the
    spans walked again `changed` (their rows as they were), with the lineage `found`: as `build_lineage` makes them,
    an end before its start moved to the start."""
    starts, ends = fresh.column("start_ns"), fresh.column("end_ns")
    columns: dict[str, pa.ChunkedArray | pa.Array] = {name: fresh.column(name) for name in NODE_TABLE_COLUMNS}
    columns["end_ns"] = pc.max_element_wise(ends, starts)
    columns["inverted_ns"] = pc.max_element_wise(pc.subtract(starts, ends), pa.scalar(0, pa.int64()))
    parts = [(fresh, columns)]
    if changed is not None:
        parts.append((changed, {name: changed.column(name) for name in (*NODE_TABLE_COLUMNS, "inverted_ns")}))
    tables = []
    for table, own in parts:
        walked = [found[key] for key in keys_of(table)]
        inherited = {
            "eff_iteration": pa.array([w.eff_iteration for w in walked], pa.int64()),
            "ancestor_iteration": pa.array([w.ancestor_iteration for w in walked], pa.int64()),
            "ancestor_iteration_span": pa.array([w.ancestor_iteration_span for w in walked], pa.string()),
            "bucketed_chain": pa.array([list(w.bucketed_chain) for w in walked], pa.list_(pa.string())),
            "has_parent": pa.array([w.has_parent for w in walked], pa.bool_()),
        }
        values = {**own, **inherited, "source_file": table.column("source_file"),
                  "source_process": table.column("source_process")}  # fmt: skip
        tables.append(pa.table([values[field.name] for field in schema], schema=schema))
    return pa.concat_tables(tables)


@contextmanager
def pending_tops(connection: duckdb.DuckDBPyConnection, spans: str) -> Iterator[str]:
    """A table of the spans of `spans` (`tkey`, `skey`, `pkey`, `changed`, `start_ns`) with `top`: the id of the
    first parent not among `spans` that its chain of parents there ends at; null at a root and in a cycle (which
    ends nowhere; a chain deeper than any real trace, MAX_DEPTH, counts as one). Dropped on leaving.

    By pointer doubling: each round, a span not answered yet takes its ancestor's answer, or jumps to that
    ancestor's ancestor, so the rounds are the log of the deepest chain; each round one join of the table with
    itself."""
    c = connection
    names = [f"live_tops_{n}" for n in range(3)]
    nodes, state, more = names
    try:
        c.execute(f"""CREATE OR REPLACE TEMP TABLE {nodes} AS
                      SELECT row_number() OVER () AS i, tkey, skey, pkey, changed, start_ns FROM {spans}""")
        # `state`: 0 not known yet, 1 none (a root), 2 the parent id in `top`; `at`, where to look next. A parent
        # id held by two spans is the first's.
        c.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE {state} AS
            SELECT n.i, CASE WHEN n.pkey IS NULL THEN 1 WHEN p.i IS NULL THEN 2 ELSE 0 END AS state,
                   CASE WHEN n.pkey IS NOT NULL AND p.i IS NULL THEN n.pkey END AS top, coalesce(p.i, n.i) AS at
            FROM {nodes} n LEFT JOIN (SELECT tkey, skey, min(i) AS i FROM {nodes} GROUP BY ALL) p
                ON p.tkey = n.tkey AND p.skey = n.pkey
            """
        )
        for _ in range(MAX_DEPTH.bit_length() + 1):
            ((open_,),) = c.execute(f"SELECT count(*) FROM {state} WHERE state = 0").fetchall()
            if not open_:
                break
            c.execute(
                f"""
                CREATE OR REPLACE TEMP TABLE {more} AS
                SELECT s.i, CASE WHEN s.state = 0 THEN a.state ELSE s.state END AS state,
                       CASE WHEN s.state = 0 THEN a.top ELSE s.top END AS top,
                       CASE WHEN s.state = 0 THEN a.at ELSE s.at END AS at
                FROM {state} s JOIN {state} a ON a.i = s.at
                """
            )
            state, more = more, state
        c.execute(f"""CREATE OR REPLACE TEMP TABLE {more} AS SELECT n.*, CASE WHEN s.state = 2 THEN s.top END AS top
                      FROM {nodes} n JOIN {state} s USING (i)""")
        yield more
    finally:
        for name in names:
            c.execute(f"DROP TABLE IF EXISTS {name}")
