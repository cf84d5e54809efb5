"""The newest spans of a run being watched, held in memory as Arrow (`goodput watch`, SPEC section 13): a refresh
asks again only of the newest frames and the rolling stretches of the last 15 minutes, and a slice of these rows
answers them without a scan of every span in DuckDB.

Held: every span (its lineage columns) that ends at or after `start_ns`, which trails the newest span end by HOT_NS
(it is moved up now and then, not at every refresh). A slice these rows cannot answer is left to the database
(`LiveSpans.slice`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from rollup.base.arrays import FALSE

if TYPE_CHECKING:
    import duckdb

# How far back of the newest span end the rows are held: the longest rolling stretch (15 minutes), and room for a
# process that writes its spans an hour late (a batch of a quiet process fills slowly: every window of that hour
# is asked again when it lands). More rows than HOT_ROWS (a job writing many spans a second) hold less time.
HOT_NS = 2 * 3600 * 10**9
HOT_ROWS = 100_000
# The most parts (a refresh's rows each) held before they are copied into one: a slice filters every column of every
# part, a few microseconds each (a dozen columns of 64 parts was 3 ms a slice of a few hundred rows).
COMBINED_CHUNKS = 8


class HotSpans:
    """The rows of the newest spans (`rows`, the watcher's table's columns) and what they can answer."""

    def __init__(self, schema: pa.Schema) -> None:
        self.rows = schema.empty_table()
        self.start_ns: int | None = None  # every span ending at or after it is held; None: nothing known
        self.newest_ns: int | None = None

    def reload(self, connection: duckdb.DuckDBPyConnection, table: str) -> None:
        """Hold the newest of the spans of `table`, every span of the run (after a rebuild, or a large batch)."""
        ((newest,),) = connection.execute(f"SELECT max(end_ns) FROM {table}").fetchall()
        self.rows, self.start_ns, self.newest_ns = self.rows.slice(0, 0), None, newest
        if newest is not None:
            held = connection.sql(f"SELECT * FROM {table} WHERE end_ns >= {int(newest) - HOT_NS}").to_arrow_table()
            self.rows = self._trimmed(held.cast(self.rows.schema))

    def add(self, rows: pa.Table, replaced: Iterable[tuple[int, int]] | None) -> None:
        """Take in `rows` (new spans, and spans walked again whose old rows, keyed (tkey, skey) in `replaced`, go)."""
        held = self.rows
        if replaced:
            gone = set(replaced)
            skeys = pa.array({skey for _, skey in gone}, pa.uint64())
            candidates = pc.indices_nonzero(pc.is_in(held.column("skey"), value_set=skeys)).to_pylist()
            if candidates:
                tkeys, skeys_held = held.column("tkey"), held.column("skey")
                drop = {i for i in candidates if (tkeys[i].as_py(), skeys_held[i].as_py()) in gone}
                keep = [True] * held.num_rows
                for i in drop:
                    keep[i] = False
                held = held.filter(pa.array(keep, pa.bool_()))
        if rows.num_rows:
            newest = pc.max(rows.column("end_ns")).as_py()
            self.newest_ns = newest if self.newest_ns is None else max(self.newest_ns, newest)
            held = pa.concat_tables([held, rows.cast(held.schema)])
        self.rows = self._trimmed(held)

    def _trimmed(self, held: pa.Table) -> pa.Table:
        """`held` less the spans ended before HOT_NS back of the newest end (or, past HOT_ROWS, the oldest ends)."""
        if self.newest_ns is None:
            return held
        start = self.newest_ns - HOT_NS
        if self.start_ns is None or start > self.start_ns + HOT_NS // 8:  # now and then: a filter of every row held
            held = held.filter(pc.greater_equal(held.column("end_ns"), _ns(start)))
            self.start_ns = start
        if held.num_rows > HOT_ROWS:
            ends = held.column("end_ns")
            cut = pc.select_k_unstable(ends, k=HOT_ROWS, sort_keys=[("", "descending")])
            start = ends[cut[-1].as_py()].as_py() + 1
            held = held.filter(pc.greater_equal(ends, _ns(start)))
            self.start_ns = start
        if held.column(0).num_chunks > COMBINED_CHUNKS:
            held = held.combine_chunks()
        return held

    def rows_with(self, keys: set[tuple[int, int]]) -> pa.Table:
        """The held rows whose id is one of `keys`' (by skey alone: the caller matches the trace too)."""
        skeys = pa.array(sorted({skey for _, skey in keys}), pa.uint64())
        return self.rows.filter(pc.is_in(self.rows.column("skey"), value_set=skeys))

    def answers(self, cover: list[tuple[int, int]]) -> bool:
        """Whether these rows hold every span active in one of `cover`."""
        return self.start_ns is not None and all(start >= self.start_ns for start, _ in cover)

    def slice(self, cover: list[tuple[int, int]]) -> pa.Table:
        """The rows active in one of `cover` (`answers` said they are all here)."""
        rows = self.rows
        starts, ends = rows.column("start_ns"), rows.column("end_ns")
        masks = [pc.and_(pc.less(starts, _ns(end)), pc.greater(ends, _ns(start))) for start, end in cover]
        if not masks:
            return rows.slice(0, 0)
        mask = masks[0]
        for more in masks[1:]:
            mask = pc.or_(mask, more)
        return rows.filter(pc.fill_null(mask, FALSE))


def _ns(value: int) -> pa.Scalar:
    """An integer as an Arrow scalar: a kernel given a Python int converts it on each call, which costs twenty times
    the comparison of a few thousand rows (pyarrow tries an import that fails, every time)."""
    return pa.scalar(value, pa.int64())
