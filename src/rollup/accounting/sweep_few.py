"""The charge of a few spans swept in this process (`charge_few`): a watcher's slice of the newest frames, where the
SQL sweep's statements (`attribution.charge_stretches`) cost tens of milliseconds whatever their size.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .attribution import FrameCharges, swept_spans_sql

if TYPE_CHECKING:
    from rollup.store.spanset import SpanSet

# The most bucketed spans `charge_few` sweeps on Arrow columns: a watcher's slice of the newest frames, a few thousand,
# where the SQL sweep's statements cost tens of milliseconds whatever their size (bench/watch.py).
FEW_SPANS = 50_000


def charge_few(spans: SpanSet, stretches: Sequence[tuple[int, int]], precedence: Sequence[str]) -> FrameCharges | None:
    """`charge_stretches` of a few spans, swept on Arrow columns in this process: None when `spans` holds more than
    FEW_SPANS bucketed spans of positive length (the caller sweeps them in SQL).

    The same charge: each instant goes to the first bucket in `precedence` among the spans active at it, and a
    stretch's charge is the sum over its instants. Every span's start and end, and every stretch's bounds, are
    events in time order; after each event the count of active spans of each bucket is a running sum, the bucket
    charged until the next event is the first with any, and each bucket's nanoseconds before an event are a running
    sum too. A stretch takes each bucket's nanoseconds before its end less those before its start. Events at one
    instant are apart by nothing, so their order among themselves changes no sum."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from rollup.base.arrays import FALSE, int64_array, int64_column

    rows = spans.in_memory()
    if rows is not None:  # the spans are here: `swept_spans_sql` on Arrow columns
        swept = pc.and_(pc.fill_null(rows.column("bucketed"), FALSE),
                        pc.greater(rows.column("end_ns"), rows.column("start_ns")))  # fmt: skip
        found = rows.select(["start_ns", "end_ns", "bucket"]).filter(pc.fill_null(swept, FALSE))
    else:
        found = spans.arrow(f"SELECT start_ns, end_ns, bucket FROM ({swept_spans_sql(spans)}) LIMIT {FEW_SPANS + 1}")
    if found.num_rows > FEW_SPANS:
        return None
    count, held = found.num_rows, len(stretches)
    walls = array("q", (end - start for start, end in stretches))
    if not held:
        return FrameCharges(walls, [array("q") for _ in precedence], precedence)
    zero, int64 = pa.scalar(0, pa.int64()), pa.int64()
    buckets = found.column("bucket").cast(pa.string()).combine_chunks()
    ranks = pc.index_in(buckets, value_set=pa.array(list(precedence), pa.string())).cast(int64)
    times = pa.chunked_array([found.column("start_ns").cast(int64).combine_chunks(),
                              found.column("end_ns").cast(int64).combine_chunks(),
                              int64_array(array("q", (s for s, _ in stretches))),
                              int64_array(array("q", (e for _, e in stretches)))])  # fmt: skip
    event_ranks = pa.chunked_array([ranks, ranks, pa.nulls(2 * held, int64)], int64)
    signs = pa.chunked_array([pa.repeat(pa.scalar(1, pa.int64()), count), pa.repeat(pa.scalar(-1, pa.int64()), count),
                              pa.repeat(zero, 2 * held)], int64)  # fmt: skip
    order = pc.sort_indices(times)
    times, event_ranks, signs = (pc.take(column, order) for column in (times, event_ranks, signs))
    charged = pa.repeat(pa.scalar(-1, pa.int64()), len(times))
    for rank in reversed(range(len(precedence))):  # the first active in precedence wins: set last
        of_rank = pc.if_else(pc.equal(event_ranks, pa.scalar(rank, int64)), signs, zero)
        active = pc.greater(pc.cumulative_sum(pc.fill_null(of_rank, zero)), zero)
        charged = pc.if_else(active, pa.scalar(rank, int64), charged)
    in_order = times.combine_chunks()
    lengths = pc.subtract(pa.concat_arrays([in_order[1:], in_order[-1:]]), in_order)  # the last: nothing after it
    at = pc.sort_indices(order)  # each event's place in time order, the stretches' bounds last
    bounds_at = at.slice(2 * count)
    by_rank = []
    for rank in range(len(precedence)):
        charged_ns = pc.if_else(pc.equal(charged, pa.scalar(rank, int64)), lengths, zero)
        before = pc.subtract(pc.cumulative_sum(charged_ns), charged_ns)  # each bucket's nanoseconds before an event
        upto = pc.take(before, bounds_at)
        charge = pc.subtract(upto.slice(held), upto.slice(0, held))
        by_rank.append(int64_column(pa.table({"ns": charge}), "ns"))
    return FrameCharges(walls, by_rank, precedence)
