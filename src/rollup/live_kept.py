"""What a watcher keeps of one refresh's report for the next (`goodput watch`): each frame's answer, and the runner and
sweeps (`runners.Runner`, `runners.Sweeps`) that `report.build_report` is given, which ask only about the frames
without one, of a slice of the spans (`live.LiveRun.sliced`).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .attribution import Charge, ChargeColumns, FrameCharges, charge_stretches
from .gpu_charge import GpuCharges, GpuFigures, charge_gpus
from .live_held import Held, Journal, Key
from .ranges import CheckPart, ReportPart
from .ray_slices import merged_stretches
from .rows import IterationRows
from .runners import LocalRunner
from .schema import BUCKETS
from .sweep_few import charge_few
from .windows import (
    ReportFrames,
    SortedWindows,
    Windows,
    attempt_windows,
    frames_of,
    kinds_with_names,
    step_windows,
)

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import duckdb

    from .gpus import GpuModel
    from .live_spans import LiveSpans
    from .live_sql import Touched
    from .spanset import SpanSet


class LiveRun(Protocol):
    """What the runner and the sweeps read of the watcher they serve (`live.LiveRun`)."""

    answers: Answers
    live: LiveSpans
    connection: duckdb.DuckDBPyConnection

    def sliced(self, stretches: list[tuple[int, int]]) -> AbstractContextManager[SpanSet]: ...


class Answers(Journal):
    """Each frame's answers (its charge, its kind, its GPU charge), by the frame's key (kind, attempt, iteration,
    start, end, ...), dropped when new bucketed spans overlap the frame (`forget`): what a frame is charged, its kind
    and its GPUs' charge depend on the bucketed spans active in it alone. Indexed by the frame's end (in bins of
    BIN_NS), so forgetting looks only at the frames ending after the earliest stretch touched: the newest, mostly.
    A key dropped, or a kind changed in place (`KeptSweeps.landed`), is noted for the readers (`live_held.Held`)."""

    BIN_NS = 1 << 34  # about 17 s

    def __init__(self) -> None:
        super().__init__()
        self._by_bin: dict[int, set[Key]] = {}

    def __setitem__(self, key: Key, value: Any) -> None:
        if key not in self.by_key:
            self._by_bin.setdefault(key[4] // self.BIN_NS, set()).add(key)
        self.by_key[key] = value

    def forget(self, touched: Touched) -> None:
        """Drop the answers of every frame `touched` overlaps; all of them after a rebuild."""
        if touched.everything:
            self.cleared()
            self._by_bin.clear()
            return
        if not touched.stretches:
            return
        stretches = merged_stretches(touched.stretches)
        starts = [start for start, _ in stretches]
        first_bin = stretches[0][0] // self.BIN_NS
        dropped = []
        for number in [n for n in self._by_bin if n >= first_bin]:
            held = self._by_bin[number]
            for key in list(held):
                start, end = key[3], key[4]
                at = bisect.bisect_right(starts, end) - 1  # the last touched stretch starting by the frame's end
                if at >= 0 and stretches[at][1] >= start and key[0] != "kind":  # kinds: `KeptSweeps.landed`
                    del self.by_key[key]
                    held.discard(key)
                    dropped.append(key)
        self.changed(dropped)

    def kinds_ending_after(self, time_ns: int) -> list[Key]:
        """The keys of the kinds held of stretches that may end after `time_ns` (by their bins)."""
        first = time_ns // self.BIN_NS
        return [key for number, held in self._by_bin.items() if number >= first for key in held if key[0] == "kind"]


def charged(spans: SpanSet, stretches: Sequence[tuple[int, int]], precedence: Sequence[str]) -> FrameCharges:
    """The charge of `stretches` over a slice: swept in Python when it holds a few spans (the newest frames', most
    refreshes), in SQL otherwise (a first refresh, a rebuild)."""
    few = charge_few(spans, stretches, precedence)
    return charge_stretches(spans, stretches, precedence) if few is None else few


def _same(answer: Any) -> Any:
    return answer


def _kind_row(answer: tuple[int, frozenset[str]]) -> tuple[int]:
    return (answer[0],)


def _int64s(values: Sequence[int]) -> array:
    """`values` as an array of 64-bit integers: itself when it is one."""
    return values if isinstance(values, array) and values.typecode == "q" else array("q", values)


def _charge_row(charge: Charge) -> tuple[int, ...]:
    return (charge.wall_ns, *(charge.bucket_ns[b] for b in BUCKETS), charge.unaccounted_ns)


def _summed(columns: list[array]) -> Charge:
    wall, *by_bucket, unaccounted = (sum(column) for column in columns)
    return Charge(wall, dict(zip(BUCKETS, by_bucket, strict=True)), unaccounted)


class KeptRunner:
    """A runner (`runners.Runner`) that keeps each frame's charge, and asks only for the frames it has no answer
    for, of a slice of the spans; each window's span-seconds are the watcher's sums (`Summary.span_ns_of`)."""

    def __init__(self, run: LiveRun) -> None:
        self.run = run
        width = 2 + len(BUCKETS)
        self._windows, self._lost, self._outside = (Held(run.answers, width) for _ in range(3))

    def report_parts(
        self, spans: SpanSet, frames: ReportFrames, precedence: Sequence[str], by: str | None
    ) -> list[ReportPart]:
        order = tuple(precedence)
        answers = self.run.answers
        windows, lost, outside = frames.windows, frames.lost, frames.outside
        wanted = [
            *_plan_windows(self._windows, "window", windows, order),
            *_plan_windows(self._lost, "lost", lost, order),
            *self._outside.plan(
                (outside.starts, outside.ends),
                order,
                lambda start: [("outside", None, None, s, e, order)
                               for s, e in zip(outside.starts[start:], outside.ends[start:], strict=True)],
            ),
        ]  # fmt: skip
        if wanted:
            stretches = [(key[3], key[4]) for key in wanted]
            with self.run.sliced(stretches) as sliced:
                charges = charged(sliced, stretches, precedence)
            for at, key in enumerate(wanted):
                answers[key] = _charge_row(charges[at])
        walls, *by_bucket = self._windows.patched(_same)
        columns = ChargeColumns(walls, dict(zip(BUCKETS, by_bucket[: len(BUCKETS)], strict=True)), by_bucket[-1])
        rows = IterationRows.of_windows(windows, columns, self.run.live.summary.span_ns_of(windows))
        lost_total, outside_total = _summed(self._lost.patched(_same)), _summed(self._outside.patched(_same))
        return [ReportPart(array("q", range(len(windows))), rows, rows.total(), lost_total, outside_total)]

    def check_parts(self, spans: SpanSet, windows: Windows, expect: Sequence[str]) -> list[CheckPart]:
        """A check over the watcher's spans: every span and window asked again, of every span's own columns (`spans`
        has the summary's, which stand in for the run's attempts, not for its bucketed spans)."""
        return LocalRunner().check_parts(self.run.live.every_span(), windows, expect)


def _plan_windows(held: Held, kind: str, windows: Windows, order: tuple[str, ...]) -> list[Key]:
    """`held.plan` of the frames of `windows` (their keys: `_window_keys`)."""
    stretches = windows.stretches
    return held.plan(
        (windows.iterations, stretches.starts, stretches.ends, windows.attempts),
        (tuple(windows.run_ids), order),
        lambda start: _window_keys(kind, windows[start:], order),
    )


def _window_keys(kind: str, windows: Windows, order: tuple[str, ...]) -> list[Key]:
    """The answers' keys of `windows`, read off their columns (no Window made)."""
    run_ids = windows.run_ids
    stretches = windows.stretches
    return [
        (kind, run_ids[attempt], iteration, start, end, order)
        for attempt, iteration, start, end in zip(
            windows.attempts, windows.iterations, stretches.starts, stretches.ends, strict=True
        )
    ]


