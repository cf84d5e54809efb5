"""What each step waited on (SPEC section 14): `build_critical`, one attempt at a time.

For each attempt with windows asked for, its spans are read once (`graph.AttemptSpans`), their dependencies worked
out (`graph.dependencies`), each window explained back from its end (`explain`), the attempt re-timed whole once
per phase on the paths with that phase 10% shorter (`retime`: what `saves_s` says) and once for `--speedup`, and
its fan-outs' stragglers found (`stragglers`). The windows are the report's rows (`frames.report_frames`), so the
paths are of the same steps `report` charges.
"""

from __future__ import annotations

import statistics
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from rollup.accounting.frames import report_frames
from rollup.accounting.gpus import GpuOptions, gpu_model, read_holders
from rollup.accounting.windows import missing_in
from rollup.base.arrays import int64_array
from rollup.base.errors import GoodputError, OptionError
from rollup.base.schema import sql_text
from rollup.store.attempts import ATTEMPT_SQL
from rollup.store.derived import kept_columns, stretches_key

from .causes import attempt_graph
from .explain import explain_window, window_tops
from .graph import NO_ITERATION, NONE, WAKEUP_NS, AttemptSpans, Dependencies
from .paths import CriticalPaths, Speedup, decoded_segments, empty_segments, encoded_segments, summed_paths
from .retime import SAVES_PCT, EventGraph
from .stragglers import Straggler, fan_out_stragglers, ranked

if TYPE_CHECKING:
    from rollup.accounting.gpus import GpuModel
    from rollup.accounting.windows import Windows
    from rollup.store.spanset import SpanSet, SpanSource


@dataclass(frozen=True)
class CriticalOptions:
    """What `goodput critical` is asked for: the windows of the inclusive range `iterations` (all when None; with
    `exact`, one iteration asked for by number, an error when the traces lack it), of attempt `attempt` alone (a
    run id or `latest`; None: every attempt, each iteration's latest window); how late after what woke it a wait
    may end (`wakeup_ns`); the phases to re-time shorter (`speedup`: span name and percent); what processes hold
    (`gpus`: `--gpus`, `--place`)."""

    iterations: tuple[int, int] | None = None
    attempt: str | None = None
    exact: bool = False
    wakeup_ns: int = WAKEUP_NS
    speedup: tuple[tuple[str, Fraction], ...] = ()
    gpus: GpuOptions = field(default_factory=GpuOptions)

    def __post_init__(self) -> None:
        if self.wakeup_ns < 0:
            raise OptionError("--wakeup", "a wait cannot end before what woke it: give a duration of 0 or more")
        for name, pct in self.speedup:
            if not 0 < pct <= 100:
                raise OptionError("--speedup", f"{name}={pct}%: a speed-up is more than 0% and at most 100%")


def parse_speedup(values: Sequence[str]) -> tuple[tuple[str, Fraction], ...]:
    """`--speedup NAME=PCT` values (`rl.grpo.generation=10%`; the `%` may be left out), checked."""
    out = []
    for value in values:
        name, sep, text = value.rpartition("=")
        number = text.strip().removesuffix("%").strip()
        try:
            pct = Fraction(number)
        except (ValueError, ZeroDivisionError):
            pct = None
        if not sep or not name.strip() or pct is None:
            raise OptionError("--speedup", f"expected NAME=PCT (rl.grpo.generation=10%), got {value!r}")
        if not 0 < pct <= 100:
            raise OptionError("--speedup", f"{value}: a speed-up is more than 0% and at most 100%")
        out.append((name.strip(), pct))
    return tuple(out)


@dataclass
class _Attempt:
    """One attempt's spans, dependencies and event graph, and its windows asked for (positions among all)."""

    spans: AttemptSpans
    deps: Dependencies
    positions: list[int]
    iterations: list[int]
    rows_of: dict[int, list[int]]
    graph: EventGraph

    def timing(self) -> _Timing:
        """What re-timing this attempt's windows needs: its event graph, and per window the spans whose re-timed
        envelope is its length (its step spans, else its spans)."""
        bounds = [self.deps.steps.get(n) or self.rows_of.get(n, []) for n in self.iterations]
        return _Timing(self.graph, self.spans.names, self.positions, bounds)


