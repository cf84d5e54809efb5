"""64-bit integer columns held as Python `array('q')`s and handed to and from Arrow without a Python int per value.

A long run has hundreds of thousands of windows and millions of shares: held as Python ints they would cost ~30 bytes
each and a copy at every hand-off; as arrays they cost 8 and share one buffer with Arrow.
"""

from __future__ import annotations

from array import array

import pyarrow as pa

# False as an Arrow scalar, for `fill_null` and its kind. A value handed to pyarrow without its type
# (`pa.scalar(False)`, a Python int given to a kernel) is typed by pyarrow's inference, which tries to import dateutil
# every time: some 80 us a call where it is not installed, against 3 us typed (a dozen a refresh of `watch`).
FALSE = pa.scalar(False, pa.bool_())


def int64_column(table: pa.Table, name: str) -> array:
    """A BIGINT column without nulls as an `array('q')`, copied from Arrow's buffer (no Python int per value)."""
    column = table.column(name).combine_chunks()
    out = array("q")
    if len(column):
        if column.null_count:
            raise ValueError(f"column {name} has nulls")
        out.frombytes(memoryview(column.buffers()[1])[8 * column.offset : 8 * (column.offset + len(column))])
    return out


def int64_array(column: array) -> pa.Array:
    """A column of 64-bit integers as an Arrow array sharing its buffer (no Python int per value)."""
    return pa.Array.from_buffers(pa.int64(), len(column), [None, pa.py_buffer(column)])


def rising(column: array, *, strictly: bool = True) -> bool:
    """Whether `column`'s values rise (or, not `strictly`, never fall) from each to the next, compared on Arrow's
    kernels (a Python loop over a long run's windows costs a millisecond each time)."""
    if len(column) < 2:
        return True
    import pyarrow.compute as pc

    values = int64_array(column)
    rises = (pc.greater if strictly else pc.greater_equal)(values.slice(1), values.slice(0, len(column) - 1))
    return bool(pc.all(rises).as_py())


def column_sum(column: array) -> int:
    """The sum of a column of 64-bit integers, exact (nanoseconds: 2**63 of them are 292 years), summed by Arrow:
    Python's `sum` makes an int of every value, a millisecond a long run's column."""
    if len(column) < 64:
        return sum(column)
    import pyarrow.compute as pc

    return int(pc.sum(int64_array(column)).as_py())


def alike(column: array) -> bool:
    """Whether every value of a non-empty column is its first (one attempt's windows, one process's rows): compared
    on Arrow's kernels past a few values."""
    if len(column) < 64:
        return column.count(column[0]) == len(column)
    least, most = least_and_most(column)
    return least == most


def least_and_most(column: array) -> tuple[int | None, int | None]:
    """A column's least and greatest values (None, None when empty): by Arrow's kernels past a few values."""
    if len(column) < 64:
        return min(column, default=None), max(column, default=None)
    import pyarrow.compute as pc

    least, most = pc.min_max(int64_array(column)).values()
    return least.as_py(), most.as_py()
