"""One range of iteration windows, accounted on its own: what a Ray task of `report --ray` / `check --ray` runs.

A range is a run of consecutive frames in time (iteration windows, superseded windows, stretches outside them) plus
the span starts it answers for in `check`. The task reads, from the lineage table (`spans_ex` as Parquet, built once
for the whole trace), only the spans its frames need: every span overlapping one of them (so a span crossing a range
boundary is read by every range it touches), every span whose effective iteration is one of its windows' (the
span-seconds view counts those wherever they ran), and for `check` every span starting in its part of the time axis.
On that slice it runs the accounting's own functions, whose results for a frame depend only on the spans overlapping
it: integer nanoseconds per window, which the driver adds up exactly (`distributed`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from .attribution import Charge, Frame, charge_stretches, span_seconds_ns
from .checks import SPAN_RULES
from .connection import (
    MIN_LIMIT_BYTES,
    SpillDirectory,
    connect,
    memory_limit_bytes,
    parse_memory_limit,
    spill_directory,
)
from .errors import GoodputError
from .report import Figures, IterationRow, Report, add_names, add_process_rows, charge_frames
from .rows import IterationRows
from .schema import BUCKETS, sql_text
from .window_rules import groups_present

if TYPE_CHECKING:
    import duckdb

    from .findings import Finding
    from .windows import Window

# The most stretches a range's spans are read from (see `cover`).
COVER_STRETCHES = 16

@dataclass(frozen=True)
class RangeWork:
    """What one task accounts.

    `windows`: the report's rows in this range, as (frame id, window); `others`: frames only charged (superseded
    windows, stretches outside). `cover`: merged `[start, end]` stretches holding every frame. `iterations`: the
    lowest and highest iteration of `windows` (span-seconds). `owned`: with `check`, the span starts
    `[low, high)` whose findings this range reports (None: unbounded), and `ancestors` the (trace id, span id) of
    the nearest bucketed ancestors of bucketed spans starting there.
    """

    index: int
    windows: tuple[tuple[int, Window], ...]
    others: tuple[Frame, ...] = ()
    cover: tuple[tuple[int, int], ...] = ()
    iterations: tuple[int, int] | None = None
    owned: tuple[int | None, int | None] | None = None
    ancestors: tuple[tuple[str, str], ...] = ()

    @property
    def frames(self) -> list[Frame]:
        return [Frame(frame_id, w.start_ns, w.end_ns) for frame_id, w in self.windows] + list(self.others)

    def charge(self, connection: duckdb.DuckDBPyConnection, precedence: Sequence[str]) -> dict[int, Charge]:
        """Each frame's charge, by frame id."""
        frames = self.frames
        charges = charge_stretches(connection, [(f.start_ns, f.end_ns) for f in frames], precedence)
        return {frame.frame_id: charge for frame, charge in zip(frames, charges, strict=True)}


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


@dataclass
class RangeReport:
    """A range's part of the report: each window's row (by frame id), with `--by process` its rows per process,
    and the charges of the frames only charged."""

    index: int
    rows: dict[int, IterationRow]
    process_rows: dict[int, list[IterationRow]] = field(default_factory=dict)
    charges: dict[int, Charge] = field(default_factory=dict)


@dataclass
class RangeChecks:
    """A range's part of `check`: the span rules' findings on the spans it owns, and per window (by frame id) its
    charge in the declared precedence and the `--expect` groups active in it."""

    index: int
    findings: list[Finding]
    charges: dict[int, Charge]
    present: dict[int, set[str]]


def cover(frames: Sequence[Frame], most: int = COVER_STRETCHES) -> tuple[tuple[int, int], ...]:
    """At most `most` stretches, sorted and disjoint, holding every frame: the frames merged where they overlap,
    then across the smallest gaps between them (a few spans more to read, but a short filter: DuckDB tests each
    span against every stretch)."""
    merged: list[list[int]] = []
    for frame in sorted(frames, key=lambda f: (f.start_ns, f.end_ns)):
        if merged and frame.start_ns <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], frame.end_ns)
        else:
            merged.append([frame.start_ns, frame.end_ns])
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


# What only the span rules read: `report` leaves these wide columns (ids as text, the ancestor chains) unread.
CHECK_ONLY_COLUMNS = ("trace_id", "span_id", "parent_span_id", "bucketed_chain", "ancestor_iteration_span", "host_pid")


