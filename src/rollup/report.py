"""The per-iteration goodput report of SPEC sections 4 and 7: wall-clock view, span-seconds view, total, outside,
and over the job's attempts the rework, the downtime and the job's own goodput.

Returns plain dataclasses; `report_json` gives the exact JSON object of SPEC section 6 with section 7's keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .attempts import Attempt, downtime_stretches, find_attempts, keep_attempt
from .attribution import Charge, Frame, charge_wall_clock, parse_precedence, processes_in_frames, span_seconds_ns
from .lineage import ensure_lineage
from .schema import BUCKETS
from .windows import Window, attempt_windows, latest_windows, outside_stretches

if TYPE_CHECKING:
    import duckdb

    from .store import SpanStore

NS_PER_S = 1e9


@dataclass
class Figures:
    """Wall-clock seconds of one stretch of time, by bucket, plus the naive span-seconds when they apply."""

    wall_s: float = 0.0
    productive_s: float = 0.0
    overhead_s: float = 0.0
    idle_s: float = 0.0
    wasted_s: float = 0.0
    unaccounted_s: float = 0.0
    span_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0.0))

    @property
    def goodput(self) -> float:
        return self.productive_s / self.wall_s if self.wall_s > 0 else 0.0

    @classmethod
    def from_ns(cls, charge: Charge, span_ns: dict[str, int] | None = None) -> Figures:
        # Spelled out, not built from BUCKETS: a report makes one per iteration, and 10k iterations are common.
        bucket_ns = charge.bucket_ns
        return cls(
            wall_s=charge.wall_ns / NS_PER_S,
            productive_s=bucket_ns["productive"] / NS_PER_S,
            overhead_s=bucket_ns["overhead"] / NS_PER_S,
            idle_s=bucket_ns["idle"] / NS_PER_S,
            wasted_s=bucket_ns["wasted"] / NS_PER_S,
            unaccounted_s=charge.unaccounted_ns / NS_PER_S,
            span_seconds={b: span_ns.get(b, 0) / NS_PER_S for b in BUCKETS} if span_ns else dict.fromkeys(BUCKETS, 0.0),
        )


def _sum_charges(charges: Sequence[Charge]) -> Charge:
    """The stretches outside every window as one: integer nanoseconds, added exactly."""
    return Charge(
        sum(c.wall_ns for c in charges),
        {b: sum(c.bucket_ns[b] for c in charges) for b in BUCKETS},
        sum(c.unaccounted_ns for c in charges),
    )


_FIGURE_FIELDS = ("wall_s", *(f"{b}_s" for b in BUCKETS), "unaccounted_s")


def _sum_figures(parts: Sequence[Figures]) -> Figures:
    total = Figures(**{name: sum(getattr(part, name) for part in parts) for name in _FIGURE_FIELDS})
    total.span_seconds = {b: sum(part.span_seconds[b] for part in parts) for b in BUCKETS}
    return total


@dataclass
class IterationRow:
    """One row of the report: iteration `iteration`'s window and its figures (of one process, with `--by process`).

    `run_id` is the attempt whose window it is (the latest one with a window for `iteration`).
    """

    iteration: int
    start_ns: int
    end_ns: int
    figures: Figures
    process: str | None = None
    run_id: str = ""


@dataclass(frozen=True)
class JobFigures:
    """The whole job's wall clock (every window, superseded or not, outside and downtime) and the productive time
    it kept: the share of the job that became training progress."""

    wall_s: float
    productive_s: float

    @property
    def goodput(self) -> float:
        return self.productive_s / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class Report:
    """The report of SPEC sections 4 and 7: a row per window, their total, the time outside every window, the
    superseded windows (rework), the time between attempts (downtime), and the attempts themselves."""

    iterations: list[IterationRow]
    total: Figures
    outside: Figures
    precedence: list[str]
    by_process: bool = False
    process_totals: dict[str, Figures] = field(default_factory=dict)
    rework: Figures = field(default_factory=Figures)
    downtime_s: float = 0.0
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def job(self) -> JobFigures:
        wall_s = self.total.wall_s + self.rework.wall_s + self.outside.wall_s + self.downtime_s
        return JobFigures(wall_s, self.total.productive_s)


def select_windows(windows: list[Window], iterations: tuple[int, int] | None) -> list[Window]:
    """Windows whose iteration lies in the inclusive range `iterations` (all when None)."""
    if iterations is None:
        return windows
    low, high = iterations
    return [w for w in windows if low <= w.iteration <= high]


def build_report(
    store: SpanStore,
    *,
    iterations: tuple[int, int] | None = None,
    precedence: str | None = None,
    by_process: bool = False,
    attempt: str | None = None,
) -> Report:
    """The report over the store's spans.

    `iterations` keeps the windows in that inclusive range, superseded ones included (rework); outside and
    downtime stay the whole run's. `attempt` (a run id or `latest`) reads that attempt alone.
    """
    order = parse_precedence(precedence)
    connection = store.connection
    ensure_lineage(store)
    if attempt is not None:
        keep_attempt(store, attempt)
    attempts = find_attempts(connection)
    every = attempt_windows(connection, [a.run_id for a in attempts])
    latest, superseded = latest_windows(every)
    windows = select_windows(latest, iterations)
    lost = select_windows(superseded, iterations)
    by_attempt: dict[str, list[Window]] = {}
    for window in every:
        by_attempt.setdefault(window.run_id, []).append(window)
    outside = [s for a in attempts for s in outside_stretches(a.extent, by_attempt.get(a.run_id, []))]
    # One charge for every frame: the rows' windows, the superseded ones, then the stretches outside.
    frames = [Frame(i, w.start_ns, w.end_ns) for i, w in enumerate([*windows, *lost])]
    outside_frames = [Frame(len(frames) + i, s, e) for i, (s, e) in enumerate(outside)]
    charges = charge_wall_clock(connection, frames + outside_frames, order)
    span_ns = span_seconds_ns(connection)

    rows = [
        IterationRow(
            w.iteration, w.start_ns, w.end_ns, Figures.from_ns(charges[i], span_ns.get((w.run_id, w.iteration))),
            run_id=w.run_id,
        )
        for i, w in enumerate(windows)
    ]  # fmt: skip
    report = Report(
        rows,
        _sum_figures([row.figures for row in rows]),
        Figures.from_ns(_sum_charges([charges[f.frame_id] for f in outside_frames])),
        order,
        rework=Figures.from_ns(_sum_charges([charges[len(windows) + i] for i in range(len(lost))])),
        downtime_s=sum(end - start for start, end in downtime_stretches(attempts)) / NS_PER_S,
        attempts=_with_windows(attempts, by_attempt, superseded),
    )
    if by_process:
        _add_process_rows(connection, report, windows, order)
    return report


def _with_windows(
    attempts: list[Attempt], by_attempt: dict[str, list[Window]], superseded: list[Window]
) -> list[Attempt]:
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


def _add_process_rows(
    connection: duckdb.DuckDBPyConnection, report: Report, windows: list[Window], order: list[str]
) -> None:
    """Replace the rows by one per (iteration, process), each charging only that process's spans."""
    frames = [Frame(i, w.start_ns, w.end_ns) for i, w in enumerate(windows)]
    processes = processes_in_frames(connection, frames)
    process_frames: list[tuple[Frame, Frame]] = []
    for frame in frames:
        for process in processes.get(frame.frame_id, []):
            process_frames.append((frame, Frame(len(process_frames), frame.start_ns, frame.end_ns, process)))
    charges = charge_wall_clock(connection, [pf for _, pf in process_frames], order)
    span_ns = span_seconds_ns(connection, by_process=True)
    rows = []
    for frame, pframe in process_frames:
        w = windows[frame.frame_id]
        figures = Figures.from_ns(charges[pframe.frame_id], span_ns.get((w.run_id, w.iteration, pframe.process)))
        rows.append(IterationRow(w.iteration, w.start_ns, w.end_ns, figures, pframe.process, w.run_id))
    report.iterations = rows
    report.by_process = True
    by_process: dict[str, list[Figures]] = {}
    for row in rows:
        by_process.setdefault(row.process or "", []).append(row.figures)
    report.process_totals = {p: _sum_figures(figs) for p, figs in sorted(by_process.items())}


