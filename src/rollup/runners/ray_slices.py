"""A Ray task's side of `report --ray` and `check --ray`: one range of frames, read from the lineage table, accounted.

A range (`RangeWork`) is a run of consecutive frames in time (iteration windows, superseded windows, stretches
outside them) plus, for `check`, the span starts it answers for. The task reads, from the lineage table (as Parquet,
built once for the whole trace), only the spans its frames need: every span overlapping one of them (so a span
crossing a range boundary is read by every range it touches), every span whose effective iteration is one of its
windows' (the span-seconds view counts those wherever they ran), and for `check` every span starting in its part of
the time axis. On that slice it runs `accounting.parts`' own functions, as a local command runs them on every span.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from rollup.accounting.intervals import Stretches, merged_stretches
from rollup.accounting.parts import ReportPart, account_frames
from rollup.base.connection import (
    MIN_LIMIT_BYTES,
    SpillDirectory,
    connect,
    memory_limit_bytes,
    parse_memory_limit,
    release,
    spill_directory,
)
from rollup.base.errors import GoodputError
from rollup.base.schema import sql_text
from rollup.base.tables import LINEAGE
from rollup.checks.parts import CheckPart, check_frames
from rollup.store.spanset import SpanSet

if TYPE_CHECKING:
    import duckdb

    from rollup.accounting.windows import Windows
    from rollup.checks.findings import Finding

# The most stretches a range's spans are read from (see `cover`).
COVER_STRETCHES = 16
# What only the span rules read: `report` leaves these wide columns (ids as text, the ancestor chains) unread.
CHECK_ONLY_COLUMNS = ("trace_id", "span_id", "parent_span_id", "bucketed_chain", "ancestor_iteration_span", "host_pid")


@dataclass(frozen=True)
class RangeWork:
    """What one task accounts.

    `windows`: the report's rows in this range, at `positions` among the report's windows; `lost` and `outside`:
    the superseded windows' stretches and the stretches outside every window it charges (each summed). `cover`:
    merged `[start, end]` stretches holding every frame. `iterations`: the lowest and highest iteration of `windows`
    (span-seconds). `owned`: with `check`, the span starts `[low, high)` whose findings this range reports (None:
    unbounded), and `ancestors` the (trace id, span id) of the nearest bucketed ancestors of bucketed spans starting
    there.
    """

    index: int
    windows: Windows
    positions: array
    lost: Stretches
    outside: Stretches
    cover: tuple[tuple[int, int], ...] = ()
    iterations: tuple[int, int] | None = None
    owned: tuple[int | None, int | None] | None = None
    ancestors: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Dataset:
    """The lineage table's Parquet files every task reads, the attempt the command keeps (None: every one), and
    GOODPUT_MEMORY_LIMIT as the command was given it (None: each node's default)."""

    files: tuple[str, ...]
    run_id: str | None = None
    memory_limit: str | None = None

    def task_limit_bytes(self) -> int:
        """A task's share of its node's memory limit: the node runs a task per CPU at once. A share (`40%`) is of
        the node's own memory."""
        limit = parse_memory_limit(self.memory_limit) if self.memory_limit else memory_limit_bytes()
        return max(MIN_LIMIT_BYTES, limit // (os.cpu_count() or 1))


def cover(stretches: Sequence[tuple[int, int]], most: int = COVER_STRETCHES) -> tuple[tuple[int, int], ...]:
    """At most `most` stretches, sorted and disjoint, holding every one of `stretches`: merged where they overlap,
    then across the smallest gaps between them (a few spans more to read, but a short filter: DuckDB tests each
    span against every stretch)."""
    merged = [list(stretch) for stretch in merged_stretches(stretches)]
    if len(merged) > most:
        gaps = sorted(range(1, len(merged)), key=lambda i: merged[i][0] - merged[i - 1][1], reverse=True)
        breaks = sorted(gaps[: most - 1])
        bounds = [0, *breaks, len(merged)]
        merged = [[merged[a][0], max(m[1] for m in merged[a:b])] for a, b in zip(bounds, bounds[1:], strict=False)]
    return tuple((start, end) for start, end in merged)


def _slice_filter(work: RangeWork) -> str:
    """The spans `work` needs, as a SQL condition (closed comparisons: a few spans more never change a result)."""
    terms = [f"(start_ns <= {end} AND end_ns >= {start})" for start, end in work.cover]
    if work.iterations is not None:
        terms.append(f"(eff_iteration BETWEEN {work.iterations[0]} AND {work.iterations[1]})")
    if work.owned is not None:
        low, high = work.owned
        owned = [f"start_ns < {high}" if high is not None else "true"]
        if low is not None:
            owned.append(f"end_ns >= {low}")
        terms.append("(" + " AND ".join(owned) + ")")
    if work.ancestors:
        terms.append("((trace_id, span_id) IN (SELECT trace_id, span_id FROM range_ancestors))")
    return " OR ".join(terms) or "false"


def load_slice(
    dataset: Dataset, work: RangeWork, spill: SpillDirectory, *, for_check: bool = False
) -> duckdb.DuckDBPyConnection:
    """A fresh DuckDB, held to the task's share of memory and spilling into `spill`, whose LINEAGE table holds the
    spans `work` needs, each once (for `report`, without the columns only the span rules read)."""
    for path in dataset.files:
        if not os.path.exists(path):
            raise GoodputError(
                f"{path}: this Ray worker cannot see the lineage table: it must be on a filesystem every Ray node "
                "shares (the cache, GOODPUT_CACHE_DIR; with --no-cache, the temporary folder, TMPDIR)"
            )
    connection = connect(spill, limit_bytes=dataset.task_limit_bytes(), threads=1, lent=True)
    if work.ancestors:
        trace_ids, span_ids = zip(*work.ancestors, strict=True)
        connection.register(
            "range_ancestors", pa.table({"trace_id": pa.array(trace_ids), "span_id": pa.array(span_ids)})
        )
    files = "[" + ", ".join(sql_text(p) for p in dataset.files) + "]"
    attempt = "" if dataset.run_id is None else f" AND coalesce(run_id, '') = {sql_text(dataset.run_id)}"
    columns = "*" if for_check else f"* EXCLUDE ({', '.join(CHECK_ONLY_COLUMNS)})"
    connection.execute(
        f"CREATE TABLE {LINEAGE} AS SELECT {columns} FROM read_parquet({files}) WHERE ({_slice_filter(work)}){attempt}"
    )
    if work.ancestors:
        connection.unregister("range_ancestors")
    return connection


def task_spill() -> SpillDirectory:
    """Where a task's DuckDB spills: the node's own temporary folder (never the shared storage the data is on)."""
    return spill_directory(Path(tempfile.gettempdir()) / "goodput-spill")


def report_task(dataset: Dataset, work: RangeWork, precedence: list[str], by: str | None) -> ReportPart:
    """The range's part of the report (`accounting.parts.account_frames`) over its slice of the spans."""
    spill = task_spill()
    connection = load_slice(dataset, work, spill)
    try:
        spans = SpanSet(connection, LINEAGE, LINEAGE)
        return account_frames(spans, work.windows, work.lost, work.outside, precedence, by, work.positions)
    finally:
        release(connection)
        spill.remove()


def check_task(dataset: Dataset, work: RangeWork, expect: Sequence[str]) -> CheckPart:
    """The range's part of `check` (`checks.parts.check_frames`) over its slice: the span rules' findings of the spans
    starting in its part of the time axis, and its windows' charges and groups present."""
    spill = task_spill()
    connection = load_slice(dataset, work, spill, for_check=True)
    try:
        spans = SpanSet(connection, LINEAGE, LINEAGE)
        part = check_frames(spans, work.windows, expect, work.positions)
        part.findings = _owned(spans, part.findings, work.owned)
        return part
    finally:
        release(connection)
        spill.remove()


def _owned(spans: SpanSet, findings: list[Finding], owned: tuple[int | None, int | None] | None) -> list[Finding]:
    """The findings whose span starts in `owned` (each span belongs to exactly one range)."""
    if owned is None or not findings:
        return findings
    low, high = owned
    ids = {(f.trace_id, f.span_id) for f in findings}
    trace_ids, span_ids = zip(*ids, strict=True)
    found = pa.table({"trace_id": pa.array(trace_ids), "span_id": pa.array(span_ids)})
    with spans.registered("range_found", found) as found_table:
        starts = spans.rows(
            f"SELECT trace_id, span_id, start_ns FROM {spans.lineage} SEMI JOIN {found_table} USING (trace_id, span_id)"
        )
    start_of = {(t, s): start for t, s, start in starts}

    def mine(start: int) -> bool:
        return (low is None or start >= low) and (high is None or start < high)

    return [f for f in findings if mine(start_of[(f.trace_id, f.span_id)])]
