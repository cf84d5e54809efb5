"""What each step waited on (SPEC section 14): the chain of bucketed spans the window's end waited on, walked back.

From the window's end `t = b`, the span the step was waiting on at `t` is the bucketed span (any process, any
iteration) started before `t` whose `min(end, t)` is latest (ties: the later start, then the smaller span id): one
running at `t` if any, the one that ended last otherwise, with the gap after its end `waiting`. Its segment runs back
to its start (or the window's), and the walk goes on from there. The segments and waits partition the window, so a
phase's seconds on the path bound what shortening it can save: a phase off the path saves nothing until another
becomes critical, which is what the shares of `report --by name` cannot say.

Per window the walk is a heap over the window's spans in order of their ends, latest first: each span is pushed once
and popped at most once. The spans come from DuckDB already cut to the windows and sorted, in batches consecutive in
time (`intervals.in_time_batches`), so what is held is a batch's spans, not the run's.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from .attribution import swept_spans_sql
from .errors import GoodputError
from .intervals import clip_to_stretches, in_time_batches
from .memory import sweep_batch_spans
from .rows import NS_PER_S, seconds, share
from .windows import missing_in, report_frames, stretches_of

if TYPE_CHECKING:
    from .report import SpanSource
    from .spanset import SpanSet
    from .windows import Windows

# What a path's segment says of its span (SPEC section 14's `path` items, less the segment's bounds).
_SPAN_COLUMNS = ("span_id", "name", "process", "bucket")
# Of each process, its service: a process's peers, for the straggler, are the other processes of its service.
SERVICE_SQL = "coalesce(service, process)"
# A process is a straggler when it is on the path at least this many times as long as its peers on average, and for
# at least STRAGGLER_SHARE of the steps' wall clock (a worker a few milliseconds late now and then is not one).
STRAGGLER_RATIO = 3.0
STRAGGLER_SHARE = 0.05
# What SPEC section 14's reading of the table is worked out for: shortening the phase by this share.
SPEED_UP = 0.1


@dataclass(frozen=True, slots=True)
class Segment:
    """One piece of a step's critical path: span `span_id` (its name, process and bucket), cut to what the step
    waited on of it, `[start_ns, end_ns]`. `late_ns`: how much of it ran after every other process of its service
    had ended its span of that name in the window (0 when none had one, or one ran on past it): what the step
    waited on this process alone for."""

    span_id: str
    name: str
    process: str | None
    bucket: str
    start_ns: int
    end_ns: int
    late_ns: int = 0

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def json(self) -> dict[str, Any]:
        return {"span_id": self.span_id, "name": self.name, "process": self.process, "bucket": self.bucket,
                "start_ns": self.start_ns, "end_ns": self.end_ns}  # fmt: skip


@dataclass(frozen=True)
class WindowPath:
    """One window's critical path, its segments in time order; the rest of the window is `waiting`."""

    run_id: str
    iteration: int
    start_ns: int
    end_ns: int
    path: tuple[Segment, ...]

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def waiting_ns(self) -> int:
        return self.wall_ns - sum(segment.duration_ns for segment in self.path)

    def json(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "wall_s": seconds(self.wall_ns), "waiting_s": seconds(self.waiting_ns),
                "path": [segment.json() for segment in self.path]}  # fmt: skip


@dataclass(frozen=True)
class PathShare:
    """A phase's (span name and bucket) or a process's seconds on the paths, and their share of the steps' wall."""

    key: str | None
    bucket: str | None
    critical_ns: int
    wall_ns: int  # of every window asked for: the share's denominator
    steps: int

    @property
    def critical_s(self) -> float:
        return seconds(self.critical_ns)

    @property
    def share(self) -> float | None:
        return share(self.critical_ns, self.wall_ns)

    @property
    def per_step_s(self) -> float:
        """Its mean seconds on the path per step."""
        return self.critical_ns / NS_PER_S / self.steps if self.steps else 0.0


@dataclass(frozen=True)
class Straggler:
    """A process on the path far longer than the other processes of its service (`STRAGGLER_RATIO`), which the
    steps waited on alone for `late_ns` (`Segment.late_ns`)."""

    process: str | None
    service: str
    critical_ns: int
    peers_mean_ns: float
    peers: int
    late_ns: int

    @property
    def ratio(self) -> float | None:
        return self.critical_ns / self.peers_mean_ns if self.peers_mean_ns else None


