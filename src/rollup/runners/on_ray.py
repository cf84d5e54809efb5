"""The accounting on Ray: a runner (`parts.ReportRunner`) whose parts are Ray tasks, one per range of iteration windows.

`report.build_report` and `checks.check_findings` find the frames from the lineage (`SpanStore.spans`: effective
iterations follow parent links anywhere in the trace, so they cannot be found range by range), kept as Parquet in
the cache as every local command keeps it. `RayRunner` cuts the frames to charge into ranges of consecutive windows
in time (`GOODPUT_RAY_RANGE_WINDOWS` windows each; by default two ranges per CPU of the cluster) and sends each range
to a Ray task (`runners.ray_slices`) that reads only its spans from the lineage table and returns its part, integer
nanoseconds per window, which the orchestration merges exactly as it merges the one part of a local run.

The same runner converts trace files for `ingest --ray` (`runners.ray_ingest`), so one `--ray` means one cluster.
Assumption, as for `ingest --ray`: the cache (where the lineage table is) is on a filesystem every Ray node sees, and
every node can import `rollup`.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import shutil
import tempfile
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollup.accounting.intervals import Stretches
from rollup.accounting.parts import ReportPart
from rollup.base.connection import ENV_MEMORY_LIMIT
from rollup.base.errors import GoodputError
from rollup.base.schema import sql_text
from rollup.checks.parts import CheckPart

from .ray_ingest import RAY_CHUNK_BYTES, connect_ray, convert_on_ray, import_ray, task_result
from .ray_slices import Dataset, RangeWork, check_task, cover, report_task

if TYPE_CHECKING:
    from rollup.accounting.frames import ReportFrames
    from rollup.accounting.windows import Windows
    from rollup.read.chunks import ChunkResult
    from rollup.read.workers import ConvertJob
    from rollup.store.spanset import SpanSet

# Windows per range; unset, the windows are shared out as RANGES_PER_CPU ranges per CPU of the cluster.
ENV_RANGE_WINDOWS = "GOODPUT_RAY_RANGE_WINDOWS"
RANGES_PER_CPU = 2


class RayRunner:
    """Runs the accounting's parts (and `ingest`'s conversions) as Ray tasks, one CPU each.

    `address`: the cluster (None: `RAY_ADDRESS`, else a local one started for the purpose and shut down after; a
    process already connected keeps its connection). `range_windows`: windows per range (default
    `GOODPUT_RAY_RANGE_WINDOWS`, else two ranges per CPU), checked now, before any cluster is reached. Used as a
    context manager, it keeps one connection for the whole block (a command that reports and checks); otherwise
    each call connects when it has work. As a conversion runner (`store.ingest`), its chunks are at most
    `max_chunk_bytes`: Ray's CPUs are not known before it connects.
    """

    max_chunk_bytes = RAY_CHUNK_BYTES

    def __init__(self, address: str | None = None, *, range_windows: int | None = None) -> None:
        self.address = address
        self.range_windows = _per_range(range_windows)
        self._ray = import_ray()
        self._held: contextlib.ExitStack | None = None

    def __enter__(self) -> RayRunner:
        self._held = contextlib.ExitStack()
        self._held.enter_context(ray_connection(self.address))
        return self

    def __exit__(self, *exc_info: object) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()

    def __repr__(self) -> str:
        return f"RayRunner(address={self.address!r})"

    def __call__(self, jobs: Sequence[ConvertJob]) -> Iterator[ChunkResult]:
        """Convert trace chunks as tasks (the load's runner, `store.ingest`)."""
        return convert_on_ray(self._ray, self.address, jobs)

    @contextlib.contextmanager
    def _connected(self) -> Iterator[Any]:
        if self._held is not None:
            yield self._ray
        else:
            with ray_connection(self.address) as ray:
                yield ray

    def report_parts(
        self, spans: SpanSet, frames: ReportFrames, precedence: Sequence[str], by: str | None
    ) -> list[ReportPart]:
        windows, lost, outside = frames.windows, frames.lost.stretches, frames.outside
        if not (windows or lost or outside):
            return []
        with _dataset(spans) as dataset, self._connected() as ray:
            per_range = windows_per_range(ray, self.range_windows, len(windows))
            works = plan_ranges(windows, lost, outside, per_range)
            return list(run_ranges(ray, report_task, [(dataset, w, list(precedence), by) for w in works]))

    def check_parts(self, spans: SpanSet, windows: Windows, expect: Sequence[str]) -> list[CheckPart]:
        with _dataset(spans) as dataset, self._connected() as ray:
            per_range = windows_per_range(ray, self.range_windows, len(windows))
            empty = Stretches(array("q"), array("q"))
            works = _with_ownership(spans, plan_ranges(windows, empty, empty, per_range) or [_everything(windows)])
            return list(run_ranges(ray, check_task, [(dataset, w, list(expect)) for w in works]))


# --- ranges -------------------------------------------------------------------------------------------------------


def plan_ranges(windows: Windows, lost: Stretches, outside: Stretches, per_range: int) -> list[RangeWork]:
    """Cut the frames, in time order, into ranges of `per_range` windows; a frame that is not a row (a superseded
    window, a stretch outside) joins the range of the window before it.

    Each range reads the spans overlapping its frames and those whose effective iteration lies between its windows'
    lowest and highest iteration."""
    if not windows and not lost and not outside:
        return []
    starts, ends = windows.stretches.starts, windows.stretches.ends
    items: list[tuple[int, int, int, int]] = [(starts[i], ends[i], 0, i) for i in range(len(windows))]
    items += [(start, end, 1, i) for i, (start, end) in enumerate(lost)]
    items += [(start, end, 1, len(lost) + i) for i, (start, end) in enumerate(outside)]
    items.sort(key=lambda item: item[:3])
    groups: list[tuple[array, list[int]]] = []
    for _, _, kind, index in items:
        if not groups or (kind == 0 and len(groups[-1][0]) >= per_range):
            groups.append((array("q"), []))
        (groups[-1][0] if kind == 0 else groups[-1][1]).append(index)
    works = []
    for number, (positions, others) in enumerate(groups):
        held = windows.take(positions)
        mine_lost = lost.take(i for i in others if i < len(lost))
        mine_outside = outside.take(i - len(lost) for i in others if i >= len(lost))
        iterations = (min(held.iterations), max(held.iterations)) if len(held) else None
        stretches = [*held.stretches, *mine_lost, *mine_outside]
        works.append(RangeWork(number, held, positions, mine_lost, mine_outside, cover(stretches), iterations))
    return works


def _everything(windows: Windows) -> RangeWork:
    """The one range of a check with no frame at all: the span rules still run, over every span."""
    empty = Stretches(array("q"), array("q"))
    return RangeWork(0, windows, array("q"), empty, empty)


def _per_range(explicit: int | None) -> int | None:
    """Windows per range asked for: the argument, else GOODPUT_RAY_RANGE_WINDOWS, else None."""
    if explicit is not None:
        if explicit < 1:
            raise GoodputError(f"windows per range must be at least 1, got {explicit}")
        return explicit
    text = os.environ.get(ENV_RANGE_WINDOWS, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise GoodputError(f"{ENV_RANGE_WINDOWS} must be a whole number of windows, at least 1; got {text!r}")
    return value


def _with_ownership(spans: SpanSet, works: list[RangeWork]) -> list[RangeWork]:
    """For `check`: each range answers for the spans starting from its first frame to the next range's first frame
    (the first from the beginning of time, the last to its end), and gets the nearest bucketed ancestors of the
    bucketed spans starting there (nested-bucket compares a span with that ancestor, wherever it ran)."""
    starts = [min(w.windows.stretches.starts, default=0) for w in works]
    bounds: list[tuple[int | None, int | None]] = [
        (None if i == 0 else starts[i], None if i == len(works) - 1 else starts[i + 1]) for i in range(len(works))
    ]
    needed: list[set[tuple[str, str]]] = [set() for _ in works]
    for trace_id, ancestor, start in spans.rows(
        f"SELECT trace_id, bucketed_chain[-1], start_ns FROM {spans.lineage} WHERE bucketed AND len(bucketed_chain) > 0"
    ):
        needed[max(0, bisect.bisect_right(starts, start) - 1)].add((trace_id, ancestor))
    return [  # no span-seconds in `check`: no spans by effective iteration
        RangeWork(w.index, w.windows, w.positions, w.lost, w.outside, w.cover, None, bounds[i],
                  tuple(sorted(needed[i])))
        for i, w in enumerate(works)
    ]  # fmt: skip


# --- Ray ----------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _dataset(spans: SpanSet) -> Iterator[Dataset]:
    """The Parquet files the tasks read `spans` from: the cached lineage table when `spans` is read from it (the
    tasks keep `spans.run_id`'s rows), else a copy written for them and removed after (`--no-cache`, an unwritable
    cache)."""
    limit = os.environ.get(ENV_MEMORY_LIMIT, "").strip() or None
    if spans.files:
        yield Dataset(spans.files, spans.run_id, limit)
        return
    scratch = Path(tempfile.mkdtemp(prefix="goodput-ray-"))
    try:
        path = scratch / "lineage.parquet"
        spans.run(f"COPY {spans.lineage} TO {sql_text(str(path))} (FORMAT parquet, COMPRESSION zstd)")
        yield Dataset((str(path),), spans.run_id, limit)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def ray_connection(address: str | None) -> Iterator[Any]:
    """Ray, connected as `ingest --ray` connects (`runners.ray_ingest`): a process already connected keeps its
    connection; otherwise `address`, else `RAY_ADDRESS`, else a local cluster, shut down again on leaving."""
    ray = import_ray()
    started = connect_ray(ray, address)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def windows_per_range(ray: Any, explicit: int | None, windows: int) -> int:
    """Windows per range: `explicit`, else RANGES_PER_CPU ranges per CPU of the cluster (so a slow range does not
    leave a CPU idle for long)."""
    if explicit is not None:
        return explicit
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    return max(1, math.ceil(windows / (RANGES_PER_CPU * cpus)))


def run_ranges(ray: Any, task: Callable[..., Any], arguments: list[tuple[Any, ...]]) -> Iterator[Any]:
    """Run `task(*args)` as a Ray task (one CPU each) for each `args`, yielding results as tasks finish. A
    GoodputError raised in a task is raised here as itself; a lost worker becomes a GoodputError."""
    remote = ray.remote(num_cpus=1)(task)
    pending = [remote.remote(*args) for args in arguments]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield task_result(ray, ref, "a Ray task accounting a range of iteration windows")
    except BaseException:  # a failed range, or the caller gave up: the rest are not needed
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        raise
