"""Did it get worse, and where (SPEC section 9): two runs' typical step compared figure by figure and phase by phase.

Each side is summarised by medians over its iteration rows, not by totals: two runs rarely have the same number of
steps, and a median step shrugs off the one step that hit a slow checkpoint or a straggler. The figures compared are
the report's that `figures.FIGURES` marks `in_diff`. The phases (span names, by bucket, from the `--by name`
breakdown) are compared the same way, a phase absent from a step counting 0 there, and sorted by how much they
moved. So is each phase's time on the critical path (SPEC section 14), and the median length of its spans: a phase's
share of the wall clock moves whenever a phase beside it does, its time on the path only when the step waited on it
longer, and its length only when the phase itself got longer or shorter, whether or not the step waited on it. The
verdict names the phase whose length moved most and the one whose time on the path did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from statistics import median
from typing import TYPE_CHECKING, Any

from rollup.accounting.attribution import parse_precedence
from rollup.accounting.breakdown import charged_name_walls, name_share_columns
from rollup.accounting.gpu_charge import charge_gpus
from rollup.accounting.gpus import GpuOptions, gpu_model
from rollup.accounting.rows import NS_PER_S, Figures
from rollup.accounting.span_seconds import SPAN_SECONDS_SPANS
from rollup.accounting.windows import iteration_windows, select_windows, window_keys
from rollup.base.schema import BUCKETS
from rollup.critical.build import window_segments
from rollup.critical.paths import window_seconds_on_path
from rollup.store.attempts import ATTEMPT_SQL

from .figures import FIGURES, Figure

if TYPE_CHECKING:
    from rollup.accounting.windows import Windows
    from rollup.store.span_store import SpanStore
    from rollup.store.spanset import SpanSet

    from .build import Report

# The figures a diff compares, in the report's order.
DIFF_FIGURES: tuple[Figure, ...] = tuple(figure for figure in FIGURES if figure.in_diff)
GPU_GOODPUT = "gpu_goodput"  # the key the median GPU goodput goes under, when both sides have GPUs


@dataclass(frozen=True)
class Side:
    """One run as the diff sees it: the paths it was read from, its rows' medians and its phases' medians.

    Seconds figures are held as nanoseconds (a median of integers: whole, or a half between two), so a delta is one
    exact subtraction divided once, with none of the float noise of subtracting two rounded seconds."""

    paths: list[str]
    iterations: int
    medians: dict[str, float | None]  # per DIFF_FIGURES key: nanoseconds for seconds figures, else the figure
    names_ns: dict[tuple[str, str], float]  # (name, bucket) -> median wall nanoseconds per iteration
    critical_ns: dict[tuple[str, str], float] = field(default_factory=dict)  # -> median nanoseconds on the path
    durations_ns: dict[tuple[str, str], float] = field(default_factory=dict)  # -> median nanoseconds of its spans
    gpus: bool = False  # some process holds a GPU, or --gpus named some (SPEC section 12)
    gpu_goodput: float | None = None  # then the median of the iterations' GPU goodput

    @property
    def median(self) -> dict[str, float | None]:
        """The medians as the figures are shown: seconds, or the figure itself."""
        return {f.key: _shown(f, self.medians[f.key]) for f in DIFF_FIGURES}


@dataclass(frozen=True)
class PhaseChange:
    """One span name's median in one bucket on each side (0 where it never ran): its wall seconds per step, its
    seconds on the path per step, or the length of its spans."""

    name: str
    bucket: str
    baseline_ns: float
    candidate_ns: float

    @property
    def baseline_s(self) -> float:
        return self.baseline_ns / NS_PER_S

    @property
    def candidate_s(self) -> float:
        return self.candidate_ns / NS_PER_S

    @property
    def delta_s(self) -> float:
        return (self.candidate_ns - self.baseline_ns) / NS_PER_S

    @property
    def ratio(self) -> float | None:
        """candidate / baseline - 1 (SPEC section 9); None when the baseline is 0."""
        return self.candidate_ns / self.baseline_ns - 1 if self.baseline_ns else None


@dataclass(frozen=True)
class Diff:
    """Two runs compared: each side, and the phases sorted by how much their median moved (largest absolute
    change first; then bucket order and name, so ties read the same; `durations`, a name's buckets together: name,
    then bucket order)."""

    baseline: Side
    candidate: Side
    names: list[PhaseChange]
    critical: list[PhaseChange] = field(default_factory=list)
    durations: list[PhaseChange] = field(default_factory=list)

    @property
    def gpus(self) -> bool:
        """Both sides have GPUs: the median GPU goodput is compared too (`GPU_GOODPUT`)."""
        return self.baseline.gpus and self.candidate.gpus

    def gpu_goodput(self) -> tuple[float | None, float | None, float | None, float | None]:
        """Baseline, candidate, delta and ratio of the median GPU goodput."""
        before, after = self.baseline.gpu_goodput, self.candidate.gpu_goodput
        if before is None or after is None:
            return before, after, None, None
        return before, after, after - before, (after / before - 1 if before else None)

    def delta(self, key: str) -> float | None:
        """Candidate minus baseline of one figure, as it is shown (seconds, or the figure itself)."""
        figure = _figure(key)
        before, after = self.baseline.medians[key], self.candidate.medians[key]
        return None if before is None or after is None else _shown(figure, after - before)

    def ratio(self, key: str) -> float | None:
        """candidate / baseline - 1 of one figure; None when the baseline is 0 or either side has no value."""
        before, after = self.baseline.medians[key], self.candidate.medians[key]
        return None if before is None or after is None or before == 0 else after / before - 1

    def json(self) -> dict[str, Any]:
        """SPEC section 9's object with section 14's `critical` and `durations` after `names`; with GPUs on both
        sides, `gpu_goodput` in each median, delta and ratio."""
        extra: list[dict[str, Any]] = [{}, {}, {}, {}]
        if self.gpus:
            extra = [{GPU_GOODPUT: value} for value in self.gpu_goodput()]
        return {
            "baseline": _side_json(self.baseline, extra[0]),
            "candidate": _side_json(self.candidate, extra[1]),
            "delta": {f.key: self.delta(f.key) for f in DIFF_FIGURES} | extra[2],
            "ratio": {f.key: self.ratio(f.key) for f in DIFF_FIGURES} | extra[3],
            "names": [
                {
                    "name": n.name,
                    "bucket": n.bucket,
                    "baseline_s": n.baseline_s,
                    "candidate_s": n.candidate_s,
                    "delta_s": n.delta_s,
                }
                for n in self.names
            ],  # fmt: skip
            "critical": [
                {
                    "name": c.name,
                    "bucket": c.bucket,
                    "baseline_s": c.baseline_s,
                    "candidate_s": c.candidate_s,
                    "delta_s": c.delta_s,
                }
                for c in self.critical
            ],  # fmt: skip
            "durations": [
                {
                    "name": d.name,
                    "bucket": d.bucket,
                    "baseline_s": d.baseline_s,
                    "candidate_s": d.candidate_s,
                    "delta_s": d.delta_s,
                    "ratio": d.ratio,
                }
                for d in self.durations
            ],  # fmt: skip
        }


def _figure(key: str) -> Figure:
    return next(figure for figure in DIFF_FIGURES if figure.key == key)


def _shown(figure: Figure, value: float | None) -> float | None:
    """A median (or a difference of two) as the figure is shown: nanoseconds as seconds."""
    if value is None or figure.nanos is None:
        return value
    return value / NS_PER_S


def _middle(values: Sequence[float]) -> float | None:
    return float(median(values)) if values else None


def summarise(report: Report, paths: Sequence[str]) -> Side:
    """A side of the diff from a report built with `by="name"`."""
    rows = report.iterations
    names = [{(share.name, share.bucket): share.wall_ns for share in row.names or ()} for row in rows]
    return _side(paths, [row.figures for row in rows], names)


def measure(
    store: SpanStore,
    paths: Sequence[str],
    *,
    iterations: tuple[int, int] | None = None,
    precedence: str | None = None,
    gpus: GpuOptions | None = None,
) -> Side:
    """A side of the diff straight from a store: `summarise(build_report(store, by="name", ...))` without the parts
    of a report the diff does not compare (span-seconds, the time outside and between attempts, outliers), with
    each phase's median seconds on the path and median span length (SPEC section 14); with GPUs (SPEC section 12),
    the median of the iterations' GPU goodput too."""
    order = parse_precedence(precedence)
    spans = store.spans()
    windows = select_windows(iteration_windows(spans), iterations)
    model = gpu_model(spans, gpus or GpuOptions())
    gpu_goodput = None
    if model is not None:
        stretches = [(w.start_ns, w.end_ns) for w in windows]
        charged = charge_gpus(spans, model, stretches, [w.run_id for w in windows], order)
        gpu_goodput = _middle([g for i in range(len(windows)) if (g := charged.window(i).goodput) is not None])
    charges, walls = charged_name_walls(spans, windows, order)
    shares, _ = name_share_columns(spans, windows, walls)  # names with span-seconds alone are listed at 0 wall
    names: list[dict[tuple[str, str], int]] = [{} for _ in windows]
    for position, key, bucket, wall_ns in zip(shares.positions, shares.key_ids, shares.buckets, shares.wall_ns,
                                              strict=True):  # fmt: skip
        names[position][(shares.keys[key], BUCKETS[bucket])] = wall_ns
    side = _side(paths, [Figures.from_ns(charge) for charge in charges], names)
    on_path = window_seconds_on_path(window_segments(spans, windows), len(windows))
    critical = _name_medians(on_path, len(windows))
    return replace(side, gpus=model is not None, gpu_goodput=gpu_goodput, critical_ns=critical,
                   durations_ns=span_length_medians(spans, windows))  # fmt: skip


