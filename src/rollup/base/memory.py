"""How much memory each part of the work may take, within the store's limit (`connection.memory_limit_bytes`).

Conversion workers run before the store's DuckDB holds anything; each decodes one batch at a time in a fixed amount
of memory (WORKER_LIMIT_BYTES for its own DuckDB), and there are only as many of them as the limit has room for
(`conversion_workers`). The accounting then sweeps a batch of spans at a time (`sweep_batch_spans`). So a command's
peak is the limit plus a fixed margin, whatever the trace's size. Each constant's figures, and the bench that
measures them, are in docs/performance.md.
"""

from __future__ import annotations

import os

from .connection import memory_limit_bytes

# A conversion worker's own DuckDB decodes one JSON batch (`read.json_lines.BATCH_BYTES`) at a time: this is room to
# spare for it, whatever the store's limit. Conversion ends before the accounting starts, whose peak is the limit and
# a third more: one worker per WORKER_BUDGET_BYTES of the limit keeps conversion's peak under the accounting's.
WORKER_LIMIT_BYTES = 256 * 10**6
WORKER_BUDGET_BYTES = 250 * 10**6
# DuckDB's own read of JSON Lines (`read.duckdb_json`) fails under too low a limit (its read buffers); below this the
# careful reader, batch by batch, reads those files instead.
DIRECT_JSON_MIN_BYTES = 500 * 10**6
# The spans as a DuckDB table of their node columns take about this many bytes each. Past twice the limit they go to
# Parquet files of the command's own instead (`nodes.nodes_view`): a table that fits is scanned faster, one that
# spills has every scan read DuckDB's uncompressed spill file back.
NODE_TABLE_BYTES_PER_SPAN = 150
# Charging stretches of time cuts each bucketed span to the stretches it overlaps and sorts the cuts (`attribution`),
# which DuckDB holds at well over a hundred bytes a span: the stretches are charged in batches of at most the limit
# over this many bytes a span (`sweep_batch_spans`), a small share of the limit for the sweep and the rest for what
# the command holds beside it. A batch's size sets the command's peak whatever the trace's length; smaller batches
# cost time (bench/scale.py).
SWEEP_BYTES_PER_SPAN = 1500


def nodes_as_parquet(spans: int, limit_bytes: int) -> bool:
    """Whether `spans` spans are better held as Parquet than as a DuckDB table under `limit_bytes`."""
    return spans * NODE_TABLE_BYTES_PER_SPAN > 2 * limit_bytes


def sweep_batch_spans(limit_bytes: int) -> int:
    """How many bucketed spans one sweep of `attribution` may take at once under a connection's `limit_bytes`."""
    return max(1, limit_bytes // SWEEP_BYTES_PER_SPAN)


def conversion_workers(cores: int | None = None) -> int:
    """How many processes convert trace files at once: one a core, and no more than WORKER_BUDGET_BYTES each of the
    memory limit allow (at least one)."""
    cores = cores or os.cpu_count() or 1
    return max(1, min(cores, memory_limit_bytes() // WORKER_BUDGET_BYTES))