@dataclass
class _Timing:
    """One attempt re-timed: its event graph, its names (by code), its windows' positions among all, and per window
    the spans whose envelope is its length. Kept beside a cached lineage (`kept`), so a `--speedup` asked after a
    first run reads it back rather than working the graph out again."""

    graph: EventGraph
    names: list[str]
    positions: list[int]
    bounds: list[list[int]]

    def lengths(self, keep: dict[int, Fraction] | None = None) -> list[int]:
        """Each window's length with the own time of each name code in `keep` shortened (as recorded without)."""
        times: Sequence[int] = self.graph.times if not keep else self.graph.retimed(keep)
        return [max(times[2 * r + 1] for r in rows) - min(times[2 * r] for r in rows) if rows else 0
                for rows in self.bounds]  # fmt: skip

    _COLUMNS = ("times", "bind", "owner", "owner_name", "gap", "other_at", "other", "order", "row_names")

    def kept(self) -> tuple[dict[str, array], dict[str, Any]]:
        graph = self.graph
        columns = {name: getattr(graph, name) for name in self._COLUMNS}
        columns["positions"] = array("q", self.positions)
        columns["bounds_at"] = array("q", [0])
        columns["bounds"] = array("q")
        for rows in self.bounds:
            columns["bounds"].extend(rows)
            columns["bounds_at"].append(len(columns["bounds"]))
        extras = {"names": self.names, "ties": [[e, c, o] for e, tied in graph.ties.items() for c, o in tied]}
        return columns, extras

    @classmethod
    def of_kept(cls, columns: dict[str, array], extras: dict[str, Any]) -> _Timing:
        ties: dict[int, list[tuple[int, int]]] = {}
        for e, c, o in extras["ties"]:
            ties.setdefault(e, []).append((c, o))
        c = columns
        graph = EventGraph(c["times"], c["bind"], c["owner"], c["owner_name"], c["gap"], c["other_at"], c["other"],
                           c["order"], ties, c["row_names"], len(extras["names"]))  # fmt: skip
        at, rows = columns["bounds_at"], columns["bounds"]
        bounds = [list(rows[at[i] : at[i + 1]]) for i in range(len(at) - 1)]
        return cls(graph, extras["names"], list(columns["positions"]), bounds)


def build_critical(store: SpanSource, options: CriticalOptions | None = None) -> CriticalPaths:
    """SPEC section 14 over the store's spans, as `options` ask."""
    options = options or CriticalOptions()
    spans = store.spans(options.attempt)
    frames = report_frames(spans, options.iterations)
    windows = frames.windows
    missing = missing_in(frames.held, options.iterations) if not windows else None
    if missing is not None and options.exact:
        raise GoodputError(missing)
    walls = [end - start for start, end in windows.stretches]
    built: dict[str, _Attempt] = {}

    def work() -> _Answer:
        built.update(_attempts(spans, windows, options.wakeup_ns))
        timings = _timings(spans, windows, options.wakeup_ns, built)
        return _Answer(_segments(windows, built), _saves(built, timings, windows),
                       _stragglers(spans, built, options.gpus))  # fmt: skip

    stretches = windows.stretches
    key: list[str | bytes] = [
        stretches_key(stretches.starts, stretches.ends),
        repr(options.wakeup_ns),
        repr((options.gpus.gpus, options.gpus.place)),
    ]
    answer = _Answer.kept(spans, key, work) if len(windows) else _Answer(empty_segments(), {}, [])
    speedup = None
    if options.speedup and len(windows):
        asked = {name: 1 - pct / 100 for name, pct in options.speedup}
        timings = _timings(spans, windows, options.wakeup_ns, built)
        predicted = [w - s for w, s in zip(walls, _savings(timings, windows, asked), strict=True)]
        speedup = Speedup(dict(options.speedup), walls, predicted)
    elif options.speedup:
        speedup = Speedup(dict(options.speedup), [], [])
    return summed_paths(windows, answer.segments, answer.saves, answer.stragglers, speedup, missing)


def _timings(spans: SpanSet, windows: Windows, wakeup_ns: int, built: dict[str, _Attempt]) -> dict[str, _Timing]:
    """Each attempt's timing (`_Timing`), of the attempts in `built` or worked out, kept beside a cached lineage."""
    positions: dict[str, list[int]] = {}
    for position in range(len(windows)):
        positions.setdefault(windows.run_ids[windows.attempts[position]], []).append(position)
    out = {}
    for run_id, at in positions.items():

        def make(run_id: str = run_id) -> tuple[dict[str, array], dict[str, Any]]:
            if run_id not in built:
                built.update(_attempts(spans, windows, wakeup_ns, only=run_id))
            return built[run_id].timing().kept()

        starts = array("q", (windows.stretches.starts[p] for p in at))
        ends = array("q", (windows.stretches.ends[p] for p in at))
        key: list[str | bytes] = [stretches_key(starts, ends), repr((wakeup_ns, run_id))]
        if run_id in built:
            out[run_id] = built[run_id].timing()
            kept_columns(spans, "critical-timing", key, make)  # kept for a later --speedup
        else:
            out[run_id] = _Timing.of_kept(*kept_columns(spans, "critical-timing", key, make))
    return out


