"""The Parquet side of a load: a span table read back as batches (an `ingest` result given as a trace), and the
part a chunk's spans are written to (`chunks.convert_chunk`), with the columns that get dictionaries and statistics.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from rollup.base.errors import GoodputError, TraceFormatError
from rollup.base.schema import SPAN_SCHEMA

from .signals import NotATrace

if TYPE_CHECKING:  # imported where a Parquet file is read or written: a load from the cache alone never does
    import pyarrow.parquet as pq

# Dictionary pages only where values repeat, statistics only where queries filter: both cost write time, and a
# dictionary on unique ids makes the file larger, not smaller (docs/performance.md).
_DICTIONARY_COLUMNS = [
    "name", "status_message", "scope_name", "scope_version", "service", "process", "host_pid", "run_id", "holding",
    "bucket", "span_group", "efficiency_category", "fleet", "source_file",
]  # fmt: skip
_STATISTICS_COLUMNS = ["trace_id", "span_id", "start_ns", "end_ns", "iteration"]


def parquet_batches(path: str, batch_rows: int, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The rows of a span-schema Parquet file (an `ingest` result) as they are, source_file included; `schema`'s
    columns only."""
    try:
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(path)
        problem = parquet_problem(parquet.schema_arrow.names)
        if problem:
            raise NotATrace(path, "", problem)
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=schema.names):
            yield batch.cast(schema)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as error:  # a damaged file (a column name not UTF-8)
        raise TraceFormatError(path, "", f"unreadable Parquet file ({error})") from None


def parquet_problem(columns: list[str]) -> str | None:
    """Why a Parquet file with `columns` is not a goodput span table (None when it is one)."""
    missing = [name for name in SPAN_SCHEMA.names if name not in columns]
    if not missing:
        return None
    if len(missing) < len(SPAN_SCHEMA.names) // 2:  # most columns there: a span table of an older version
        return f"a goodput span table of an older version (no {', '.join(missing)}): ingest its traces again"
    return f"a Parquet file that is not a goodput span table (no {missing[0]})"


def open_part(out_path: str, schema: pa.Schema) -> pq.ParquetWriter:
    import pyarrow.parquet as pq

    try:
        return pq.ParquetWriter(
            out_path,
            schema,
            compression="zstd",
            use_dictionary=[name for name in _DICTIONARY_COLUMNS if name in schema.names],
            write_statistics=[name for name in _STATISTICS_COLUMNS if name in schema.names],
        )
    except OSError as error:
        raise GoodputError(f"{out_path}: cannot write ({error})") from None


def write_part(writer: pq.ParquetWriter, table: pa.Table, batch_rows: int, out_path: str) -> int:
    try:
        writer.write_table(table, row_group_size=batch_rows)
    except OSError as error:
        raise GoodputError(f"{out_path}: cannot write ({error})") from None
    return table.num_rows


def remove_part(out_path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(out_path)