def load_slice(
    dataset: Dataset, work: RangeWork, spill: SpillDirectory, *, for_check: bool = False
) -> duckdb.DuckDBPyConnection:
    """A fresh DuckDB, held to the task's share of memory and spilling into `spill`, whose `spans_ex` holds the
    spans `work` needs, each once (for `report`, without the columns only the span rules read)."""
    for path in dataset.files:
        if not os.path.exists(path):
            raise GoodputError(
                f"{path}: this Ray worker cannot see the lineage table: it must be on a filesystem every Ray node "
                "shares (the cache, GOODPUT_CACHE_DIR; with --no-cache, the temporary folder, TMPDIR)"
            )
    connection = connect(spill, limit_bytes=dataset.task_limit_bytes(), threads=1)
    if work.ancestors:
        trace_ids, span_ids = zip(*work.ancestors, strict=True)
        connection.register(
            "range_ancestors", pa.table({"trace_id": pa.array(trace_ids), "span_id": pa.array(span_ids)})
        )
    files = "[" + ", ".join(sql_text(p) for p in dataset.files) + "]"
    attempt = "" if dataset.run_id is None else f" AND coalesce(run_id, '') = {sql_text(dataset.run_id)}"
    columns = "*" if for_check else f"* EXCLUDE ({', '.join(CHECK_ONLY_COLUMNS)})"
    connection.execute(
        f"CREATE TABLE spans_ex AS SELECT {columns} FROM read_parquet({files}) WHERE ({_slice_filter(work)}){attempt}"
    )
    if work.ancestors:
        connection.unregister("range_ancestors")
    return connection


def task_spill() -> SpillDirectory:
    """Where a task's DuckDB spills: the node's own temporary folder (never the shared storage the data is on)."""
    return spill_directory(Path(tempfile.gettempdir()) / "goodput-spill")


def report_range(dataset: Dataset, work: RangeWork, precedence: list[str], by: str | None) -> RangeReport:
    """Charge the range's frames and build its windows' rows as `report.build_report` builds them, with their
    process rows (`--by process`) or name shares (`--by name` / `--by group`)."""
    spill = task_spill()
    connection = load_slice(dataset, work, spill)
    try:
        windows = [w for _, w in work.windows]
        others = [(f.start_ns, f.end_ns) for f in work.others]
        window_charges, other_charges, names_wall = charge_frames(connection, windows, others, precedence, by)
        span_ns = span_seconds_ns(connection)
        rows = [
            IterationRow(
                w.iteration, w.start_ns, w.end_ns,
                Figures.from_ns(charge, span_ns.get((w.run_id, w.iteration))), run_id=w.run_id,
            )
            for w, charge in zip(windows, window_charges, strict=True)
        ]  # fmt: skip
        part = Report(IterationRows(rows), Figures(), Figures(), precedence, by=by)
        if by == "process":
            add_process_rows(connection, part, windows, precedence)
        elif by is not None and names_wall is not None:
            add_names(connection, part, windows, by, names_wall)
    finally:
        connection.close()
        spill.remove()
    frame_of = {w.iteration: frame_id for frame_id, w in work.windows}  # a report has one window per iteration
    process_rows: dict[int, list[IterationRow]] = {}
    if by == "process":
        for row in part.iterations:
            process_rows.setdefault(frame_of[row.iteration], []).append(row)
    plain = rows if by == "process" else list(part.iterations)  # with their names (held by `part`'s columns)
    return RangeReport(
        work.index,
        {frame_id: row for (frame_id, _), row in zip(work.windows, plain, strict=True)},
        process_rows,
        {frame.frame_id: charge for frame, charge in zip(work.others, other_charges, strict=True)},
    )


def check_range(dataset: Dataset, work: RangeWork, expect: Sequence[str]) -> RangeChecks:
    """The span rules' findings of the spans starting in the range's part of the time axis, and what the window
    rules need of its windows (`window_rules.window_findings`): their charge and the `expect` groups active in them."""
    spill = task_spill()
    connection = load_slice(dataset, work, spill, for_check=True)
    try:
        found = [finding for rule in SPAN_RULES for finding in rule(connection)]
        findings = _owned(connection, found, work.owned)
        windows = [w for _, w in work.windows]
        charges = work.charge(connection, list(BUCKETS))
        present: dict[int, set[str]] = {}
        if expect and windows:
            by_position = groups_present(connection, windows, expect)
            present = {frame_id: by_position.get(i, set()) for i, (frame_id, _) in enumerate(work.windows)}
    finally:
        connection.close()
        spill.remove()
    return RangeChecks(work.index, findings, charges, present)


def _owned(
    connection: duckdb.DuckDBPyConnection, findings: list[Finding], owned: tuple[int | None, int | None] | None
) -> list[Finding]:
    """The findings whose span starts in `owned` (each span belongs to exactly one range)."""
    if owned is None or not findings:
        return findings
    low, high = owned
    ids = {(f.trace_id, f.span_id) for f in findings}
    trace_ids, span_ids = zip(*ids, strict=True)
    connection.register("range_found", pa.table({"trace_id": pa.array(trace_ids), "span_id": pa.array(span_ids)}))
    try:
        starts = connection.execute(
            "SELECT trace_id, span_id, start_ns FROM spans_ex SEMI JOIN range_found USING (trace_id, span_id)"
        ).fetchall()
    finally:
        connection.unregister("range_found")
    start_of = {(t, s): start for t, s, start in starts}

    def mine(start: int) -> bool:
        return (low is None or start >= low) and (high is None or start < high)

    return [f for f in findings if mine(start_of[(f.trace_id, f.span_id)])]
