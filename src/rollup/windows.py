"""Iteration windows, and the stretches of the run that no window covers.

Window N is the step span with `rl.iteration = N` (the envelope when there are several). A trace with no step
spans at all gets, for each N, the envelope of the spans whose effective iteration is N. Outside is the run's own
time (its job spans, else all spans) minus every window: start-up, gaps between steps, shutdown. And what else was
happening in step N: every span active during its window, whatever its own iteration (`goodput spans`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import GoodputError
from .lineage import ensure_lineage
from .schema import IS_JOB_SQL

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from .store import SpanStore


@dataclass(frozen=True)
class Window:
    """Iteration `iteration`'s stretch of the run, `[start_ns, end_ns)`."""

    iteration: int
    start_ns: int
    end_ns: int

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns


def iteration_windows(connection: duckdb.DuckDBPyConnection) -> list[Window]:
    """Every iteration's window, sorted by iteration (needs the `spans_ex` view of `lineage.build_lineage`)."""
    (has_steps,) = connection.execute(
        "SELECT count(*) > 0 FROM spans_ex WHERE is_step AND eff_iteration IS NOT NULL"
    ).fetchall()[0]
    source = "is_step" if has_steps else "true"
    rows = connection.execute(
        f"""
        SELECT eff_iteration, min(start_ns), max(end_ns) FROM spans_ex
        WHERE {source} AND eff_iteration IS NOT NULL
        GROUP BY eff_iteration ORDER BY eff_iteration
        """
    ).fetchall()
    return [Window(int(i), int(s), int(e)) for i, s, e in rows]


def run_extent(connection: duckdb.DuckDBPyConnection) -> tuple[int, int] | None:
    """The run's `[start, end]`: the envelope of its job spans, else of every span; None for no spans."""
    for where in (IS_JOB_SQL, "true"):
        start, end = connection.execute(f"SELECT min(start_ns), max(end_ns) FROM spans_ex WHERE {where}").fetchall()[0]
        if start is not None:
            return int(start), int(end)
    return None


def outside_stretches(extent: tuple[int, int] | None, windows: list[Window]) -> list[tuple[int, int]]:
    """The parts of `extent` covered by no window, as sorted disjoint `(start, end)` pairs."""
    if extent is None:
        return []
    cursor, run_end = extent
    stretches = []
    for window in sorted(windows, key=lambda w: w.start_ns):
        if window.start_ns > cursor:
            stretches.append((cursor, min(window.start_ns, run_end)))
        cursor = max(cursor, window.end_ns)
        if cursor >= run_end:
            break
    if cursor < run_end:
        stretches.append((cursor, run_end))
    return [(s, e) for s, e in stretches if e > s]


def window_of(connection: duckdb.DuckDBPyConnection, iteration: int) -> Window:
    """The window of `iteration`; GoodputError when these traces have none."""
    for window in iteration_windows(connection):
        if window.iteration == iteration:
            return window
    raise GoodputError(f"no iteration {iteration} in these traces")


def spans_in_window(
    store: SpanStore, iteration: int, *, bucket: str | None = None, process: str | None = None
) -> tuple[Window, pa.Table]:
    """(window, Arrow table) of the spans overlapping window `iteration`, sorted by start.

    `start_offset_s` is from the window's start (negative for a span that began before it); `iteration` is the
    span's effective iteration, which differs from the window's for work that spills across steps.
    """
    connection = store.connection
    ensure_lineage(store)
    window = window_of(connection, iteration)
    filters = ["start_ns < $end", "(end_ns > $start OR (end_ns = start_ns AND start_ns >= $start))"]
    params: dict[str, object] = {"start": window.start_ns, "end": window.end_ns}
    if bucket is not None:
        filters.append("bucket = $bucket")
        params["bucket"] = bucket
    if process is not None:
        filters.append("process = $process")
        params["process"] = process
    table = store.sql(
        f"""
        SELECT (start_ns - $start) / 1e9 AS start_offset_s, (end_ns - start_ns) / 1e9 AS duration_s, process,
               bucket, span_group, name, eff_iteration AS iteration, span_id, parent_span_id, trace_id
        FROM spans_ex WHERE {" AND ".join(filters)}
        ORDER BY start_ns, end_ns DESC, span_id
        """,
        params,
    )
    return window, table
