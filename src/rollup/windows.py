"""Iteration windows, and the stretches of the run that no window covers.

Window N is the step span with `rl.iteration = N` (the envelope when there are several). A trace with no step
spans at all gets, for each N, the envelope of the spans whose effective iteration is N. Outside is the run's own
time (its job spans, else all spans) minus every window: start-up, gaps between steps, shutdown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .lineage import IS_JOB_SQL


@dataclass(frozen=True)
class Window:
    iteration: int
    start_ns: int
    end_ns: int

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns


def iteration_windows(connection) -> list[Window]:
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


def run_extent(connection) -> Optional[tuple[int, int]]:
    """The run's `[start, end]`: the envelope of its job spans, else of every span; None for no spans."""
    for where in (IS_JOB_SQL, "true"):
        start, end = connection.execute(f"SELECT min(start_ns), max(end_ns) FROM spans_ex WHERE {where}").fetchall()[0]
        if start is not None:
            return int(start), int(end)
    return None


def outside_stretches(extent: Optional[tuple[int, int]], windows: list[Window]) -> list[tuple[int, int]]:
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
