"""The watcher's summary of the run (`goodput watch`): what the report's questions of the whole run read, kept up to
date as spans arrive, so none of them scans every span.

Two parts. Every span folded to a row per attempt, process, holding, step-or-not and job-or-not, with the earliest
start and the latest end (SUMMARY, the `own` relation of `spans()`: what `attempts.find_attempts`,
`gpus.read_holders` and `recent.last_stretch` read; a few rows however long the run). And the step spans as they
are, in a table of the database's own (`steps`: the windows and the step rules), whose questions are answered once
until a step span arrives (`_SummarySpans`). Each span's own columns, which a walk does not change: spans walked
again are not summarized again. Beside them, each (attempt, iteration)'s span-seconds, kept as sums.
"""

from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from rollup.accounting.attribution import SPAN_SECONDS_SPANS
from rollup.base.arrays import FALSE, rising
from rollup.base.nodes import NODE_TABLE_COLUMNS
from rollup.base.schema import BUCKETS, IS_JOB_SQL
from rollup.store.attempts import ATTEMPT_SQL, Attempt
from rollup.store.lineage import LINEAGE_COLUMNS
from rollup.store.spanset import Params, SpanSet

from .held import Held

if TYPE_CHECKING:
    import duckdb

    from rollup.accounting.windows import Windows

SUMMARY = "live_summary"  # a view of the spans folded (`_merge_folded`)
_SUMMARY_STEPS = "live_summary_steps"
_SUMMARY_FOLDED = "live_summary_folded"
# The watcher's spans table's columns: the lineage's, and each span's file and its process as read (before
# `LiveSpans._renamed`), for a rebuild.
SOURCE_COLUMNS = ("source_file", "source_process")
ROW_COLUMNS = (*NODE_TABLE_COLUMNS, *LINEAGE_COLUMNS, *SOURCE_COLUMNS)
_OWN_KEYS = ("run_id", "process", "host_pid", "service", "holding")


