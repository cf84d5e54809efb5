"""Iterations that stand out (SPEC section 10): a figure more than three robust standard deviations above its median.

The median absolute deviation (MAD), scaled by 1.4826, estimates the standard deviation of normally distributed
figures without letting the outliers themselves widen it, as a plain standard deviation would. A figure (the wall
clock, a bucket's seconds, the unaccounted seconds) is an outlier when it exceeds the median of that figure over the
rows by more than 3 x 1.4826 x MAD, by more than 1 ms and by more than 5% of the rows' median wall clock (a 3 ms
wobble in a 700 ms step is noise, not a slow step). Fewer than 8 rows, or a MAD of 0, flag nothing: too few to know
what is normal, or a figure that never varies.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from rollup.base.schema import BUCKETS

# The figures of a row that can be outliers, as the row's JSON names them.
OUTLIER_FIGURES = ("wall_s", *(f"{b}_s" for b in BUCKETS), "unaccounted_s")
MIN_ROWS = 8
MAD_SCALE = 1.4826
MAD_FACTOR = 3.0
MIN_EXCESS_NS = 1_000_000
MIN_EXCESS_OF_WALL = 0.05  # of the rows' median wall clock


def compared_groups(indices: Sequence[int], kinds: Sequence[int]) -> list[array]:
    """The rows `indices` (of one process) split into the groups whose figures are compared (SPEC section 10): by
    kind (`kinds[i]`: row i's kind, `windows.window_kinds`), when every kind has `MIN_ROWS` rows or more, so a step
    that validates is compared with the steps that validate; otherwise all of them together. Each group's rows in
    the order given, the groups in the order their kinds first appear; counted on Arrow columns (a long run has tens
    of thousands of rows, a refresh of `watch` asks every time)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from rollup.base.arrays import int64_column

    rows = _int64(indices)
    of_rows = pc.take(_int64(kinds), rows)
    counts = pc.value_counts(of_rows)
    if len(counts) < 2 or pc.min(counts.field("counts")).as_py() < MIN_ROWS:
        return [array("q", indices)]
    return [
        int64_column(pa.table({"row": pc.filter(rows, pc.equal(of_rows, kind))}), "row")
        for kind in counts.field("values").cast(pa.int64())
    ]


def outliers(rows: Sequence[dict[str, int]]) -> list[list[str]]:
    """For each row (its figures in integer nanoseconds, keyed as `OUTLIER_FIGURES`), the names of its figures that
    are outliers among `rows`, in `OUTLIER_FIGURES` order."""
    columns = {figure: [row[figure] for row in rows] for figure in OUTLIER_FIGURES} if rows else {}
    found = outliers_of_columns(columns, len(rows))
    return [found.get(index, []) for index in range(len(rows))]


def outliers_of_columns(columns: Mapping[str, Sequence[int]], count: int) -> dict[int, list[str]]:
    """`outliers` over figures held as columns (`columns[figure][i]`: row i's figure, `count` rows): the rows with an
    outlying figure, by index, each with its figures in `OUTLIER_FIGURES` order. Worked out in Arrow's kernels: the
    medians of a long run's thousands of rows, every refresh of `watch`, were a tenth of its time in Python. The
    figures are exact as doubles (integer nanoseconds below 2**53, 104 days), so each comparison is the one Python
    makes of an integer with the median. Rows flagged alike share one list: copy it before changing it."""
    if count < MIN_ROWS:
        return {}
    import pyarrow as pa
    import pyarrow.compute as pc

    flags = None  # each row's outlying figures as bits, bit k for OUTLIER_FIGURES[k]
    least = max(MIN_EXCESS_NS, MIN_EXCESS_OF_WALL * _median(pc.cast(_int64(columns["wall_s"]), pa.float64())))
    for bit, figure in enumerate(OUTLIER_FIGURES):
        values = pc.cast(_int64(columns[figure]), pa.float64())
        middle = pa.scalar(_median(values), pa.float64())
        mad = _median(pc.abs(pc.subtract(values, middle)))
        if mad == 0:
            continue
        bar = pa.scalar(max(MAD_FACTOR * MAD_SCALE * mad, least), pa.float64())
        out = pc.if_else(
            pc.greater(pc.subtract(values, middle), bar), pa.scalar(1 << bit, pa.int64()), pa.scalar(0, pa.int64())
        )
        flags = out if flags is None else pc.bit_wise_or(flags, out)
    if flags is None:
        return {}
    rows = pc.indices_nonzero(flags)
    found = pc.take(flags, rows).to_pylist()
    names = {f: [figure for bit, figure in enumerate(OUTLIER_FIGURES) if f >> bit & 1] for f in set(found)}
    return dict(zip(rows.to_pylist(), map(names.__getitem__, found), strict=True))  # rows alike share a list


def _int64(values: Sequence[int]) -> Any:
    """`values` as an Arrow int64 array: an array("q") without a copy, anything else converted."""
    import pyarrow as pa

    from rollup.base.arrays import int64_array

    if isinstance(values, array) and values.typecode == "q":
        return int64_array(values)
    return pa.array(values, pa.int64())


def _median(values: Any) -> float:
    """The median as `statistics.median` takes it: the middle value, or the mean of the two middle ones."""
    import pyarrow.compute as pc

    return float(pc.quantile(values, q=0.5, interpolation="midpoint")[0].as_py())
