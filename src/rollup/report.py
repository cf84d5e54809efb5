"""The per-iteration goodput report of SPEC sections 4 and 7: wall-clock view, span-seconds view, total, outside,
and over the job's attempts the rework, the downtime and the job's own goodput.

Returns plain dataclasses; `report_json` gives the exact JSON object of SPEC section 6 with section 7's keys.
"""

from __future__ import annotations

import functools
import gc
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from .attempts import Attempt, downtime_stretches, find_attempts, keep_attempt
from .attribution import (
    Charge,
    Frame,
    FrameCharges,
    charge_each_process,
    charge_stretches,
    parse_precedence,
    span_seconds_ns,
    total_charge,
    window_span_ns,
)
from .breakdown import BREAKDOWN_KEYS, NameShare, NameWalls, charged_name_walls, name_share_columns
from .errors import GoodputError
from .intervals import Stretches
from .lineage import ensure_lineage
from .outliers import outliers_of_columns
from .rows import Figures, IterationRow, IterationRows, seconds, share, zero_buckets
from .schema import BUCKETS
from .windows import Window, Windows, attempt_windows, latest_windows, outside_attempts, stretches_of

if TYPE_CHECKING:
    import duckdb

    from .store import SpanStore

_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")


def _many_small_objects(build: Callable[_Params, _Result]) -> Callable[_Params, _Result]:
    """Run `build` with the cyclic garbage collector paused: a report of many windows (and processes) is hundreds
    of thousands of small objects, none in a cycle, and each collection would walk every one built so far again
    (a quarter of the time of `--by process` at 4M spans). Reference counting frees them as ever."""

    @functools.wraps(build)
    def paused(*args: _Params.args, **kwargs: _Params.kwargs) -> _Result:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return build(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return paused


@dataclass(frozen=True)
class JobFigures:
    """The whole job's wall clock (every window, superseded or not, outside and downtime) and the productive time
    it kept: the share of the job that became training progress."""

    wall_ns: int
    productive_ns: int

    @property
    def wall_s(self) -> float:
        return seconds(self.wall_ns)

    @property
    def productive_s(self) -> float:
        return seconds(self.productive_ns)

    @property
    def goodput(self) -> float | None:
        """productive / wall; None where there is no wall clock."""
        return share(self.productive_ns, self.wall_ns)


@dataclass
class Report:
    """The report of SPEC sections 4 and 7: a row per window, their total, the time outside every window, the
    superseded windows (rework), the time between attempts (downtime), and the attempts themselves."""

    iterations: IterationRows  # a list of `IterationRow`s given here is turned into columns
    total: Figures
    outside: Figures
    precedence: list[str]
    by: str | None = None  # None, "process", "name" or "group"
    process_totals: dict[str, Figures] = field(default_factory=dict)
    rework: Figures = field(default_factory=Figures)
    downtime_ns: int = 0
    attempts: list[Attempt] = field(default_factory=list)
    total_names: list[NameShare] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.iterations, IterationRows):
            self.iterations = IterationRows(self.iterations)

    @property
    def by_process(self) -> bool:
        return self.by == "process"

    @property
    def downtime_s(self) -> float:
        return seconds(self.downtime_ns)

    @property
    def job(self) -> JobFigures:
        wall_ns = self.total.wall_ns + self.rework.wall_ns + self.outside.wall_ns + self.downtime_ns
        return JobFigures(wall_ns, self.total.bucket_ns["productive"])


def select_windows(windows: Windows, iterations: tuple[int, int] | None) -> Windows:
    """Windows whose iteration lies in the inclusive range `iterations` (all when None)."""
    if iterations is None:
        return windows
    low, high = iterations
    return windows.take(i for i, iteration in enumerate(windows.iterations) if low <= iteration <= high)


@dataclass(frozen=True)
class ReportFrames:
    """What a report charges: its rows' windows (the latest attempt's, in the iterations selected), the superseded
    windows among those iterations (rework) and the stretches outside every window; and the attempts, with their
    windows' iterations filled in (`with_windows`)."""

    windows: Windows
    lost: Windows
    outside: Stretches
    attempts: list[Attempt]


