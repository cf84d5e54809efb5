"""The answer of `goodput critical` (SPEC section 14), held as columns: every window's path in one Arrow table
(`SEGMENT_SCHEMA`), the windows beside it, and what is summed from them: each phase's and process's seconds on the
paths, what a 10% speed-up of each phase saves, the stragglers, and a `--speedup`'s prediction.

A long run's paths hold most of its steps' spans (a million spans gave 600,000 segments), so nothing is made per
segment until it is asked for: the sums are Arrow group-bys, and a window's `WindowPath` (its `Segment`s) is made
when it is read (the JSON is written a window at a time, `iterations` being a lazy sequence).
"""

from __future__ import annotations

import bisect
import statistics
from array import array
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from rollup.accounting.rows import NS_PER_S, seconds, share
from rollup.base.arrays import int64_array, int64_column
from rollup.base.made import MadeOnRead

from .stragglers import Straggler, waited_on_most

if TYPE_CHECKING:
    from rollup.accounting.windows import Windows

# Every window's segments (the bucketed stretches of its path), sorted by window (its position among the windows
# asked for) and start. What lies between them is waiting.
SEGMENT_SCHEMA = pa.schema(
    [("window", pa.int64()), ("span_id", pa.string()), ("name", pa.string()), ("process", pa.string()),
     ("bucket", pa.string()), ("start_ns", pa.int64()), ("end_ns", pa.int64())]
)  # fmt: skip
# What `saves_s` and the table's lead line are worked out for: each phase 10% shorter (retime.SAVES_PCT).
SPEED_UP = 0.1


@dataclass(frozen=True, slots=True)
class Segment:
    """One stretch of a step's critical path: own time of span `span_id` (its name, process and bucket)."""

    span_id: str
    name: str
    process: str | None
    bucket: str
    start_ns: int
    end_ns: int

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
    """A phase's (span name and bucket) or a process's seconds on the paths, their share of the steps' wall, and for
    a phase the median over the steps of what a 10% speed-up of its name saves (`saves_ns`)."""

    key: str | None
    bucket: str | None
    critical_ns: int
    wall_ns: int  # of every window asked for: the share's denominator
    steps: int
    saves_ns: float = 0.0

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

    @property
    def saves_s(self) -> float:
        return round(self.saves_ns / NS_PER_S, 9)


@dataclass(frozen=True)
class Speedup:
    """`--speedup`'s prediction: the names sped up and by what percent, and each window's wall clock as recorded and
    as re-timed (nanoseconds, in the windows' order)."""

    names: dict[str, Fraction]
    wall_ns: list[int]
    predicted_ns: list[int]

    @property
    def median_saving_ns(self) -> float:
        savings = [w - p for w, p in zip(self.wall_ns, self.predicted_ns, strict=True)]
        return float(statistics.median(savings)) if savings else 0.0

    def json(self, windows: Windows) -> dict[str, Any]:
        return {
            "names": {name: _number(pct) for name, pct in self.names.items()},
            "iterations": [{"iteration": windows.iterations[i], "wall_s": seconds(w), "predicted_wall_s": seconds(p)}
                           for i, (w, p) in enumerate(zip(self.wall_ns, self.predicted_ns, strict=True))],
            "median_saving_s": round(self.median_saving_ns / NS_PER_S, 9),
        }  # fmt: skip


def _number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def empty_segments() -> pa.Table:
    return SEGMENT_SCHEMA.empty_table()


class WindowPaths(MadeOnRead[WindowPath]):
    """Each window's WindowPath, made when it is read from the segments' columns, which are read into Python a
    block of BLOCK windows at a time (the JSON reads them in order: a block's segments at a time are held)."""

    BLOCK = 1024

    def __init__(self, windows: Windows, segments: pa.Table) -> None:
        super().__init__(len(windows), self._path)
        self.windows, self.segments = windows, segments
        self._block: tuple[int, dict[str, list[Any]]] | None = None
        self._bounds: list[int] | None = None

    def _path(self, index: int) -> WindowPath:
        path = tuple(map(Segment, *self.columns_of(index)))
        window = self.windows[index]
        return WindowPath(window.run_id, window.iteration, window.start_ns, window.end_ns, path)

    def columns_of(self, index: int) -> list[list[Any]]:
        """Window `index`'s segments as columns: span_id, name, process, bucket, start_ns, end_ns."""
        bounds = self._bounds_of()
        number = index // self.BLOCK
        if self._block is None or self._block[0] != number:
            low, high = bounds[number * self.BLOCK], bounds[min(len(bounds) - 1, (number + 1) * self.BLOCK)]
            self._block = (number, self.segments.slice(low, high - low).to_pydict())
        first = bounds[number * self.BLOCK]
        low, high = bounds[index] - first, bounds[index + 1] - first
        return [self._block[1][name][low:high] for name in _PATH_COLUMNS]

    def _bounds_of(self) -> list[int]:
        """Where each window's segments start among the rows, and where the last one's end."""
        if self._bounds is None:
            positions = int64_column(self.segments, "window")
            self._bounds = [bisect.bisect_left(positions, i) for i in range(len(self.windows) + 1)]
        return self._bounds


