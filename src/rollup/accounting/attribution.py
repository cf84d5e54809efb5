"""Charging wall clock to buckets, instant by instant (the naive span-seconds sum is beside it: `span_seconds`).

Each frame (an iteration window, a stretch outside every window) is swept over the boundaries of the bucketed
spans that overlap it, clipped to it. Between two boundaries the active set of buckets is constant, and the whole
segment goes to the first active bucket in precedence order, or to `unaccounted` when none is active. Nested and
concurrent spans therefore count once, and the buckets plus unaccounted add up to the frame's wall clock exactly
(integer nanoseconds all the way).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, overload

from rollup.base.arrays import int64_array
from rollup.base.errors import OptionError
from rollup.base.memory import sweep_batch_spans
from rollup.base.schema import BUCKETS
from rollup.store.derived import kept_columns, stretches_key

from .intervals import Stretches, clip_to_stretches, in_time_batches

if TYPE_CHECKING:
    import pyarrow as pa

    from rollup.store.spanset import SpanSet


@dataclass(frozen=True, slots=True)
class Frame:
    """A stretch of time to charge: an iteration window or a stretch outside them all."""

    frame_id: int
    start_ns: int
    end_ns: int


@dataclass(slots=True)
class Charge:
    """Nanoseconds of one frame per bucket (keys: the four buckets) and unaccounted."""

    wall_ns: int
    bucket_ns: dict[str, int]
    unaccounted_ns: int


class FrameCharges(Sequence[Charge]):
    """The charges of stretches of time, by position, held as columns of 64-bit integers (a stretch's wall clock
    and its nanoseconds per bucket in precedence order): a Charge is made when one is asked for.

    A long run has hundreds of thousands of windows; a Charge object with its dict of buckets costs ~0.6 KB of
    Python memory each, these columns 48 bytes."""

    __slots__ = ("_walls", "_by_rank", "_precedence", "_start", "_stop", "rest")

    def __init__(
        self,
        walls: array,
        by_rank: Sequence[array],
        precedence: Sequence[str],
        start: int = 0,
        stop: int | None = None,
        *,
        rest: Charge | None = None,
    ) -> None:
        self._walls, self._by_rank, self._precedence = walls, by_rank, tuple(precedence)
        self._start, self._stop = start, len(walls) if stop is None else stop
        self.rest = rest  # the stretches charged as one after these (`charge_stretches`' `summed_from`), if any

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> Charge: ...

    @overload
    def __getitem__(self, index: slice) -> FrameCharges: ...

    def __getitem__(self, index: int | slice) -> Charge | FrameCharges:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ValueError("FrameCharges slices are contiguous")
            return FrameCharges(self._walls, self._by_rank, self._precedence, self._start + start, self._start + stop)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        at = self._start + index
        return _charge(self._walls[at], [column[at] for column in self._by_rank], self._precedence)

    def __iter__(self) -> Iterator[Charge]:
        return (self[i] for i in range(len(self)))

    def columns(self) -> ChargeColumns:
        """The charges as columns (the ones these charges hold when they are the whole of them, else copies)."""
        whole = self._start == 0 and self._stop == len(self._walls)

        def held(column: array) -> array:
            return column if whole else column[self._start : self._stop]

        walls = held(self._walls)
        by_bucket = {b: held(column) for b, column in zip(self._precedence, self._by_rank, strict=True)}
        charged = zip(walls, *by_bucket.values(), strict=True)
        return ChargeColumns(walls, by_bucket, array("q", (wall - sum(ns) for wall, *ns in charged)))

    def total(self) -> Charge:
        """The stretches as one: their figures summed (exact integers; unaccounted is what the buckets leave)."""
        wall = sum(islice(self._walls, self._start, self._stop))
        by_bucket = {b: sum(islice(column, self._start, self._stop))
                     for b, column in zip(self._precedence, self._by_rank, strict=True)}  # fmt: skip
        return Charge(wall, {b: by_bucket[b] for b in BUCKETS}, wall - sum(by_bucket.values()))


@dataclass(frozen=True, slots=True)
class ChargeColumns:
    """Charges as columns of 64-bit integers: wall clocks, nanoseconds per bucket (by name), unaccounted."""

    walls: array
    by_bucket: dict[str, array]
    unaccounted: array


def total_charge(charges: Sequence[Charge]) -> Charge:
    """`charges` as one, summed exactly (from the columns where they are held as such)."""
    if isinstance(charges, FrameCharges):
        return charges.total()
    return Charge(
        sum(c.wall_ns for c in charges),
        {b: sum(c.bucket_ns[b] for c in charges) for b in BUCKETS},
        sum(c.unaccounted_ns for c in charges),
    )


def parse_precedence(text: str | None) -> list[str]:
    """`idle,productive,overhead,wasted` -> that list; None -> the declared order. Each bucket exactly once."""
    if text is None:
        return list(BUCKETS)
    order = [token.strip() for token in text.split(",") if token.strip()]
    if sorted(order) != sorted(BUCKETS):
        raise OptionError("--precedence", f"expected each of {', '.join(BUCKETS)} once, got {text!r}")
    return order


def charge_stretches(
    spans: SpanSet,
    stretches: Sequence[tuple[int, int]],
    precedence: Sequence[str],
    *,
    summed_from: int | None = None,
    batch_spans: int | None = None,
) -> FrameCharges:
    """Each stretch's wall clock charged to the highest-precedence bucket active at each instant, else unaccounted,
    every span of `spans` counting, by position; held as columns (`FrameCharges`), not as an object per stretch.
    Stretches may overlap each other; each is charged on its own.

    `summed_from`: the stretches from that position on are wanted as one, their charges summed (`FrameCharges.rest`)
    and not held one by one (a report's hundreds of thousands of gaps between steps). `batch_spans`: the most spans
    one sweep takes (default: what the memory limit has room for, `memory.sweep_batch_spans`)."""
    held = len(stretches) if summed_from is None else min(summed_from, len(stretches))
    walls = array("q", (end - start for start, end in islice(stretches, held)))

    def sweep() -> tuple[dict[str, array], dict[str, Any]]:
        by_rank = [array("q", bytes(8 * held)) for _ in precedence]
        rest_by_rank = [0 for _ in precedence]
        if stretches:  # each batch's sums put in place as it comes: no Python int per stretch held for the whole run
            for positions, table in _charged_batches(spans, stretches, precedence, False, batch_spans):
                at = [positions[i] for i in table.column("stretch").to_pylist()]
                for rank, column in enumerate(by_rank):
                    for position, value in zip(at, table.column(f"r{rank}").to_pylist(), strict=True):
                        if position < held:
                            column[position] = value or 0
                        else:
                            rest_by_rank[rank] += value or 0
        return {f"r{rank}": column for rank, column in enumerate(by_rank)}, {"rest": rest_by_rank}

    of = Stretches.of(stretches)
    key: list[bytes | str] = [stretches_key(of.starts, of.ends), ",".join(precedence), str(summed_from)]
    columns, extras = kept_columns(spans, "charge", key, sweep)  # a re-run on cached files reads the sweep's answer
    by_rank = [columns[f"r{rank}"] for rank in range(len(precedence))]
    rest_by_rank = [int(value) for value in extras["rest"]]
    rest = None
    if summed_from is not None:
        rest = _charge(sum(end - start for start, end in islice(stretches, held, None)), rest_by_rank, precedence)
    return FrameCharges(walls, by_rank, precedence, rest=rest)


def charge_each_process(
    spans: SpanSet, frames: Sequence[Frame], precedence: Sequence[str]
) -> dict[int, dict[str, Charge]]:
    """For `--by process`: per frame, each process that has a bucketed span overlapping it, charged with that
    process's spans alone. One pass for every process (a process with nothing in a frame is not listed)."""
    if not frames:
        return {}
    stretches = sorted({(f.start_ns, f.end_ns) for f in frames})
    stretch_of = {stretch: index for index, stretch in enumerate(stretches)}
    by_stretch: dict[int, dict[str, list[int]]] = {}
    for (stretch, process), by_rank in _charged_ns(spans, stretches, precedence, by_process=True).items():
        by_stretch.setdefault(stretch, {})[process] = by_rank
    out = {}
    for frame in frames:
        found = by_stretch.get(stretch_of[(frame.start_ns, frame.end_ns)], {})
        out[frame.frame_id] = {process: frame_charge(frame, by_rank, precedence) for process, by_rank in found.items()}
    return out


def charged_by_key(
    spans: SpanSet,
    stretches: Sequence[tuple[int, int]],
    precedence: Sequence[str],
    keyed: Callable[[str], str],
    batch_spans: int | None = None,
) -> Iterator[tuple[array, pa.Table]]:
    """The charge of each stretch per key, a batch of stretches at a time: `keyed(spans_sql)` is a query of the
    bucketed spans of `spans_sql` with the key each one counts under (`start_ns`, `end_ns`, `process`: the key,
    `bucket`), a span listed once per key it counts under. Per batch, its positions among `stretches` and its table
    (`stretch`: the position in the batch, `process`: the key, `r0`..`r3` as `_charged_table`'s). What GPUs are
    charged with (`gpus`): the spans that occupy them, keyed by the GPUs' class."""
    most = batch_spans or sweep_batch_spans(spans.limit_bytes)
    for positions, batch, spans_sql in in_time_batches(spans, stretches, swept_spans_sql(spans), most):
        yield positions, _swept(spans, batch, precedence, keyed(spans_sql), by_process=True)


def frame_charge(frame: Frame, by_rank: list[int] | None, precedence: Sequence[str]) -> Charge:
    """A frame's charge from its nanoseconds by bucket in `precedence` order (None: nothing charged)."""
    return _charge(frame.end_ns - frame.start_ns, by_rank or [0] * len(BUCKETS), precedence)


def _charge(wall: int, by_rank: Sequence[int], precedence: Sequence[str]) -> Charge:
    return Charge(wall, dict(zip(precedence, by_rank, strict=True)), wall - sum(by_rank))


def _charged_ns(
    spans: SpanSet,
    stretches: Sequence[tuple[int, int]],
    precedence: Sequence[str],
    *,
    by_process: bool,
) -> dict[Any, list[int]]:
    """Nanoseconds charged to each bucket (in `precedence` order) in each stretch (by position), or in each
    (stretch, process) for the processes with bucketed spans there (`_charged_table`)."""
    table = _charged_table(spans, stretches, precedence, by_process=by_process)
    ranks = zip(*(table.column(f"r{i}").to_pylist() for i in range(len(BUCKETS))), strict=True)
    charged = [[int(v or 0) for v in values] for values in ranks]
    stretch = table.column("stretch").to_pylist()
    if by_process:
        return dict(zip(zip(stretch, table.column("process").to_pylist(), strict=True), charged, strict=True))
    return dict(zip(stretch, charged, strict=True))


def swept_spans_sql(spans: SpanSet) -> str:
    """The spans a charge sweeps: bucketed, of positive length (their own columns)."""
    return f"SELECT * FROM {spans.own} WHERE bucketed AND end_ns > start_ns"


def _charged_table(
    spans: SpanSet,
    stretches: Sequence[tuple[int, int]],
    precedence: Sequence[str],
    *,
    by_process: bool,
    batch_spans: int | None = None,
) -> pa.Table:
    """Nanoseconds charged to each bucket in each stretch (or each stretch and process), as an Arrow table:
    `stretch`[, `process`], `r0`..`r3` (per bucket in `precedence` order; null where nothing was charged). A stretch
    (or stretch and process) without bucketed spans has no row.

    The spans cut to each stretch (`intervals`) are swept in time order within it: between two events the active
    buckets are constant and the segment goes to the first of them. The four active counts travel packed in one
    128-bit integer, 32 bits a bucket, so one running sum carries the whole state; events at the same instant give
    zero-length segments, which charge nothing.

    The stretches are swept in batches consecutive in time (`intervals.in_time_batches`), each of as many spans as the
    memory limit has room for (`memory.sweep_batch_spans`): a long trace is many sweeps that fit, not one that
    spills.
    """
    import pyarrow as pa

    parts = []
    for positions, table in _charged_batches(spans, stretches, precedence, by_process, batch_spans):
        parts.append(table.set_column(0, "stretch", int64_array(positions).take(table.column("stretch"))))
    return pa.concat_tables(parts)


def _charged_batches(
    spans: SpanSet,
    stretches: Sequence[tuple[int, int]],
    precedence: Sequence[str],
    by_process: bool,
    batch_spans: int | None,
) -> Iterator[tuple[array, pa.Table]]:
    """`_charged_table` a batch at a time: each batch's positions among `stretches` and its table, whose `stretch`
    is the position in the batch (its stretch i is `positions[i]`)."""
    most = batch_spans or sweep_batch_spans(spans.limit_bytes)
    for positions, batch, spans_sql in in_time_batches(spans, stretches, swept_spans_sql(spans), most):
        yield positions, _swept(spans, batch, precedence, spans_sql, by_process=by_process)


def _swept(
    spans: SpanSet,
    stretches: Sequence[tuple[int, int]],
    precedence: Sequence[str],
    spans_sql: str,
    *,
    by_process: bool,
) -> pa.Table:
    """`_charged_table` of `stretches` in one sweep, over the spans of `spans_sql` (bucketed, of positive length)."""
    rank_sql = "CASE bucket " + " ".join(f"WHEN '{b}' THEN {i}" for i, b in enumerate(precedence)) + " END"
    shift = 32

    def first_active(i: int) -> str:
        earlier = "".join(f"(active >> {shift * j}) & {0xFFFFFFFF} = 0 AND " for j in range(i))
        charged = f"CASE WHEN {earlier}(active >> {shift * i}) & {0xFFFFFFFF} > 0 THEN t_next - t ELSE 0 END"
        return f"sum({charged})::BIGINT AS r{i}"

    keys = "stretch, process" if by_process else "stretch"
    with spans.scratch("charge_clipped") as clipped:
        clip_to_stretches(
            spans,
            stretches,
            f"SELECT start_ns, end_ns, {'process, ' if by_process else ''}{rank_sql} AS rank FROM ({spans_sql})",
            ["process", "rank"] if by_process else ["rank"],
            clipped,
        )
        return spans.arrow(
            f"""
            WITH events AS (
                SELECT {keys}, s AS t, (1::HUGEINT << ({shift} * rank)) AS delta FROM {clipped}
                UNION ALL
                SELECT {keys}, e AS t, -(1::HUGEINT << ({shift} * rank)) AS delta FROM {clipped}
            ),
            running AS (
                SELECT {keys}, t,
                       lead(t) OVER (PARTITION BY {keys} ORDER BY t ROWS UNBOUNDED PRECEDING) AS t_next,
                       sum(delta) OVER (PARTITION BY {keys} ORDER BY t ROWS UNBOUNDED PRECEDING) AS active
                FROM events
            )
            SELECT {keys}, {", ".join(first_active(i) for i in range(len(BUCKETS)))}
            FROM running WHERE t_next IS NOT NULL GROUP BY {keys}
            """
        )