def report_frames(connection: duckdb.DuckDBPyConnection, iterations: tuple[int, int] | None) -> ReportFrames:
    """The frames of the report over `spans_ex` (`iterations`: as `build_report` takes it). Every attempt's windows
    are only held while they are sorted out here."""
    attempts = find_attempts(connection)
    every = attempt_windows(connection, [a.run_id for a in attempts])
    latest, superseded = latest_windows(every)
    by_attempt = every.by_attempt()
    return ReportFrames(
        select_windows(latest, iterations),
        select_windows(superseded, iterations),
        outside_attempts(attempts, by_attempt),
        with_windows(attempts, by_attempt, superseded),
    )


@_many_small_objects
def build_report(
    store: SpanStore,
    *,
    iterations: tuple[int, int] | None = None,
    precedence: str | None = None,
    by: str | None = None,
    attempt: str | None = None,
) -> Report:
    """The report over the store's spans.

    `iterations` keeps the windows in that inclusive range, superseded ones included (rework); outside and
    downtime stay the whole run's. `by`: "process" gives a row per window and process; "name" or "group" adds each
    row's and the total's breakdown by span name or `rl.span_group`. `attempt` (a run id or `latest`) reads that
    attempt alone.
    """
    if by not in (None, "process", *BREAKDOWN_KEYS):
        raise GoodputError(f"--by takes process, name or group, got {by!r}")
    order = parse_precedence(precedence)
    connection = store.connection
    ensure_lineage(store)
    if attempt is not None:
        keep_attempt(store, attempt)
    frames = report_frames(connection, iterations)
    windows, lost, attempts = frames.windows, len(frames.lost), frames.attempts
    # The rows' windows charged (with their names' shares when broken down by name), then the superseded windows
    # and the stretches outside. What a long run holds per window is let go as soon as it is summed or copied.
    window_charges, lost_charges, names_wall = charge_frames(
        connection, windows, frames.lost.stretches + frames.outside, order, by, summed_from=lost
    )
    del frames
    outside, rework = lost_charges.rest, total_charge(lost_charges)
    assert outside is not None  # summed_from given: the outside stretches are charged as one
    del lost_charges
    rows = IterationRows.of_windows(windows, window_charges.columns(), window_span_ns(connection, windows))
    del window_charges
    report = Report(
        rows,
        rows.total(),
        Figures.from_ns(outside),
        order,
        rework=Figures.from_ns(rework),
        downtime_ns=sum(end - start for start, end in downtime_stretches(attempts)),
        attempts=attempts,
        by=by,
    )
    if by == "process":
        add_process_rows(connection, report, windows, order)
    elif by is not None and names_wall is not None:
        add_names(connection, report, windows, by, names_wall)
    del windows, names_wall
    mark_outliers(report.iterations)
    return report


def charge_frames(
    connection: duckdb.DuckDBPyConnection,
    windows: Sequence[Window],
    others: Sequence[tuple[int, int]],
    order: list[str],
    by: str | None,
    *,
    summed_from: int | None = None,
) -> tuple[FrameCharges, FrameCharges, NameWalls | None]:
    """The charges of `windows` and of the `others` stretches (each list in the order given), and with `by` "name"
    or "group" each window's wall nanoseconds per (name, bucket): those windows are charged by the sweep that shares
    them among the names (`breakdown.charged_name_walls`), never swept twice. `summed_from`: the others from that
    position on are charged as one (the others' `rest`, `attribution.charge_stretches`)."""
    if by in BREAKDOWN_KEYS:
        window_charges, wall = charged_name_walls(connection, windows, order, by=by)
        return window_charges, charge_stretches(connection, others, order, summed_from=summed_from), wall
    held = None if summed_from is None else len(windows) + summed_from
    charged = charge_stretches(connection, stretches_of(windows) + others, order, summed_from=held)
    other_charges = charged[len(windows) :]
    other_charges.rest = charged.rest
    return charged[: len(windows)], other_charges, None