@dataclass
class CriticalPaths:
    """SPEC section 14's answer over `windows`: their segments (SEGMENT_SCHEMA), each window's path as `iterations`,
    each phase's share of the paths and what speeding it up saves (sorted by the saving, then the seconds on the
    path, most first, then name), each process's share, the stragglers, a `--speedup`'s prediction, and why no window
    was found (`missing`, as `Report.missing`)."""

    SPEED_UP = SPEED_UP  # what `saves_s` is worked out for (SPEC section 14)

    windows: Windows
    segments: pa.Table
    names: list[PathShare] = field(default_factory=list)
    processes: list[PathShare] = field(default_factory=list)
    stragglers: list[Straggler] = field(default_factory=list)
    speedup: Speedup | None = None
    missing: str | None = None

    @property
    def iterations(self) -> WindowPaths:
        return WindowPaths(self.windows, self.segments)

    @property
    def wall_ns(self) -> int:
        stretches = self.windows.stretches
        return sum(stretches.ends) - sum(stretches.starts)

    @property
    def waiting_ns(self) -> int:
        return self.wall_ns - _sum(_durations(self.segments))

    def first(self) -> PathShare | None:
        """The phase to speed up first: the one whose 10% speed-up saves the most (None when none saves anything)."""
        return self.names[0] if self.names and self.names[0].saves_ns > 0 else None

    def waited_on_most(self) -> list[Straggler]:
        """Per fleet, the worker it waited on most."""
        return waited_on_most(self.stragglers)

    def json(self) -> dict[str, Any]:
        """SPEC section 14's object, `iterations` made a window at a time as it is read."""
        paths = self.iterations
        out: dict[str, Any] = {
            "iterations": MadeOnRead(len(paths), lambda i: _path_json(paths, i)),
            "names": [{"name": n.key, "bucket": n.bucket, "critical_s": n.critical_s, "share": n.share,
                       "saves_s": n.saves_s} for n in self.names],
            "processes": [{"process": p.key, "critical_s": p.critical_s, "share": p.share} for p in self.processes],
            "stragglers": [s.json() for s in self.stragglers],
        }  # fmt: skip
        if self.speedup is not None:
            out["speedup"] = self.speedup.json(self.windows)
        return out


_PATH_COLUMNS = ("span_id", "name", "process", "bucket", "start_ns", "end_ns")


def _path_json(paths: WindowPaths, index: int) -> dict[str, Any]:
    """Window `index`'s item of the JSON's `iterations`, made from the columns (no Segment made)."""
    ids, names, processes, buckets, starts, ends = paths.columns_of(index)
    window = paths.windows[index]
    wall = window.end_ns - window.start_ns
    path = [{"span_id": i, "name": n, "process": p, "bucket": b, "start_ns": s, "end_ns": e}
            for i, n, p, b, s, e in zip(ids, names, processes, buckets, starts, ends, strict=True)]  # fmt: skip
    waiting = wall - (sum(ends) - sum(starts))
    return {"iteration": window.iteration, "wall_s": seconds(wall), "waiting_s": seconds(waiting), "path": path}


def _durations(segments: pa.Table) -> pa.Array:
    return pc.subtract(segments.column("end_ns"), segments.column("start_ns"))


def _sum(values: Any) -> int:
    total = pc.sum(values).as_py()
    return int(total or 0)


