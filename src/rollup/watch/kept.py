"""What a watcher keeps of one refresh's report for the next (`goodput watch`): each frame's answer, and the runner and
sweeps (`parts.ReportRunner`, `sweeps.Sweeps`) that `report.build_report` is given, which ask only about the frames
without one, of a slice of the spans (`SlicedRun.sliced`).

What a frame is charged, its kind and its GPUs' charge depend on the bucketed spans active in it alone: each is kept
by position (`held.Held`) until new bucketed spans land in the frame (`forget`); a kind is kept with its set of
names and takes a landing name's hash in place (`KeptSweeps.landed`).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from rollup.accounting.attribution import Charge, ChargeColumns, FrameCharges, charge_stretches
from rollup.accounting.frames import ReportFrames, SortedWindows, frames_of
from rollup.accounting.gpu_charge import GpuCharges, GpuFigures, charge_gpus
from rollup.accounting.intervals import merged_stretches
from rollup.accounting.parts import ReportPart
from rollup.accounting.rows import IterationRows
from rollup.accounting.sweep_few import charge_few
from rollup.accounting.windows import Windows, attempt_windows, kinds_with_names, step_windows, torn_windows
from rollup.base.arrays import column_sum
from rollup.base.schema import BUCKETS
from rollup.checks.parts import CheckPart, check_frames

from .held import Held

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import duckdb

    from rollup.accounting.gpus import GpuModel
    from rollup.store.spanset import SpanSet

    from .spans import LiveSpans
    from .walk_sql import Touched


class SlicedRun(Protocol):
    """The watched run as its runner and sweeps read it (`watcher.LiveRun` is one): its spans (`live`), their
    connection, and the spans active in some stretches, as a set dropped on leaving (`sliced`)."""

    live: LiveSpans
    connection: duckdb.DuckDBPyConnection

    def sliced(self, stretches: list[tuple[int, int]]) -> AbstractContextManager[SpanSet]: ...


def forget(touched: Touched, held: Sequence[Held]) -> None:
    """Make stale the answers `touched` changes: of the frames a new bucketed span landed in; all of them when every
    span was walked again."""
    if touched.everything:
        for one in held:
            one.forget_all()
    elif touched.stretches:
        stretches = merged_stretches(touched.stretches)
        for one in held:
            one.forget(stretches)


def charged(spans: SpanSet, stretches: Sequence[tuple[int, int]], precedence: Sequence[str]) -> FrameCharges:
    """The charge of `stretches` over a slice: swept in Python when it holds a few spans (the newest frames', most
    refreshes), in SQL otherwise (a first refresh, a rebuild)."""
    few = charge_few(spans, stretches, precedence)
    return charge_stretches(spans, stretches, precedence) if few is None else few


def _int64s(values: Sequence[int]) -> array:
    """`values` as an array of 64-bit integers: itself when it is one."""
    return values if isinstance(values, array) and values.typecode == "q" else array("q", values)


def _charge_row(charge: Charge) -> tuple[int, ...]:
    return (charge.wall_ns, *(charge.bucket_ns[b] for b in BUCKETS), charge.unaccounted_ns)


def _summed(columns: list[array]) -> Charge:
    wall, *by_bucket, unaccounted = (column_sum(column) for column in columns)
    return Charge(wall, dict(zip(BUCKETS, by_bucket, strict=True)), unaccounted)


class KeptRunner:
    """A runner (`parts.ReportRunner`) that keeps each frame's charge, and asks only for the frames it has no answer
    for, of a slice of the spans; each window's span-seconds are the watcher's sums (`Summary.span_ns_of`)."""

    def __init__(self, run: SlicedRun) -> None:
        self.run = run
        width = 2 + len(BUCKETS)
        self._windows, self._lost, self._outside = Held(width), Held(width), Held(width)

    def forget(self, touched: Touched) -> None:
        forget(touched, (self._windows, self._lost, self._outside))

    def report_parts(
        self, spans: SpanSet, frames: ReportFrames, precedence: Sequence[str], by: str | None
    ) -> list[ReportPart]:
        order = tuple(precedence)
        windows, lost, outside = frames.windows, frames.lost, frames.outside
        asked = [
            (self._windows, _plan_windows(self._windows, windows, order)),
            (self._lost, _plan_windows(self._lost, lost, order)),
            (self._outside, self._outside.plan((outside.starts, outside.ends), order, outside.starts, outside.ends)),
        ]
        stretches = [(held.starts[p], held.ends[p]) for held, positions in asked for p in positions]
        rows: list[tuple[int, ...]] = []
        if stretches:
            with self.run.sliced(stretches) as sliced:
                charges = charged(sliced, stretches, precedence)
            rows = [_charge_row(charges[i]) for i in range(len(stretches))]
        filled, at = [], 0
        for held, positions in asked:
            filled.append(held.fill(rows[at : at + len(positions)]))
            at += len(positions)
        (walls, *by_bucket), lost_held, outside_held = filled
        columns = ChargeColumns(walls, dict(zip(BUCKETS, by_bucket[: len(BUCKETS)], strict=True)), by_bucket[-1])
        made = IterationRows.of_windows(windows, columns, self.run.live.summary.span_ns_of(windows))
        lost_total, outside_total = _summed(lost_held), _summed(outside_held)
        return [ReportPart(array("q", range(len(windows))), made, made.total(), lost_total, outside_total)]

    def check_parts(self, spans: SpanSet, windows: Windows, expect: Sequence[str]) -> list[CheckPart]:
        """A check over the watcher's spans: every span and window asked again, of the tables (`LiveSpans.every_span`:
        none of its questions is answered from what the watcher keeps)."""
        return [check_frames(self.run.live.every_span(), windows, expect)]


def _plan_windows(held: Held, windows: Windows, order: tuple[str, ...]) -> list[int]:
    """`held.plan` of `windows`: a window is its iteration, its stretch and its attempt."""
    stretches = windows.stretches
    return held.plan(
        (windows.iterations, stretches.starts, stretches.ends, windows.attempts),
        (tuple(windows.run_ids), order),
        stretches.starts,
        stretches.ends,
    )


class KeptSweeps:
    """Sweeps (`sweeps.Sweeps`) that keep each stretch's kind and GPU charge, asking only for new stretches."""

    def __init__(self, run: SlicedRun) -> None:
        self.run = run
        self._sorted: tuple[tuple[Any, ...], Windows] | None = None  # every attempt's windows, and what they were of
        self.kinds = Held(1, values=True)  # each stretch's kind, and its names
        self._names: dict[frozenset[str], frozenset[str]] = {}  # each set of names once
        self._hash_of: dict[str, int] = {}  # a name's part of a kind (KIND_SQL), by name
        self._gpus = Held(0, values=True)  # each window's GPU charge
        self._attempts: dict[str, int] = {}  # a number for each attempt, as GPU charges' frames hold them

    def frames(self, spans: SpanSet, iterations: tuple[int, int] | None) -> ReportFrames:
        """`frames.report_frames` of the watcher's spans: the attempts (`SpanSet.attempts`, which the watcher answers
        from its summary); the windows sorted out kept while the attempts are the same and no step span arrived, when
        every attempt's are its step spans' (`windows.step_windows`). An attempt a later one follows has its torn
        window (`windows.torn_windows`) worked out at every refresh: the spans of the step it died in may still
        arrive (a worker's late batch), and a run watched has one attempt, mostly, which asks nothing."""
        attempts = spans.attempts()
        order = [attempt.run_id for attempt in attempts]
        key = (self.run.live.summary.steps_version, tuple(order))
        if self._sorted is not None and self._sorted[0] == key:
            found = self._sorted[1]
        else:
            every = step_windows(spans, order)
            found = every if every is not None else attempt_windows(spans, order)
            self._sorted = (key, found) if every is not None else None
        return frames_of(attempts, SortedWindows.of(found, torn_windows(spans, attempts, found)), iterations)

    def window_kinds(self, spans: SpanSet, starts: Sequence[int], ends: Sequence[int]) -> array:
        starts, ends = _int64s(starts), _int64s(ends)
        asked = self.kinds.plan((starts, ends), None, starts, ends)
        kinds: Sequence[int] = ()
        names: list[frozenset[str]] = []
        if asked:
            stretches = [(starts[p], ends[p]) for p in asked]
            with self.run.sliced(stretches) as sliced:
                kinds, found = kinds_with_names(sliced, array("q", (starts[p] for p in asked)),
                                                array("q", (ends[p] for p in asked)))  # fmt: skip
            names = [self._names.setdefault(named, named) for named in found]
        return self.kinds.fill([(kind,) for kind in kinds], names)[0]

    def landed(self, touched: Touched) -> None:
        """What the new spans of `touched` change: the GPU charges of the windows a bucketed one landed in are asked
        again (`forget`); each kind held takes the names landing in its stretch: a name new to it adds its hash
        (KIND_SQL is an xor over the set), asked of DuckDB once a name. Kept, not asked again of a slice: a
        refresh's batch lands in dozens of windows, and their names are mostly those they had."""
        forget(touched, (self._gpus,))
        if touched.everything:
            self.kinds.forget_all()
            return
        held = self.kinds
        landing: dict[int, set[str]] = {}
        for start, end, name in touched.named:
            for position in held.overlapping(start, end):
                landing.setdefault(position, set()).add(name)
        assert held.values is not None
        for position, names in landing.items():
            new = names - held.values[position]
            if new:
                self._hashes(new)
                kind = held.columns[0][position]
                for name in new:
                    kind ^= self._hash_of[name]
                held.columns[0][position] = kind
                named = held.values[position] | new
                held.values[position] = self._names.setdefault(named, named)

    def _hashes(self, names: set[str]) -> None:
        """Learn the hash (KIND_SQL's part) of each of `names` not known yet."""
        import pyarrow as pa

        unknown = sorted(names - self._hash_of.keys())
        if unknown:
            connection = self.run.connection
            connection.register("live_kind_names", pa.table({"name": pa.array(unknown, pa.string())}))
            try:
                for name, part in connection.execute(
                    "SELECT name, (hash(name) >> 1)::BIGINT FROM live_kind_names"
                ).fetchall():
                    self._hash_of[name] = int(part)
            finally:
                connection.unregister("live_kind_names")

    def charge_gpus(
        self,
        spans: SpanSet,
        model: GpuModel,
        stretches: Sequence[tuple[int, int]],
        attempts: Sequence[str],
        precedence: Sequence[str],
    ) -> GpuCharges:
        starts, ends = array("q", (s for s, _ in stretches)), array("q", (e for _, e in stretches))
        numbers = array("q", (self._attempts.setdefault(a, len(self._attempts)) for a in attempts))
        context = repr((model.classes, model.pools, sorted(model.placed.items()), tuple(precedence)))
        asked = self._gpus.plan((starts, ends, numbers), context, starts, ends)
        by_window: Sequence[dict[str, GpuFigures]] = ()
        scale = None
        if asked:
            wanted = [stretches[p] for p in asked]
            with self.run.sliced(wanted) as sliced:
                charges = charge_gpus(sliced, model, wanted, [attempts[p] for p in asked], precedence)
            by_window, scale = charges.by_window, charges.scale
        if scale is None:
            scale = charge_gpus(spans, model, [], [], precedence).scale
        self._gpus.fill([() for _ in by_window], by_window)
        assert self._gpus.values is not None
        return GpuCharges(list(self._gpus.values), scale)

    def charge_stretches(
        self, spans: SpanSet, stretches: Sequence[tuple[int, int]], precedence: Sequence[str]
    ) -> FrameCharges:
        with self.run.sliced(list(stretches)) as sliced:
            return charged(sliced, stretches, precedence)
