"""The walk of the watcher's spans in SQL (`goodput watch`): a large batch (a run already written, read a part at a
time), a batch the walk in Python leaves (`walk.Unwalked`), and the rebuild of every span (a file replaced, a
process name shared, the job span arriving over everything).

The lineage of the batch's spans, of the pending spans below them and of every ancestor above is `build_lineage`'s
(`lineage`), run over those rows alone; their rows replace the old ones. `LiveSpans` owns what the walk keeps up to
date beside its tables, and hands it over: the newest spans held, the summary, the pending spans' parents
(`PendingParents`) and the processes' names (`ProcessNames`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from rollup.base.nodes import NODE_COLUMNS_SQL, NODE_TABLE_COLUMNS
from rollup.base.schema import ACCOUNTING_SCHEMA, sql_text
from rollup.base.tables import LINEAGE, LINEAGE_HANDED, OWN_SPANS
from rollup.store.lineage import build_lineage

from .summary import ROW_COLUMNS, SOURCE_COLUMNS
from .walk import keys_table, pending_tops

if TYPE_CHECKING:
    import duckdb

    from .newest import HotSpans
    from .summary import Summary
    from .walk import Key

# The watcher's own tables: every span with its lineage (and its file), the pending spans' keys (the summary's:
# `summary`), and the walk's.
SPANS_TABLE = "live_spans"
PENDING = "live_pending"
_WALKED = "live_walked"
FRESH = "live_fresh"
CHANGED = "live_changed"
_FOUND = "live_found"


# The most pending spans whose keys are listed by the parent they wait for (`PendingParents.listed`).
LISTED = 4_096
# A batch of more new spans than this (a run already written, read a part at a time) touches everything: listing
# what each of its spans touched would cost more than asking every frame again, and hold the list in memory.
EVERYTHING_SPANS = 20_000


@dataclass
class Touched:
    """What one batch of arrivals changed: the stretches of the bucketed spans that arrived (a frame's charge, kind
    and GPU charge change only where one does: a walk changes no span's own columns), and whether everything did
    (`everything`: every span was walked again). The span-seconds are kept up to date apart (`span_seconds`)."""

    stretches: list[tuple[int, int]] = field(default_factory=list)
    everything: bool = False
    # The new spans with a bucket (valid or not) and some length: (start, end, name), what a kind reads.
    named: list[tuple[int, int, str]] = field(default_factory=list)


class PendingParents:
    """The parents not read that pending spans wait for (PENDING's `top`), kept in memory beside the table: how many
    pending spans wait for each (`counts`, by (tkey, parent id)), so a refresh knows without a query whether a new
    span has any below it, and that a parent named here is not loaded; and of a parent few wait for (at most
    LISTED), their keys and starts (`listed`): when it arrives, the spans walked again are then taken from the
    newest spans held, not looked for among every pending span. Kept up to date by the walk in Python (`add`,
    `arrived`), read again from PENDING after a walk in SQL (`count`)."""

    def __init__(self) -> None:
        self.counts: dict[Key, int] = {}
        self.listed: dict[Key, list[tuple[int, int, int]]] = {}

    def count(self, connection: duckdb.DuckDBPyConnection) -> None:
        """Read both again from PENDING on `connection`."""
        self.counts = {
            (int(tkey), int(top)): int(count)
            for tkey, top, count in connection.execute(
                f"SELECT tkey, top, count(*) FROM {PENDING} GROUP BY ALL"
            ).fetchall()
        }
        self.listed = {}
        few = [key for key, count in self.counts.items() if count <= LISTED]
        if not few:
            return
        connection.register("live_few_tops", keys_table(few, "top"))
        try:
            for tkey, top, skey, start in connection.execute(
                f"SELECT tkey, top, skey, start_ns FROM {PENDING} SEMI JOIN live_few_tops USING (tkey, top)"
            ).fetchall():
                self.listed.setdefault((int(tkey), int(top)), []).append((int(tkey), int(skey), int(start)))
        finally:
            connection.unregister("live_few_tops")

    def add(self, pending: Iterable[tuple[Key, int, int]]) -> None:
        """Count new pending spans: each (its key, the id of the parent it waits for, its start)."""
        for (tkey, skey), top, start in pending:
            count = self.counts.get((tkey, top), 0)
            self.counts[(tkey, top)] = count + 1
            listed = self.listed.get((tkey, top)) if count else self.listed.setdefault((tkey, top), [])
            if listed is not None:
                if len(listed) < LISTED:
                    listed.append((tkey, skey, start))
                else:
                    del self.listed[(tkey, top)]

    def arrived(self, keys: Iterable[Key]) -> None:
        """Forget the parents of `keys`, read now: every span that waited for them was walked again."""
        for key in keys:
            self.counts.pop(key, None)
            self.listed.pop(key, None)


class ProcessNames:
    """The processes read, by name as read: the host:pid of each process of that name. A name that a second
    host:pid comes to share is shown with its `[host:pid]` (SPEC section 1, as `store` does)."""

    def __init__(self) -> None:
        self._hosts: dict[str, set[str | None]] = {}

    def renames_needed(self, arrived: pa.Table) -> bool:
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

    def read_again(self, connection: duckdb.DuckDBPyConnection, table: str) -> None:
        """Record anew the processes of every span of `table` (a rebuild)."""
        self._hosts = {}
        for process, host_pid in connection.execute(f"SELECT DISTINCT process, host_pid FROM {table}").fetchall():
            self._hosts.setdefault(process, set()).add(host_pid)

    def renamed_sql(self) -> str:
        """The arrivals' columns, a process shown alike another named with its `[host:pid]` (as `store` does)."""
        shared = [name for name, hosts in self._hosts.items() if len(hosts) > 1 and name is not None]
        names = ", ".join(sql_text(name) for name in shared)
        if not shared:
            return "*"
        return (f"* REPLACE (CASE WHEN process IN ({names}) THEN process || ' [' || coalesce(host_pid, '?') || ']' "
                "ELSE process END AS process)")  # fmt: skip


def column_types(connection: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """The columns of LINEAGE as the walk makes them, plus `source_file`: read off an empty walk."""
    empty = pa.Table.from_batches([], schema=ACCOUNTING_SCHEMA)
    connection.register("live_empty", empty)
    try:
        connection.execute(f"CREATE TEMP TABLE {_WALKED} AS SELECT *, {NODE_COLUMNS_SQL} FROM live_empty")
        build_lineage(connection, _WALKED)
        described = connection.execute(f"SELECT * FROM {LINEAGE} LIMIT 0").description
    finally:
        _drop_walk(connection)
        connection.unregister("live_empty")
    return [(name, str(kind)) for name, kind, *_ in described] + [(name, "VARCHAR") for name in SOURCE_COLUMNS]


class SqlWalk:
    """The walk in SQL over the watcher's tables on `connection` (SPANS_TABLE, PENDING; FRESH, a batch's new spans,
    the caller's), keeping up to date what `LiveSpans` hands it beside them: the newest spans held (`hot`), the
    summary, the pending spans' parents (`parents`) and the processes' names (`names`)."""

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection,
        hot: HotSpans,
        summary: Summary,
        parents: PendingParents,
        names: ProcessNames,
    ) -> None:
        self.connection, self.hot, self.summary, self.parents, self.names = connection, hot, summary, parents, names
        self._earliest_changed: int | None = None  # the earliest start of the pending spans a batch changes

    def pending_below(self) -> int:
        """Table CHANGED: the keys of the pending spans below the new ones, whose chains end at a new span (their
        lineage changes); their count."""
        self.connection.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE {CHANGED} AS
            SELECT DISTINCT p.tkey, p.skey, p.start_ns
            FROM {PENDING} p SEMI JOIN {FRESH} f ON f.tkey = p.tkey AND f.skey = p.top
            """
        )
        ((below, earliest),) = self.connection.execute(f"SELECT count(*), min(start_ns) FROM {CHANGED}").fetchall()
        self._earliest_changed = None if earliest is None else int(earliest)
        return int(below)

    def _since(self, prefix: str) -> str:
        """SQL: a span (its columns after `prefix`) started no earlier than the earliest pending span changed."""
        return "false" if self._earliest_changed is None else f"{prefix}start_ns >= {self._earliest_changed}"

    def walk_new(self, fresh: int) -> None:
        """The walk over the `fresh` new spans of FRESH, the pending ones below them (CHANGED: `pending_below`) and
        every ancestor above: their rows replace the old ones. What the batch touched is the new spans' alone
        (`watch.spans._touched_by`: a walk changes no span's own columns), or everything past EVERYTHING_SPANS."""
        c = self.connection
        node_columns = ", ".join(NODE_TABLE_COLUMNS)
        c.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE {_WALKED} AS
            SELECT {node_columns}, source_file, source_process, true AS changed FROM {FRESH}
            UNION ALL
            SELECT {", ".join("s." + n for n in NODE_TABLE_COLUMNS)}, s.source_file, s.source_process, true
            FROM (SELECT * FROM {SPANS_TABLE} WHERE {self._since("")}) s SEMI JOIN {CHANGED} c USING (tkey, skey)
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
        everything = fresh > EVERYTHING_SPANS
        old_sql = f"""SELECT s.tkey, s.skey FROM (SELECT * FROM {SPANS_TABLE} WHERE {self._since("")}) s
                SEMI JOIN {CHANGED} c USING (tkey, skey)"""
        replaced = [] if everything else c.execute(old_sql).fetchall()  # the old rows `hot` drops
        for table in (SPANS_TABLE, PENDING):
            c.execute(
                f"DELETE FROM {table} t USING {CHANGED} x "
                f"WHERE {self._since('t.')} AND t.tkey = x.tkey AND t.skey = x.skey"
            )
        try:
            build_lineage(c, _WALKED)
            c.execute(
                f"""CREATE OR REPLACE TEMP TABLE live_rows AS
                    SELECT {", ".join("l." + n if n not in SOURCE_COLUMNS else "w." + n for n in ROW_COLUMNS)}
                    FROM {LINEAGE} l JOIN {_WALKED} w USING (tkey, skey) WHERE w.changed"""
            )
            c.execute(f"INSERT INTO {SPANS_TABLE} SELECT * FROM live_rows ORDER BY start_ns")  # time order: see rebuild
            self._pend(_WALKED)
        finally:
            _drop_walk(c)
        if everything:
            self.hot.reload(c, SPANS_TABLE)
        else:
            self.hot.add(c.sql("SELECT * FROM live_rows").to_arrow_table(), [(t, k) for t, k in replaced])
        self.summary.add_table(f"(SELECT * FROM live_rows SEMI JOIN {FRESH} USING (tkey, skey))")
        c.execute("DROP TABLE live_rows")
        c.execute(f"DROP TABLE {FRESH}")
        c.execute(f"DROP TABLE {CHANGED}")
        self.summary.count_span_seconds(SPANS_TABLE)

    def _pend(self, walked: str) -> None:
        """Add to PENDING the changed spans of `walked` (which holds every loaded ancestor of them) whose chain of
        loaded parents ends at a parent not read, with that parent's id: they wait for it. A chain caught in a
        cycle ends nowhere and waits for nothing. Worked out in SQL (`pending_tops`), so a rebuild of a long run
        holds what DuckDB holds, under its limit."""
        with pending_tops(self.connection, walked) as tops:
            self.connection.execute(
                f"INSERT INTO {PENDING} SELECT tkey, skey, top, start_ns FROM {tops} WHERE changed AND top IS NOT NULL"
            )

    def rebuild(self, arrived: pa.Table, dropped_files: list[str]) -> int:
        """Every span walked again: the ones kept (less those of `dropped_files`) and the arrivals. Returns how many
        spans there are now."""
        c = self.connection
        c.register("live_arrived", arrived)
        try:
            files = ", ".join(sql_text(f) for f in dropped_files)
            names = [n if n != "process" else "source_process AS process" for n in ACCOUNTING_SCHEMA.names]
            kept = f"SELECT {', '.join(names)}, source_file, source_process FROM {SPANS_TABLE}"
            if files:
                kept += f" WHERE source_file IS NULL OR source_file NOT IN ({files})"
            c.execute(
                f"CREATE OR REPLACE TEMP TABLE live_all AS SELECT * FROM ({kept} UNION ALL SELECT * FROM live_arrived)"
            )
        finally:
            c.unregister("live_arrived")
        self.names.read_again(c, "live_all")
        c.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE {_WALKED} AS
            SELECT DISTINCT ON (trace_id, span_id) {self.names.renamed_sql()}, {NODE_COLUMNS_SQL}, true AS changed
            FROM live_all
            """
        )
        c.execute("DROP TABLE live_all")
        try:
            build_lineage(c, _WALKED)
            c.execute(f"DELETE FROM {SPANS_TABLE}")
            c.execute(f"DELETE FROM {PENDING}")
            self.summary.clear()
            picked = ", ".join("l." + n if n not in SOURCE_COLUMNS else "w." + n for n in ROW_COLUMNS)
            # In time order: a scan for recent spans then skips the older row groups by their start and end.
            c.execute(
                f"INSERT INTO {SPANS_TABLE} SELECT {picked} FROM {LINEAGE} l JOIN {_WALKED} w USING (tkey, skey) "
                "ORDER BY l.start_ns"
            )
            self._pend(_WALKED)
            self.summary.add_table(SPANS_TABLE)
            self.hot.reload(c, SPANS_TABLE)
        finally:
            _drop_walk(c)
        ((count,),) = c.execute(f"SELECT count(*) FROM {SPANS_TABLE}").fetchall()
        self.parents.count(c)
        self.summary.count_span_seconds(SPANS_TABLE)
        return int(count)


def _drop_walk(connection: duckdb.DuckDBPyConnection) -> None:
    for view in (LINEAGE, OWN_SPANS):
        connection.execute(f"DROP VIEW IF EXISTS {view}")
    for table in (_WALKED, LINEAGE_HANDED):
        connection.execute(f"DROP TABLE IF EXISTS {table}")