def add_names(
    connection: duckdb.DuckDBPyConnection,
    report: Report,
    windows: Sequence[Window],
    by: str,
    wall: NameWalls,
) -> None:
    """Each row's share of its buckets by span name (or group), from the rows' wall nanoseconds per (name, bucket)
    (`charge_frames`), with their span-seconds; and the total's: the rows' shares summed."""
    shares, total = name_share_columns(connection, windows, wall, by=by)
    report.iterations.set_name_columns(shares)
    report.total_names = total


def mark_outliers(rows: IterationRows) -> None:
    """Each row's outlying figures among the rows of its process (all rows when not by process): a process's
    steps are compared with its own other steps, never with another process's."""
    groups: dict[str | None, array] = {}  # each process's rows, by position
    for index, process in enumerate(rows.processes()):
        groups.setdefault(process, array("q")).append(index)
    columns = {"wall_s": rows.column("wall_ns"), **{f"{b}_s": rows.column(f"{b}_ns") for b in BUCKETS}}
    whole = len(groups) == 1
    for indices in groups.values():
        of_group = columns if whole else {f: array("q", (c[i] for i in indices)) for f, c in columns.items()}
        for position, flagged in outliers_of_columns(of_group, len(indices)).items():
            rows.set_outliers(indices[position], flagged)


def with_windows(attempts: list[Attempt], by_attempt: dict[str, Windows], superseded: Windows) -> list[Attempt]:
    """The attempts with their first and last iteration and their superseded iterations filled in."""
    lost: dict[str, list[int]] = {}
    for window in superseded:
        lost.setdefault(window.run_id, []).append(window.iteration)
    out = []
    for attempt in attempts:
        numbers = [w.iteration for w in by_attempt.get(attempt.run_id, [])]
        out.append(
            replace(
                attempt,
                first_iteration=min(numbers, default=None),
                last_iteration=max(numbers, default=None),
                superseded=tuple(sorted(lost.get(attempt.run_id, []))),
            )
        )
    return out


def add_process_rows(
    connection: duckdb.DuckDBPyConnection, report: Report, windows: Sequence[Window], order: list[str]
) -> None:
    """Replace the rows by one per (iteration, process), each charging only that process's spans.

    A process has a row in a window where one of its bucketed spans overlaps the window or where it has
    span-seconds (spans of that iteration, wherever they ran). Its totals cover every window all the same: a window
    where it had nothing is unaccounted for it, so every process's total `wall_s` is the report's.
    """
    frames = [Frame(i, w.start_ns, w.end_ns) for i, w in enumerate(windows)]
    charged = charge_each_process(connection, frames, order)  # the processes with a bucketed span there
    span_ns = span_seconds_ns(connection, by_process=True)
    counted: dict[tuple[str, int], set[str]] = {}
    for (run_id, iteration, process), by_bucket in span_ns.items():
        if any(by_bucket.values()):
            counted.setdefault((run_id, iteration), set()).add(process)
    rows = IterationRows()
    by_process: dict[str, Figures] = {}
    for frame in frames:
        w = windows[frame.frame_id]
        charges = charged.get(frame.frame_id, {})
        for process in sorted(set(charges) | counted.get((w.run_id, w.iteration), set())):
            wall = frame.end_ns - frame.start_ns
            charge = charges.get(process) or Charge(wall, zero_buckets(), wall)  # nothing of its own: unaccounted
            spans = span_ns.get((w.run_id, w.iteration, process))
            rows.append(w.iteration, w.start_ns, w.end_ns, charge, spans, process=process, run_id=w.run_id)
            summed = by_process.setdefault(process, Figures())
            summed.wall_ns += charge.wall_ns
            summed.unaccounted_ns += charge.unaccounted_ns
            for b in BUCKETS:
                summed.bucket_ns[b] += charge.bucket_ns[b]
                summed.span_ns[b] += spans[b] if spans else 0
    report.iterations = rows
    report.process_totals = {
        process: over_every_window(figures, report.total.wall_ns) for process, figures in sorted(by_process.items())
    }


