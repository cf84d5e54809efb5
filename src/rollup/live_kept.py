"""What a watcher keeps of one refresh's report for the next (`goodput watch`): each frame's answer, and the runner and
sweeps (`runners.Runner`, `runners.Sweeps`) that `report.build_report` is given, which ask only about the frames
without one, of a slice of the spans (`live.LiveRun.sliced`).
"""

from __future__ import annotations

import bisect
import operator
from array import array
from collections.abc import Sequence
from itertools import compress
from typing import TYPE_CHECKING, Any, Protocol

from .attribution import Charge, ChargeColumns, FrameCharges, charge_stretches
from .gpu_charge import GpuCharges, GpuFigures, charge_gpus
from .ranges import CheckPart, ReportPart
from .ray_slices import merged_stretches
from .rows import IterationRows
from .runners import LocalRunner
from .schema import BUCKETS
from .sweep_few import charge_few
from .windows import ReportFrames, Windows, kinds_with_names

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


class Answers:
    """Each frame's answers (its charge, its kind, its GPU charge), by the frame's key (kind, attempt, iteration,
    start, end, ...), dropped when new bucketed spans overlap the frame (`forget`): what a frame is charged, its kind
    and its GPUs' charge depend on the bucketed spans active in it alone. Indexed by the frame's end (in bins of
    BIN_NS), so forgetting looks only at the frames ending after the earliest stretch touched: the newest, mostly."""

    BIN_NS = 1 << 34  # about 17 s

    def __init__(self) -> None:
        self.by_key: dict[tuple[Any, ...], Any] = {}
        self._by_bin: dict[int, set[tuple[Any, ...]]] = {}

    def __getitem__(self, key: tuple[Any, ...]) -> Any:
        return self.by_key[key]

    def missing(self, keys: list[tuple[Any, ...]]) -> list[int]:
        """The positions of the keys without an answer, looked up in C (`map`, `compress`): tens of thousands of
        keys a refresh, most of them held."""
        return list(compress(range(len(keys)), map(operator.not_, map(self.by_key.__contains__, keys))))

    def __setitem__(self, key: tuple[Any, ...], value: Any) -> None:
        if key not in self.by_key:
            self._by_bin.setdefault(key[4] // self.BIN_NS, set()).add(key)
        self.by_key[key] = value

    def forget(self, touched: Touched) -> None:
        """Drop the answers of every frame `touched` overlaps; all of them after a rebuild."""
        if touched.everything:
            self.by_key.clear()
            self._by_bin.clear()
            return
        if not touched.stretches:
            return
        stretches = merged_stretches(touched.stretches)
        starts = [start for start, _ in stretches]
        first_bin = stretches[0][0] // self.BIN_NS
        for number in [n for n in self._by_bin if n >= first_bin]:
            held = self._by_bin[number]
            for key in list(held):
                start, end = key[3], key[4]
                at = bisect.bisect_right(starts, end) - 1  # the last touched stretch starting by the frame's end
                if at >= 0 and stretches[at][1] >= start and key[0] != "kind":  # kinds: `KeptSweeps.landed`
                    del self.by_key[key]
                    held.discard(key)

    def kinds_ending_after(self, time_ns: int) -> list[tuple[Any, ...]]:
        """The keys of the kinds held of stretches that may end after `time_ns` (by their bins)."""
        first = time_ns // self.BIN_NS
        return [key for number, held in self._by_bin.items() if number >= first for key in held if key[0] == "kind"]


def charged(spans: SpanSet, stretches: Sequence[tuple[int, int]], precedence: Sequence[str]) -> FrameCharges:
    """The charge of `stretches` over a slice: swept in Python when it holds a few spans (the newest frames', most
    refreshes), in SQL otherwise (a first refresh, a rebuild)."""
    few = charge_few(spans, stretches, precedence)
    return charge_stretches(spans, stretches, precedence) if few is None else few


class _Held:
    """What one question of the report answered last time, as columns of 64-bit integers, and the keys it was
    asked for. Asked again with keys that start as those did, it takes that part of the columns as it was and looks
    up only the rest: a refresh touches the newest frames, so the part looked up is short."""

    def __init__(self, width: int) -> None:
        self.keys: list[tuple[Any, ...]] = []
        self.columns = [array("q") for _ in range(width)]

    def columns_for(self, keys: list[tuple[Any, ...]], answers: Answers, first_missing: int, row: Any) -> list[array]:
        """The columns for `keys`: the part before `first_missing` (the first key this asking had to work out)
        that starts as last time's did is reused; the rest is `row(answer)` for each key."""
        old, by_key = self.keys, answers.by_key
        most = min(len(old), len(keys), max(first_missing, 0))
        same = most if keys[:most] == old[:most] else 0  # the usual case, compared in one pass
        while same < most and keys[same] == old[same]:
            same += 1
        rows = [row(by_key[key]) for key in keys[same:]]
        columns = [column[:same] + array("q", (values[j] for values in rows)) for j, column in enumerate(self.columns)]
        self.keys, self.columns = keys, columns
        return columns


def _same(answer: Any) -> Any:
    return answer


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
        self._windows, self._lost, self._outside = _Held(width), _Held(width), _Held(width)

    def report_parts(
        self, spans: SpanSet, frames: ReportFrames, precedence: Sequence[str], by: str | None
    ) -> list[ReportPart]:
        order = tuple(precedence)
        answers = self.run.answers
        windows, lost, outside = frames.windows, frames.lost, frames.outside
        window_keys, lost_keys = _window_keys("window", windows, order), _window_keys("lost", lost, order)
        outside_keys = [("outside", None, None, s, e, order) for s, e in zip(outside.starts, outside.ends, strict=True)]
        keys = [*window_keys, *lost_keys, *outside_keys]
        missing = answers.missing(keys)
        if missing:
            stretches = [(keys[i][3], keys[i][4]) for i in missing]
            with self.run.sliced(stretches) as sliced:
                charges = charged(sliced, stretches, precedence)
            for at, i in enumerate(missing):
                answers[keys[i]] = _charge_row(charges[at])
        ends = (len(windows), len(windows) + len(lost), len(keys))

        def first_missing(low: int, high: int) -> int:
            """The first position, counted from `low`, of a key worked out this time among keys[low:high]."""
            return next((i - low for i in missing if low <= i < high), high - low)

        held = self._windows.columns_for(window_keys, answers, first_missing(0, ends[0]), _same)
        lost_held = self._lost.columns_for(lost_keys, answers, first_missing(*ends[:2]), _same)
        outside_held = self._outside.columns_for(outside_keys, answers, first_missing(*ends[1:]), _same)
        walls, *by_bucket = held
        columns = ChargeColumns(walls, dict(zip(BUCKETS, by_bucket[: len(BUCKETS)], strict=True)), by_bucket[-1])
        rows = IterationRows.of_windows(windows, columns, self.run.live.summary.span_ns_of(windows))
        lost_total, outside_total = _summed(lost_held), _summed(outside_held)
        return [ReportPart(array("q", range(len(windows))), rows, rows.total(), lost_total, outside_total)]

    def check_parts(self, spans: SpanSet, windows: Windows, expect: Sequence[str]) -> list[CheckPart]:
        """A check over the watcher's spans: every span and window asked again, of every span's own columns (`spans`
        has the summary's, which stand in for the run's attempts, not for its bucketed spans)."""
        return LocalRunner().check_parts(self.run.live.every_span(), windows, expect)


def _window_keys(kind: str, windows: Windows, order: tuple[str, ...]) -> list[tuple[Any, ...]]:
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
        self._kinds = _Held(1)
        self._hash_of: dict[str, int] = {}  # a name's part of a kind (KIND_SQL), by name
        self._changed = False  # a kind held changed since the last `window_kinds`

    def window_kinds(self, spans: SpanSet, starts: Sequence[int], ends: Sequence[int]) -> array:
        answers = self.run.answers
        keys = [("kind", None, None, start, end) for start, end in zip(starts, ends, strict=True)]
        missing = answers.missing(keys)
        if missing:
            asked = [(keys[i][3], keys[i][4]) for i in missing]
            with self.run.sliced(asked) as sliced:
                kinds, names = kinds_with_names(
                    sliced, array("q", (s for s, _ in asked)), array("q", (e for _, e in asked))
                )
            for i, kind, named in zip(missing, kinds, names, strict=True):
                answers[keys[i]] = (kind, named)
        first = 0 if self._changed else missing[0] if missing else len(keys)
        self._changed = False
        return self._kinds.columns_for(keys, answers, first, lambda answer: (answer[0],))[0]

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
                self._changed = True

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
