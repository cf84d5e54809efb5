"""What else was happening in step N (`goodput spans`): every span active during its window, whatever its own
iteration, process or attempt, as the wall clock is charged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollup.accounting.windows import Window, window_of
from rollup.base.errors import GoodputError
from rollup.base.schema import BUCKETS

if TYPE_CHECKING:
    import pyarrow as pa

    from rollup.store.span_store import SpanStore
    from rollup.store.spanset import SpanSet


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
    name (SPEC section 1's display names), in any case. An unknown bucket, a process these traces do not have, and
    an iteration with no window are GoodputErrors naming what there is.
    """
    if bucket is not None and bucket not in BUCKETS:
        raise GoodputError(f"no bucket {bucket!r}; buckets: {', '.join(BUCKETS)}")
    spans = store.spans(attempt)
    filters: list[str] = []
    params: dict[str, object] = {}
    window = None
    if iteration is None:
        ((params["start"],),) = spans.rows(f"SELECT coalesce(min(start_ns), 0) FROM {spans.lineage}")
    else:
        window = window_of(spans, iteration)
        filters += ["start_ns < $end", "(end_ns > $start OR (end_ns = start_ns AND start_ns >= $start))"]
        params.update(start=window.start_ns, end=window.end_ns)
    if bucket is not None:
        filters.append("bucket = $bucket")
        params["bucket"] = bucket
    if process is not None:
        filters.append(_require_process(spans, process))
        params["process"] = process
    table = spans.arrow(
        f"""
        SELECT (start_ns - $start) / 1e9 AS start_offset_s, (end_ns - start_ns) / 1e9 AS duration_s, process,
               bucket, span_group, name, eff_iteration AS iteration, span_id, parent_span_id, trace_id
        FROM {spans.lineage} WHERE {" AND ".join(filters) or "true"}
        ORDER BY start_ns, end_ns DESC, span_id
        """,
        params,
    )
    return window, table


# The processes `--process NAME` selects: NAME itself, and NAME as the service or shared name of a display name, in
# any case (as span groups are).
_PROCESS_MATCH_SQL = (
    "(lower(process) = lower($process) OR starts_with(lower(process), lower($process) || '@') "
    "OR starts_with(lower(process), lower($process) || ' ['))"
)


def _require_process(spans: SpanSet, process: str) -> str:
    """The filter selecting `process` (see `_PROCESS_MATCH_SQL`); GoodputError naming the processes there are
    when it selects none."""
    found = spans.rows(f"SELECT 1 FROM {spans.lineage} WHERE {_PROCESS_MATCH_SQL} LIMIT 1", {"process": process})
    if not found:
        names = [n for (n,) in spans.rows(f"SELECT DISTINCT process FROM {spans.lineage} ORDER BY 1") if n]
        shown = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
        raise GoodputError(
            f"no process {process!r} in these traces (nor one shown as {process}@host:pid or {process} [host:pid]); "
            f"processes: {shown}"
        )
    return _PROCESS_MATCH_SQL