@dataclass
class _Answer:
    """What `build_critical` works out of the spans (the rest is summed from it), as kept for a re-run on cached
    files: the segments, each phase's saving, the stragglers."""

    segments: pa.Table
    saves: dict[tuple[str, str], float]
    stragglers: list[Straggler]

    @classmethod
    def kept(cls, spans: SpanSet, key: list[str | bytes], work: Callable[[], _Answer]) -> _Answer:
        """`work()`'s answer, read back when the spans are the cache's and the question was answered before
        (`derived.kept_columns`), else worked out and kept (unless its span ids are not the readers' hex)."""
        made: list[_Answer] = []

        def make() -> tuple[dict[str, array], dict[str, Any]]:
            answer = work()
            made.append(answer)
            encoded = encoded_segments(answer.segments)
            if encoded is None:
                raise _NotKept
            columns, extras = encoded
            extras["saves"] = [[name, bucket, ns] for (name, bucket), ns in answer.saves.items()]
            extras["stragglers"] = [s.kept() for s in answer.stragglers]
            return columns, extras

        try:
            columns, extras = kept_columns(spans, "critical", key, make)
        except _NotKept:
            return made[0]
        if made:
            return made[0]
        saves = {(name, bucket): ns for name, bucket, ns in extras.pop("saves")}
        stragglers = [Straggler.of_kept(row) for row in extras.pop("stragglers")]
        return cls(decoded_segments(columns, extras), saves, stragglers)


class _NotKept(Exception):
    """The answer worked out, whose span ids cannot be kept (`encoded_segments`)."""


def _saves(
    attempts: dict[str, _Attempt], timings: dict[str, _Timing], windows: Windows
) -> dict[tuple[str, str], float]:
    """Each phase's (a bucketed name's) `saves_s`, in nanoseconds: the median over the windows of what a 10% speed-up
    of its name saves. Only the phases whose own time binds a window's start or end somewhere are re-timed (the
    others' speed-up moves no window: 0); a phase off every path may save (a step that waits, in no span of its own,
    for what an earlier step made for it)."""
    bound: set[tuple[str, str]] = set()
    for attempt in attempts.values():
        spans = attempt.spans
        events = []
        for iteration in attempt.iterations:
            for row in attempt.deps.steps.get(iteration) or attempt.rows_of.get(iteration, []):
                events += [2 * row, 2 * row + 1]
        for row in attempt.graph.bound_by(events):
            if spans.is_bucketed(row):
                bound.add((spans.names[spans.name[row]], str(spans.buckets[spans.bucket[row]])))
    keep = 1 - SAVES_PCT / 100
    saves: dict[tuple[str, str], float] = {}
    for name in sorted({n for n, _ in bound}):
        savings = _savings(timings, windows, {name: keep})
        median = float(statistics.median(savings)) if savings else 0.0
        saves.update({(n, bucket): median for n, bucket in bound if n == name})
    return saves


def window_segments(spans: SpanSet, windows: Windows, wakeup_ns: int = WAKEUP_NS) -> pa.Table:
    """The segments (`paths.SEGMENT_SCHEMA`) of `windows`' paths over `spans`, windows numbered by position."""
    return _segments(windows, _attempts(spans, windows, wakeup_ns))


def _attempts(spans: SpanSet, windows: Windows, wakeup_ns: int, only: str | None = None) -> dict[str, _Attempt]:
    """Each attempt with windows among `windows` (attempt `only`, if given): its spans read, their dependencies
    worked out."""
    positions: dict[str, list[int]] = {}
    for position in range(len(windows)):
        positions.setdefault(windows.run_ids[windows.attempts[position]], []).append(position)
    out = {}
    for run_id, at in positions.items():
        if only is not None and run_id != only:
            continue
        read, deps, graph = attempt_graph(spans, f"{ATTEMPT_SQL} = {sql_text(run_id)}", wakeup_ns)
        rows_of: dict[int, list[int]] = {}
        for row, iteration in enumerate(read.eff_iteration):
            if iteration != NO_ITERATION:
                rows_of.setdefault(iteration, []).append(row)
        out[run_id] = _Attempt(read, deps, at, [windows.iterations[p] for p in at], rows_of, graph)
    return out


