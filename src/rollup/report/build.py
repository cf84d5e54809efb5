"""The per-iteration goodput report of SPEC sections 4 and 7: wall-clock view, span-seconds view, total, outside,
and over the job's attempts the rework, the downtime and the job's own goodput.

One orchestration, whoever computes it: `build_report` finds the report's frames (`frames.report_frames`), hands them to
a runner (none: one part in this process; `runners.on_ray.RayRunner`: Ray tasks) and merges the parts it gets back
(`accounting.parts`). Returns plain dataclasses; `report.as_json.report_json` gives the exact JSON object of SPEC
section 6 (and 7's keys)."""

from __future__ import annotations

import functools
import gc
import operator
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from rollup.accounting.attribution import parse_precedence, total_charge
from rollup.accounting.breakdown import BREAKDOWN_KEYS
from rollup.accounting.gpu_charge import GpuReport, gpu_report
from rollup.accounting.gpus import GpuOptions, gpu_model
from rollup.accounting.parts import ReportPart, ReportRunner, account_here
from rollup.accounting.rows import Figures, IterationRows, NameShare, seconds, share, sum_figures
from rollup.accounting.sweeps import LocalSweeps, Sweeps
from rollup.accounting.windows import missing_in
from rollup.base.errors import GoodputError, OptionError
from rollup.base.schema import BUCKETS
from rollup.checks.run_rules import duplicate_step_findings, lost_step_findings
from rollup.critical.build import PoolShare, pool_bottleneck
from rollup.store.attempts import Attempt, downtime_stretches

from .figures import FIGURES
from .outliers import MIN_ROWS, compared_groups, outliers_of_columns
from .recent import Recent, clip_attempt, clip_frames, clip_pairs, last_stretch

if TYPE_CHECKING:
    from rollup.checks.findings import Finding
    from rollup.store.spanset import SpanSet, SpanSource

_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")

# What `--by` takes: a row per window and process, or each row's buckets shared among span names or groups.
BY_CHOICES = ("process", *BREAKDOWN_KEYS, "pool")