@dataclass
class CriticalPaths:
    """SPEC section 14's answer: each window's path, and over them each phase's and each process's share of the
    path (sorted by seconds on it, most first, then name), the stragglers among the processes, and why no window
    was found (`missing`, as `Report.missing`)."""

    iterations: list[WindowPath]
    names: list[PathShare] = field(default_factory=list)
    processes: list[PathShare] = field(default_factory=list)
    stragglers: list[Straggler] = field(default_factory=list)
    missing: str | None = None

    @property
    def wall_ns(self) -> int:
        return sum(path.wall_ns for path in self.iterations)

    @property
    def waiting_ns(self) -> int:
        return sum(path.waiting_ns for path in self.iterations)

    def first(self) -> PathShare | None:
        """The phase to speed up first: the most seconds on the path (None when no step had any)."""
        return self.names[0] if self.names and self.names[0].critical_ns else None

    def json(self) -> dict[str, Any]:
        return {
            "iterations": [path.json() for path in self.iterations],
            "names": [{"name": n.key, "bucket": n.bucket, "critical_s": n.critical_s, "share": n.share}
                      for n in self.names],
            "processes": [{"process": p.key, "critical_s": p.critical_s, "share": p.share} for p in self.processes],
        }  # fmt: skip


def walk_back(
    start_ns: int, end_ns: int, starts: Sequence[int], ends: Sequence[int], ids: Sequence[str], low: int, high: int
) -> list[tuple[int, int, int]]:
    """The critical path of window `[start_ns, end_ns]` over the spans at rows `low:high` of `starts`, `ends`, `ids`
    (each of positive length and overlapping the window, sorted by end descending, then start descending, then id):
    `(row, segment start, segment end)` for each segment, latest first.

    At `t`, the spans ending at or after `t` are in a heap by latest start (then smallest id); those starting at or
    after `t` are dropped from it, for good (`t` only falls). The heap's top is then the span running at `t` that
    started last; with none, the next span by end (the sort's order is the tie rule) is the one that ended last."""
    t, row = end_ns, low
    heap: list[tuple[int, str, int]] = []
    path: list[tuple[int, int, int]] = []
    while t > start_ns:
        while row < high and ends[row] >= t:
            heapq.heappush(heap, (-starts[row], ids[row], row))
            row += 1
        while heap and -heap[0][0] >= t:
            heapq.heappop(heap)
        if heap:
            chosen = heapq.heappop(heap)[2]
            until = t
        elif row < high:
            chosen, until = row, ends[row]
            row += 1
        else:
            break
        t = max(starts[chosen], start_ns)
        path.append((chosen, t, until))
    return path


def critical_paths(spans: SpanSet, windows: Windows, batch_spans: int | None = None) -> list[tuple[Segment, ...]]:
    """Each window's critical path (SPEC section 14), segments in time order, over the bucketed spans of `spans`.

    The spans overlapping the windows are cut to them in DuckDB and read back sorted, a batch of windows
    consecutive in time at a time (at most `batch_spans` spans each, default what the memory limit has room for)."""
    stretches = list(stretches_of(windows))
    paths: list[tuple[Segment, ...]] = [() for _ in stretches]
    if not stretches:
        return paths
    most = batch_spans or sweep_batch_spans(spans.limit_bytes)
    for positions, batch, spans_sql in in_time_batches(spans, stretches, swept_spans_sql(spans), most):
        with spans.scratch("critical_cut") as cut:
            clip_to_stretches(spans, batch, spans_sql, ["start_ns", "end_ns", "service", *_SPAN_COLUMNS], cut)
            table = spans.arrow(
                f"SELECT stretch, start_ns, end_ns, {', '.join(_SPAN_COLUMNS)} FROM {cut} "
                "ORDER BY stretch, end_ns DESC, start_ns DESC, span_id"
            )
            walked = _walked(table, batch)
            del table
            late = _lateness(spans, cut, walked)
        for local, path in walked.items():
            paths[positions[local]] = tuple(replace(s, late_ns=late.get((local, i), 0)) for i, s in enumerate(path))
    return paths


