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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from .attempts import ATTEMPT_SQL
from .lineage import LINEAGE_COLUMNS, MAX_DEPTH, build_lineage
from .nodes import NODE_COLUMNS_SQL, NODE_TABLE_COLUMNS
from .ray_slices import merged_stretches
from .schema import ACCOUNTING_SCHEMA, IS_JOB_SQL
from .spanset import SpanSet
from .tables import LINEAGE, LINEAGE_HANDED, OWN_SPANS

if TYPE_CHECKING:
    import duckdb

# The watcher's own tables: every span with its lineage (and its file), the pending spans' keys, the summary.
SPANS_TABLE = "live_spans"
PENDING = "live_pending"
SUMMARY = "live_summary"  # a view: the step spans as they are, and the other spans folded
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
# Beside the lineage's columns, each span's file and its process as read (before `_renamed`), for a rebuild.
_SOURCE_COLUMNS = ("source_file", "source_process")
_ROW_COLUMNS = (*NODE_TABLE_COLUMNS, *LINEAGE_COLUMNS, *_SOURCE_COLUMNS)
# The most stretches a slice is cut from; beyond, the questions read every span (a first refresh, a rebuild).
SLICE_STRETCHES = 16
_OWN_KEYS = ("run_id", "process", "host_pid", "service", "holding")