def span_length_medians(spans: SpanSet, windows: Windows) -> dict[tuple[str, str], float]:
    """Per (name, bucket), the median length in nanoseconds of the spans of `windows` (the report's rows): the
    bucketed spans whose effective iteration is a row's iteration, in that row's attempt. The spans whose full
    durations make the rows' span-seconds (SPEC sections 4 and 7), so a superseded or torn window's spans, and
    those with no effective iteration (start-up: neither carrying nor inheriting `rl.iteration`), are not counted;
    zero-length spans are (a length of 0 is what they took), and a span whose end precedes its start is zero-length
    as everywhere.
    One query, the median worked out in DuckDB: a long run has a million such spans."""
    if not len(windows):
        return {}
    with spans.registered("diff_rows", window_keys(windows)) as rows:
        found = spans.rows(
            f"""
            SELECT s.name, s.bucket, median(s.end_ns - s.start_ns)
            FROM (
                SELECT {ATTEMPT_SQL} AS attempt, eff_iteration, name, bucket, start_ns, end_ns
                FROM {spans.lineage} WHERE {SPAN_SECONDS_SPANS}
            ) s SEMI JOIN {rows} w ON w.attempt = s.attempt AND w.iteration = s.eff_iteration
            GROUP BY ALL
            """
        )
    return {(name, bucket): float(ns) for name, bucket, ns in found}


