"""A run watched while it is written (`goodput watch`, SPEC section 13): each refresh reads what the files gained, and
re-charges only the frames those spans touched.

The report is built as `report` builds it (`report.build_report`), on the watcher's spans (`live_spans.LiveSpans`)
and with a runner and sweeps of its own that keep every frame's answer (a window's charge, a superseded window's or
an outside stretch's charge, a window's kind, its GPU charge): one stretch's answer depends only on the bucketed
spans active in it, so after a refresh only the frames a new bucketed span landed in are asked again, of a slice of
the newest spans (`live_hot`); a kind is kept with its set of names and takes a landing name's hash in place. A
window's span-seconds are sums the watcher keeps per iteration. What is asked of the run as a whole (attempts,
windows, holdings, the step rules) reads the summary: every span folded to a few rows, the step spans apart, whose
questions are answered once until a step span arrives. So a refresh costs what the new spans touched, the newest
windows mostly, plus the rolling stretches of `recent`, plus what `build_report` does over every window's row.
"""

from __future__ import annotations

import bisect
import itertools
import os
import tempfile
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .attribution import Charge, ChargeColumns, FrameCharges, charge_few, charge_stretches
from .connection import ENV_MEMORY_LIMIT, ONE_THREAD_SPANS, SpillDirectory, connect, memory_limit_bytes, out_of_memory
from .gpu_charge import GpuCharges, GpuFigures, charge_gpus
from .gpus import GpuModel
from .live_spans import LiveSpans, Touched
from .ranges import CheckPart, ReportPart
from .ray_slices import merged_stretches
from .read.tail import Tailer
from .recent import Recent
from .report import Report, ReportOptions, build_report
from .rows import Figures, IterationRows
from .runners import LocalRunner
from .schema import ACCOUNTING_SCHEMA, BUCKETS, SPAN_SCHEMA
from .spanset import SpanSet
from .windows import ReportFrames, Windows, kinds_with_names

if TYPE_CHECKING:
    from .checks import Check

# What a watcher reads of each span: what the accounting reads, and the span's file (to drop it when replaced).
_READ_SCHEMA = pa.schema([*ACCOUNTING_SCHEMA, SPAN_SCHEMA.field("source_file")])
# The rolling stretches a watcher charges at every refresh (SPEC section 13), by label.
RECENT = {"1m": 60 * 10**9, "5m": 300 * 10**9, "15m": 900 * 10**9}
_SLICES = itertools.count(1)
# The most bytes of records a refresh takes in at a time: a large run already written is read a part at a time,
# each walked and stored before the next is read, so what is held in memory follows this, not the run.
POLL_BYTES = 32 * 10**6
# What a watcher's DuckDB may hold in memory unless GOODPUT_MEMORY_LIMIT says otherwise: a watch stays open for days
# beside the job, so it holds a fixed amount, not a share of the machine; the rest of the run stays in its database
# file on disk (bench/watch.py: its peak is the cached report's plus about this).
WATCH_LIMIT_BYTES = 512 * 10**6


@dataclass
class LiveState:
    """One refresh: the report as it stands, the rolling stretches, what was read, the notes of this refresh."""

    report: Report
    recent: dict[str, Recent | None]
    spans: int
    files: int
    newest_end_ns: int | None
    notes: list[str] = field(default_factory=list)


class _Answers:
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
                if at >= 0 and stretches[at][1] >= start and key[0] != "kind":  # kinds: `_KeptSweeps.landed`
                    del self.by_key[key]
                    held.discard(key)

    def kinds_ending_after(self, time_ns: int) -> list[tuple[Any, ...]]:
        """The keys of the kinds held of stretches that may end after `time_ns` (by their bins)."""
        first = time_ns // self.BIN_NS
        return [key for number, held in self._by_bin.items() if number >= first for key in held if key[0] == "kind"]


