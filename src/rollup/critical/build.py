"""What each step waited on (SPEC section 14): the chain of bucketed spans the window's end waited on, walked back.

From the window's end `t = b`, the span the step was waiting on at `t` is the bucketed span (any process, any
iteration) started before `t` whose `min(end, t)` is latest (ties: the later start, then the smaller span id): one
running at `t` if any, the one that ended last otherwise, with the gap after its end `waiting`. Its segment runs back
to its start (or the window's), and the walk goes on from there. The segments and waits partition the window, so a
phase's seconds on the path bound what shortening it can save: a phase off the path saves nothing until another
becomes critical, which is what the shares of `report --by name` cannot say.

Per window the walk is a heap over the window's spans in order of their ends, latest first: each span is pushed once
and popped at most once, over plain integers. The spans come from DuckDB already cut to the windows and sorted, in
batches consecutive in time (`intervals.in_time_batches`), so what is held is a batch's spans, not the run's; the
segments go back to Arrow as columns (`critical.paths`), never a Python object each.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from rollup.accounting.attribution import swept_spans_sql
from rollup.accounting.frames import report_frames
from rollup.accounting.intervals import clip_to_stretches, in_time_batches
from rollup.accounting.windows import missing_in, stretches_of
from rollup.base.arrays import int64_array, int64_column
from rollup.base.errors import GoodputError
from rollup.base.memory import sweep_batch_spans
from rollup.store.derived import kept_columns, stretches_key

from .paths import (
    CriticalPaths,
    decoded_segments,
    empty_segments,
    encoded_segments,
    late_column,
    summed_paths,
)

if TYPE_CHECKING:
    from rollup.accounting.windows import Windows
    from rollup.store.spanset import SpanSet, SpanSource

# Of each process, its service: a process's peers, for the straggler, are the other processes of its service.
SERVICE_SQL = "coalesce(service, process)"


def walk_back(
    start_ns: int, end_ns: int, starts: Sequence[int], ends: Sequence[int], ids: Sequence[str], low: int, high: int
) -> list[tuple[int, int, int]]:
    """The critical path of window `[start_ns, end_ns]` over the spans at rows `low:high` of `starts`, `ends`, `ids`
    (each of positive length and overlapping the window, sorted by end descending, then start descending, then id):
    `(row, segment start, segment end)` for each segment, latest first.

    At `t`, the spans ending at or after `t` are in a heap by latest start (then smallest id); those starting at or
    after `t` are dropped from it, for good (`t` only falls). The heap's top is then the span running at `t` that
    started last; with none, the next span by end (the sort's order is the tie rule) is the one that ended last."""
    t, row = end_ns, low
    heap: list[tuple[int, str, int]] = []
    path: list[tuple[int, int, int]] = []
    while t > start_ns:
        while row < high and ends[row] >= t:
            heapq.heappush(heap, (-starts[row], ids[row], row))
            row += 1
        while heap and -heap[0][0] >= t:
            heapq.heappop(heap)
        if heap:
            chosen = heapq.heappop(heap)[2]
            until = t
        elif row < high:
            chosen, until = row, ends[row]
            row += 1
        else:
            break
        t = max(starts[chosen], start_ns)
        path.append((chosen, t, until))
    return path


def critical_segments(
    spans: SpanSet, windows: Windows, positions: Sequence[int] | None = None, batch_spans: int | None = None
) -> pa.Table:
    """The segments (`critical.paths.SEGMENT_SCHEMA`) of each window's critical path over the bucketed spans of
    `spans`, each window numbered by `positions` (default 0, 1, ...), sorted by window and start.

    The spans overlapping the windows are cut to them in DuckDB and read back sorted, a batch of windows
    consecutive in time at a time (at most `batch_spans` spans each, default what the memory limit has room for)."""
    stretches = list(stretches_of(windows))
    at = list(positions) if positions is not None else list(range(len(stretches)))
    if not stretches:
        return empty_segments()
    most = batch_spans or sweep_batch_spans(spans.limit_bytes)
    parts = []
    for batch_positions, batch, spans_sql in in_time_batches(spans, stretches, swept_spans_sql(spans), most):
        with spans.scratch("critical_cut") as cut:
            with_service = f"SELECT *, {SERVICE_SQL} AS peer_service FROM ({spans_sql})"
            clip_to_stretches(spans, batch, with_service, ["start_ns", "end_ns", "span_id", "name", "process",
                                                           "bucket", "peer_service"], cut)  # fmt: skip
            table = spans.arrow(
                f"SELECT stretch, start_ns, end_ns, span_id, name, process, bucket, peer_service AS service "
                f"FROM {cut} ORDER BY stretch, end_ns DESC, start_ns DESC, span_id"
            )
            rows, numbers, starts, ends = _walked(table, batch)
            picked = table.take(int64_array(rows))
            mine = pa.table(
                {"stretch": int64_array(numbers), "name": picked.column("name"), "process": picked.column("process"),
                 "service": picked.column("service"), "start_ns": int64_array(starts), "end_ns": int64_array(ends)}
            )  # fmt: skip
            late = late_column(len(rows), _lateness(spans, cut, mine))
        global_window = array("q", (at[batch_positions[n]] for n in numbers))
        parts.append(
            pa.table(
                {
                    "window": int64_array(global_window),
                    "span_id": picked.column("span_id"),
                    "name": picked.column("name"),
                    "process": picked.column("process"),
                    "bucket": picked.column("bucket"),
                    "start_ns": int64_array(starts),
                    "end_ns": int64_array(ends),
                    "late_ns": late,
                }
            )  # fmt: skip
        )
    segments = pa.concat_tables([p.cast(empty_segments().schema) for p in parts])
    return segments.sort_by([("window", "ascending"), ("start_ns", "ascending")])


def _walked(table: pa.Table, stretches: Sequence[tuple[int, int]]) -> tuple[array, array, array, array]:
    """The segments of the paths of `stretches` over `table`'s rows (`critical_segments`' query), as columns: the
    row of each segment's span, its stretch (by position), its start and its end."""
    numbers = int64_column(table, "stretch")
    starts, ends = int64_column(table, "start_ns"), int64_column(table, "end_ns")
    ids = table.column("span_id").to_pylist()
    rows, of, seg_starts, seg_ends = array("q"), array("q"), array("q"), array("q")
    low = 0
    while low < len(numbers):
        number = numbers[low]
        high = low
        while high < len(numbers) and numbers[high] == number:
            high += 1
        start, end = stretches[number]
        for row, seg_start, seg_end in walk_back(start, end, starts, ends, ids, low, high):
            rows.append(row)
            of.append(number)
            seg_starts.append(seg_start)
            seg_ends.append(seg_end)
        low = high
    return rows, of, seg_starts, seg_ends


def _lateness(spans: SpanSet, cut: str, segments: pa.Table) -> dict[int, int]:
    """Each segment's late nanoseconds (SEGMENT_SCHEMA's `late_ns`), by its position in `segments` (those with
    none left out): one query pairing each segment with the spans of the same name in its window of the other
    processes of its service."""
    if not segments.num_rows:
        return {}
    numbered = segments.append_column("i", pa.array(range(segments.num_rows), pa.int64()))
    with spans.registered("critical_segments", numbered) as table:
        rows = spans.rows(
            f"""
            SELECT p.i, p.start_ns, p.end_ns, max(c.e) FILTER (WHERE c.e <= p.end_ns),
                   count(*) FILTER (WHERE c.e > p.end_ns)
            FROM {table} p JOIN {cut} c ON c.stretch = p.stretch AND c.name = p.name
                AND c.peer_service = p.service
                AND c.process IS DISTINCT FROM p.process
            GROUP BY p.i, p.start_ns, p.end_ns
            """
        )
    return {i: e - max(s, peer_end) for i, s, e, peer_end, after in rows
            if not after and peer_end is not None and e > max(s, peer_end)}  # fmt: skip


def window_services(spans: SpanSet, windows: Windows) -> dict[str | None, str]:
    """Each process with a bucketed span overlapping one of `windows`, and its service (its peers' name)."""
    if not len(windows):
        return {}
    stretches = stretches_of(windows)
    low, high = min(s for s, _ in stretches), max(e for _, e in stretches)
    rows = spans.rows(
        f"SELECT process, any_value({SERVICE_SQL}) FROM ({swept_spans_sql(spans)}) "
        f"WHERE start_ns < {high} AND end_ns > {low} GROUP BY process"
    )
    return {process: service or "" for process, service in rows}


@dataclass(frozen=True)
class CriticalOptions:
    """What `goodput critical` is asked for: the windows of the inclusive range `iterations` (all when None; with
    `exact`, one iteration asked for by number, an error when the traces lack it), of attempt `attempt` alone (a
    run id or `latest`; None: every attempt, each iteration's latest window)."""

    iterations: tuple[int, int] | None = None
    attempt: str | None = None
    exact: bool = False


@dataclass
class CriticalPart:
    """The segments of some of the windows' paths, `window` their positions among all (a runner's part)."""

    segments: pa.Table


def critical_part(spans: SpanSet, windows: Windows, positions: Sequence[int] | None = None) -> CriticalPart:
    """The part of `windows` (at `positions` among the command's; default 0, 1, ...) over `spans`."""
    return CriticalPart(critical_segments(spans, windows, positions))


class CriticalRunner(Protocol):
    """Computes the paths of windows in parts (one part here: one; `on_ray.RayRunner`: a Ray task per range
    of windows)."""

    def critical_parts(self, spans: SpanSet, windows: Windows) -> list[CriticalPart]: ...


def build_critical(
    store: SpanSource, options: CriticalOptions | None = None, runner: CriticalRunner | None = None
) -> CriticalPaths:
    """SPEC section 14 over the store's spans: the windows are the report's rows (`report_frames`), their paths
    computed by `runner` (default: in this process, one part; `on_ray.RayRunner` as Ray tasks, by ranges of
    windows), merged by position."""
    options = options or CriticalOptions()
    spans = store.spans(options.attempt)
    frames = report_frames(spans, options.iterations)
    windows = frames.windows
    missing = missing_in(frames.held, options.iterations) if not windows else None
    if missing is not None and options.exact:
        raise GoodputError(missing)
    segments = window_segments(spans, windows, runner)
    return summed_paths(windows, segments, window_services(spans, windows), missing)


class _NotKept(Exception):
    """The segments worked out, which cannot be kept (`encoded_segments`)."""

    def __init__(self, segments: pa.Table) -> None:
        super().__init__()
        self.segments = segments


def window_segments(spans: SpanSet, windows: Windows, runner: CriticalRunner | None = None) -> pa.Table:
    """The segments of `windows`' paths (`critical_segments`), computed by `runner` (default: here, in one part)
    and merged; a re-run on cached files reads them back (`derived.kept_columns`)."""

    def work() -> pa.Table:
        if not len(windows):
            return empty_segments()
        parts = [critical_part(spans, windows)] if runner is None else runner.critical_parts(spans, windows)
        merged = pa.concat_tables([empty_segments(), *(part.segments for part in parts)])
        return merged.sort_by([("window", "ascending"), ("start_ns", "ascending")])

    def make() -> tuple[dict[str, array], dict[str, Any]]:
        segments = work()
        encoded = encoded_segments(segments)
        if encoded is None:
            raise _NotKept(segments)
        return encoded

    stretches = windows.stretches
    try:
        columns, extras = kept_columns(spans, "critical", [stretches_key(stretches.starts, stretches.ends)], make)
    except _NotKept as not_kept:
        return not_kept.segments
    return decoded_segments(columns, extras)