class KeptSweeps:
    """Sweeps (`runners.Sweeps`) that keep each stretch's kind and GPU charge, asking only for new stretches."""

    def __init__(self, run: LiveRun) -> None:
        self.run = run
        self._sorted: tuple[tuple[Any, ...], SortedWindows] | None = None  # the windows, and what they were of
        self._kinds = Held(run.answers, 1)
        self._hash_of: dict[str, int] = {}  # a name's part of a kind (KIND_SQL), by name

    def frames(self, spans: SpanSet, iterations: tuple[int, int] | None) -> ReportFrames:
        """`windows.report_frames` of the watcher's spans: the attempts from the summary (`Summary.attempts`); the
        windows sorted out kept while the attempts are the same and no step span arrived, when every attempt's are
        its step spans' (`windows.step_windows`)."""
        summary = self.run.live.summary
        attempts = summary.attempts()
        order = [attempt.run_id for attempt in attempts]
        key = (summary.steps_version, tuple(order))
        if self._sorted is not None and self._sorted[0] == key:
            windows = self._sorted[1]
        else:
            every = step_windows(spans, order)
            windows = SortedWindows.of(every if every is not None else attempt_windows(spans, order))
            self._sorted = (key, windows) if every is not None else None
        return frames_of(attempts, windows, iterations)

    def window_kinds(self, spans: SpanSet, starts: Sequence[int], ends: Sequence[int]) -> array:
        answers = self.run.answers
        starts, ends = _int64s(starts), _int64s(ends)
        wanted = self._kinds.plan(
            (starts, ends),
            None,
            lambda first: [("kind", None, None, s, e) for s, e in zip(starts[first:], ends[first:], strict=True)],
        )
        if wanted:
            asked = [(key[3], key[4]) for key in wanted]
            with self.run.sliced(asked) as sliced:
                kinds, names = kinds_with_names(
                    sliced, array("q", (s for s, _ in asked)), array("q", (e for _, e in asked))
                )
            for key, kind, named in zip(wanted, kinds, names, strict=True):
                answers[key] = (kind, named)
        return self._kinds.patched(_kind_row)[0]

    def landed(self, touched: Touched) -> None:
        """Each kind held, as the new spans named in `touched` make it: a name new to a stretch it lands in adds its
        hash (KIND_SQL is an xor over the set), asked of DuckDB once a name. Kept, not asked again of a slice: a
        refresh's batch lands in dozens of windows, and their names are mostly those they had."""
        if touched.everything or not touched.named:
            return
        landed = sorted(touched.named)
        starts = [start for start, _, _ in landed]
        answers = self.run.answers
        for key in answers.kinds_ending_after(starts[0]):
            low, high = key[3], key[4]
            names = {name for start, end, name in landed[: bisect.bisect_left(starts, high)] if end > low}
            kind, held = answers.by_key[key]
            new = names - held
            if new:
                self._hashes(new)
                for name in new:
                    kind ^= self._hash_of[name]
                answers.by_key[key] = (kind, held | new)
                answers.changed([key])

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
        answers = self.run.answers
        held = repr((model.classes, model.pools, sorted(model.placed.items()), tuple(precedence)))
        keys = [
            ("gpu", attempt, None, start, end, held) for (start, end), attempt in zip(stretches, attempts, strict=True)
        ]
        missing = answers.missing(keys)
        scale = None
        if missing:
            asked = [stretches[i] for i in missing]
            with self.run.sliced(list(asked)) as sliced:
                charges = charge_gpus(sliced, model, asked, [attempts[i] for i in missing], precedence)
            scale = charges.scale
            for at, i in enumerate(missing):
                answers[keys[i]] = charges.by_window[at]
        if scale is None:
            scale = charge_gpus(spans, model, [], [], precedence).scale
        by_window: list[dict[str, GpuFigures]] = [answers[key] for key in keys]
        return GpuCharges(by_window, scale)

    def charge_stretches(
        self, spans: SpanSet, stretches: Sequence[tuple[int, int]], precedence: Sequence[str]
    ) -> FrameCharges:
        with self.run.sliced(list(stretches)) as sliced:
            return charged(sliced, stretches, precedence)