def summed_paths(
    windows: Windows,
    segments: pa.Table,
    saves: dict[tuple[str, str], float],
    stragglers: list[Straggler],
    speedup: Speedup | None = None,
    missing: str | None = None,
) -> CriticalPaths:
    """The paths of `windows` with each phase's and each process's seconds on them; `saves` gives each phase's
    (name, bucket) saving from a 10% speed-up. The phases listed are those on a path, and those off every path whose
    speed-up saves something."""
    stretches = windows.stretches
    wall, steps = sum(stretches.ends) - sum(stretches.starts), len(windows)
    table = segments.append_column("duration_ns", _durations(segments))
    by_name = table.group_by(["name", "bucket"]).aggregate([("duration_ns", "sum")]).to_pylist()
    names = [PathShare(row["name"], row["bucket"], int(row["duration_ns_sum"]), wall, steps,
                       saves.get((row["name"], row["bucket"]), 0.0)) for row in by_name]  # fmt: skip
    listed = {(n.key, n.bucket) for n in names}
    names += [PathShare(name, bucket, 0, wall, steps, saved) for (name, bucket), saved in saves.items()
              if saved > 0 and (name, bucket) not in listed]  # fmt: skip
    names.sort(key=lambda n: (-n.saves_ns, -n.critical_ns, n.key or "", n.bucket or ""))
    summed = table.group_by("process").aggregate([("duration_ns", "sum")]).to_pylist()
    processes = [PathShare(row["process"], None, int(row["duration_ns_sum"]), wall, steps) for row in summed
                 if row["duration_ns_sum"]]  # fmt: skip
    processes.sort(key=lambda p: (-p.critical_ns, p.key or ""))
    return CriticalPaths(windows, segments, names, processes, stragglers, speedup, missing)


def window_seconds_on_path(segments: pa.Table, windows: int) -> list[dict[tuple[str, str], int]]:
    """Per window (by position, `windows` of them), each (name, bucket)'s seconds on its path, in nanoseconds."""
    table = segments.append_column("duration_ns", _durations(segments))
    summed = table.group_by(["window", "name", "bucket"]).aggregate([("duration_ns", "sum")])
    out: list[dict[tuple[str, str], int]] = [{} for _ in range(windows)]
    for window, name, bucket, ns in zip(*(summed.column(c).to_pylist() for c in
                                          ("window", "name", "bucket", "duration_ns_sum")), strict=True):  # fmt: skip
        out[window][(name, bucket)] = ns
    return out


# --- kept in the cache --------------------------------------------------------------------------------------------

_TEXT_COLUMNS = ("name", "process", "bucket")
_INT_COLUMNS = ("window", "start_ns", "end_ns")
_ID_OFFSET = 2**63  # a 64-bit span id, as hex, held as a signed 64-bit integer


def encoded_segments(segments: pa.Table) -> tuple[dict[str, array], dict[str, Any]] | None:
    """`segments` as 64-bit integer columns and small extras (`derived.kept_columns`' shape): the texts as positions
    in lists of their values, each span id as its 16 hex digits' integer. None when some span id is not 16 lowercase
    hex digits (written back it would not be the same text): then nothing is kept."""
    columns = {name: int64_column(segments, name) for name in _INT_COLUMNS}
    ids = array("q")
    try:
        for text in segments.column("span_id").to_pylist():
            if len(text) != 16 or text != text.lower():
                return None
            ids.append(int(text, 16) - _ID_OFFSET)
    except (TypeError, ValueError):  # a null id, or one that is not hex
        return None
    columns["span_id"] = ids
    extras: dict[str, Any] = {}
    for name in _TEXT_COLUMNS:
        encoded = pc.dictionary_encode(segments.column(name).combine_chunks(), null_encoding="encode")
        columns[name] = array("q", encoded.indices.cast(pa.int64()).to_pylist())
        extras[name] = encoded.dictionary.to_pylist()
    return columns, extras


def decoded_segments(columns: dict[str, array], extras: dict[str, Any]) -> pa.Table:
    """What `encoded_segments` kept, as the segments table again."""
    data: dict[str, pa.Array] = {name: int64_array(columns[name]) for name in _INT_COLUMNS}
    data["span_id"] = pa.array([f"{value + _ID_OFFSET:016x}" for value in columns["span_id"]], pa.string())
    for name in _TEXT_COLUMNS:
        data[name] = pa.array(extras[name], pa.string()).take(int64_array(columns[name]))
    return pa.table({field.name: data[field.name] for field in SEGMENT_SCHEMA}, schema=SEGMENT_SCHEMA)
