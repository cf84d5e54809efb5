"""What else was happening in step N: every span active during an iteration's window, whatever its own iteration."""

from __future__ import annotations

from typing import Optional

from .errors import GoodputError
from .lineage import ensure_lineage
from .windows import Window, iteration_windows


def window_of(connection, iteration: int) -> Window:
    for window in iteration_windows(connection):
        if window.iteration == iteration:
            return window
    raise GoodputError(f"no iteration {iteration} in these traces")


def spans_in_window(store, iteration: int, *, bucket: Optional[str] = None, process: Optional[str] = None):
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