def _lateness(spans: SpanSet, cut: str, walked: dict[int, tuple[Segment, ...]]) -> dict[tuple[int, int], int]:
    """`Segment.late_ns` of each segment of `walked` (by stretch and position in its path) that has some: one query
    over the cut spans, pairing each segment with the spans of the same name in its window of the other processes
    of its service."""
    import pyarrow as pa

    keys = [(number, i, s) for number, path in walked.items() for i, s in enumerate(path)]
    if not keys:
        return {}
    segments = pa.table(
        {"stretch": [k[0] for k in keys], "i": [k[1] for k in keys], "name": [k[2].name for k in keys],
         "process": [k[2].process for k in keys], "s": [k[2].start_ns for k in keys],
         "e": [k[2].end_ns for k in keys]}
    )  # fmt: skip
    with spans.registered("critical_segments", segments) as table:
        rows = spans.rows(
            f"""
            WITH mine AS (
                SELECT p.*, any_value(coalesce(c.service, c.process)) AS service FROM {table} p JOIN {cut} c
                    ON c.stretch = p.stretch AND c.name = p.name AND c.process IS NOT DISTINCT FROM p.process
                GROUP BY ALL
            )
            SELECT p.stretch, p.i, p.s, p.e, max(c.e) FILTER (WHERE c.e <= p.e), count(*) FILTER (WHERE c.e > p.e)
            FROM mine p JOIN {cut} c ON c.stretch = p.stretch AND c.name = p.name
                AND coalesce(c.service, c.process) = p.service
                AND c.process IS DISTINCT FROM p.process
            GROUP BY p.stretch, p.i, p.s, p.e
            """
        )
    return {(number, i): e - max(s, peer_end) for number, i, s, e, peer_end, after in rows
            if not after and peer_end is not None and e > max(s, peer_end)}  # fmt: skip


def _walked(table: Any, stretches: Sequence[tuple[int, int]]) -> dict[int, tuple[Segment, ...]]:
    """The paths of `stretches` (by position) over `table`'s rows (`critical_paths`' query); a stretch without rows
    has none here (all waiting)."""
    numbers = table.column("stretch").to_pylist()
    starts, ends = table.column("start_ns").to_pylist(), table.column("end_ns").to_pylist()
    ids = table.column("span_id").to_pylist()
    walked: dict[int, list[tuple[int, int, int]]] = {}
    low = 0
    while low < len(numbers):
        number = numbers[low]
        high = low
        while high < len(numbers) and numbers[high] == number:
            high += 1
        start, end = stretches[number]
        walked[number] = walk_back(start, end, starts, ends, ids, low, high)
        low = high
    rows = sorted({row for path in walked.values() for row, _, _ in path})
    picked = table.take(rows).to_pydict() if rows else {}
    at = {row: i for i, row in enumerate(rows)}
    columns = [picked.get(name, []) for name in _SPAN_COLUMNS]

    def segment(row: int, start: int, end: int) -> Segment:
        i = at[row]
        return Segment(columns[0][i], columns[1][i], columns[2][i], columns[3][i], start, end)

    return {number: tuple(segment(*piece) for piece in reversed(path)) for number, path in walked.items()}


def window_paths(windows: Windows, paths: Sequence[tuple[Segment, ...]]) -> list[WindowPath]:
    """`paths` (by position) as each window's WindowPath."""
    return [
        WindowPath(window.run_id, window.iteration, window.start_ns, window.end_ns, path)
        for window, path in zip(windows, paths, strict=True)
    ]


def summed_paths(
    iterations: list[WindowPath], services: dict[str | None, str], missing: str | None = None
) -> CriticalPaths:
    """The paths with each phase's and each process's seconds on them, and the stragglers: `services` names each
    process's service, and holds every process with a bucketed span in the windows (those never on the path too)."""
    wall = sum(path.wall_ns for path in iterations)
    steps = len(iterations)
    by_name: dict[tuple[str, str], int] = {}
    by_process: dict[str | None, int] = dict.fromkeys(services, 0)
    late: dict[str | None, int] = {}
    for path in iterations:
        for segment in path.path:
            key = (segment.name, segment.bucket)
            by_name[key] = by_name.get(key, 0) + segment.duration_ns
            by_process[segment.process] = by_process.get(segment.process, 0) + segment.duration_ns
            late[segment.process] = late.get(segment.process, 0) + segment.late_ns
    names = [PathShare(name, bucket, ns, wall, steps) for (name, bucket), ns in by_name.items()]
    names.sort(key=lambda n: (-n.critical_ns, n.key or "", n.bucket or ""))
    processes = [PathShare(process, None, ns, wall, steps) for process, ns in by_process.items() if ns]
    processes.sort(key=lambda p: (-p.critical_ns, p.key or ""))
    return CriticalPaths(iterations, names, processes, _stragglers(by_process, late, services, wall), missing)


