"""Which spans overlap which stretches of time (iteration windows, the gaps between them), each span cut to each
stretch it overlaps: the first step of charging, sharing out and checking the windows.

A range join would find the pairs, but DuckDB's (an IE join, two sorts of every span) grows faster than the spans
and spills badly under a memory limit. Time is cut into bins of one width instead: each span lists the bins it
touches, each stretch the bins it touches, and an equality join on the bin pairs them, streaming the spans past a
small table of (bin, stretch) with no sort at all. A pair meeting in several bins is kept in the first bin both
touch, so it comes out once. The width is chosen so that a bin holds few stretches (about one on average); where
no width does (stretches crowded into a short span of a long run), the range join does the work.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

import pyarrow as pa

from rollup.base.arrays import int64_array

if TYPE_CHECKING:
    from rollup.store.spanset import SpanSet

# A width is used when no bin holds more stretches than this, and the (bin, stretch) pairs are not too many.
MOST_STRETCHES_PER_BIN = 16
_HALVINGS = 12  # widths tried: the run's length over twice the stretches, then halved up to this many times
_BATCH_BINS = 4096  # bins `time_batches` counts spans in: batches end at their edges


class Stretches(Sequence[tuple[int, int]]):
    """Stretches of time `(start, end)` held as two columns of 64-bit integers: a long run's hundreds of thousands
    of windows take 16 bytes each, where a tuple of two Python ints takes ~130. A pair is made when one is asked
    for."""

    __slots__ = ("starts", "ends")

    def __init__(self, starts: array, ends: array) -> None:
        self.starts, self.ends = starts, ends

    @classmethod
    def of(cls, pairs: Iterable[tuple[int, int]]) -> Stretches:
        if isinstance(pairs, Stretches):
            return pairs
        starts, ends = array("q"), array("q")
        for start, end in pairs:
            starts.append(start)
            ends.append(end)
        return cls(starts, ends)

    def __len__(self) -> int:
        return len(self.starts)

    @overload
    def __getitem__(self, index: int) -> tuple[int, int]: ...

    @overload
    def __getitem__(self, index: slice) -> Stretches: ...

    def __getitem__(self, index: int | slice) -> tuple[int, int] | Stretches:
        if isinstance(index, slice):
            return Stretches(self.starts[index], self.ends[index])
        return self.starts[index], self.ends[index]

    def __add__(self, other: Iterable[tuple[int, int]]) -> Stretches:
        more = Stretches.of(other)
        return Stretches(self.starts + more.starts, self.ends + more.ends)

    def take(self, positions: Iterable[int]) -> Stretches:
        """The stretches at `positions`, in that order."""
        starts, ends = self.starts, self.ends
        picked = list(positions)
        return Stretches(array("q", (starts[i] for i in picked)), array("q", (ends[i] for i in picked)))


@dataclass(frozen=True)
class Bins:
    """Bins of `width` nanoseconds from `origin` up to `end` (exclusive)."""

    origin: int
    end: int
    width: int

    def of(self, ns: str) -> str:
        """SQL: the bin of the instant `ns` (an SQL expression), for instants in [origin, end)."""
        return f"(({ns}) - {self.origin}) // {self.width}"

    def of_stretch(self) -> tuple[str, str]:
        """SQL: the first and the last bin a row of `start_ns`, `end_ns` (a stretch) touches; a zero-length stretch
        touches its instant's bin."""
        return self.of("start_ns"), self.of("greatest(end_ns - 1, start_ns)")