class Summary:
    """The summary of the spans of the watcher's table `spans_table` on `connection` (`schema`: its columns)."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, spans_table: str, schema: pa.Schema) -> None:
        self.connection = connection
        self._schema = schema
        self._folded = schema.empty_table()
        self._folded_keyed = self._folded.append_column("live_is_job", pa.array([], pa.bool_()))
        # The step spans as a table of the database's own (appended to a few times in ten refreshes): each question
        # of them scans it faster than it scans an Arrow table handed over by name.
        connection.execute(f"CREATE TEMP TABLE {_SUMMARY_STEPS} AS SELECT * FROM {spans_table} LIMIT 0")
        self.step_answers: dict[tuple[str, str, str], Any] = {}  # `_SummarySpans`: emptied when a step span arrives
        self.own_answers: dict[tuple[str, str, str], Any] = {}  # `_SummarySpans`: emptied when a folded row is new
        self.steps_version = 0  # counts the times the step spans changed
        self._registered = False  # the folded part as it stands is what SUMMARY reads
        # What is to be done before a query reads every span (`LiveSpans.written`: the rows waiting are written).
        self.before_every_span: Callable[[], None] | None = None
        # Each (attempt, iteration)'s span-seconds by bucket (BUCKETS order): `attribution.window_span_ns`'s sums,
        # kept up to date as spans arrive and are walked again; and the windows' columns of them, kept.
        self.span_seconds: dict[tuple[str, int], tuple[int, ...]] = {}
        self._span_changed: set[tuple[str, int]] = set()  # since the windows' columns were last asked for
        self._span_count = 0  # the times every sum was counted again
        self._span_columns = Held(len(BUCKETS))
        self.registered()
        connection.execute(f"CREATE VIEW {SUMMARY} AS SELECT * FROM {_SUMMARY_FOLDED}")

    def spans(self, lineage: str) -> SpanSet:
        """The whole run: the summary for the own columns, `lineage` (every span) for the lineage."""
        return _SummarySpans(self.connection, lineage, SUMMARY, steps=_SUMMARY_STEPS, summary=self)

    def clear(self) -> None:
        """Forget every span (a rebuild summarizes them all again)."""
        self._folded = self._folded.slice(0, 0)
        self._folded_keyed = self._folded_keyed.slice(0, 0)
        self.connection.execute(f"DELETE FROM {_SUMMARY_STEPS}")
        self.step_answers.clear()
        self.steps_version += 1
        self.own_answers.clear()
        self._registered = False

    def attempts(self) -> list[Attempt]:
        """`attempts.find_attempts` of the summary, worked out here from its few folded rows (a query of them costs
        milliseconds, each refresh): each attempt's extent is the envelope of its job spans, else of all its spans;
        ordered by the first span's start, then run id."""
        found: dict[str, list[Any]] = {}  # attempt -> [start, end, job start, job end, first start, processes]
        columns = ("run_id", "process", "start_ns", "end_ns", "live_is_job")
        for run_id, process, start, end, is_job in zip(*(self._folded_keyed.column(c).to_pylist() for c in columns),
                                                       strict=True):  # fmt: skip
            held = found.setdefault(run_id or "", [start, end, None, None, start, set()])
            held[0], held[1], held[4] = min(held[0], start), max(held[1], end), min(held[4], start)
            if is_job:
                held[2] = start if held[2] is None else min(held[2], start)
                held[3] = end if held[3] is None else max(held[3], end)
            if process is not None:
                held[5].add(process)
        made = [
            Attempt(run_id, s if js is None else js, e if je is None else je, first, len(processes))
            for run_id, (s, e, js, je, first, processes) in found.items()
        ]
        return sorted(made, key=lambda a: (a.first_span_ns, a.run_id))

    def add_rows(self, rows: pa.Table) -> None:
        """`add_table` of new spans held as Arrow (`live_is_job` among their columns): folded here, no query."""
        self._add_steps(rows.filter(pc.fill_null(rows.column("is_step"), FALSE)))
        self._merge_folded(rows.select([*ROW_COLUMNS, "live_is_job"]))

    def add_table(self, table: str) -> None:
        """Fold the new spans of `table` into the summary: their step spans as they are (`_SUMMARY_STEPS`, what
        `windows.attempt_windows` and the step rules read), and every span as one row per attempt, process,
        holding, whether a step and whether a job span, spanning their earliest start to their latest end (SUMMARY:
        what `attempts.find_attempts`, `gpus.read_holders` and `recent.last_stretch` read; a few rows however long
        the run). Each span's own columns, which a walk does not change: spans walked again are not folded again."""
        c = self.connection
        columns = ", ".join(ROW_COLUMNS)
        self._add_steps(c.sql(f"SELECT {columns} FROM {table} WHERE is_step").to_arrow_table())
        keys = ", ".join(_OWN_KEYS)
        others = [n for n in ROW_COLUMNS if n not in (*_OWN_KEYS, "start_ns", "end_ns")]
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
        self.steps_version += 1
        self.connection.register("live_new_steps", steps.select(list(ROW_COLUMNS)).cast(self._schema))
        try:
            self.connection.execute(f"INSERT INTO {_SUMMARY_STEPS} SELECT * FROM live_new_steps")
        finally:
            self.connection.unregister("live_new_steps")

    def _merge_folded(self, new: pa.Table) -> None:
        """Fold `new` (rows of ROW_COLUMNS and `live_is_job`, one or more a key) into the folded part: a row per
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
        if kept.num_rows != self._folded_keyed.num_rows:
            self.own_answers.clear()
        self._folded_keyed = kept.cast(self._folded_keyed.schema)
        self._folded = self._folded_keyed.drop_columns(["live_is_job"])
        self._registered = False

    def registered(self) -> None:
        """Make SUMMARY read the folded part as it stands (before a query of it: registering costs a millisecond,
        and most refreshes ask none)."""
        if not self._registered:
            self.connection.register(_SUMMARY_FOLDED, self._folded)
            self._registered = True

    def span_ns_of(self, windows: Windows) -> list[array]:
        """Each window's span-seconds (`attribution.window_span_ns`), from the sums kept: a column per bucket, kept
        from one asking to the next but where the sums changed (`held`)."""
        run_ids, attempts, iterations = windows.run_ids, windows.attempts, windows.iterations
        changed, self._span_changed = self._span_changed, set()
        if rising(iterations):  # a row per iteration, in order (the report's rows): each changed sum's row by halves
            stale = []
            for attempt, iteration in changed:
                at = bisect.bisect_left(iterations, iteration)
                if at < len(iterations) and iterations[at] == iteration and run_ids[attempts[at]] == attempt:
                    stale.append(at)
        else:
            stale = list(range(len(iterations)))
        stretches = windows.stretches
        asked = self._span_columns.plan(
            (attempts, iterations), (tuple(run_ids), self._span_count), stretches.starts, stretches.ends, stale
        )
        held, none = self.span_seconds, (0,) * len(BUCKETS)
        return self._span_columns.fill([held.get((run_ids[attempts[p]], iterations[p]), none) for p in asked])

    def add_span_seconds(self, rows: pa.Table, sign: int) -> None:
        """Add to `span_seconds` (or, `sign` -1, take from it) what the spans of `rows` count."""
        counted = rows.filter(pc.and_(pc.fill_null(rows.column("bucketed"), FALSE),
                                      pc.is_valid(rows.column("eff_iteration"))))  # fmt: skip
        if not counted.num_rows:
            return
        keyed = pa.table({
            "attempt": pc.fill_null(counted.column("run_id"), pa.scalar("", pa.string())),
            "iteration": counted.column("eff_iteration"), "bucket": counted.column("bucket"),
            "ns": pc.subtract(counted.column("end_ns"), counted.column("start_ns")),
        })  # fmt: skip
        summed = keyed.group_by(["attempt", "iteration", "bucket"]).aggregate([("ns", "sum")])
        held, none = self.span_seconds, (0,) * len(BUCKETS)
        for attempt, iteration, bucket, ns in zip(*(summed.column(n).to_pylist() for n in summed.column_names),
                                                  strict=True):  # fmt: skip
            values = list(held.get((attempt, iteration), none))
            values[BUCKETS.index(bucket)] += sign * ns
            held[(attempt, iteration)] = tuple(values)
            self._span_changed.add((attempt, iteration))

    def count_span_seconds(self, table: str) -> None:
        """`span_seconds` read again from every span of `table` (after a walk in SQL)."""
        self.span_seconds, self._span_changed = {}, set()
        self._span_count += 1
        held, none = self.span_seconds, (0,) * len(BUCKETS)
        for attempt, iteration, bucket, ns in self.connection.execute(
            f"SELECT {ATTEMPT_SQL}, eff_iteration, bucket, sum(end_ns - start_ns)::BIGINT FROM {table} "
            f"WHERE {SPAN_SECONDS_SPANS} GROUP BY ALL"
        ).fetchall():
            values = list(held.get((attempt, iteration), none))
            values[BUCKETS.index(bucket)] = int(ns)
            held[(attempt, iteration)] = tuple(values)


@dataclass(frozen=True)
class _SummarySpans(SpanSet):
    """The watcher's whole run (`LiveSpans.spans`), whose questions of the summary alone are answered once until
    what they read changes: of the step spans alone (`steps`, not `own` nor `lineage`), until a step span arrives
    (the driver's, a few batches in ten: the windows, the step rules); of the folded spans' other columns than their
    times (`own`, no `start_ns`, `end_ns` nor `*`), until a folded row is new (a process, a holding: what the
    processes hold)."""

    summary: Summary | None = None

    def _kept(self, sql: str) -> dict[tuple[str, str, str], Any] | None:
        """Where the answer of `sql` is kept, when it is kept."""

        def names(relation: str | None) -> bool:
            return relation is not None and re.search(rf"\b{re.escape(relation)}\b", sql) is not None

        if self.summary is None or names(self.lineage):
            return None
        if names(self.steps) and not names(self.own):
            return self.summary.step_answers
        if names(self.own) and not names(self.steps) and _TIMES.search(sql) is None:
            return self.summary.own_answers
        return None

    def _ready(self, sql: str) -> None:
        if self.summary is None:
            return
        if re.search(rf"\b{re.escape(self.own)}\b", sql):
            self.summary.registered()
        if self.summary.before_every_span is not None and re.search(rf"\b{re.escape(self.lineage)}\b", sql):
            self.summary.before_every_span()

    def _asked(self, how: str, sql: str, params: Params, ask: Callable[[], Any]) -> Any:
        """`ask()`'s answer to `sql`, or the one kept (`_kept`)."""
        kept = self._kept(sql)
        key = (how, sql, repr(params))
        if kept is not None and key in kept:
            return kept[key]
        self._ready(sql)
        found = ask()
        if kept is not None:
            kept[key] = found
        return found

    def rows(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        return list(self._asked("rows", sql, params, lambda: SpanSet.rows(self, sql, params)))

    def run(self, sql: str, params: Params = None) -> None:
        self._ready(sql)
        super().run(sql, params)

    def arrow(self, sql: str, params: Params = None) -> pa.Table:
        table: pa.Table = self._asked("arrow", sql, params, lambda: SpanSet.arrow(self, sql, params))
        return table

    def batches(self, sql: str, params: Params = None, *, rows: int) -> pa.RecordBatchReader:
        self._ready(sql)
        return super().batches(sql, params, rows=rows)


# What a question of the folded spans reads that changes at every refresh: their times (or every column).
_TIMES = re.compile(r"\bstart_ns\b|\bend_ns\b|\*")