class LiveRun:
    """`paths` followed as they grow; `refresh()` reads what they gained and gives the report as it stands."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]], options: ReportOptions | None = None) -> None:
        if options is not None and (options.by is not None or options.attempt is not None):
            raise ValueError("a watcher reports every attempt, a row per window")
        self.options = options or ReportOptions()
        self.tailer = Tailer(paths, _READ_SCHEMA, poll_bytes=POLL_BYTES)
        self._folder = tempfile.TemporaryDirectory(prefix="goodput-watch-")
        self._spill = SpillDirectory(Path(self._folder.name) / "spill")
        # A database file of its own: what the run holds beyond the memory limit stays on disk, not in memory.
        self.connection = connect(
            self._spill, limit_bytes=watch_limit_bytes(), database=Path(self._folder.name) / "live.duckdb"
        )
        self.connection.execute("SET threads = 1")  # until the run outgrows ONE_THREAD_SPANS (`store`)
        self._one_thread = True
        self.live = LiveSpans(self.connection)
        self.answers = _Answers()
        self.runner = _KeptRunner(self)
        self.sweeps = _KeptSweeps(self)

    def refresh(self) -> LiveState:
        """Read what the files gained, and the report and the rolling stretches as they stand.

        Raises GoodputError when DuckDB runs out of memory under its limit, as `report` does (`out_of_memory`)."""
        try:
            return self._refresh()
        except Exception as exc:
            error = out_of_memory(exc)
            if error is None:
                raise
            raise error from None

    def _refresh(self) -> LiveState:
        notes: list[str] = []
        while True:
            batch = self.tailer.poll()
            notes.extend(batch.notes)
            if batch.spans.num_rows or batch.reset:
                touched = self.live.add(batch.spans, batch.reset)
                self.answers.forget(touched)
                self.sweeps.landed(touched)
                if self._one_thread and self.live.count > ONE_THREAD_SPANS:
                    self.connection.execute("RESET threads")
                    self._one_thread = False
            if not batch.more:
                break
            del batch  # its spans are stored: the next part is read in their room
        report = build_report(self.live, self.options, self.runner, self.sweeps)
        newest = _newest(self.live)
        recent: dict[str, Recent | None] = dict.fromkeys(RECENT)
        if newest is not None:
            stretches = [(newest - length, newest) for length in RECENT.values()]
            with self.sliced(stretches) as spans:
                charges = _charged(spans, stretches, self.options.order)
            for (label, _), stretch, charge in zip(RECENT.items(), stretches, charges, strict=True):
                recent[label] = Recent(*stretch, Figures.from_ns(charge))
        return LiveState(report, recent, self.live.count, batch.files, newest, notes)

    def check(self) -> Check:
        """`goodput check` of the spans read so far (the screen's counts): every rule over every span's own columns
        (the summary the report reads folds them)."""
        from .checks import CheckOptions, check_findings

        return check_findings(_EverySpan(self.live), CheckOptions(), self.runner)

    def sliced(self, stretches: list[tuple[int, int]]) -> _Slice:
        return _Slice(self.live, stretches)

    def close(self) -> None:
        self.connection.close()
        self._folder.cleanup()


def watch_limit_bytes() -> int:
    """The watcher's DuckDB memory limit: GOODPUT_MEMORY_LIMIT when set, else WATCH_LIMIT_BYTES (or the machine's
    default share, when that is smaller)."""
    if os.environ.get(ENV_MEMORY_LIMIT, "").strip():
        return memory_limit_bytes()
    return min(WATCH_LIMIT_BYTES, memory_limit_bytes())


def _charged(spans: SpanSet, stretches: Sequence[tuple[int, int]], precedence: Sequence[str]) -> FrameCharges:
    """The charge of `stretches` over a slice: swept in Python when it holds a few spans (the newest frames', most
    refreshes), in SQL otherwise (a first refresh, a rebuild)."""
    few = charge_few(spans, stretches, precedence)
    return charge_stretches(spans, stretches, precedence) if few is None else few


def _newest(live: LiveSpans) -> int | None:
    newest = live.hot.newest_ns
    return None if newest is None else int(newest)


class _EverySpan:
    """The watcher's spans as a store (`store.SpanStore`'s `spans`) whose questions read every span."""

    def __init__(self, live: LiveSpans) -> None:
        self.live = live

    def spans(self, attempt: str | None = None) -> SpanSet:
        if attempt is not None:
            raise ValueError("a watcher reads every attempt")
        return self.live.every_span()


class _Slice:
    """A slice of the watcher's spans for some stretches (`LiveSpans.slice`), dropped on leaving."""

    def __init__(self, live: LiveSpans, stretches: list[tuple[int, int]]) -> None:
        self.live, self.name = live, f"live_slice_{next(_SLICES)}"
        self.spans = live.slice(stretches, self.name)

    def __enter__(self) -> SpanSet:
        return self.spans

    def __exit__(self, *exc: object) -> None:
        self.live.drop_slice(self.name)


