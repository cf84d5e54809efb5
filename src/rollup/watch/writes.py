"""The rows a watcher has walked and not yet written to its tables (`goodput watch`): written a batch at a time.

A statement that writes to DuckDB costs milliseconds however few its rows (bench/watch.py: an insert of a refresh's
few hundred spans into the spans table cost about a tenth of the refresh, a delete of the spans walked again twice
that), so a refresh's rows wait here, in Arrow. When WRITE_ROWS have gathered, those older than the newest spans
held (`newest`) are written: a span is walked again when a parent arrives, mostly soon after it, and while its row
waits here it is taken out here, not deleted from a table. Everything is written before a query reads the tables
(`LiveSpans.written`). What asks of the newest spans while they wait reads them here: a span read again (`keys`), an
ancestor looked up (`rows_with`), a span walked again whose row goes (`drop`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    import duckdb

    from .walk import Key

# How many rows (spans and pending spans) may wait before the older ones are written: some fifteen refreshes of a
# few hundred spans, a few MB of Arrow (bench/watch.py). Past WAITING_ROWS, the newer ones are written too.
WRITE_ROWS = 20_000
WAITING_ROWS = 200_000


class Unwritten:
    """Rows waiting to be written to `spans_table` (its rows) and `pending_table` (its rows: `tkey`, `skey`, `top`,
    `start_ns`) on `connection`."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, spans_table: str, pending_table: str) -> None:
        self.connection = connection
        self._tables = (spans_table, pending_table)
        self._parts: tuple[list[pa.Table], list[pa.Table]] = ([], [])
        self.keys: set[Key] = set()  # the spans' keys (tkey, skey)
        self._pending_keys: set[Key] = set()
        self.rows = 0
        self._due = WRITE_ROWS  # the rows waiting at which the older ones are written

    def add(self, spans: pa.Table, pending: pa.Table | None, newer_ns: int | None) -> None:
        """Rows to write: of spans, and of pending spans (alike rows of `pending_table`). When WRITE_ROWS more are
        waiting, those of spans that ended before `newer_ns` (and of pending spans that started before it) are
        written; all of them past WAITING_ROWS, or with no `newer_ns`."""
        for parts, keys, table in ((self._parts[0], self.keys, spans), (self._parts[1], self._pending_keys, pending)):
            if table is not None and table.num_rows:
                parts.append(table)
                keys.update(_keys(table))
                self.rows += table.num_rows
        if self.rows >= self._due:
            self.write(None if self.rows >= WAITING_ROWS else newer_ns)

    def drop(self, keys: list[Key]) -> tuple[list[Key], list[Key]]:
        """Take the rows of `keys` out (spans walked again); returns the keys of those not held here, of spans and of
        pending spans: the caller deletes them from the tables."""
        out = []
        for parts, held in zip(self._parts, (self.keys, self._pending_keys), strict=True):
            gone = {key for key in keys if key in held}
            if gone:
                held.difference_update(gone)
                kept = [_without(part, gone) for part in parts]
                self.rows -= sum(part.num_rows for part in parts) - sum(part.num_rows for part in kept)
                parts[:] = [part for part in kept if part.num_rows]
            out.append([key for key in keys if key not in gone])
        return out[0], out[1]

    def rows_with(self, keys: set[Key], columns: list[str]) -> pa.Table | None:
        """The waiting spans' rows (`columns` of them) whose id is one of `keys`' (by skey alone: the caller matches
        the trace too); None when none waits."""
        if not self._parts[0]:
            return None
        skeys = pa.array(sorted({skey for _, skey in keys}), pa.uint64())
        found = [part.select(columns).filter(pc.is_in(part.column("skey"), value_set=skeys)) for part in self._parts[0]]
        return pa.concat_tables(found)

    def write(self, older_than_ns: int | None = None) -> None:
        """Write the waiting rows to their tables (spans in time order: `walk_sql._rebuild` says why): every one, or
        with `older_than_ns` those of spans that ended before it and of pending spans that started before it."""
        c = self.connection
        for parts, keys, table, time in zip(self._parts, (self.keys, self._pending_keys), self._tables,
                                            ("end_ns", "start_ns"), strict=True):  # fmt: skip
            if not parts:
                continue
            rows = pa.concat_tables(parts)
            parts.clear()
            if older_than_ns is not None:
                older = pc.less(rows.column(time), pa.scalar(older_than_ns, pa.int64()))
                newer = rows.filter(pc.invert(older))
                rows = rows.filter(older)
                if newer.num_rows:
                    parts.append(newer)
                keys.difference_update(_keys(rows))
            else:
                keys.clear()
            if table == self._tables[0]:
                rows = rows.sort_by("start_ns")
            if rows.num_rows:
                c.register("live_unwritten", rows)
                try:
                    c.execute(f"INSERT INTO {table} SELECT * FROM live_unwritten")
                finally:
                    c.unregister("live_unwritten")
        self.rows = sum(part.num_rows for parts in self._parts for part in parts)
        self._due = self.rows + WRITE_ROWS


def _keys(table: pa.Table) -> list[Key]:
    return list(zip(table.column("tkey").to_pylist(), table.column("skey").to_pylist(), strict=True))


def _without(table: pa.Table, keys: set[Key]) -> pa.Table:
    """`table` less its rows of `keys`."""
    candidates = pc.is_in(table.column("skey"), value_set=pa.array(sorted({s for _, s in keys}), pa.uint64()))
    if not pc.any(candidates).as_py():
        return table
    keep = [key not in keys for key in _keys(table)]
    return table.filter(pa.array(keep, pa.bool_()))
