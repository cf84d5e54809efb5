"""One refresh of a watched run, typed (SPEC section 13): what was read, the newest rows, the total so far, the
rolling stretches of trace time, the GPUs. The three things a watch shows read it alike: the screen
(`cli.views.watch`), the JSON Lines object (`watch_json`, here) and the gauges at `/metrics` (`cli.serve`).

A figure not known yet is None, never a zero standing in for it: the latest span end before the first span, a
rolling stretch before anything was read, the newest complete iteration before there is one, the GPUs of a run
whose processes hold none, a goodput with no wall clock to divide (`Figures.goodput`). A reader shows a gap for it
(`-` on the screen, null in the JSON, no sample at `/metrics`). So do the total's seconds before it has a wall clock
(no window yet): `/metrics` has no sample of them, the screen no table (the JSON writes the total as `report` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollup.accounting.gpu_charge import GpuFigures, GpuReport
    from rollup.accounting.rows import Figures, IterationRow
    from rollup.report.build import Report
    from rollup.report.recent import Recent

# The rolling stretches of trace time a watcher charges at every refresh (SPEC section 13): label -> nanoseconds.
RECENT: dict[str, int] = {"1m": 60 * 10**9, "5m": 300 * 10**9, "15m": 900 * 10**9}
# The rows a refresh carries, to the screen and in its JSON object: the newest iterations' (SPEC section 13's "last
# rows"); the screen shows as many of them as its height holds.
WATCH_ROWS = 10


@dataclass(frozen=True)
class LiveRow:
    """One of the newest rows: the report's row of an iteration, and its GPU-seconds when the run holds GPUs."""

    row: IterationRow
    gpu: GpuFigures | None = None

    @property
    def iteration(self) -> int:
        return self.row.iteration

    @property
    def figures(self) -> Figures:
        return self.row.figures


@dataclass(frozen=True)
class LiveGpus:
    """The GPUs the run's processes hold (SPEC section 12): the report's GPU figures, and the total's GPU-seconds
    (every row's window once)."""

    report: GpuReport
    total: GpuFigures

    @property
    def count(self) -> int | float:
        """The job's GPUs, as JSON writes them."""
        return self.report.count

    @property
    def goodput(self) -> float | None:
        """The total's GPU goodput; None while its GPUs held no time."""
        return self.total.goodput


@dataclass(frozen=True)
class LiveState:
    """One refresh. What was read: `spans`, `files`, and `newest_end_ns`, the latest span end (trace time T; None
    before the first span). `rows`: the newest WATCH_ROWS rows, oldest first. `total`: the total so far. `recent`:
    the rolling stretches by RECENT's labels, in its order (None: nothing read yet). `gpus`: None when no process
    holds a GPU. `run_id`: the run's id when it has one attempt (what `/metrics` labels its samples with), else
    None. `report`: the whole report as it stands, as `report` builds it of the files. `notes`: this refresh's.
    `waits`: what the watcher waits for now, a sentence a path named that names no file yet (`waits.Waits`): said
    while it holds, gone once the path names a file."""

    spans: int
    files: int
    newest_end_ns: int | None
    rows: tuple[LiveRow, ...]
    total: Figures
    recent: dict[str, Recent | None]
    gpus: LiveGpus | None
    run_id: str | None
    report: Report
    notes: list[str] = field(default_factory=list)
    waits: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        report: Report,
        recent: dict[str, Recent | None],
        spans: int,
        files: int,
        newest_end_ns: int | None,
        notes: list[str],
        rows: int = WATCH_ROWS,
        waits: tuple[str, ...] = (),
    ) -> LiveState:
        """The state of a refresh whose report is `report`, keeping its newest `rows` rows."""
        iterations, gpus = report.iterations, report.gpus
        newest = tuple(
            LiveRow(iterations[i], None if gpus is None else gpus.row(i))
            for i in range(max(0, len(iterations) - rows), len(iterations))
        )
        attempts = report.attempts
        run_id = attempts[0].run_id or None if len(attempts) == 1 else None
        held = None if gpus is None else LiveGpus(gpus, gpus.total())
        return cls(spans, files, newest_end_ns, newest, report.total, recent, held, run_id, report, notes, waits)

    @property
    def newest_iteration(self) -> int | None:
        """The newest complete iteration; None before the first."""
        return self.rows[-1].iteration if self.rows else None


def watch_json(state: LiveState) -> dict[str, Any]:
    """SPEC section 13's object of one refresh, keys in its order: what was read, the newest rows and the total as
    `report --format json` writes them, the rolling stretches (null: nothing read yet), the GPUs (null: none held).
    """
    from rollup.report.as_json import figures_json, iteration_json

    total = figures_json(state.total)
    if state.gpus is not None:
        total["gpu"] = state.gpus.total.json()
    return {
        "kind": "watch",
        "spans": state.spans,
        "files": state.files,
        "iterations": [iteration_json(row.row, row.gpu) for row in state.rows],
        "total": total,
        "recent": {label: None if recent is None else recent.json() for label, recent in state.recent.items()},
        "gpus": None if state.gpus is None else state.gpus.report.json(),
    }