def choose_bins(spans: SpanSet, bounds: str) -> Bins | None:
    """Bins for the stretches of table `bounds` (`stretch`, `start_ns`, `end_ns`), or None when no width keeps
    every bin to a few stretches without listing far more pairs than stretches.

    Each width tried is two aggregates over the stretches in DuckDB (the pairs they make, then the most stretches
    in one bin), so choosing holds nothing per stretch in Python however many windows a run has."""
    ((count, origin, last),) = spans.rows(
        f"SELECT count(*), min(start_ns), max(greatest(end_ns, start_ns)) FROM {bounds}"
    )
    if not count:
        return None
    end = last + 1  # a zero-length stretch at the very end has a bin
    width = max(1, (end - origin) // (2 * count))
    most_pairs = 8 * count + 100_000
    for _ in range(_HALVINGS + 1):
        bins = Bins(origin, end, width)
        first, final = bins.of_stretch()
        ((pairs,),) = spans.rows(f"SELECT sum({final} - {first} + 1)::BIGINT FROM {bounds}")
        if pairs > most_pairs:
            return None
        ((crowd,),) = spans.rows(
            f"SELECT max(n) FROM (SELECT count(*) AS n FROM "
            f"(SELECT unnest(range({first}, {final} + 1)) AS bin FROM {bounds}) GROUP BY bin)"
        )
        if crowd <= MOST_STRETCHES_PER_BIN:
            return bins
        if width == 1:
            return None
        width = max(1, width // 2)
    return None


def clip_to_stretches(
    spans: SpanSet,
    stretches: Sequence[tuple[int, int]],
    spans_sql: str,
    columns: Sequence[str],
    table: str,
) -> None:
    """Create temp table `table` (stretch, *columns, s, e): each span of `spans_sql` with each stretch it overlaps
    (the span starts before the stretch ends and ends after it starts), `s` and `e` the span cut to the stretch.
    `table` is the caller's to drop (a `SpanSet.scratch` name).

    `spans_sql` is a query giving `start_ns`, `end_ns` and `columns`; stretches are numbered by position and may
    overlap each other or be zero-length (a span then overlaps it when it runs across its instant).
    """
    kept = ", ".join(f"x.{c}" for c in columns)
    with (
        spans.registered(f"{table}_bounds", _stretch_table(stretches)) as bounds,
        spans.scratch(f"{table}_bins") as bins_table,
    ):
        bins = choose_bins(spans, bounds)
        if bins is None:  # a statement of its own, so that DuckDB runs the range condition as an IE join
            spans.run(
                f"""
                CREATE OR REPLACE TEMP TABLE {table} AS
                SELECT r.stretch, {kept}, greatest(x.start_ns, r.start_ns) AS s, least(x.end_ns, r.end_ns) AS e
                FROM {bounds} r JOIN ({spans_sql}) x ON x.start_ns < r.end_ns AND x.end_ns > r.start_ns
                """
            )
            return
        # The pairs as a table of their own: DuckDB then knows how few they are and builds its hash table on them.
        first, final = bins.of_stretch()
        spans.run(
            f"""
            CREATE OR REPLACE TEMP TABLE {bins_table} AS
            SELECT unnest(range({first}, {final} + 1)) AS bin, stretch FROM {bounds}
            """
        )
        spans.run(
            f"""
            CREATE OR REPLACE TEMP TABLE {table} AS
            WITH spans AS (
                SELECT *, {bins.of(f"greatest(start_ns, {bins.origin})")} AS first_bin,
                       {bins.of(f"least(end_ns, {bins.end}) - 1")} AS last_bin
                FROM ({spans_sql}) WHERE end_ns > {bins.origin} AND start_ns < {bins.end}
            ),
            binned AS (SELECT *, unnest(range(first_bin, last_bin + 1)) AS bin FROM spans)
            SELECT r.stretch, {kept}, greatest(x.start_ns, r.start_ns) AS s, least(x.end_ns, r.end_ns) AS e
            FROM binned x JOIN {bins_table} b ON b.bin = x.bin JOIN {bounds} r ON r.stretch = b.stretch
            WHERE x.start_ns < r.end_ns AND x.end_ns > r.start_ns
              AND x.bin = greatest(x.first_bin, {bins.of("r.start_ns")})
            """
        )


def time_batches(spans: SpanSet, stretches: Sequence[tuple[int, int]], spans_sql: str, most_spans: int) -> list[array]:
    """The positions of `stretches` in batches of stretches consecutive in time, each overlapped by about
    `most_spans` of the spans of `spans_sql` (a query giving `start_ns`, `end_ns`) at most; a single batch of every
    stretch when the spans are that few.

    So that cutting spans to stretches and sweeping them holds a batch's spans at a time, not the trace's: the
    spans overlapping the stretches are cut by their start (`start_cuts`), and each stretch goes to the batch its
    start falls in. A batch's spans are those overlapping its hull (`hull_condition`): a span across a cut is read
    by both sides, each pairing it with its own stretches, so together the batches give exactly what one pass
    would."""
    if not stretches:
        return []
    cuts = start_cuts(spans, f"SELECT * FROM ({spans_sql}) WHERE {hull_condition(stretches)}", most_spans)
    batches = [array("q") for _ in range(len(cuts) + 1)]  # positions as 64-bit integers: no Python int each
    for position, start in enumerate(Stretches.of(stretches).starts):
        batches[bisect.bisect_right(cuts, start)].append(position)
    return [batch for batch in batches if batch]


def in_time_batches(
    spans: SpanSet, stretches: Sequence[tuple[int, int]], spans_sql: str, most_spans: int
) -> Iterator[tuple[array, Stretches, str]]:
    """`time_batches` as work to do: per batch, the positions of its stretches, the stretches (numbered from 0 in
    the batch: its stretch i is `positions[i]`), and the query of the spans it reads: those of `spans_sql`
    overlapping its hull, or all of them when there is one batch."""
    held = Stretches.of(stretches)
    batches = time_batches(spans, held, spans_sql, most_spans)
    for positions in batches:
        if len(batches) == 1:
            yield positions, held, spans_sql
        else:
            batch = held.take(positions)
            yield positions, batch, f"SELECT * FROM ({spans_sql}) WHERE {hull_condition(batch)}"


def start_cuts(spans: SpanSet, spans_sql: str, most_spans: int) -> list[int]:
    """Instants, ascending, that cut the spans of `spans_sql` by their start into runs of about `most_spans` spans
    at most (none: they are that few): a run is the spans starting from one cut (or the beginning) up to the next.

    One aggregate counts the starts in `_BATCH_BINS` bins of equal width; a run ends at the bin edge where its count
    reaches its share. A run is never less than a bin (a crowded bin is a run of its own, however many it holds)."""
    ((count, low, high),) = spans.rows(f"SELECT count(*), min(start_ns), max(start_ns) FROM ({spans_sql})")
    if count <= most_spans:
        return []
    width = max(1, -(-(high + 1 - low) // _BATCH_BINS))
    counts = spans.rows(
        f"SELECT (start_ns - {low}) // {width} AS bin, count(*) FROM ({spans_sql}) GROUP BY bin ORDER BY bin"
    )
    share = count / -(-count // most_spans)
    cuts: list[int] = []
    seen = 0
    for bin_index, in_bin in counts[:-1]:  # no cut after the last bin: nothing starts beyond it
        seen += in_bin
        if seen >= share * (len(cuts) + 1):
            cuts.append(low + (bin_index + 1) * width)
    return cuts


def hull_condition(stretches: Sequence[tuple[int, int]]) -> str:
    """SQL over `start_ns`, `end_ns`: true of every span overlapping one of `stretches` (a zero-length stretch
    included: a span running across its instant), and of few others."""
    low, high = _hull(stretches)
    return f"start_ns < {high} AND end_ns > {low}"


def _hull(stretches: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """From the first stretch's start to past the last one's end (one nanosecond past a zero-length one's instant)."""
    return min(start for start, _ in stretches), max(max(end, start + 1) for start, end in stretches)


def _stretch_table(stretches: Sequence[tuple[int, int]]) -> pa.Table:
    """Stretches of time numbered by position: `stretch`, `start_ns`, `end_ns`."""
    held = Stretches.of(stretches)
    return pa.table(
        {"stretch": pa.array(range(len(held)), pa.int64()),
         "start_ns": int64_array(held.starts),
         "end_ns": int64_array(held.ends)}
    )  # fmt: skip


def merged_stretches(stretches: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """`stretches` as the fewest stretches covering the same time: sorted, those that meet joined."""
    out: list[list[int]] = []
    for start, end in sorted(stretches):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(start, end) for start, end in out]