def _side(paths: Sequence[str], rows: Sequence[Figures], names: Sequence[dict[tuple[str, str], int]]) -> Side:
    """Medians over the rows of each figure (of its nanoseconds, or of its value where it has one), and over each
    (name, bucket)'s wall nanoseconds (0 in a row without it)."""
    medians: dict[str, float | None] = {}
    for figure in DIFF_FIGURES:
        if figure.nanos is not None:
            medians[figure.key] = _middle([figure.nanos(row) for row in rows])
        else:
            medians[figure.key] = _middle([v for row in rows if (v := figure.value(row)) is not None])
    return Side(list(paths), len(rows), medians, _name_medians(names, len(rows)))


def _name_medians(of_rows: Sequence[dict[tuple[str, str], int]], rows: int) -> dict[tuple[str, str], float]:
    """Per (name, bucket), the median of its nanoseconds over the rows (0 in a row without it)."""
    per_name: dict[tuple[str, str], list[int]] = {}
    for of_row in of_rows:
        for key, ns in of_row.items():
            if key in per_name:
                per_name[key].append(ns)
            else:
                per_name[key] = [ns]
    return {key: _median_with_zeros(v, rows) for key, v in per_name.items()}


def _median_with_zeros(present: list[int], rows: int) -> float:
    """The median of `present` and as many zeros as it takes to make `rows` values (the rows a name is absent
    from)."""
    return float(median([*present, *[0] * (rows - len(present))]))


def compare(baseline: Side, candidate: Side) -> Diff:
    """The two sides compared (SPEC sections 9 and 14)."""
    return Diff(baseline, candidate, _changes(baseline.names_ns, candidate.names_ns),
                _changes(baseline.critical_ns, candidate.critical_ns),
                _changes(baseline.durations_ns, candidate.durations_ns, name_first=True))  # fmt: skip


def _changes(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], *, name_first: bool = False
) -> list[PhaseChange]:
    """Each (name, bucket) of either side, its medians on both (0 where absent), largest absolute change first; ties
    in bucket order, then by name (`name_first`: by name, then in bucket order)."""
    if name_first:
        keys = sorted(set(before) | set(after), key=lambda k: (k[0], BUCKETS.index(k[1])))
    else:
        keys = sorted(set(before) | set(after), key=lambda k: (BUCKETS.index(k[1]), k[0]))
    changes = [PhaseChange(*key, before.get(key, 0.0), after.get(key, 0.0)) for key in keys]
    changes.sort(key=lambda n: -abs(n.candidate_ns - n.baseline_ns))  # stable: ties keep the order above
    return changes


def _side_json(side: Side, extra: dict[str, Any]) -> dict[str, Any]:
    return {"paths": side.paths, "iterations": side.iterations, "median": dict(side.median) | extra}