@dataclass
class Touched:
    """What one batch of arrivals changed: the stretches of the bucketed spans that arrived or whose lineage changed
    (before and after), the (attempt, iteration) pairs whose span-seconds changed, and whether everything did
    (`everything`: every span was walked again)."""

    stretches: list[tuple[int, int]] = field(default_factory=list)
    iterations: set[tuple[str, int]] = field(default_factory=set)
    everything: bool = False


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
        self._steps = self._folded = connection.sql(f"SELECT * FROM {SPANS_TABLE} LIMIT 0").to_arrow_table()
        self._register_summary()
        connection.execute(
            f"CREATE VIEW {SUMMARY} AS SELECT * FROM {_SUMMARY_STEPS} UNION ALL SELECT * FROM {_SUMMARY_FOLDED}"
        )

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
        return SpanSet(self.connection, SPANS_TABLE, SUMMARY)

    def every_span(self) -> SpanSet:
        """The whole run with every span's own columns too: what a sweep over all of it reads (a check's)."""
        return SpanSet(self.connection, SPANS_TABLE, SPANS_TABLE)

    def slice(self, stretches: list[tuple[int, int]], iterations: set[tuple[str, int]], name: str) -> SpanSet:
        """A table `name` of the spans active in one of `stretches` or of one of the (attempt, iteration) pairs
        `iterations`: all that those frames' charges and span-seconds read (`ranges`). The caller drops it. Past
        SLICE_STRETCHES merged stretches, every span (no table made)."""
        cover = merged_stretches(stretches)
        if len(cover) > SLICE_STRETCHES:
            return self.every_span()
        where = " OR ".join(f"(start_ns < {end} AND end_ns > {start})" for start, end in cover) or "false"
        if not iterations:  # the stretches alone: one filtered scan, no union to take duplicates out
            self.connection.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {SPANS_TABLE} WHERE {where}")
            return SpanSet(self.connection, name, name)
        pairs = pa.table({"attempt": [a for a, _ in iterations], "iteration": [i for _, i in iterations]},
                         schema=pa.schema([("attempt", pa.string()), ("iteration", pa.int64())]))  # fmt: skip
        self.connection.register("live_slice_iterations", pairs)
        try:
            self.connection.execute(
                f"""
                CREATE OR REPLACE TEMP TABLE {name} AS
                SELECT * FROM {SPANS_TABLE} WHERE {where}
                UNION
                SELECT s.* FROM {SPANS_TABLE} s JOIN live_slice_iterations k
                    ON k.attempt = {ATTEMPT_SQL.replace("run_id", "s.run_id")} AND k.iteration = s.eff_iteration
                """
            )
        finally:
            self.connection.unregister("live_slice_iterations")
        return SpanSet(self.connection, name, name)

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
            self.connection.execute(
                f"""
                CREATE OR REPLACE TEMP TABLE {_FRESH} AS
                SELECT * FROM (
                    SELECT DISTINCT ON (trace_id, span_id) {self._renamed()}, {NODE_COLUMNS_SQL} FROM live_arrived
                ) a ANTI JOIN (SELECT trace_id, span_id FROM {SPANS_TABLE} {since}) s USING (trace_id, span_id)
                """
            )
        finally:
            self.connection.unregister("live_arrived")
        ((fresh,),) = self.connection.execute(f"SELECT count(*) FROM {_FRESH}").fetchall()
        if not fresh:
            self.connection.execute(f"DROP TABLE {_FRESH}")
            return Touched()
        below = self._pending_below()
        if below > max(REBUILD_SHARE * self.count, REBUILD_LEAST):
            self.connection.execute(f"DROP TABLE {_FRESH}")
            self.connection.execute(f"DROP TABLE {_CHANGED}")
            return self._rebuild(arrived, [])
        return self._walk_new(fresh)

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
        old_sql = f"""SELECT s.start_ns, s.end_ns, s.bucketed, {attempt}, s.eff_iteration
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
        rows_sql = f"SELECT start_ns, end_ns, bucketed, {ATTEMPT_SQL}, eff_iteration FROM live_rows"
        rows = [] if touched.everything else c.execute(rows_sql).fetchall()
        self._summarize("live_rows")
        c.execute("DROP TABLE live_rows")
        c.execute(f"DROP TABLE {_FRESH}")
        c.execute(f"DROP TABLE {_CHANGED}")
        self.count += fresh
        for start, end, bucketed, attempt, iteration in [*old, *rows]:
            if bucketed:
                touched.stretches.append((int(start), int(end)))
            if iteration is not None:
                touched.iterations.add((attempt, int(iteration)))
        return touched

    def _pend(self, walked: str) -> None:
        """Add to PENDING the changed spans of `walked` (which holds every loaded ancestor of them) whose chain of
        loaded parents ends at a parent not read, with that parent's id: they wait for it. A chain caught in a
        cycle ends nowhere and waits for nothing. Walked in Python: the table is a batch's spans, and a statement
        costs more than the walk."""
        rows = self.connection.execute(f"SELECT tkey, skey, pkey, changed, start_ns FROM {walked}").fetchall()
        parent_of = {(t, s): p for t, s, p, _, _ in rows}
        tops: dict[tuple[int, int], int | None] = {}

        def top_of(tkey: int, parent: int | None) -> int | None:
            """Where the chain from `parent` (a parent id) up ends: None at a root (or in a cycle), else the first
            id not loaded. `tops` keeps, for each loaded span passed, where the chain above it ends."""
            path: list[int] = []
            key = parent
            while True:
                if key is None or len(path) > MAX_DEPTH:  # a root, or a cycle
                    end = None
                    break
                if (tkey, key) not in parent_of:  # not loaded: the chain waits for it
                    end = key
                    break
                if (tkey, key) in tops:
                    end = tops[(tkey, key)]
                    break
                path.append(key)
                key = parent_of[(tkey, key)]
            for on in path:
                tops[(tkey, on)] = end
            return end

        pending = [(t, s, top, start) for t, s, p, changed, start in rows
                   if changed and (top := top_of(t, p)) is not None]  # fmt: skip
        if pending:
            keys, skeys, tops_found, starts = zip(*pending, strict=True)
            table = pa.table({"tkey": pa.array(keys, pa.uint64()), "skey": pa.array(skeys, pa.uint64()),
                              "top": pa.array(tops_found, pa.uint64()),
                              "start_ns": pa.array(starts, pa.int64())})  # fmt: skip
            self.connection.register("live_new_pending", table)
            try:
                self.connection.execute(f"INSERT INTO {PENDING} SELECT * FROM live_new_pending")
            finally:
                self.connection.unregister("live_new_pending")

    def _summarize(self, table: str) -> None:
        """Fold the spans of `table` into SUMMARY: their step spans as they are, the rest as one row per attempt,
        process, holding and whether a job span, spanning their earliest start to their latest end (what
        `attempts.find_attempts`, `windows.attempt_windows`, `gpus.read_holders` and the step rules read). Both
        parts are Arrow tables held here and handed to DuckDB by name: a few rows a batch, no table written."""
        c = self.connection
        columns = ", ".join(_ROW_COLUMNS)
        steps = c.sql(f"SELECT {columns} FROM {table} WHERE is_step").to_arrow_table()
        if steps.num_rows:
            self._steps = pa.concat_tables([self._steps, steps.cast(self._steps.schema)])
            if self._steps.column(0).num_chunks > 64:
                self._steps = self._steps.combine_chunks()
        keys = ", ".join(_OWN_KEYS)
        others = [n for n in _ROW_COLUMNS if n not in (*_OWN_KEYS, "start_ns", "end_ns")]
        picked = ", ".join(f"any_value({n}) AS {n}" for n in others)
        folded = f"""
            SELECT {keys}, min(start_ns) AS start_ns, max(end_ns) AS end_ns, {picked}
            FROM (SELECT {columns} FROM {_SUMMARY_FOLDED} UNION ALL SELECT {columns} FROM {table} WHERE NOT is_step)
            GROUP BY {keys}, {IS_JOB_SQL}
        """
        self._folded = c.sql(f"SELECT {columns} FROM ({folded})").to_arrow_table().cast(self._steps.schema)
        self._register_summary()

    def _register_summary(self) -> None:
        self.connection.register(_SUMMARY_STEPS, self._steps)
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
            self._steps = self._folded = self._steps.slice(0, 0)
            self._register_summary()
            picked = ", ".join("l." + n if n not in _SOURCE_COLUMNS else "w." + n for n in _ROW_COLUMNS)
            # In time order: a scan for recent spans then skips the older row groups by their start and end.
            c.execute(
                f"INSERT INTO {SPANS_TABLE} SELECT {picked} FROM {LINEAGE} l JOIN {_WALKED} w USING (tkey, skey) "
                "ORDER BY l.start_ns"
            )
            self._pend(_WALKED)
            self._summarize(SPANS_TABLE)
        finally:
            self._drop_walk()
        ((self.count,),) = c.execute(f"SELECT count(*) FROM {SPANS_TABLE}").fetchall()
        return Touched(everything=True)

    def _drop_walk(self) -> None:
        for view in (LINEAGE, OWN_SPANS):
            self.connection.execute(f"DROP VIEW IF EXISTS {view}")
        for table in (_WALKED, LINEAGE_HANDED):
            self.connection.execute(f"DROP TABLE IF EXISTS {table}")


def _in_schema() -> pa.Schema:
    return pa.schema([*ACCOUNTING_SCHEMA, pa.field("source_file", pa.string())])
