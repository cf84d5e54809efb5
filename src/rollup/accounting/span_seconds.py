"""Span-seconds (SPEC section 4): the naive view a monitor computes, each bucketed span's full duration summed per
attempt and effective iteration, beside the wall clock's charge (`attribution`). It exceeds the wall clock wherever
spans nest or run concurrently.

One SQL original (`span_seconds_sql`: a report's rows, `window_span_ns`; `--by process`, `span_seconds_ns`) and its
Python twin on Arrow (`span_seconds_of_rows`: a watcher's new spans), held equal by
tests/test_accounting_fast_paths.py.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

from rollup.base.arrays import int64_column
from rollup.base.schema import BUCKETS
from rollup.store.attempts import ATTEMPT_SQL

from .windows import window_keys

if TYPE_CHECKING:
    import pyarrow as pa

    from rollup.store.spanset import SpanSet

    from .windows import Windows

# The spans whose full durations make span-seconds (here, and by name in `breakdown`).
SPAN_SECONDS_SPANS = "bucketed AND eff_iteration IS NOT NULL"


def span_seconds_sql(spans: SpanSet, by_process: bool = False) -> str:
    """SQL: the span-seconds of `spans` per attempt (its run id, `""` when unnamed: a row counts the spans of its own
    attempt only), effective iteration (and `process`): a column per bucket (BUCKETS names), the summed full
    durations of its bucketed spans."""
    sums = ", ".join(
        f"coalesce(sum(end_ns - start_ns) FILTER (WHERE bucket = '{b}'), 0)::BIGINT AS {b}" for b in BUCKETS
    )
    process = ", process" if by_process else ""
    return f"""
        SELECT {ATTEMPT_SQL} AS attempt, eff_iteration{process}, {sums} FROM {spans.lineage}
        WHERE {SPAN_SECONDS_SPANS} GROUP BY ALL
    """


def window_span_ns(spans: SpanSet, windows: Windows) -> list[array]:
    """The span-seconds (`span_seconds_sql`) of each window's (attempt, iteration), by position: a column of 64-bit
    integers per bucket (BUCKETS order), zero where the window has no bucketed span of its own attempt and iteration.

    What the report's rows take: 32 bytes a window, where the dict of `span_seconds_ns` holds ~0.4 KB each (and
    its rows on the way, more), at hundreds of thousands of windows."""

    if not windows:
        return [array("q") for _ in BUCKETS]
    keys = window_keys(windows)
    picked = ", ".join(f"coalesce(s.{b}, 0)::BIGINT AS {b}" for b in BUCKETS)
    with spans.registered("span_seconds_windows", keys) as windows_table:
        table = spans.arrow(
            f"""
            SELECT k.position, {picked}
            FROM {windows_table} k LEFT JOIN ({span_seconds_sql(spans)}) s
            ON s.attempt = k.attempt AND s.eff_iteration = k.iteration
            ORDER BY k.position
            """
        )
    return [int64_column(table, b) for b in BUCKETS]


def span_seconds_ns(spans: SpanSet, by_process: bool = False) -> dict[Any, dict[str, int]]:
    """The span-seconds (`span_seconds_sql`) per (attempt, effective iteration[, process]), per bucket."""
    out: dict[Any, dict[str, int]] = {}
    for row in spans.rows(span_seconds_sql(spans, by_process)):
        key = (row[0], int(row[1]), row[2]) if by_process else (row[0], int(row[1]))
        out[key] = {b: int(ns) for b, ns in zip(BUCKETS, row[-len(BUCKETS) :], strict=True)}
    return out


def span_seconds_of_rows(rows: pa.Table) -> dict[tuple[str, int], dict[str, int]]:
    """`span_seconds_ns` of spans held as Arrow (lineage columns: `run_id`, `eff_iteration`, `bucketed`, `bucket`,
    `start_ns`, `end_ns`), worked out in this process: a watcher's few hundred new spans, where a query costs
    milliseconds (`watch.summary`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from rollup.base.arrays import FALSE

    counted = rows.filter(pc.and_(pc.fill_null(rows.column("bucketed"), FALSE),
                                  pc.is_valid(rows.column("eff_iteration"))))  # fmt: skip
    out: dict[tuple[str, int], dict[str, int]] = {}
    if not counted.num_rows:
        return out
    keyed = pa.table({
        "attempt": pc.fill_null(counted.column("run_id"), pa.scalar("", pa.string())),
        "iteration": counted.column("eff_iteration"), "bucket": counted.column("bucket"),
        "ns": pc.subtract(counted.column("end_ns"), counted.column("start_ns")),
    })  # fmt: skip
    summed = keyed.group_by(["attempt", "iteration", "bucket"]).aggregate([("ns", "sum")])
    for attempt, iteration, bucket, ns in zip(*(summed.column(n).to_pylist() for n in summed.column_names),
                                              strict=True):  # fmt: skip
        out.setdefault((attempt, int(iteration)), dict.fromkeys(BUCKETS, 0))[bucket] = int(ns)
    return out