def _stragglers(
    by_process: dict[str | None, int], late: dict[str | None, int], services: dict[str | None, str], wall_ns: int
) -> list[Straggler]:
    """The processes on the path STRAGGLER_RATIO times as long as the mean of the other processes of their service,
    which the steps waited on alone (`Segment.late_ns`) for STRAGGLER_SHARE of their wall clock at least: a rank
    always a few milliseconds behind its peers is on the path as often, but holds the steps back by little."""
    of_service: dict[str, list[str | None]] = {}
    for process in by_process:
        of_service.setdefault(services.get(process, process or ""), []).append(process)
    found = []
    for service, processes in of_service.items():
        if len(processes) < 2:
            continue
        for process in processes:
            ns = by_process[process]
            peers = [by_process[p] for p in processes if p != process]
            mean = sum(peers) / len(peers)
            held = late.get(process, 0)
            if held >= STRAGGLER_SHARE * wall_ns and held > 0 and ns >= STRAGGLER_RATIO * mean:
                found.append(Straggler(process, service, ns, mean, len(peers), held))
    found.sort(key=lambda s: (-s.critical_ns, s.process or ""))
    return found


def window_services(spans: SpanSet, windows: Windows) -> dict[str | None, str]:
    """Each process with a bucketed span overlapping one of `windows`, and its service (its peers' name)."""
    if not len(windows):
        return {}
    stretches = stretches_of(windows)
    low, high = min(s for s, _ in stretches), max(e for _, e in stretches)
    rows = spans.rows(
        f"SELECT process, any_value({SERVICE_SQL}) FROM ({swept_spans_sql(spans)}) "
        f"WHERE start_ns < {high} AND end_ns > {low} GROUP BY process"
    )
    return {process: service or "" for process, service in rows}


@dataclass(frozen=True)
class CriticalOptions:
    """What `goodput critical` is asked for: the windows of the inclusive range `iterations` (all when None; with
    `exact`, one iteration asked for by number, an error when the traces lack it), of attempt `attempt` alone (a
    run id or `latest`; None: every attempt, each iteration's latest window)."""

    iterations: tuple[int, int] | None = None
    attempt: str | None = None
    exact: bool = False


@dataclass
class CriticalPart:
    """The paths of some of the windows, at `positions` among them (a runner's part: `runners`)."""

    positions: list[int]
    paths: list[tuple[Segment, ...]]


def critical_part(spans: SpanSet, windows: Windows, positions: Sequence[int] | None = None) -> CriticalPart:
    """The part of `windows` (at `positions` among the command's; default 0, 1, ...) over `spans`."""
    at = list(positions) if positions is not None else list(range(len(windows)))
    return CriticalPart(at, critical_paths(spans, windows))


class CriticalRunner(Protocol):
    """Computes the paths of windows in parts (`runners.LocalRunner`: one; `on_ray.RayRunner`: a Ray task per range
    of windows)."""

    def critical_parts(self, spans: SpanSet, windows: Windows) -> list[CriticalPart]: ...


def build_critical(
    store: SpanSource, options: CriticalOptions | None = None, runner: CriticalRunner | None = None
) -> CriticalPaths:
    """SPEC section 14 over the store's spans: the windows are the report's rows (`report_frames`), their paths
    computed by `runner` (default: in this process, one part; `on_ray.RayRunner` as Ray tasks, by ranges of
    windows), merged by position."""
    options = options or CriticalOptions()
    spans = store.spans(options.attempt)
    frames = report_frames(spans, options.iterations)
    windows = frames.windows
    missing = missing_in(frames.held, options.iterations) if not windows else None
    if missing is not None and options.exact:
        raise GoodputError(missing)
    paths: list[tuple[Segment, ...]] = [() for _ in range(len(windows))]
    parts = (
        []
        if not windows
        else [critical_part(spans, windows)]
        if runner is None
        else runner.critical_parts(spans, windows)
    )
    for part in parts:
        for position, path in zip(part.positions, part.paths, strict=True):
            paths[position] = path
    return summed_paths(window_paths(windows, paths), window_services(spans, windows), missing)
