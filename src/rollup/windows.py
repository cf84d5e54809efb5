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
from .schema import BUCKETS

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from .store import SpanStore


@dataclass(frozen=True, slots=True)
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
    """The window of `iteration`; GoodputError naming the iterations these traces hold when it is not one."""
    windows = iteration_windows(connection)
    for window in windows:
        if window.iteration == iteration:
            return window
    raise GoodputError(_missing_iterations((iteration, iteration), windows))


def missing_iterations(store: SpanStore, selected: tuple[int, int]) -> str | None:
    """Why `selected` (inclusive; ends may be open, +-2**63) holds no iteration of these traces, naming those they
    hold ("no iteration 99 in these traces; they hold iterations 1-6"); None when it holds one."""
    ensure_lineage(store)
    windows = iteration_windows(store.connection)
    if any(selected[0] <= window.iteration <= selected[1] for window in windows):
        return None
    return _missing_iterations(selected, windows)


def _missing_iterations(selected: tuple[int, int], windows: Sequence[Window]) -> str:
    low, high = selected
    if low == high:
        asked = f"iteration {low}"
    else:
        asked = "iteration in the range " + (str(low) if low > -(2**63) else "") + ":"
        asked += str(high) if high < 2**63 - 1 else ""
    held = sorted(window.iteration for window in windows)
    if not held:
        return f"no {asked} in these traces: they hold no iteration (no rl.iteration on any step or span)"
    return f"no {asked} in these traces; they hold {iteration_list(held)}"


def iteration_list(iterations: Sequence[int], most: int = 6) -> str:
    """`iterations 1-6`, `iterations 1-3, 7, 9-12`: sorted numbers as runs, the first `most` runs and the last."""
    runs: list[list[int]] = []
    for number in iterations:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    texts = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    if len(texts) > most + 1:
        texts = [*texts[:most], "...", texts[-1]]
    count = f" ({len(iterations)} in all)" if len(runs) > most + 1 else ""
    noun = "iteration" if len(iterations) == 1 else "iterations"
    return f"{noun} {', '.join(texts)}{count}"


def spans_in_window(
    store: SpanStore,
    iteration: int | None,
    *,
    bucket: str | None = None,
    process: str | None = None,
    attempt: str | None = None,
) -> tuple[Window | None, pa.Table]:
    """(window, Arrow table) of the spans overlapping window `iteration`, sorted by start; with `iteration` None,
    (None, every span).

    The window is the report's row for `iteration` (the latest attempt's); the spans are of any attempt, as the
    wall clock is charged. `attempt` (a run id or `latest`) reads that attempt alone. `start_offset_s` is from the
    window's start (negative for a span that began before it), or from the first span's start when listing every
    span; `iteration` is the span's effective iteration, which differs from the window's for work that spills
    across steps.

    `bucket` is one of the four buckets. `process` selects the process shown as that name and those shown as
    `<process>@host:pid` or `<process> [host:pid]`, i.e. every process of a service when the name is its service
    name (SPEC section 1's display names). An unknown bucket, a process these traces do not have, and an iteration
    with no window are GoodputErrors naming what there is.
    """
    connection = store.connection
    if bucket is not None and bucket not in BUCKETS:
        raise GoodputError(f"no bucket {bucket!r}; buckets: {', '.join(BUCKETS)}")
    ensure_lineage(store)
    if attempt is not None:
        keep_attempt(store, attempt)
    filters: list[str] = []
    params: dict[str, object] = {}
    window = None
    if iteration is None:
        (params["start"],) = connection.execute("SELECT coalesce(min(start_ns), 0) FROM spans_ex").fetchall()[0]
    else:
        window = window_of(connection, iteration)
        filters += ["start_ns < $end", "(end_ns > $start OR (end_ns = start_ns AND start_ns >= $start))"]
        params.update(start=window.start_ns, end=window.end_ns)
    if bucket is not None:
        filters.append("bucket = $bucket")
        params["bucket"] = bucket
    if process is not None:
        filters.append(_require_process(connection, process))
        params["process"] = process
    table = connection.sql(
        f"""
        SELECT (start_ns - $start) / 1e9 AS start_offset_s, (end_ns - start_ns) / 1e9 AS duration_s, process,
               bucket, span_group, name, eff_iteration AS iteration, span_id, parent_span_id, trace_id
        FROM spans_ex WHERE {" AND ".join(filters) or "true"}
        ORDER BY start_ns, end_ns DESC, span_id
        """,
        params=params,
    ).to_arrow_table()
    return window, table


# The processes `--process NAME` selects: NAME itself, and NAME as the service or shared name of a display name.
_PROCESS_MATCH_SQL = (
    "(process = $process OR starts_with(process, $process || '@') OR starts_with(process, $process || ' ['))"
)


def _require_process(connection: duckdb.DuckDBPyConnection, process: str) -> str:
    """The filter selecting `process` (see `_PROCESS_MATCH_SQL`); GoodputError naming the processes there are
    when it selects none."""
    found = connection.execute(
        f"SELECT 1 FROM spans_ex WHERE {_PROCESS_MATCH_SQL} LIMIT 1", {"process": process}
    ).fetchall()
    if not found:
        names = [n for (n,) in connection.execute("SELECT DISTINCT process FROM spans_ex ORDER BY 1").fetchall() if n]
        shown = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
        raise GoodputError(
            f"no process {process!r} in these traces (nor one shown as {process}@host:pid or {process} [host:pid]); "
            f"processes: {shown}"
        )
    return _PROCESS_MATCH_SQL