class _Held:
    """What one question of the report answered last time, as columns of 64-bit integers, and the keys it was
    asked for. Asked again with keys that start as those did, it takes that part of the columns as it was and looks
    up only the rest: a refresh touches the newest frames, so the part looked up is short."""

    def __init__(self, width: int) -> None:
        self.keys: list[tuple[Any, ...]] = []
        self.columns = [array("q") for _ in range(width)]

    def columns_for(self, keys: list[tuple[Any, ...]], answers: _Answers, first_missing: int, row: Any) -> list[array]:
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


class _KeptRunner:
    """A runner (`runners.Runner`) that keeps each frame's charge, and asks only for the frames it has no answer
    for, of a slice of the spans; each window's span-seconds are the watcher's sums (`LiveSpans.span_ns_of`)."""

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
        held_keys = answers.by_key
        missing = [i for i, key in enumerate(keys) if key not in held_keys]
        if missing:
            stretches = [(keys[i][3], keys[i][4]) for i in missing]
            with self.run.sliced(stretches) as sliced:
                charges = _charged(sliced, stretches, precedence)
            for at, i in enumerate(missing):
                answers[keys[i]] = _charge_row(charges[at])
        ends = (len(windows), len(windows) + len(lost), len(keys))

        def first_missing(low: int, high: int) -> int:
            """The first position, counted from `low`, of a key worked out this time among keys[low:high]."""
            return next((i - low for i in missing if low <= i < high), high - low)

        held = self._windows.columns_for(window_keys, answers, first_missing(0, ends[0]), _same)
        lost_held = self._lost.columns_for(lost_keys, answers, first_missing(*ends[:2]), _same)
        outside_held = self._outside.columns_for(outside_keys, answers, first_missing(*ends[1:]), _same)
        walls, *charged = held
        columns = ChargeColumns(walls, dict(zip(BUCKETS, charged[: len(BUCKETS)], strict=True)), charged[-1])
        rows = IterationRows.of_windows(windows, columns, self.run.live.span_ns_of(windows))
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


class _KeptSweeps:
    """Sweeps (`runners.Sweeps`) that keep each stretch's kind and GPU charge, asking only for new stretches."""

    def __init__(self, run: LiveRun) -> None:
        self.run = run
        self._kinds = _Held(1)
        self._hash_of: dict[str, int] = {}  # a name's part of a kind (KIND_SQL), by name
        self._changed = False  # a kind held changed since the last `window_kinds`

    def window_kinds(self, spans: SpanSet, starts: Sequence[int], ends: Sequence[int]) -> array:
        answers = self.run.answers
        keys = [("kind", None, None, start, end) for start, end in zip(starts, ends, strict=True)]
        held_keys = answers.by_key
        missing = [i for i, key in enumerate(keys) if key not in held_keys]
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
        held_keys = answers.by_key
        missing = [i for i, key in enumerate(keys) if key not in held_keys]
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
            return _charged(sliced, stretches, precedence)


# The rows a refresh's JSON object carries: the newest iterations' (SPEC section 13's "last rows").
WATCH_ROWS = 10


def watch_json(state: LiveState, rows: int = WATCH_ROWS) -> dict[str, Any]:
    """SPEC section 13's object of one refresh: what was read, the newest `rows` rows and the total as `report
    --format json` writes them, the rolling stretches, the GPUs."""
    from .json_report import figures_json, row_json

    report = state.report
    iterations = report.iterations
    first = max(0, len(iterations) - rows)
    total = report.whole_run()[0]
    total_json = figures_json(total.figures, total.keys)
    if report.gpus is not None:
        total_json["gpu"] = report.gpus.total().json()
    return {
        "kind": "watch",
        "spans": state.spans,
        "files": state.files,
        "iterations": [row_json(report, iterations[i], i) for i in range(first, len(iterations))],
        "total": total_json,
        "recent": {label: None if recent is None else recent.json() for label, recent in state.recent.items()},
        "gpus": None if report.gpus is None else report.gpus.json(),
    }