def over_every_window(figures: Figures, wall_ns: int) -> Figures:
    """A process's summed rows stretched to every window's wall clock: the windows it had no row in are
    unaccounted for it."""
    charged = sum(figures.bucket_ns.values())
    return replace(figures, wall_ns=wall_ns, unaccounted_ns=wall_ns - charged)


def _figures_json(figures: Figures, *, with_span_seconds: bool = True) -> dict[str, Any]:
    """Seconds to the nanosecond, floats always; `goodput` null where there is no wall clock."""
    bucket_ns = figures.bucket_ns
    out: dict[str, Any] = {"wall_s": seconds(figures.wall_ns)}
    out.update({f"{b}_s": seconds(bucket_ns[b]) for b in BUCKETS})
    out["unaccounted_s"] = seconds(figures.unaccounted_ns)
    out["goodput"] = share(bucket_ns["productive"], figures.wall_ns)
    if with_span_seconds:
        out["span_seconds"] = {b: seconds(figures.span_ns[b]) for b in BUCKETS}
    return out


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    """One item of the report's `attempts` list (SPEC section 7)."""
    return {
        "run_id": attempt.run_id,
        "start_ns": attempt.start_ns,
        "end_ns": attempt.end_ns,
        "first_iteration": attempt.first_iteration,
        "last_iteration": attempt.last_iteration,
        "processes": attempt.processes,
        "superseded": list(attempt.superseded),
    }


def names_json(names: list[NameShare], by: str) -> list[dict[str, Any]]:
    """SPEC section 8's list: `{"name" (or "group"), "bucket", "wall_s", "span_s"}` per name and bucket."""
    return [{by: n.name, "bucket": n.bucket, "wall_s": seconds(n.wall_ns), "span_s": seconds(n.span_ns)} for n in names]


class RowsJson(Sequence[dict[str, Any]]):
    """A report's rows as SPEC section 6's objects, each made when it is asked for (and then let go): what
    `report_json(report, lazy=True)` holds in place of the list, so that writing the JSON of 500k iterations never
    holds it all."""

    def __init__(self, report: Report) -> None:
        self._report = report

    def __len__(self) -> int:
        return len(self._report.iterations)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [row_json(self._report, row) for row in self._report.iterations[index]]
        return row_json(self._report, self._report.iterations[index])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (row_json(self._report, row) for row in self._report.iterations)


def row_json(report: Report, row: IterationRow) -> dict[str, Any]:
    """One item of the report's `iterations` list."""
    item: dict[str, Any] = {"iteration": row.iteration, "start_ns": row.start_ns, "end_ns": row.end_ns}
    if report.by_process:
        item["process"] = row.process
    item.update(_figures_json(row.figures))
    if row.names is not None and report.by is not None:
        item["names"] = names_json(row.names, report.by)
    item["outliers"] = list(row.outliers)
    return item


@_many_small_objects
def report_json(report: Report, *, lazy: bool = False) -> dict[str, Any]:
    """The object `report --format json` prints (SPEC sections 6, 7, 8 and 10); `--by process` adds `process` and
    `processes`, `--by name` / `--by group` a `names` list to each row and to the total. `lazy`: `iterations` is a
    `RowsJson`, whose items are made as they are read (`views.json_chunks` writes it), not a list."""
    job = report.job
    iterations: Sequence[dict[str, Any]] = (
        RowsJson(report) if lazy else [row_json(report, row) for row in report.iterations]
    )
    total = _figures_json(report.total)
    if report.total_names is not None and report.by is not None:
        total["names"] = names_json(report.total_names, report.by)
    out: dict[str, Any] = {
        "iterations": iterations,
        "total": total,
        "outside": _figures_json(report.outside, with_span_seconds=False),
        "rework": _figures_json(report.rework, with_span_seconds=False),
        "downtime": {"wall_s": report.downtime_s},
        "job": {"wall_s": job.wall_s, "productive_s": job.productive_s, "goodput": job.goodput},
        "attempts": [attempt_json(a) for a in report.attempts],
    }
    if report.by_process:
        out["processes"] = [{"process": p, **_figures_json(f)} for p, f in report.process_totals.items()]
    return out
