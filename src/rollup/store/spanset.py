"""The spans a question is asked of: a store's spans with their lineage, the whole run's or one attempt's.

Every part of the accounting (attempts, windows, charges, breakdowns, checks, the timeline) takes a `SpanSet` rather
than a DuckDB connection and a table name it knows by heart: the set says which relations to read, and lends its
connection for the queries. A store hands sets out (`SpanStore.spans`) and keeps what they name; a Ray task builds
one over its slice of the lineage table (`runners.ray_slices.load_slice`). A set never changes what it names, so two
questions asked of one store, one attempt and then the whole run, each get their own answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from rollup.base.connection import connection_limit_bytes, drop_table_or_view, out_of_memory
from rollup.base.tables import LINEAGE

from .attempts import ATTEMPT_SQL, Attempt, find_attempts

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

# Scratch tables are numbered across the process: two sets on one connection never take the same name.
_SCRATCH = itertools.count(1)

Params = Sequence[Any] | dict[str, Any] | None
# A process's holding as `SpanSet.holdings` gives it: (attempt, process, host_pid, service, holding).
Holding = tuple[str, str, str | None, str | None, str | None]


@dataclass(frozen=True)
class SpanSet:
    """Spans with their lineage on `connection`: `lineage` names the relation with every column of
    `lineage.LINEAGE_COLUMNS` (each span's own accounting columns and what it inherits), `own` one with a span's own
    columns alone, cheaper to read where `lineage` is a join (the same relation elsewhere). `run_id` is the attempt
    kept (None: every attempt); `files`, the Parquet files `lineage` reads when it is a view of them (what a Ray task
    of `report --ray` is given to read its slice from), else empty."""

    connection: duckdb.DuckDBPyConnection
    lineage: str = LINEAGE
    own: str = LINEAGE
    run_id: str | None = None
    files: tuple[str, ...] = ()

    # --- the questions of the whole run, by name ----------------------------------------------------------------

    def attempts(self) -> list[Attempt]:
        """Every attempt, ordered by its first span's start (then run id), windows not yet known
        (`attempts.find_attempts`)."""
        return find_attempts(self)

    def step_spans(self) -> SpanSet:
        """The step spans alone (`is_step`), each with its own columns: a set whose relations hold just them. Every
        question of the step spans (the windows, the step rules) asks this set."""
        steps = f"(SELECT * FROM {self.own} WHERE is_step)"
        return SpanSet(self.connection, steps, steps, self.run_id)

    def holdings(self) -> list[Holding]:
        """What the processes hold: each distinct (attempt, process, host_pid, service, holding), sorted (what
        `accounting.gpus.read_holders` reads)."""
        return self.rows(
            f"SELECT DISTINCT {ATTEMPT_SQL}, process, host_pid, service, holding FROM {self.own} ORDER BY ALL"
        )

    def newest_end_ns(self) -> int | None:
        """T: the latest span end (None when the set holds no span)."""
        ((newest,),) = self.rows(f"SELECT max(end_ns) FROM {self.own}")
        return None if newest is None else int(newest)

    def in_memory(self) -> pa.Table | None:
        """The spans themselves as Arrow (every column of `lineage`), when this process holds them so (a watcher's
        slice of its newest spans): a question of a few spans may read them there, with no query. None: ask the
        database."""
        return None

    # --- queries ----------------------------------------------------------------------------------------------

    def rows(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        """The rows of `sql`, as tuples."""
        return self._execute(sql, params).fetchall()

    def run(self, sql: str, params: Params = None) -> None:
        """Run a statement that returns nothing to read (CREATE, INSERT, DROP)."""
        self._execute(sql, params)

    def arrow(self, sql: str, params: Params = None) -> pa.Table:
        """The result of `sql` as an Arrow table."""
        return self.connection.sql(sql, params=params).to_arrow_table()

    def batches(self, sql: str, params: Params = None, *, rows: int) -> pa.RecordBatchReader:
        """The result of `sql` as Arrow batches of `rows` rows, read as they are asked for."""
        return self.connection.sql(sql, params=params).to_arrow_reader(rows)

    def _execute(self, sql: str, params: Params) -> duckdb.DuckDBPyConnection:
        return self.connection.execute(sql, params) if params is not None else self.connection.execute(sql)

    @contextmanager
    def scratch(self, what: str) -> Iterator[str]:
        """A name for a table (or view) of this caller's own, `what` and a number no other has; whatever it names
        is dropped on leaving, however the block ends."""
        name = f"{what}_{next(_SCRATCH)}"
        try:
            yield name
        finally:
            drop_table_or_view(self.connection, name)

    @contextmanager
    def registered(self, what: str, table: pa.Table) -> Iterator[str]:
        """`table` readable by SQL under a name of its own (`what` and a number) while the block runs."""
        name = f"{what}_{next(_SCRATCH)}"
        self.connection.register(name, table)
        try:
            yield name
        finally:
            self.connection.unregister(name)

    @property
    def limit_bytes(self) -> int:
        """The memory limit of the connection's DuckDB (`connection.connect`)."""
        return connection_limit_bytes(self.connection)

    def guarded(self, error: BaseException) -> BaseException:
        """The error to raise for `error` met running a query: DuckDB out of memory said as such, else `error`."""
        return out_of_memory(error) or error


class SpanSource(Protocol):
    """What hands out sets of spans: a store (`store.SpanStore`), or a watcher's spans (`watch.spans.LiveSpans`).
    What a report, a check and the critical path read."""

    def spans(self, attempt: str | None = None) -> SpanSet: ...