def _segments(windows: Windows, attempts: dict[str, _Attempt]) -> pa.Table:
    """Every window's path explained, its bucketed stretches as SEGMENT_SCHEMA rows sorted by window and start."""
    number, names, processes, buckets = array("q"), [], [], []
    starts, ends = array("q"), array("q")
    id_parts = []
    for attempt in attempts.values():
        spans, deps = attempt.spans, attempt.deps
        rows = array("q")
        for position, iteration in zip(attempt.positions, attempt.iterations, strict=True):
            start_ns, end_ns = windows.stretches[position]
            tops = window_tops(spans, deps, iteration, attempt.rows_of.get(iteration, []))
            for row, seg_start, seg_end in explain_window(spans, deps, tops, start_ns, end_ns):
                if row == NONE or not spans.is_bucketed(row):
                    continue  # waiting
                number.append(position)
                rows.append(row)
                names.append(spans.names[spans.name[row]])
                processes.append(spans.processes[spans.process[row]])
                buckets.append(spans.buckets[spans.bucket[row]])
                starts.append(seg_start)
                ends.append(seg_end)
        id_parts.append(spans.ids.take(int64_array(rows)))
    if not len(number):
        return empty_segments()
    table = pa.table(
        {"window": int64_array(number), "span_id": pa.concat_arrays(id_parts).cast(pa.string()),
         "name": pa.array(names, pa.string()),
         "process": pa.array(processes, pa.string()), "bucket": pa.array(buckets, pa.string()),
         "start_ns": int64_array(starts), "end_ns": int64_array(ends)}
    )  # fmt: skip
    return table.sort_by([("window", "ascending"), ("start_ns", "ascending")])


def _savings(timings: dict[str, _Timing], windows: Windows, keep_by_name: dict[str, Fraction]) -> list[int]:
    """Each window's wall clock saved (nanoseconds, in the windows' order) when the own time of the spans of each
    name in `keep_by_name` is multiplied by its fraction, each attempt re-timed whole."""
    saved = [0] * len(windows)
    for timing in timings.values():
        codes = {timing.names.index(n): f for n, f in keep_by_name.items() if n in timing.names}
        if not codes:
            continue
        before, after = timing.lengths(), timing.lengths(codes)
        for position, old, new in zip(timing.positions, before, after, strict=True):
            saved[position] = old - new
    return saved


def _stragglers(spans: SpanSet, attempts: dict[str, _Attempt], gpus: GpuOptions) -> list[Straggler]:
    """The fan-outs' stragglers of every attempt's windows asked for."""
    holders, _ = read_holders(spans)
    model = gpu_model(spans, gpus)
    held: dict[tuple[str, str], Fraction] = {}
    if model is not None:
        for gpu_class in model.classes:
            for member in gpu_class.members:
                holder = model.holders[member]
                key = (holder.attempt, holder.process)
                held[key] = held.get(key, Fraction(0)) + gpu_class.weight
    found: dict[tuple[str, str, str | None], Straggler] = {}
    for run_id, attempt in attempts.items():
        fleet_of = {h.process: h.fleet for h in holders if h.attempt == run_id}
        gpus_of = {process: count for (a, process), count in held.items() if a == run_id}
        fan_out_stragglers(attempt.spans, set(attempt.iterations), fleet_of, gpus_of, found)  # type: ignore[arg-type]
    return ranked(found)


@dataclass(frozen=True)
class PoolShare:
    """The pool whose processes hold the largest share of the steps' critical path (`report --by pool`'s
    bottleneck, SPEC section 14), and that share of the windows' wall clock."""

    pool: str
    share: float

    def json(self) -> dict[str, str | float]:
        return {"pool": self.pool, "share": self.share}


def pool_bottleneck(spans: SpanSet, windows: Windows, model: GpuModel, wakeup_ns: int = WAKEUP_NS) -> PoolShare | None:
    """The pool the others waited on: the one whose processes' time on the windows' critical paths is largest (None
    when no pool's process is on a path, or with fewer than two pools)."""
    if len(model.pools) < 2 or not len(windows):
        return None
    pool_of_fleet = {fleet: pool.name for pool in model.pools for fleet in pool.fleets}
    pool_of = {(h.attempt, h.process): pool_of_fleet[h.fleet] for h in model.holders if h.fleet in pool_of_fleet}
    segments = window_segments(spans, windows, wakeup_ns)
    on_path: dict[str, int] = {}
    for window, process, start, end in zip(
        *(segments.column(c).to_pylist() for c in ("window", "process", "start_ns", "end_ns")), strict=True
    ):
        pool = pool_of.get((windows.run_ids[windows.attempts[window]], process))
        if pool is not None:
            on_path[pool] = on_path.get(pool, 0) + end - start
    if not on_path:
        return None
    pool, critical_ns = min(on_path.items(), key=lambda item: (-item[1], item[0]))
    wall = sum(windows.stretches.ends) - sum(windows.stretches.starts)
    return PoolShare(pool, critical_ns / wall if wall else 0.0)
