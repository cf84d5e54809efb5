"""The watcher's summary of the run (`goodput watch`): what the report's questions of the whole run read, kept up to
date as spans arrive, so none of them scans every span.

Two parts. Every span folded to a row per attempt, process, holding, step-or-not and job-or-not, with the earliest
start and the latest end: what the attempts (`attempts.attempts_of_folded`), the processes' holdings and the latest
span end are answered from, a few rows however long the run. And the step spans as they are, in a table of the
database's own (what the windows and the step rules read), whose questions are answered once until a step span
arrives (`step_spans`). Each span's own columns, which a walk does not change: spans walked again are not summarized
again. Beside them, each (attempt, iteration)'s span-seconds, kept as sums (`span_seconds.span_seconds_of_rows`).
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from rollup.accounting.span_seconds import span_seconds_ns, span_seconds_of_rows
from rollup.base.arrays import FALSE, rising
from rollup.base.nodes import NODE_TABLE_COLUMNS
from rollup.base.schema import BUCKETS, IS_JOB_SQL
from rollup.store.attempts import Attempt, attempts_of_folded
from rollup.store.lineage import LINEAGE_COLUMNS
from rollup.store.spanset import Holding, Params, SpanSet

from .held import Held

if TYPE_CHECKING:
    import duckdb

    from rollup.accounting.windows import Windows

_SUMMARY_STEPS = "live_summary_steps"
_SUMMARY_FOLDED = "live_summary_folded"
# The watcher's spans table's columns: the lineage's, and each span's file and its process as read (before
# `LiveSpans._renamed`), for a rebuild.
SOURCE_COLUMNS = ("source_file", "source_process")
ROW_COLUMNS = (*NODE_TABLE_COLUMNS, *LINEAGE_COLUMNS, *SOURCE_COLUMNS)
_OWN_KEYS = ("run_id", "process", "host_pid", "service", "holding")


class Summary:
    """The summary of the spans of the watcher's table `spans_table` on `connection` (`schema`: its columns), and
    the questions of the whole run it answers (`LiveSpans.spans` asks them here)."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, spans_table: str, schema: pa.Schema) -> None:
        self.connection = connection
        self._schema = schema
        # The folded rows: ROW_COLUMNS and `live_is_job` (`_merge_folded`).
        self._folded = schema.empty_table().append_column("live_is_job", pa.array([], pa.bool_()))
        # The step spans as a table of the database's own (appended to a few times in ten refreshes): each question
        # of them scans it faster than it scans an Arrow table handed over by name.
        connection.execute(f"CREATE TEMP TABLE {_SUMMARY_STEPS} AS SELECT * FROM {spans_table} LIMIT 0")
        self._step_answers: dict[tuple[str, str, str], Any] = {}  # `step_spans`: emptied when a step span arrives
        self._holdings: list[Holding] | None = None  # forgotten when a folded row is new
        self.steps_version = 0  # counts the times the step spans changed
        # Each (attempt, iteration)'s span-seconds by bucket (BUCKETS order): `span_seconds.window_span_ns`'s sums,
        # kept up to date as spans arrive and are walked again; and the windows' columns of them, kept.
        self.span_seconds: dict[tuple[str, int], tuple[int, ...]] = {}
        self._span_changed: set[tuple[str, int]] = set()  # since the windows' columns were last asked for
        self._span_count = 0  # the times every sum was counted again
        self._span_columns = Held(len(BUCKETS))

    def clear(self) -> None:
        """Forget every span (a rebuild summarizes them all again)."""
        self._folded = self._folded.slice(0, 0)
        self.connection.execute(f"DELETE FROM {_SUMMARY_STEPS}")
        self._step_answers.clear()
        self.steps_version += 1
        self._holdings = None

    # --- the questions of the whole run (`SpanSet`'s named ones) ---------------------------------------------------

    def attempts(self) -> list[Attempt]:
        """`SpanSet.attempts`, worked out from the few folded rows in Python (`attempts.attempts_of_folded`: a
        query of them costs milliseconds, each refresh)."""
        columns = ("run_id", "process", "start_ns", "end_ns", "live_is_job", "holding")
        return attempts_of_folded(*(self._folded.column(c).to_pylist() for c in columns))

    def step_spans(self) -> SpanSet:
        """`SpanSet.step_spans`: the step spans' table, whose answers are kept until a step span arrives (the
        driver's, a few batches in ten: the windows, the step rules)."""
        return _StepSpans(self.connection, _SUMMARY_STEPS, _SUMMARY_STEPS, answers=self._step_answers)

    def holdings(self) -> list[Holding]:
        """`SpanSet.holdings`, asked of the folded rows (their own columns but the times), kept until a folded row
        is new (a process, a holding)."""
        if self._holdings is None:
            self.connection.register(_SUMMARY_FOLDED, self._folded)
            try:
                self._holdings = SpanSet(self.connection, _SUMMARY_FOLDED, _SUMMARY_FOLDED).holdings()
            finally:
                self.connection.unregister(_SUMMARY_FOLDED)
        return self._holdings

    def newest_end_ns(self) -> int | None:
        """`SpanSet.newest_end_ns`: the latest end of the folded rows."""
        newest = pc.max(self._folded.column("end_ns")).as_py()
        return None if newest is None else int(newest)

    # --- arrivals ---------------------------------------------------------------------------------------------------

    def add_rows(self, rows: pa.Table) -> None:
        """`add_table` of new spans held as Arrow (`live_is_job` among their columns): folded here, no query."""
        self._add_steps(rows.filter(pc.fill_null(rows.column("is_step"), FALSE)))
        self._merge_folded(rows.select([*ROW_COLUMNS, "live_is_job"]))

    def add_table(self, table: str) -> None:
        """Fold the new spans of `table` into the summary: their step spans as they are (`_SUMMARY_STEPS`, what
        `windows.attempt_windows` and the step rules read), and every span as one row per attempt, process,
        holding, whether a step and whether a job span, spanning their earliest start to their latest end (what
        the attempts, the holdings and the latest end are answered from; a few rows however long the run). Each
        span's own columns, which a walk does not change: spans walked again are not folded again."""
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
        self._step_answers.clear()
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
        both = pa.concat_tables([self._folded, new.cast(self._folded.schema)])
        both = both.append_column("live_row", pa.array(range(both.num_rows), pa.int64()))
        grouped = both.group_by([*_OWN_KEYS, "is_step", "live_is_job"], use_threads=False).aggregate(
            [("live_row", "min"), ("start_ns", "min"), ("end_ns", "max")]
        )
        kept = both.take(grouped.column("live_row_min")).drop_columns(["live_row"])
        kept = kept.set_column(kept.schema.get_field_index("start_ns"), "start_ns", grouped.column("start_ns_min"))
        kept = kept.set_column(kept.schema.get_field_index("end_ns"), "end_ns", grouped.column("end_ns_max"))
        if kept.num_rows != self._folded.num_rows:
            self._holdings = None
        self._folded = kept.cast(self._folded.schema)

    # --- span-seconds -----------------------------------------------------------------------------------------------

    def span_ns_of(self, windows: Windows) -> list[array]:
        """Each window's span-seconds (`span_seconds.window_span_ns`), from the sums kept: a column per bucket, kept
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
        """Add to `span_seconds` (or, `sign` -1, take from it) what the spans of `rows` count
        (`span_seconds.span_seconds_of_rows`)."""
        held, none = self.span_seconds, (0,) * len(BUCKETS)
        for key, by_bucket in span_seconds_of_rows(rows).items():
            values = held.get(key, none)
            held[key] = tuple(value + sign * by_bucket[b] for value, b in zip(values, BUCKETS, strict=True))
            self._span_changed.add(key)

    def count_span_seconds(self, table: str) -> None:
        """`span_seconds` read again from every span of `table` (`span_seconds.span_seconds_ns`), after a walk in
        SQL."""
        counted = span_seconds_ns(SpanSet(self.connection, table, table))
        self.span_seconds = {key: tuple(by_bucket[b] for b in BUCKETS) for key, by_bucket in counted.items()}
        self._span_changed = set()
        self._span_count += 1


@dataclass(frozen=True)
class _StepSpans(SpanSet):
    """The watcher's step spans (`Summary.step_spans`): each answer kept in `answers` (by how and what was asked)
    until a step span arrives and the summary empties them."""

    answers: dict[tuple[str, str, str], Any] = field(kw_only=True)

    def rows(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        key = ("rows", sql, repr(params))
        if key not in self.answers:
            self.answers[key] = super().rows(sql, params)
        return list(self.answers[key])

    def arrow(self, sql: str, params: Params = None) -> pa.Table:
        key = ("arrow", sql, repr(params))
        if key not in self.answers:
            self.answers[key] = super().arrow(sql, params)
        table: pa.Table = self.answers[key]
        return table