def _figures_json(figures: Figures, *, with_goodput: bool = True, with_span_seconds: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"wall_s": figures.wall_s}
    out.update({f"{b}_s": getattr(figures, f"{b}_s") for b in BUCKETS})
    out["unaccounted_s"] = figures.unaccounted_s
    if with_goodput:
        out["goodput"] = figures.goodput
    if with_span_seconds:
        out["span_seconds"] = dict(figures.span_seconds)
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


def report_json(report: Report) -> dict[str, Any]:
    """The object `report --format json` prints (SPEC sections 6 and 7); `--by process` adds `process` and
    `processes`."""
    job = report.job
    iterations = []
    for row in report.iterations:
        item: dict[str, Any] = {"iteration": row.iteration, "start_ns": row.start_ns, "end_ns": row.end_ns}
        if report.by_process:
            item["process"] = row.process
        item.update(_figures_json(row.figures))
        iterations.append(item)
    out: dict[str, Any] = {
        "iterations": iterations,
        "total": _figures_json(report.total),
        "outside": _figures_json(report.outside, with_goodput=False, with_span_seconds=False),
        "rework": _figures_json(report.rework, with_goodput=False, with_span_seconds=False),
        "downtime": {"wall_s": report.downtime_s},
        "job": {"wall_s": job.wall_s, "productive_s": job.productive_s, "goodput": job.goodput},
        "attempts": [attempt_json(a) for a in report.attempts],
    }
    if report.by_process:
        out["processes"] = [{"process": p, **_figures_json(f)} for p, f in report.process_totals.items()]
    return out