def _many_small_objects(build: Callable[_Params, _Result]) -> Callable[_Params, _Result]:
    """Run `build` with the cyclic garbage collector paused: a report of many windows (and processes) is hundreds
    of thousands of small objects, none in a cycle, and each collection would walk every one built so far again
    (a large part of `--by process`'s time on a long run). Reference counting frees them as ever."""

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
class ReportOptions:
    """What a report is asked for, checked when it is made (an OptionError naming the option otherwise), so a
    command says what is wrong before it reads a file.

    `iterations`: the windows of that inclusive range, superseded ones included (rework); outside and downtime stay
    the whole run's. `exact`: `iterations` is one iteration asked for by number, which is an error when the traces
    lack it (a range holding none is an empty report, `Report.missing` saying why). `precedence`: the bucket order
    for instants where several are active (`idle,productive,overhead,wasted`; default the declared order). `by`:
    "process" gives a row per window and process; "name" or "group" adds each row's and the total's breakdown by
    span name or `rl.span_group`; "pool" a row per window and pool of GPUs (SPEC section 12). `attempt` (a run id or
    `latest`) reads that attempt alone. `gpus`: `--gpus` and `--place` (SPEC section 12). `last_ns`: `--last`, the
    stretch of that many nanoseconds up to the latest span end, every frame clipped to it (SPEC section 13)."""

    iterations: tuple[int, int] | None = None
    precedence: str | Sequence[str] | None = None
    by: str | None = None
    attempt: str | None = None
    exact: bool = False
    gpus: GpuOptions = field(default_factory=GpuOptions)
    last_ns: int | None = None

    def __post_init__(self) -> None:
        if self.by is not None and self.by not in BY_CHOICES:
            raise OptionError("--by", f"expected {', '.join(BY_CHOICES[:-1])} or {BY_CHOICES[-1]}, got {self.by!r}")
        precedence = self.precedence
        if precedence is None or isinstance(precedence, str):
            object.__setattr__(self, "precedence", tuple(parse_precedence(precedence)))
        else:
            object.__setattr__(self, "precedence", tuple(parse_precedence(",".join(precedence))))

    @property
    def order(self) -> list[str]:
        """The precedence as a list of the four buckets."""
        return list(self.precedence or BUCKETS)


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
    superseded windows (rework), the time between attempts (downtime), and the attempts themselves. `missing`: why
    the iterations asked for hold none of the traces' (None when they hold some, or none was asked for).
    `lost_steps`: the iterations (among those asked for) whose spans were read but not their step span, counted
    outside (`check`'s lost-step). `fresh_starts`: each (later, earlier) pair of consecutive attempts where the
    later starts at or below the earlier's first iteration: a new job or a restart from nothing in the same folder,
    not a resumption. `duplicate_steps`: the iterations (among those asked for) with two step spans in one attempt
    that do not overlap: two runs without run ids read as one (`check`'s duplicate-step)."""

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
    missing: str | None = None
    lost_steps: tuple[int, ...] = ()
    duplicate_steps: tuple[int, ...] = ()
    fresh_starts: list[tuple[Attempt, Attempt]] = field(default_factory=list)
    gpus: GpuReport | None = None  # when some process holds a GPU or --gpus was given (SPEC section 12)
    notes: list[str] = field(default_factory=list)  # about what was read, one line each (a GPU holding unread)
    recent: Recent | None = None  # with --last: the stretch charged whole (SPEC section 13)
    bottleneck: PoolShare | None = None  # with --by pool: the pool the others waited on (SPEC section 14)

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

    def whole_run(self) -> list[WholeRun]:
        """The report's whole-run rows, in SPEC sections 6 and 7's order: total, outside, rework, downtime, job."""
        job = self.job
        downtime = Figures(self.downtime_ns)
        job_figures = Figures(job.wall_ns)
        job_figures.bucket_ns["productive"] = job.productive_ns
        return [
            WholeRun("total", self.total, EVERY_FIGURE),
            WholeRun("outside", self.outside, OF_STRETCHES),
            WholeRun("rework", self.rework, OF_STRETCHES),
            WholeRun("downtime", downtime, OF_DOWNTIME),
            WholeRun("job", job_figures, OF_JOB),
        ]


# The figures each whole-run row has (SPEC sections 6 and 7): the total all of them; the stretches outside every
# window and the superseded windows no span-seconds (a span counts in its own iteration's row); downtime its wall
# clock alone; the job its wall clock, what of it was kept productive, and that share.
EVERY_FIGURE = frozenset(figure.key for figure in FIGURES)
OF_STRETCHES = frozenset(figure.key for figure in FIGURES if not figure.spans)
OF_DOWNTIME = frozenset({"wall_s"})
OF_JOB = frozenset({"wall_s", "productive_s", "goodput"})


@dataclass(frozen=True)
class WholeRun:
    """One whole-run row of a report: its label (the JSON key), its figures and which of FIGURES it has."""

    label: str
    figures: Figures
    keys: frozenset[str]


@_many_small_objects
def build_report(
    store: SpanSource,
    options: ReportOptions | None = None,
    runner: ReportRunner | None = None,
    sweeps: Sweeps | None = None,
) -> Report:
    """The report over the store's spans, as `options` ask (`ReportOptions`), its parts computed by `runner`
    (default: one part, in this process) and its other sweeps by `sweeps` (default `sweeps.LocalSweeps`)."""
    options = options or ReportOptions()
    order = options.order
    sweeps = sweeps or LocalSweeps()
    spans = store.spans(options.attempt)
    notes: list[str] = []
    model = gpu_model(spans, options.gpus, notes)
    if options.by == "pool" and model is None:
        raise OptionError("--by", "pool: no process holds a GPU (goodput.gpu.ids, goodput.gpus); name them with --gpus")
    frames = sweeps.frames(spans, options.iterations)
    stretch = last_stretch(spans, options.last_ns) if options.last_ns is not None else None
    recent = None
    if stretch is not None:
        frames = clip_frames(frames, stretch)
        recent = Recent(*stretch, Figures.from_ns(sweeps.charge_stretches(spans, [stretch], order)[0]))
    missing = missing_in(frames.held, options.iterations) if not frames.windows else None
    if missing is not None and options.exact:
        raise GoodputError(missing)
    by = None if options.by == "pool" else options.by
    parts = (
        [account_here(spans, frames, order, by)] if runner is None else runner.report_parts(spans, frames, order, by)
    )
    rows, total = merged_rows(parts)
    attempts = frames.attempts
    lost = [(w.run_id, w.start_ns, w.end_ns) for w in frames.lost]
    windows = [(w.run_id, w.iteration, w.start_ns, w.end_ns) for w in frames.windows] if model is not None else []
    bottleneck = pool_bottleneck(spans, frames.windows, model) if model is not None and options.by == "pool" else None
    del frames
    report = Report(
        rows,
        total,
        Figures.from_ns(total_charge([part.outside for part in parts])),
        order,
        rework=Figures.from_ns(total_charge([part.rework for part in parts])),
        downtime_ns=sum(end - start for start, end in _clipped(downtime_stretches(attempts), stretch)),
        attempts=attempts,
        by=options.by,
        missing=missing,
        lost_steps=tuple(_selected(_iterations_of(lost_step_findings(spans)), options.iterations)),
        duplicate_steps=tuple(_selected(_iterations_of(duplicate_step_findings(spans)), options.iterations)),
        fresh_starts=fresh_starts(attempts),
        recent=recent,
    )
    if model is not None:
        keys = [(row.run_id, row.iteration, row.start_ns, row.end_ns) for row in rows]
        extents = [(a.run_id, *(clip_attempt(a, stretch) if stretch else a).extent) for a in attempts]
        report.gpus = gpu_report(spans, model, windows, keys, lost, extents, order, sweeps.charge_gpus)
        report.bottleneck = bottleneck
    report.notes.extend(notes)
    if options.by == "process":
        report.process_totals = process_totals(rows, total.wall_ns)
    elif options.by is not None:
        report.total_names = summed_names([part.names or [] for part in parts])
    del parts
    mark_outliers(report.iterations, _kinds(spans, report.iterations, sweeps))
    return report


def _clipped(stretches: list[tuple[int, int]], stretch: tuple[int, int] | None) -> list[tuple[int, int]]:
    return stretches if stretch is None else clip_pairs(stretches, stretch)


def _kinds(spans: SpanSet, rows: IterationRows, sweeps: Sweeps) -> array | None:
    """The rows' kinds, when there are enough rows for two kinds to be compared apart (`compared_groups`)."""
    if len(rows) < 2 * MIN_ROWS:
        return None
    return sweeps.window_kinds(spans, rows.column("start_ns"), rows.column("end_ns"))


def _iterations_of(findings: Sequence[Finding]) -> list[int]:
    """The iterations the findings are about, sorted, each once."""
    return sorted({f.iteration for f in findings if f.iteration is not None})


def _selected(iterations: Sequence[int], selected: tuple[int, int] | None) -> list[int]:
    return [i for i in iterations if selected is None or selected[0] <= i <= selected[1]]


def fresh_starts(attempts: Sequence[Attempt]) -> list[tuple[Attempt, Attempt]]:
    """(later, earlier) for each two consecutive attempts, both with windows, where the later starts at or below the
    earlier's first iteration: a resumed job starts past where the crashed one began (SPEC section 7)."""
    with_windows = [a for a in attempts if a.first_iteration is not None]
    return [
        (later, earlier)
        for earlier, later in zip(with_windows, with_windows[1:], strict=False)
        if later.first_iteration is not None
        and earlier.first_iteration is not None
        and later.first_iteration <= earlier.first_iteration
    ]


def merged_rows(parts: Sequence[ReportPart]) -> tuple[IterationRows, Figures]:
    """The parts' rows in the order of their windows (each window's rows in the order its part gave them), and
    their plain rows' figures summed. One part's rows are already in order, and are the report's as they are."""
    total = sum_figures([part.total for part in parts])
    if len(parts) == 1:
        return parts[0].rows, total
    placed = sorted(
        ((position, p, i) for p, part in enumerate(parts) for i, position in enumerate(part.positions)),
    )
    rows = IterationRows()
    for _, p, i in placed:
        rows.append_row(parts[p].rows[i])
    return rows, total


def summed_names(parts: Sequence[Sequence[NameShare]]) -> list[NameShare]:
    """The total's names: each (name, bucket)'s shares summed over the parts, sorted as a row's are (bucket order,
    wall seconds descending, then name). One part's are its own, already sorted so."""
    if len(parts) == 1:
        return list(parts[0])
    summed: dict[tuple[str, str], list[int]] = {}
    for names in parts:
        for name in names:
            entry = summed.setdefault((name.name, name.bucket), [0, 0])
            entry[0] += name.wall_ns
            entry[1] += name.span_ns
    total = [NameShare(name, bucket, wall_ns, span_ns) for (name, bucket), (wall_ns, span_ns) in summed.items()]
    total.sort(key=lambda n: (BUCKETS.index(n.bucket), -n.wall_ns, n.name))
    return total


def process_totals(rows: IterationRows, wall_ns: int) -> dict[str, Figures]:
    """Each process's rows summed, stretched to every window's wall clock (`wall_ns`): the windows it had no row
    in are unaccounted for it, so every process's total `wall_s` is the report's. Sorted by process."""
    summed = rows.totals_by_process()
    return {p or "": over_every_window(summed[p], wall_ns) for p in sorted(summed, key=lambda p: p or "")}


def over_every_window(figures: Figures, wall_ns: int) -> Figures:
    """A process's summed rows stretched to every window's wall clock: the windows it had no row in are
    unaccounted for it."""
    charged = sum(figures.bucket_ns.values())
    return replace(figures, wall_ns=wall_ns, unaccounted_ns=wall_ns - charged)


def _taken(column: Sequence[int], positions: Sequence[int]) -> array:
    """`column`'s values at `positions`, gathered in C (`operator.itemgetter`), not a Python loop a row."""
    if len(positions) < 2:
        return array("q", (column[i] for i in positions))
    return array("q", operator.itemgetter(*positions)(column))


def mark_outliers(rows: IterationRows, kinds: Sequence[int] | None = None) -> None:
    """Each row's outlying figures among the rows of its process (all rows when not by process) and of its kind
    (`kinds[i]`, row i's: `windows.window_kinds`; `outliers.compared_groups` says when kinds count): a process's
    steps are compared with its own other steps, never with another process's."""
    by_process = rows.positions_by_process()
    columns = {figure.key: rows.column(figure.ns) for figure in FIGURES if figure.outlier and figure.ns}
    groups = [
        indices
        for of_process in by_process.values()
        for indices in (compared_groups(of_process, kinds) if kinds is not None else [of_process])
    ]
    for indices in groups:
        whole = len(indices) == len(rows)
        of_group = columns if whole else {f: _taken(c, indices) for f, c in columns.items()}
        flagged = outliers_of_columns(of_group, len(indices))
        rows.set_outliers_of(flagged if whole else {indices[position]: found for position, found in flagged.items()})
