"""The spans of a run still being written (`goodput watch`, SPEC section 13), their lineage kept up to date as they
arrive, at a cost that follows the new spans, not the run.

The lineage (`lineage.build_lineage`) is a walk down every trace from its roots; a span's lineage changes only when
one of its ancestors arrives, which happens to spans whose loaded chain of parents ends at a parent not read yet
(a step span ends after its children, so they wait for it): those are held apart as *pending*. When spans arrive,
the walk runs over them, the pending spans below them, and the ancestors above them, nothing else, and their rows
replace the old ones. A summary table stands in for the whole run where a question reads only the spans' own
columns in aggregate (the attempts, the windows, what the processes hold), so no question scans every span.

What cannot be kept up incrementally is done again from every span: a file that was replaced or shrank (its spans
are dropped), two processes that start to look alike (SPEC section 1 names them apart), a burst of arrivals below
the root of many spans (the job span arriving last).
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from .attempts import ATTEMPT_SQL
from .attribution import SPAN_SECONDS_SPANS
from .lineage import LINEAGE_COLUMNS, MAX_DEPTH, build_lineage
from .live_hot import HotSpans
from .live_walk import Key, Lineage, Node, Unwalked, walk
from .nodes import NODE_COLUMNS_SQL, NODE_TABLE_COLUMNS
from .ray_slices import merged_stretches
from .schema import ACCOUNTING_SCHEMA, BUCKETS, IS_JOB_SQL
from .spanset import Params, SpanSet
from .tables import LINEAGE, LINEAGE_HANDED, OWN_SPANS

if TYPE_CHECKING:
    import duckdb

    from .windows import Windows

# The watcher's own tables: every span with its lineage (and its file), the pending spans' keys, the summary.
SPANS_TABLE = "live_spans"
PENDING = "live_pending"
SUMMARY = "live_summary"  # a view of the spans folded (`_merge_folded`); their step spans as they are apart
_SUMMARY_STEPS = "live_summary_steps"
_SUMMARY_FOLDED = "live_summary_folded"
_WALKED = "live_walked"
_FRESH = "live_fresh"
_CHANGED = "live_changed"
_FOUND = "live_found"

# Of the spans already read, more than this share (and this many) below the new ones: walk every span again (once,
# at a run's end, when the job span arrives over everything).
REBUILD_SHARE, REBUILD_LEAST = 0.2, 100_000
# A batch of more new spans than this (a run already written, read a part at a time) touches everything: listing
# what each of its spans touched would cost more than asking every frame again, and hold the list in memory.
EVERYTHING_SPANS = 20_000
# The most pending spans whose keys are listed by the parent they wait for (`LiveSpans._waiting`).
LISTED = 4_096
# Beside the lineage's columns, each span's file and its process as read (before `_renamed`), for a rebuild.
_SOURCE_COLUMNS = ("source_file", "source_process")
_ROW_COLUMNS = (*NODE_TABLE_COLUMNS, *LINEAGE_COLUMNS, *_SOURCE_COLUMNS)
# The most stretches a slice is cut from; beyond, the questions read every span (a first refresh, a rebuild).
SLICE_STRETCHES = 16
_OWN_KEYS = ("run_id", "process", "host_pid", "service", "holding")


@dataclass
class Touched:
    """What one batch of arrivals changed: the stretches of the bucketed spans that arrived (a frame's charge, kind
    and GPU charge change only where one does: a walk changes no span's own columns), and whether everything did
    (`everything`: every span was walked again). The span-seconds are kept up to date apart (`span_seconds`)."""

    stretches: list[tuple[int, int]] = field(default_factory=list)
    everything: bool = False
    # The new spans with a bucket (valid or not) and some length: (start, end, name), what a kind reads.
    named: list[tuple[int, int, str]] = field(default_factory=list)


class LiveSpans:
    """Every span read so far on `connection`, each once, with its lineage (`spans()` hands them out as a SpanSet
    whose own columns are the summary's, `slice` one of just the spans some stretches need)."""

    def __init__(self, connection: duckdb.DuckDBPyConnection) -> None:
        self.connection = connection
        self.count = 0
        self._earliest_changed: int | None = None  # the earliest start of the pending spans a batch changes
        self._hosts: dict[str, set[str | None]] = {}  # process as read -> the host:pid of each process of that name
        columns = ", ".join(f"{name} {kind}" for name, kind in self._column_types())
        connection.execute(f"CREATE TABLE {SPANS_TABLE} ({columns})")
        # The walk looks up a batch's loaded ancestors by their ids (`_walk_new`): a few dozen ids among every span,
        # which the index answers in a few milliseconds where a scan takes tens (bench/watch.py).
        connection.execute(f"CREATE INDEX {SPANS_TABLE}_skey ON {SPANS_TABLE} (skey)")
        # A pending span, and `top`: the id of the parent not read that its chain of loaded parents ends at.
        # Its start too: the pending spans a batch changes are read back from the spans that started since the
        # earliest of them (the table is in time order: older row groups are skipped by their statistics).
        connection.execute(f"CREATE TABLE {PENDING} (tkey UBIGINT, skey UBIGINT, top UBIGINT, start_ns BIGINT)")
        self._folded = connection.sql(f"SELECT * FROM {SPANS_TABLE} LIMIT 0").to_arrow_table()
        self._schema = self._folded.schema  # the spans table's, as Arrow
        # The step spans as a table of the database's own (appended to a few times in ten refreshes): each question
        # of the summary scans it faster than it scans an Arrow table handed over by name.
        connection.execute(f"CREATE TEMP TABLE {_SUMMARY_STEPS} AS SELECT * FROM {SPANS_TABLE} LIMIT 0")
        self._folded_keyed = self._folded.append_column("live_is_job", pa.array([], pa.bool_()))
        self.hot = HotSpans(self._schema)
        self.step_answers: dict[tuple[str, str, str], Any] = {}  # `_SummarySpans`: emptied when a step span arrives
        # How many pending spans wait for each parent not read, by (tkey, parent id): kept as PENDING changes (and
        # read again after every walk in SQL), so a refresh knows without a query whether a new span has any below
        # it, and that a parent named here is not loaded.
        self._tops: dict[Key, int] = {}
        # Of a parent few spans wait for (at most LISTED), their keys and starts: the rows walked again when it
        # arrives are then taken from `hot` when it holds them, not looked for among every pending span.
        self._waiting: dict[Key, list[tuple[int, int, int]]] = {}
        # Each (attempt, iteration)'s span-seconds by bucket (BUCKETS order): `attribution.window_span_ns`'s sums,
        # kept up to date as spans arrive and are walked again.
        self.span_seconds: dict[tuple[str, int], tuple[int, ...]] = {}
        self._registered: set[str] = set()  # the slices taken of `hot`, registered by name
        self._register_summary()
        connection.execute(f"CREATE VIEW {SUMMARY} AS SELECT * FROM {_SUMMARY_FOLDED}")

    def _column_types(self) -> list[tuple[str, str]]:
        """The columns of LINEAGE as the walk makes them, plus `source_file`: read off an empty walk."""
        empty = pa.Table.from_batches([], schema=ACCOUNTING_SCHEMA)
        self.connection.register("live_empty", empty)
        try:
            self.connection.execute(f"CREATE TEMP TABLE {_WALKED} AS SELECT *, {NODE_COLUMNS_SQL} FROM live_empty")
            build_lineage(self.connection, _WALKED)
            described = self.connection.execute(f"SELECT * FROM {LINEAGE} LIMIT 0").description
        finally:
            self._drop_walk()
            self.connection.unregister("live_empty")
        return [(name, str(kind)) for name, kind, *_ in described] + [(name, "VARCHAR") for name in _SOURCE_COLUMNS]

    def spans(self, attempt: str | None = None) -> SpanSet:
        """The whole run: the summary for the own columns, every span for the lineage. One attempt alone is not
        asked of a watcher."""
        if attempt is not None:
            raise ValueError("a watcher reads every attempt")
        return _SummarySpans(self.connection, SPANS_TABLE, SUMMARY, steps=_SUMMARY_STEPS, kept=self.step_answers)

    def every_span(self) -> SpanSet:
        """The whole run with every span's own columns too: what a sweep over all of it reads (a check's)."""
        return SpanSet(self.connection, SPANS_TABLE, SPANS_TABLE)

    def slice(self, stretches: list[tuple[int, int]], name: str) -> SpanSet:
        """A table `name` of the spans active in one of `stretches`: all that those frames' charges, kinds and GPU
        charges read (`ranges`), cut from `hot` when it holds them (registered under `name`), else a table of the
        database. The caller drops it (`drop_slice`). Past SLICE_STRETCHES merged stretches, every span (no table
        made)."""
        cover = merged_stretches(stretches)
        if len(cover) > SLICE_STRETCHES:
            return self.every_span()
        if self.hot.answers(cover):  # the newest frames, most refreshes: no scan of every span
            self.connection.register(name, self.hot.slice(cover))
            self._registered.add(name)
            return SpanSet(self.connection, name, name)
        where = " OR ".join(f"(start_ns < {end} AND end_ns > {start})" for start, end in cover) or "false"
        self.connection.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {SPANS_TABLE} WHERE {where}")
        return SpanSet(self.connection, name, name)

    def drop_slice(self, name: str) -> None:
        """Drop the slice `slice` made as `name`."""
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
        if dropped_files or self._renames_needed(arrived):
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
                    SELECT DISTINCT ON (trace_id, span_id) {self._renamed()}, {NODE_COLUMNS_SQL},
                           coalesce({IS_JOB_SQL}, false) AS live_is_job
                    FROM live_arrived
                ) a ANTI JOIN (SELECT trace_id, span_id FROM {SPANS_TABLE} {since}) s USING (trace_id, span_id)
                """
            ).to_arrow_table()
        finally:
            self.connection.unregister("live_arrived")
        fresh = fresh_rows.num_rows
        if not fresh:
            return Touched()
        if fresh <= EVERYTHING_SPANS:
            keys = list(zip(fresh_rows.column("tkey").to_pylist(), fresh_rows.column("skey").to_pylist(), strict=True))
            below = sum(self._tops.get(key, 0) for key in keys)
            if below > max(REBUILD_SHARE * self.count, REBUILD_LEAST):
                return self._rebuild(arrived, [])
            try:
                return self._walk_few(fresh_rows, keys, below)
            except Unwalked:
                pass  # a cycle or an id held twice: the walk in SQL, below
        self.connection.register("live_fresh_rows", fresh_rows)
        try:
            self.connection.execute(f"CREATE OR REPLACE TEMP TABLE {_FRESH} AS SELECT * FROM live_fresh_rows")
        finally:
            self.connection.unregister("live_fresh_rows")
        named = _touched_by(fresh_rows).named if fresh <= EVERYTHING_SPANS else []
        del fresh_rows
        below = self._pending_below()
        if below > max(REBUILD_SHARE * self.count, REBUILD_LEAST):
            self.connection.execute(f"DROP TABLE {_FRESH}")
            self.connection.execute(f"DROP TABLE {_CHANGED}")
            return self._rebuild(arrived, [])
        touched = self._walk_new(fresh)
        self._count_tops()
        if not touched.everything:
            touched.named = named
        return touched

    def span_ns_of(self, windows: Windows) -> list[array]:
        """Each window's span-seconds (`attribution.window_span_ns`), from the sums kept: a column per bucket."""
        none = (0,) * len(BUCKETS)
        run_ids, held = windows.run_ids, self.span_seconds
        found = [held.get((run_ids[a], i), none) for a, i in zip(windows.attempts, windows.iterations, strict=True)]
        return [array("q", column) for column in zip(*found, strict=True)] if found else [array("q") for _ in BUCKETS]

    def _add_span_seconds(self, rows: pa.Table, sign: int) -> None:
        """Add to `span_seconds` (or, `sign` -1, take from it) what the spans of `rows` count."""
        counted = rows.filter(pc.and_(pc.fill_null(rows.column("bucketed"), pa.scalar(False)),
                                      pc.is_valid(rows.column("eff_iteration"))))  # fmt: skip
        if not counted.num_rows:
            return
        keyed = pa.table({
            "attempt": pc.fill_null(counted.column("run_id"), pa.scalar("", pa.string())),
            "iteration": counted.column("eff_iteration"), "bucket": counted.column("bucket"),
            "ns": pc.subtract(counted.column("end_ns"), counted.column("start_ns")),
        })  # fmt: skip
        summed = keyed.group_by(["attempt", "iteration", "bucket"]).aggregate([("ns", "sum")])
        for attempt, iteration, bucket, ns in zip(*(summed.column(n).to_pylist() for n in summed.column_names),
                                                  strict=True):  # fmt: skip
            values = list(self.span_seconds.get((attempt, iteration), (0,) * len(BUCKETS)))
            values[BUCKETS.index(bucket)] += sign * ns
            self.span_seconds[(attempt, iteration)] = tuple(values)

    def _count_span_seconds(self) -> None:
        """`span_seconds` read again from every span (after a walk in SQL)."""
        self.span_seconds = {}
        for attempt, iteration, bucket, ns in self.connection.execute(
            f"SELECT {ATTEMPT_SQL}, eff_iteration, bucket, sum(end_ns - start_ns)::BIGINT FROM {SPANS_TABLE} "
            f"WHERE {SPAN_SECONDS_SPANS} GROUP BY ALL"
        ).fetchall():
            values = list(self.span_seconds.get((attempt, iteration), (0,) * len(BUCKETS)))
            values[BUCKETS.index(bucket)] = int(ns)
            self.span_seconds[(attempt, iteration)] = tuple(values)

    def _count_tops(self) -> None:
        """`_tops` read again from PENDING: how many pending spans wait for each parent (after a walk in SQL)."""
        self._waiting = {}
        self._tops = {
            (int(tkey), int(top)): int(count)
            for tkey, top, count in self.connection.execute(
                f"SELECT tkey, top, count(*) FROM {PENDING} GROUP BY ALL"
            ).fetchall()
        }

    def _walk_few(self, fresh_rows: pa.Table, keys: list[Key], below: int) -> Touched:
        """The walk in Python (`live_walk.walk`) over the new spans `fresh_rows` (`keys`, their ids) and the `below`
        pending spans that wait for one of them; their rows written, what changed returned. Raises Unwalked (before
        anything is written) for the walk in SQL to take them."""
        c = self.connection
        waiting = [key for key in keys if self._tops.get(key)]
        changed = self._waiting_rows(waiting) if below else None
        parts = [fresh_rows.select(list(_WALK_COLUMNS))]
        if changed is not None:
            parts.append(changed.select(list(_WALK_COLUMNS)).cast(parts[0].schema))
        spans = _nodes(pa.concat_tables(parts))
        if len(spans) != sum(part.num_rows for part in parts):
            raise Unwalked("an id held twice")
        found = walk(spans, self._look_up, lambda key: key in self._tops)
        rows = _lineage_rows(fresh_rows, changed, found, self._schema)
        if changed is not None:
            self._delete_rows(changed)
        c.register("live_new_rows", rows.sort_by("start_ns"))
        try:
            c.execute(f"INSERT INTO {SPANS_TABLE} SELECT * FROM live_new_rows")  # time order: see _rebuild
        finally:
            c.unregister("live_new_rows")
        for key in waiting:  # every span that waited for these was walked again
            self._tops.pop(key, None)
            self._waiting.pop(key, None)
        self._pend_found(rows, found)
        self.hot.add(rows, [] if changed is None else _keys_of(changed))
        self._summarize_rows(rows.slice(0, len(keys)).append_column("live_is_job", fresh_rows.column("live_is_job")))
        self.count += len(keys)
        if changed is not None:
            self._add_span_seconds(changed, -1)
        self._add_span_seconds(rows, 1)
        return _touched_by(rows.slice(0, len(keys)))

    def _waiting_rows(self, waiting: list[Key]) -> pa.Table:
        """The rows of the pending spans that wait for one of `waiting` (ids of new spans): from `hot` when every
        one is listed (`_waiting`) and started since it holds every span, else looked for in PENDING."""
        listed = [self._waiting.get(key) for key in waiting]
        if all(keys is not None for keys in listed) and self.hot.start_ns is not None:
            wanted = {(t, s) for keys in listed for t, s, start in keys or ()}
            starts = [start for keys in listed for _, _, start in keys or ()]
            if starts and min(starts) >= self.hot.start_ns:
                rows = self.hot.rows_with(wanted)
                if rows.num_rows > len(wanted):  # an id also held in another trace: keep the ones asked for
                    keep = [key in wanted for key in _keys_of(rows)]
                    rows = rows.filter(pa.array(keep))
                if rows.num_rows == len(wanted):
                    return rows
        c = self.connection
        tops = pa.table({"tkey": pa.array([t for t, _ in waiting], pa.uint64()),
                         "top": pa.array([s for _, s in waiting], pa.uint64())})  # fmt: skip
        c.register("live_waited", tops)
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
        """Delete the rows of `changed` (spans walked again) from the spans and the pending spans."""
        c = self.connection
        earliest = int(pc.min(changed.column("start_ns")).as_py())
        c.register("live_deleted", changed.select(["tkey", "skey"]))
        try:
            for table in (SPANS_TABLE, PENDING):
                c.execute(
                    f"DELETE FROM {table} t USING live_deleted x "
                    f"WHERE t.start_ns >= {earliest} AND t.tkey = x.tkey AND t.skey = x.skey"
                )
        finally:
            c.unregister("live_deleted")

    def _look_up(self, keys: set[Key]) -> dict[Key, Node]:
        """The loaded spans among `keys`: the newest from `hot`, the others looked up by id (the index on skey)."""
        found = _nodes_of(self.hot.rows_with(keys), keys)
        rest = keys - found.keys()
        if rest:
            ids = ", ".join(str(skey) for skey in sorted({skey for _, skey in rest}))
            table = self.connection.sql(
                f"SELECT {', '.join(_WALK_COLUMNS)} FROM {SPANS_TABLE} WHERE skey IN ({ids})"
            ).to_arrow_table()
            found |= _nodes_of(table, rest)
        return found

    def _pend_found(self, rows: pa.Table, found: dict[Key, Lineage]) -> None:
        """Add to PENDING (and `_tops`) the walked spans whose chain of loaded parents ends at a parent not read."""
        keys = list(zip(rows.column("tkey").to_pylist(), rows.column("skey").to_pylist(), strict=True))
        starts = rows.column("start_ns").to_pylist()
        pending: list[tuple[Key, int, int]] = []
        for key, start in zip(keys, starts, strict=True):
            top = found[key].waits_for
            if top is not None:
                pending.append((key, top, start))
        if not pending:
            return
        for (tkey, skey), top, start in pending:
            count = self._tops.get((tkey, top), 0)
            self._tops[(tkey, top)] = count + 1
            listed = self._waiting.get((tkey, top)) if count else self._waiting.setdefault((tkey, top), [])
            if listed is not None:
                if len(listed) < LISTED:
                    listed.append((tkey, skey, start))
                else:
                    del self._waiting[(tkey, top)]
        table = pa.table({"tkey": pa.array([k[0] for k, _, _ in pending], pa.uint64()),
                          "skey": pa.array([k[1] for k, _, _ in pending], pa.uint64()),
                          "top": pa.array([t for _, t, _ in pending], pa.uint64()),
                          "start_ns": pa.array([s for _, _, s in pending], pa.int64())})  # fmt: skip
        self.connection.register("live_new_pending", table)
        try:
            self.connection.execute(f"INSERT INTO {PENDING} SELECT * FROM live_new_pending")
        finally:
            self.connection.unregister("live_new_pending")

    def _renames_needed(self, arrived: pa.Table) -> bool:
        """Record the arrivals' processes; True when a name already read is now shared by a second host:pid (the
        old spans' process names change: SPEC section 1)."""
        if not arrived.num_rows:
            return False
        pairs = arrived.select(["process", "host_pid"]).group_by(["process", "host_pid"]).aggregate([]).to_pylist()
        needed = False
        for pair in pairs:
            known = self._hosts.setdefault(pair["process"], set())
            if known and pair["host_pid"] not in known and len(known) == 1:
                needed = True
            known.add(pair["host_pid"])
        return needed

    def _renamed(self) -> str:
        """The arrivals' columns, a process shown alike another named with its `[host:pid]` (as `store` does)."""
        shared = [name for name, hosts in self._hosts.items() if len(hosts) > 1 and name is not None]
        names = ", ".join("'" + name.replace("'", "''") + "'" for name in shared)
        if not shared:
            return "*"
        return (f"* REPLACE (CASE WHEN process IN ({names}) THEN process || ' [' || coalesce(host_pid, '?') || ']' "
                "ELSE process END AS process)")  # fmt: skip

    def _pending_below(self) -> int:
        """Table _CHANGED: the keys of the pending spans below the new ones, whose chains end at a new span (their
        lineage changes); their count."""
        self.connection.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE {_CHANGED} AS
            SELECT DISTINCT p.tkey, p.skey, p.start_ns
            FROM {PENDING} p SEMI JOIN {_FRESH} f ON f.tkey = p.tkey AND f.skey = p.top
            """
        )
        ((below, earliest),) = self.connection.execute(f"SELECT count(*), min(start_ns) FROM {_CHANGED}").fetchall()
        self._earliest_changed = None if earliest is None else int(earliest)
        return int(below)

    def _since(self, prefix: str) -> str:
        """SQL: a span (its columns after `prefix`) started no earlier than the earliest pending span changed."""
        return "false" if self._earliest_changed is None else f"{prefix}start_ns >= {self._earliest_changed}"

    def _walk_new(self, fresh: int) -> Touched:
        """The walk over the new spans, the pending ones below them and every ancestor above: their rows replace
        the old ones, and what changed is returned."""
        c = self.connection
        node_columns = ", ".join(NODE_TABLE_COLUMNS)
        c.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE {_WALKED} AS
            SELECT {node_columns}, source_file, source_process, true AS changed FROM {_FRESH}
            UNION ALL
            SELECT {", ".join("s." + n for n in NODE_TABLE_COLUMNS)}, s.source_file, s.source_process, true
            FROM (SELECT * FROM {SPANS_TABLE} WHERE {self._since("")}) s SEMI JOIN {_CHANGED} c USING (tkey, skey)
            """
        )
        # Every ancestor of what is walked, up to the roots: what they hand down. Of an ancestor the walk reads its
        # keys, id, bucket flag and iteration alone (`lineage._walk`'s parents), so only those are read of every
        # span, not each span's every column; its other columns stay empty, and its row is not written back.
        # The parents not walked yet are looked up by their ids as literals: a filtered scan, not a join over
        # every span; a parent not loaded is looked for once.
        handed = ("tkey", "skey", "pkey", "span_id", "bucketed", "iteration")
        asked: set[int] = set()
        while True:
            wanted = {
                parent
                for (parent,) in c.execute(
                    f"""SELECT DISTINCT w.pkey FROM {_WALKED} w
                        ANTI JOIN {_WALKED} x ON x.tkey = w.tkey AND x.skey = w.pkey WHERE w.pkey IS NOT NULL"""
                ).fetchall()
            } - asked
            if not wanted:
                break
            asked |= wanted
            ids = ", ".join(map(str, sorted(wanted)))
            # Looked up alone first: a lookup that is part of the join below is planned as a scan, not the index's.
            c.execute(f"CREATE OR REPLACE TEMP TABLE {_FOUND} AS "
                      f"SELECT {', '.join(handed)} FROM {SPANS_TABLE} WHERE skey IN ({ids})")  # fmt: skip
            c.execute(
                f"""
                INSERT INTO {_WALKED} ({", ".join(handed)}, changed)
                SELECT DISTINCT {", ".join("s." + n for n in handed)}, false
                FROM {_FOUND} s
                SEMI JOIN {_WALKED} w ON w.tkey = s.tkey AND w.pkey = s.skey
                ANTI JOIN {_WALKED} x ON x.tkey = s.tkey AND x.skey = s.skey
                """
            )
            c.execute(f"DROP TABLE {_FOUND}")
        touched = Touched(everything=fresh > EVERYTHING_SPANS)
        attempt = ATTEMPT_SQL.replace("run_id", "s.run_id")
        old_sql = f"""SELECT s.start_ns, s.end_ns, s.bucketed, {attempt}, s.eff_iteration, s.tkey, s.skey
                FROM (SELECT * FROM {SPANS_TABLE} WHERE {self._since("")}) s
                SEMI JOIN {_CHANGED} c USING (tkey, skey)"""
        old = [] if touched.everything else c.execute(old_sql).fetchall()
        for table in (SPANS_TABLE, PENDING):
            c.execute(
                f"DELETE FROM {table} t USING {_CHANGED} x "
                f"WHERE {self._since('t.')} AND t.tkey = x.tkey AND t.skey = x.skey"
            )
        try:
            build_lineage(c, _WALKED)
            c.execute(
                f"""CREATE OR REPLACE TEMP TABLE live_rows AS
                    SELECT {", ".join("l." + n if n not in _SOURCE_COLUMNS else "w." + n for n in _ROW_COLUMNS)}
                    FROM {LINEAGE} l JOIN {_WALKED} w USING (tkey, skey) WHERE w.changed"""
            )
            c.execute(
                f"INSERT INTO {SPANS_TABLE} SELECT * FROM live_rows ORDER BY start_ns"
            )  # time order: see _rebuild
            self._pend(_WALKED)
        finally:
            self._drop_walk()
        rows: list[tuple[object, ...]] = []
        if touched.everything:
            self.hot.reload(c, SPANS_TABLE)
        else:
            walked = c.sql("SELECT * FROM live_rows").to_arrow_table()
            self.hot.add(walked, [(row[5], row[6]) for row in old])
            attempts = pc.fill_null(walked.column("run_id"), pa.scalar("", pa.string()))
            columns = [walked.column(n) for n in ("start_ns", "end_ns", "bucketed")]
            columns += [attempts, walked.column("eff_iteration")]
            rows = list(zip(*(column.to_pylist() for column in columns), strict=True))
        self._summarize(f"(SELECT * FROM live_rows SEMI JOIN {_FRESH} USING (tkey, skey))")
        c.execute("DROP TABLE live_rows")
        c.execute(f"DROP TABLE {_FRESH}")
        c.execute(f"DROP TABLE {_CHANGED}")
        self.count += fresh
        for start, end, bucketed, *_ in [*old, *rows]:
            if bucketed:
                touched.stretches.append((int(start), int(end)))
        self._count_span_seconds()
        return touched

    def _pend(self, walked: str) -> None:
        """Add to PENDING the changed spans of `walked` (which holds every loaded ancestor of them) whose chain of
        loaded parents ends at a parent not read, with that parent's id: they wait for it. A chain caught in a
        cycle ends nowhere and waits for nothing. Worked out in SQL (`pending_tops`), so a rebuild of a long run
        holds what DuckDB holds, under its limit."""
        with pending_tops(self.connection, walked) as tops:
            self.connection.execute(
                f"INSERT INTO {PENDING} SELECT tkey, skey, top, start_ns FROM {tops} WHERE changed AND top IS NOT NULL"
            )

    def _summarize_rows(self, rows: pa.Table) -> None:
        """`_summarize` of new spans held as Arrow (`live_is_job` among their columns): folded here, no query."""
        self._add_steps(rows.filter(pc.fill_null(rows.column("is_step"), pa.scalar(False))))
        self._merge_folded(rows.select([*_ROW_COLUMNS, "live_is_job"]))

    def _summarize(self, table: str) -> None:
        """Fold the new spans of `table` into the summary: their step spans as they are (`_SUMMARY_STEPS`, what
        `windows.attempt_windows` and the step rules read), and every span as one row per attempt, process,
        holding, whether a step and whether a job span, spanning their earliest start to their latest end (SUMMARY:
        what `attempts.find_attempts`, `gpus.read_holders` and `recent.last_stretch` read; a few rows however long
        the run). Each span's own columns, which a walk does not change: spans walked again are not folded again."""
        c = self.connection
        columns = ", ".join(_ROW_COLUMNS)
        self._add_steps(c.sql(f"SELECT {columns} FROM {table} WHERE is_step").to_arrow_table())
        keys = ", ".join(_OWN_KEYS)
        others = [n for n in _ROW_COLUMNS if n not in (*_OWN_KEYS, "start_ns", "end_ns")]
        picked = ", ".join(f"any_value({n}) AS {n}" for n in others)
        folded = f"""
            SELECT {keys}, min(start_ns) AS start_ns, max(end_ns) AS end_ns, {picked},
                   coalesce({IS_JOB_SQL}, false) AS live_is_job
            FROM {table} GROUP BY {keys}, is_step, live_is_job
        """
        self._merge_folded(c.sql(f"SELECT {columns}, live_is_job FROM ({folded})").to_arrow_table())

    def _add_steps(self, steps: pa.Table) -> None:
        if not steps.num_rows:
            return
        self.step_answers.clear()
        self.connection.register("live_new_steps", steps.select(list(_ROW_COLUMNS)).cast(self._schema))
        try:
            self.connection.execute(f"INSERT INTO {_SUMMARY_STEPS} SELECT * FROM live_new_steps")
        finally:
            self.connection.unregister("live_new_steps")

    def _merge_folded(self, new: pa.Table) -> None:
        """Fold `new` (rows of _ROW_COLUMNS and `live_is_job`, one or more a key) into the folded part: a row per
        key (`_OWN_KEYS`, `is_step` and `live_is_job`), any of its rows, with the earliest start and the latest
        end."""
        if not new.num_rows:
            return
        both = pa.concat_tables([self._folded_keyed, new.cast(self._folded_keyed.schema)])
        both = both.append_column("live_row", pa.array(range(both.num_rows), pa.int64()))
        grouped = both.group_by([*_OWN_KEYS, "is_step", "live_is_job"], use_threads=False).aggregate(
            [("live_row", "min"), ("start_ns", "min"), ("end_ns", "max")]
        )
        kept = both.take(grouped.column("live_row_min")).drop_columns(["live_row"])
        kept = kept.set_column(kept.schema.get_field_index("start_ns"), "start_ns", grouped.column("start_ns_min"))
        kept = kept.set_column(kept.schema.get_field_index("end_ns"), "end_ns", grouped.column("end_ns_max"))
        self._folded_keyed = kept.cast(self._folded_keyed.schema)
        self._folded = self._folded_keyed.drop_columns(["live_is_job"])
        self._register_summary()

    def _register_summary(self) -> None:
        self.connection.register(_SUMMARY_FOLDED, self._folded)

    def _rebuild(self, arrived: pa.Table, dropped_files: list[str]) -> Touched:
        """Every span walked again: the ones kept (less those of `dropped_files`) and the arrivals."""
        c = self.connection
        c.register("live_arrived", arrived)
        try:
            files = ", ".join("'" + f.replace("'", "''") + "'" for f in dropped_files)
            names = [n if n != "process" else "source_process AS process" for n in ACCOUNTING_SCHEMA.names]
            kept = f"SELECT {', '.join(names)}, source_file, source_process FROM {SPANS_TABLE}"
            if files:
                kept += f" WHERE source_file IS NULL OR source_file NOT IN ({files})"
            c.execute(
                f"CREATE OR REPLACE TEMP TABLE live_all AS SELECT * FROM ({kept} UNION ALL SELECT * FROM live_arrived)"
            )
        finally:
            c.unregister("live_arrived")
        self._hosts = {}
        for process, host_pid in c.execute("SELECT DISTINCT process, host_pid FROM live_all").fetchall():
            self._hosts.setdefault(process, set()).add(host_pid)
        c.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE {_WALKED} AS
            SELECT DISTINCT ON (trace_id, span_id) {self._renamed()}, {NODE_COLUMNS_SQL}, true AS changed FROM live_all
            """
        )
        c.execute("DROP TABLE live_all")
        try:
            build_lineage(c, _WALKED)
            c.execute(f"DELETE FROM {SPANS_TABLE}")
            c.execute(f"DELETE FROM {PENDING}")
            self._folded = self._folded.slice(0, 0)
            c.execute(f"DELETE FROM {_SUMMARY_STEPS}")
            self._folded_keyed = self._folded_keyed.slice(0, 0)
            self.step_answers.clear()
            self._register_summary()
            picked = ", ".join("l." + n if n not in _SOURCE_COLUMNS else "w." + n for n in _ROW_COLUMNS)
            # In time order: a scan for recent spans then skips the older row groups by their start and end.
            c.execute(
                f"INSERT INTO {SPANS_TABLE} SELECT {picked} FROM {LINEAGE} l JOIN {_WALKED} w USING (tkey, skey) "
                "ORDER BY l.start_ns"
            )
            self._pend(_WALKED)
            self._summarize(SPANS_TABLE)
            self.hot.reload(c, SPANS_TABLE)
        finally:
            self._drop_walk()
        ((self.count,),) = c.execute(f"SELECT count(*) FROM {SPANS_TABLE}").fetchall()
        self._count_tops()
        self._count_span_seconds()
        return Touched(everything=True)

    def _drop_walk(self) -> None:
        for view in (LINEAGE, OWN_SPANS):
            self.connection.execute(f"DROP VIEW IF EXISTS {view}")
        for table in (_WALKED, LINEAGE_HANDED):
            self.connection.execute(f"DROP TABLE IF EXISTS {table}")


@dataclass(frozen=True)
class _SummarySpans(SpanSet):
    """The watcher's whole run (`LiveSpans.spans`): a question that reads the step spans alone (`steps`, not `own`
    nor `lineage`) is answered once until a step span arrives (`kept`, which `LiveSpans` empties then). The step
    spans are the driver's, a few batches in ten, so most refreshes ask nothing of them: the windows, the step
    rules."""

    kept: dict[tuple[str, str, str], Any] | None = None

    def _of_steps_alone(self, sql: str) -> bool:
        def names(relation: str | None) -> bool:
            return relation is not None and re.search(rf"\b{re.escape(relation)}\b", sql) is not None

        return names(self.steps) and not names(self.own) and not names(self.lineage)

    def rows(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        if self.kept is None or not self._of_steps_alone(sql):
            return super().rows(sql, params)
        key = ("rows", sql, repr(params))
        if key not in self.kept:
            self.kept[key] = super().rows(sql, params)
        return list(self.kept[key])

    def arrow(self, sql: str, params: Params = None) -> pa.Table:
        if self.kept is None or not self._of_steps_alone(sql):
            return super().arrow(sql, params)
        key = ("arrow", sql, repr(params))
        if key not in self.kept:
            self.kept[key] = super().arrow(sql, params)
        table: pa.Table = self.kept[key]
        return table


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


def _touched_by(new: pa.Table) -> Touched:
    """What the new spans `new` (their rows) touch: the stretches of the bucketed ones, and the named ones."""
    bucketed = new.filter(pc.fill_null(new.column("bucketed"), pa.scalar(False)))
    stretches = list(zip(bucketed.column("start_ns").to_pylist(), bucketed.column("end_ns").to_pylist(), strict=True))
    named = new.filter(
        pc.and_(pc.is_valid(new.column("bucket")), pc.greater(new.column("end_ns"), new.column("start_ns")))
    )
    columns = (named.column(n).to_pylist() for n in ("start_ns", "end_ns", "name"))
    return Touched(stretches, named=list(zip(*columns, strict=True)))


# What the walk in Python reads of a span (`live_walk.Node`), with its keys.
_WALK_COLUMNS = ("tkey", "skey", "pkey", "span_id", "bucketed", "iteration")


def _nodes(table: pa.Table) -> dict[Key, Node]:
    """The spans of `table` (`_WALK_COLUMNS`) as the walk's nodes, by key (a key given twice is kept once)."""
    columns = [table.column(name).to_pylist() for name in _WALK_COLUMNS]
    return {(t, s): Node(p, span_id, bool(b), i) for t, s, p, span_id, b, i in zip(*columns, strict=True)}


def _nodes_of(table: pa.Table, keys: set[Key]) -> dict[Key, Node]:
    """The spans of `table` whose key is among `keys`, as nodes. Raises Unwalked for a key held by two spans."""
    columns = [table.column(name).to_pylist() for name in _WALK_COLUMNS]
    found: dict[Key, Node] = {}
    for t, s, p, span_id, b, i in zip(*columns, strict=True):
        if (t, s) in keys:
            if (t, s) in found:
                raise Unwalked("an id held twice")
            found[(t, s)] = Node(p, span_id, bool(b), i)
    return found


def _keys_of(table: pa.Table) -> list[Key]:
    return list(zip(table.column("tkey").to_pylist(), table.column("skey").to_pylist(), strict=True))


def _lineage_rows(fresh: pa.Table, changed: pa.Table | None, found: dict[Key, Lineage], schema: pa.Schema) -> pa.Table:
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
        walked = [found[key] for key in _keys_of(table)]
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


def _in_schema() -> pa.Schema:
    return pa.schema([*ACCOUNTING_SCHEMA, pa.field("source_file", pa.string())])
