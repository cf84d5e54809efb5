"""The spans of a run still being written (`goodput watch`, SPEC section 13), their lineage kept up to date as they
arrive, at a cost that follows the new spans, not the run.

The lineage (`lineage.build_lineage`) is a walk down every trace from its roots; a span's lineage changes only when
one of its ancestors arrives, which happens to spans whose loaded chain of parents ends at a parent not read yet
(a step span ends after its children, so they wait for it): those are held apart as *pending*. When spans arrive,
the walk runs over them, the pending spans below them, and the ancestors above them, nothing else, and their rows
replace the old ones: in Python for a refresh's few hundred (`walk`), in SQL for a large batch (`walk_sql`).
The questions a report asks of the whole run (`SpanSet`'s named ones: the attempts, the step spans, what the
processes hold) are answered from a summary of the spans' own columns, so none of them scans every span (`summary`);
the newest spans are held in memory for the slices a refresh asks of (`newest`), and the rows walked wait there to
be written to the tables a batch at a time (`writes`), until a query reads the tables.

What cannot be kept up incrementally is done again from every span (`walk_sql`): a file that was replaced or shrank
(its spans are dropped), two processes that start to look alike (SPEC section 1 names them apart), a burst of
arrivals below the root of many spans (the job span arriving last).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from rollup.accounting.intervals import merged_stretches
from rollup.base.arrays import FALSE
from rollup.base.nodes import NODE_COLUMNS_SQL
from rollup.base.schema import ACCOUNTING_SCHEMA, IS_JOB_SQL
from rollup.store.attempts import Attempt
from rollup.store.spanset import Holding, Params, SpanSet

from .newest import HotSpans
from .summary import Summary
from .walk import (
    WALK_COLUMNS,
    Key,
    Lineage,
    Node,
    Unwalked,
    keys_of,
    keys_table,
    lineage_rows,
    nodes,
    nodes_of,
    walk,
)
from .walk_sql import (
    CHANGED,
    EVERYTHING_SPANS,
    FRESH,
    PENDING,
    SPANS_TABLE,
    PendingParents,
    ProcessNames,
    SqlWalk,
    Touched,
    column_types,
)
from .writes import Unwritten

if TYPE_CHECKING:
    import duckdb


# Of the spans already read, more than this share (and this many) below the new ones: walk every span again (once,
# at a run's end, when the job span arrives over everything).
REBUILD_SHARE, REBUILD_LEAST = 0.2, 100_000
# The most stretches a slice is cut from; beyond, the questions read every span (a first refresh, a rebuild).
SLICE_STRETCHES = 16


class LiveSpans:
    """Every span read so far on `connection`, each once, with its lineage (`spans()` hands them out as a SpanSet,
    `slice` one of just the spans some stretches need)."""

    def __init__(self, connection: duckdb.DuckDBPyConnection) -> None:
        self.connection = connection
        self.count = 0
        columns = ", ".join(f"{name} {kind}" for name, kind in column_types(connection))
        connection.execute(f"CREATE TABLE {SPANS_TABLE} ({columns})")
        # The walk looks up a batch's loaded ancestors by their ids (`SqlWalk.walk_new`): a few dozen ids among every
        # span, which the index answers in a few milliseconds where a scan takes tens (bench/watch.py).
        connection.execute(f"CREATE INDEX {SPANS_TABLE}_skey ON {SPANS_TABLE} (skey)")
        # A pending span, and `top`: the id of the parent not read that its chain of loaded parents ends at.
        # Its start too: the pending spans a batch changes are read back from the spans that started since the
        # earliest of them (the table is in time order: older row groups are skipped by their statistics).
        connection.execute(f"CREATE TABLE {PENDING} (tkey UBIGINT, skey UBIGINT, top UBIGINT, start_ns BIGINT)")
        self._schema = connection.sql(f"SELECT * FROM {SPANS_TABLE} LIMIT 0").to_arrow_table().schema
        self.summary = Summary(connection, SPANS_TABLE, self._schema)
        self.unwritten = Unwritten(connection, SPANS_TABLE, PENDING)
        self.hot = HotSpans(self._schema)
        self._parents = PendingParents()  # what the pending spans wait for, kept as PENDING changes
        self._names = ProcessNames()  # the processes read, by name as read
        self._sql_walk = SqlWalk(connection, self.hot, self.summary, self._parents, self._names)
        self._held: set[str] = set()  # the slices taken of `hot`, by name
        self._registered: set[str] = set()  # those of them registered

    def spans(self, attempt: str | None = None) -> SpanSet:
        """The whole run (`_WholeRun`: its questions answered from the summary). One attempt alone is not asked."""
        if attempt is not None:
            raise ValueError("a watcher reads every attempt")
        return _WholeRun(self.connection, SPANS_TABLE, SPANS_TABLE, live=self)

    def every_span(self) -> SpanSet:
        """The whole run as the tables hold it, every question asked of them: what a check reads (its rules sweep
        every span)."""
        self.written()
        return SpanSet(self.connection, SPANS_TABLE, SPANS_TABLE)

    def written(self) -> None:
        """Write the rows walked and not written yet (`writes`): before a query reads the tables."""
        self.unwritten.write()

    def slice(self, stretches: list[tuple[int, int]], name: str) -> SpanSet:
        """The spans active in one of `stretches` (all that those frames' charges, kinds and GPU charges read:
        `accounting.parts`), as a set named `name`: cut from `hot` when it holds them (held as Arrow, registered under
        `name` only when a query asks), else a table of the database. Past SLICE_STRETCHES merged stretches, the rows of
        `hot` active in their envelope, or every span (no table made). The caller drops it (`drop_slice`)."""
        cover = merged_stretches(stretches)
        if self.hot.answers(cover):  # the newest frames, most refreshes: no scan of every span
            if len(cover) > SLICE_STRETCHES:
                cover = [(cover[0][0], max(end for _, end in cover))]
            self._held.add(name)
            return _HeldSlice(self.connection, name, name, rows_held=self.hot.slice(cover), live=self)
        if len(cover) > SLICE_STRETCHES:
            return self.every_span()
        self.written()
        where = " OR ".join(f"(start_ns < {end} AND end_ns > {start})" for start, end in cover) or "false"
        self.connection.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {SPANS_TABLE} WHERE {where}")
        return SpanSet(self.connection, name, name)

    def register_slice(self, name: str, rows: pa.Table) -> None:
        """Make the held slice `name` readable by SQL (once)."""
        if name not in self._registered:
            self.connection.register(name, rows)
            self._registered.add(name)

    def drop_slice(self, name: str) -> None:
        """Drop the slice `slice` made as `name`."""
        if name in self._held:
            self._held.discard(name)
            if name in self._registered:
                self._registered.discard(name)
                self.connection.unregister(name)
        else:
            self.connection.execute(f"DROP TABLE IF EXISTS {name}")

    # --- arrivals ---------------------------------------------------------------------------------------------------

    def add(self, arrived: pa.Table, dropped_files: list[str]) -> Touched:
        """Take in the spans `arrived` (SPAN_SCHEMA or ACCOUNTING_SCHEMA columns, plus `source_file`), after
        dropping every span of `dropped_files` (replaced, shrunk or gone). Returns what changed."""
        columns = [*ACCOUNTING_SCHEMA.names, "source_file"]
        arrived = arrived.select(columns) if arrived.num_rows else pa.Table.from_batches([], schema=_in_schema())
        arrived = arrived.append_column("source_process", arrived.column("process"))
        if dropped_files or self._names.renames_needed(arrived):
            self.written()
            return self._rebuild(arrived, dropped_files)
        # A span read again has its first reading's start: only the spans starting since the earliest arrival are
        # looked at for it, and the table's time order lets the scan skip the older row groups.
        earliest = pc.min(arrived.column("start_ns")).as_py()
        since = f"WHERE start_ns >= {int(earliest)}" if earliest is not None else ""
        self.connection.register("live_arrived", arrived)
        try:
            fresh_rows = self.connection.sql(
                f"""
                SELECT * FROM (
                    SELECT DISTINCT ON (trace_id, span_id) {self._names.renamed_sql()}, {NODE_COLUMNS_SQL},
                           coalesce({IS_JOB_SQL}, false) AS live_is_job
                    FROM live_arrived
                ) a ANTI JOIN (SELECT trace_id, span_id FROM {SPANS_TABLE} {since}) s USING (trace_id, span_id)
                """
            ).to_arrow_table()
        finally:
            self.connection.unregister("live_arrived")
        if self.unwritten.keys:  # read again, and still waiting to be written: not new either
            waiting = self.unwritten.keys
            fresh_rows = fresh_rows.filter(pa.array([key not in waiting for key in keys_of(fresh_rows)], pa.bool_()))
        fresh = fresh_rows.num_rows
        if not fresh:
            return Touched()
        if fresh <= EVERYTHING_SPANS:
            keys = list(zip(fresh_rows.column("tkey").to_pylist(), fresh_rows.column("skey").to_pylist(), strict=True))
            below = sum(self._parents.counts.get(key, 0) for key in keys)
            if below > max(REBUILD_SHARE * self.count, REBUILD_LEAST):
                self.written()
                return self._rebuild(arrived, [])
            try:
                return self._walk_few(fresh_rows, keys, below)
            except Unwalked:
                pass  # a cycle or an id held twice: the walk in SQL, below
        self.written()
        self.connection.register("live_fresh_rows", fresh_rows)
        try:
            self.connection.execute(f"CREATE OR REPLACE TEMP TABLE {FRESH} AS SELECT * FROM live_fresh_rows")
        finally:
            self.connection.unregister("live_fresh_rows")
        touched = _touched_by(fresh_rows) if fresh <= EVERYTHING_SPANS else Touched(everything=True)
        del fresh_rows
        below = self._sql_walk.pending_below()
        if below > max(REBUILD_SHARE * self.count, REBUILD_LEAST):
            self.connection.execute(f"DROP TABLE {FRESH}")
            self.connection.execute(f"DROP TABLE {CHANGED}")
            return self._rebuild(arrived, [])
        self._sql_walk.walk_new(fresh)
        self.count += fresh
        self._parents.count(self.connection)
        return touched

    def _rebuild(self, arrived: pa.Table, dropped_files: list[str]) -> Touched:
        """Every span walked again (`SqlWalk.rebuild`): those kept (less those of `dropped_files`), the arrivals."""
        self.count = self._sql_walk.rebuild(arrived, dropped_files)
        return Touched(everything=True)

    def _walk_few(self, fresh_rows: pa.Table, keys: list[Key], below: int) -> Touched:
        """The walk in Python (`walk.walk`) over the new spans `fresh_rows` (`keys`, their ids) and the `below`
        pending spans that wait for one of them; their rows kept (written a batch at a time: `writes`), what
        changed returned. Raises Unwalked (before any row changes) for the walk in SQL to take them."""
        waiting = [key for key in keys if self._parents.counts.get(key)]
        changed = self._waiting_rows(waiting) if below else None
        parts = [fresh_rows.select(list(WALK_COLUMNS))]
        if changed is not None:
            parts.append(changed.select(list(WALK_COLUMNS)).cast(parts[0].schema))
        spans = nodes(pa.concat_tables(parts))
        if len(spans) != sum(part.num_rows for part in parts):
            raise Unwalked("an id held twice")
        found = walk(spans, self._look_up, lambda key: key in self._parents.counts)
        rows = lineage_rows(fresh_rows, changed, found, self._schema)
        if changed is not None:
            self._delete_rows(changed)
        self._parents.arrived(waiting)  # every span that waited for these was walked again
        self.hot.add(rows, [] if changed is None else keys_of(changed))
        self.unwritten.add(rows, self._pend_found(rows, found), self.hot.start_ns)  # written later: `writes`
        self.summary.add_rows(rows.slice(0, len(keys)).append_column("live_is_job", fresh_rows.column("live_is_job")))
        self.count += len(keys)
        if changed is not None:
            self.summary.add_span_seconds(changed, -1)
        self.summary.add_span_seconds(rows, 1)
        return _touched_by(rows.slice(0, len(keys)))

    def _waiting_rows(self, waiting: list[Key]) -> pa.Table:
        """The rows of the pending spans that wait for one of `waiting` (ids of new spans): from `hot` when every
        one is listed (`PendingParents.listed`) and started since it holds every span, else looked for in PENDING."""
        listed = [self._parents.listed.get(key) for key in waiting]
        if all(keys is not None for keys in listed) and self.hot.start_ns is not None:
            wanted = {(t, s) for keys in listed for t, s, start in keys or ()}
            starts = [start for keys in listed for _, _, start in keys or ()]
            if starts and min(starts) >= self.hot.start_ns:
                rows = self.hot.rows_with(wanted)
                if rows.num_rows > len(wanted):  # an id also held in another trace: keep the ones asked for
                    keep = [key in wanted for key in keys_of(rows)]
                    rows = rows.filter(pa.array(keep, pa.bool_()))
                if rows.num_rows == len(wanted):
                    return rows
        self.written()
        c = self.connection
        c.register("live_waited", keys_table(waiting, "top"))
        try:
            keys = c.sql(
                f"SELECT p.tkey, p.skey, p.start_ns FROM {PENDING} p SEMI JOIN live_waited w USING (tkey, top)"
            ).to_arrow_table()
        finally:
            c.unregister("live_waited")
        earliest = pc.min(keys.column("start_ns")).as_py()
        c.register("live_waiting", keys)
        try:
            return c.sql(
                f"SELECT s.* FROM (SELECT * FROM {SPANS_TABLE} WHERE start_ns >= {int(earliest)}) s "
                "SEMI JOIN live_waiting w USING (tkey, skey)"
            ).to_arrow_table()
        finally:
            c.unregister("live_waiting")

    def _delete_rows(self, changed: pa.Table) -> None:
        """Delete the rows of `changed` (spans walked again) from the spans and the pending spans: those waiting to
        be written from there, the others from the tables."""
        spans, pending = self.unwritten.drop(keys_of(changed))
        earliest = int(pc.min(changed.column("start_ns")).as_py())
        c = self.connection
        for table, keys in ((SPANS_TABLE, spans), (PENDING, pending)):
            if not keys:
                continue
            c.register("live_deleted", keys_table(keys))
            try:
                c.execute(
                    f"DELETE FROM {table} t USING live_deleted x "
                    f"WHERE t.start_ns >= {earliest} AND t.tkey = x.tkey AND t.skey = x.skey"
                )
            finally:
                c.unregister("live_deleted")

    def _look_up(self, keys: set[Key]) -> dict[Key, Node]:
        """The loaded spans among `keys`: the newest from `hot`, the others looked up by id (the index on skey)."""
        found = nodes_of(self.hot.rows_with(keys), keys)
        rest = keys - found.keys()
        waiting = self.unwritten.rows_with(rest, list(WALK_COLUMNS)) if rest else None
        if waiting is not None:
            found |= nodes_of(waiting, rest)
            rest = keys - found.keys()
        if rest:
            ids = ", ".join(str(skey) for skey in sorted({skey for _, skey in rest}))
            table = self.connection.sql(
                f"SELECT {', '.join(WALK_COLUMNS)} FROM {SPANS_TABLE} WHERE skey IN ({ids})"
            ).to_arrow_table()
            found |= nodes_of(table, rest)
        return found

    def _pend_found(self, rows: pa.Table, found: dict[Key, Lineage]) -> pa.Table | None:
        """The rows of PENDING of the walked spans whose chain of loaded parents ends at a parent not read (counted
        in `_parents` here); None when there are none."""
        keys = list(zip(rows.column("tkey").to_pylist(), rows.column("skey").to_pylist(), strict=True))
        starts = rows.column("start_ns").to_pylist()
        pending: list[tuple[Key, int, int]] = []
        for key, start in zip(keys, starts, strict=True):
            top = found[key].waits_for
            if top is not None:
                pending.append((key, top, start))
        if not pending:
            return None
        self._parents.add(pending)
        return pa.table({"tkey": pa.array([k[0] for k, _, _ in pending], pa.uint64()),
                          "skey": pa.array([k[1] for k, _, _ in pending], pa.uint64()),
                          "top": pa.array([t for _, t, _ in pending], pa.uint64()),
                          "start_ns": pa.array([s for _, _, s in pending], pa.int64())})  # fmt: skip


@dataclass(frozen=True)
class _WholeRun(SpanSet):
    """The watcher's whole run (`LiveSpans.spans`): every span, and the questions of the whole run answered from what
    the watcher keeps (`summary.Summary`). Every other query reads the tables: the rows walked and waiting are
    written first (`LiveSpans.written`)."""

    live: LiveSpans = field(kw_only=True)

    def attempts(self) -> list[Attempt]:
        return self.live.summary.attempts()

    def step_spans(self) -> SpanSet:
        return self.live.summary.step_spans()

    def holdings(self) -> list[Holding]:
        return self.live.summary.holdings()

    def newest_end_ns(self) -> int | None:
        return self.live.summary.newest_end_ns()

    def _execute(self, sql: str, params: Params) -> duckdb.DuckDBPyConnection:
        self.live.written()
        return super()._execute(sql, params)

    def arrow(self, sql: str, params: Params = None) -> pa.Table:
        self.live.written()
        return super().arrow(sql, params)

    def batches(self, sql: str, params: Params = None, *, rows: int) -> pa.RecordBatchReader:
        self.live.written()
        return super().batches(sql, params, rows=rows)


@dataclass(frozen=True)
class _HeldSlice(SpanSet):
    """A slice of the newest spans, held as Arrow (`rows_held`: `in_memory`) and registered under its name the first
    time a query asks (most refreshes' charges sweep it on Arrow columns: `sweep_few`)."""

    rows_held: pa.Table = field(kw_only=True)
    live: LiveSpans = field(kw_only=True)

    def in_memory(self) -> pa.Table:
        return self.rows_held

    def _ready(self) -> None:
        self.live.register_slice(self.lineage, self.rows_held)

    def _execute(self, sql: str, params: Params) -> duckdb.DuckDBPyConnection:
        self._ready()
        return super()._execute(sql, params)

    def arrow(self, sql: str, params: Params = None) -> pa.Table:
        self._ready()
        return super().arrow(sql, params)

    def batches(self, sql: str, params: Params = None, *, rows: int) -> pa.RecordBatchReader:
        self._ready()
        return super().batches(sql, params, rows=rows)


def _touched_by(new: pa.Table) -> Touched:
    """What the new spans `new` (their rows) touch: the stretches of the bucketed ones, and the named ones."""
    bucketed = new.filter(pc.fill_null(new.column("bucketed"), FALSE))
    stretches = list(zip(bucketed.column("start_ns").to_pylist(), bucketed.column("end_ns").to_pylist(), strict=True))
    named = new.filter(
        pc.and_(pc.is_valid(new.column("bucket")), pc.greater(new.column("end_ns"), new.column("start_ns")))
    )
    columns = (named.column(n).to_pylist() for n in ("start_ns", "end_ns", "name"))
    return Touched(stretches, named=list(zip(*columns, strict=True)))


def _in_schema() -> pa.Schema:
    return pa.schema([*ACCOUNTING_SCHEMA, pa.field("source_file", pa.string())])
