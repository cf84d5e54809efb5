"""Iteration windows, and the stretches of the run that no window covers.

Windows are found per attempt (`attempts`). In an attempt, window N is the step span carrying its own
`rl.iteration = N` (the envelope when there are several); an attempt with no such step span gets, for each N, the
envelope of its spans whose effective iteration is N. When several attempts have a window for N, the latest one's
is the report's row and the earlier ones are superseded. Outside is each attempt's extent minus its windows:
start-up, gaps between steps, shutdown. And what else was happening in step N: every span active during its window,
whatever its own iteration (`goodput spans`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .attempts import ATTEMPT_SQL, find_attempts, keep_attempt
from .errors import GoodputError
from .lineage import ensure_lineage

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from .store import SpanStore


@dataclass(frozen=True)
class Window:
    """Iteration `iteration`'s stretch of attempt `run_id`, `[start_ns, end_ns)`."""

    iteration: int
    start_ns: int
    end_ns: int
    run_id: str = ""

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns


def attempt_windows(connection: duckdb.DuckDBPyConnection, order: Sequence[str]) -> list[Window]:
    """Every attempt's windows, superseded or not: by attempt in `order` (run ids), then by iteration.

    The step spans carrying their own iteration make the windows of the attempts that have any; only the attempts
    that have none (rare: a trace with no step spans) cost a second pass, for the envelopes of their iterations.
    """
    rows = connection.execute(
        f"""
        SELECT {ATTEMPT_SQL}, iteration, min(start_ns), max(end_ns) FROM spans_ex
        WHERE is_step AND iteration IS NOT NULL GROUP BY ALL
        """
    ).fetchall()
    stepless = sorted(set(order) - {row[0] for row in rows})
    if stepless:
        rows += connection.execute(
            f"""
            SELECT {ATTEMPT_SQL} AS attempt, eff_iteration, min(start_ns), max(end_ns) FROM spans_ex
            WHERE eff_iteration IS NOT NULL AND list_contains(?, attempt) GROUP BY ALL
            """,
            [stepless],
        ).fetchall()
    rank = {run_id: index for index, run_id in enumerate(order)}
    windows = [Window(int(i), int(start), int(end), run_id) for run_id, i, start, end in rows]
    windows.sort(key=lambda w: (rank[w.run_id], w.iteration))
    return windows


def latest_windows(windows: Sequence[Window]) -> tuple[list[Window], list[Window]]:
    """(rows, superseded) of `windows` in attempt order: per iteration the latest attempt's window, sorted by
    iteration, and every earlier one, in the order given."""
    latest = {w.iteration: w for w in windows}  # a later attempt's window replaces an earlier one's
    rows = sorted(latest.values(), key=lambda w: w.iteration)
    return rows, [w for w in windows if latest[w.iteration] is not w]


def iteration_windows(connection: duckdb.DuckDBPyConnection) -> list[Window]:
    """The report's windows, one per iteration (the latest attempt's), sorted by iteration.

    Needs the `spans_ex` table of `lineage.build_lineage`.
    """
    order = [a.run_id for a in find_attempts(connection)]
    rows, _ = latest_windows(attempt_windows(connection, order))
    return rows


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
    store: SpanStore,
    iteration: int,
    *,
    bucket: str | None = None,
    process: str | None = None,
    attempt: str | None = None,
) -> tuple[Window, pa.Table]:
    """(window, Arrow table) of the spans overlapping window `iteration`, sorted by start.

    The window is the report's row for `iteration` (the latest attempt's); the spans are of any attempt, as the
    wall clock is charged. `attempt` (a run id or `latest`) reads that attempt alone. `start_offset_s` is from the
    window's start (negative for a span that began before it); `iteration` is the span's effective iteration,
    which differs from the window's for work that spills across steps.
    """
    connection = store.connection
    ensure_lineage(store)
    if attempt is not None:
        keep_attempt(store, attempt)
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
