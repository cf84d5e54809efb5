"""The report's frames: what a report charges of a run (SPEC sections 4 and 7). Its rows' windows (per iteration the
latest attempt's), the superseded windows (rework), and the stretches of each attempt's extent that no window
covers (outside: start-up, gaps between steps, shutdown); and the attempts, with their windows' iterations.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from rollup.base.arrays import least_and_most, rising
from rollup.store.attempts import Attempt

from .intervals import Stretches
from .windows import Windows, attempt_windows, latest_windows, select_windows, torn_windows

if TYPE_CHECKING:
    from rollup.store.spanset import SpanSet


@dataclass(frozen=True)
class ReportFrames:
    """What a report charges: its rows' windows (the latest attempt's, in the iterations selected), the superseded
    windows among those iterations (rework) and the stretches outside every window; and the attempts, with their
    windows' iterations filled in (`with_windows`); and the iterations of every latest window, selected or not
    (`held`)."""

    windows: Windows
    lost: Windows
    outside: Stretches
    attempts: list[Attempt]
    held: array


def report_frames(spans: SpanSet, iterations: tuple[int, int] | None) -> ReportFrames:
    """The frames of the report over `spans`: the windows of the iterations in the inclusive range `iterations`
    (all when None), superseded ones included; outside and the attempts stay the whole run's. Every attempt's
    windows are only held while they are sorted out here."""
    attempts = spans.attempts()
    every = attempt_windows(spans, [a.run_id for a in attempts])
    return frames_of(attempts, SortedWindows.of(every, torn_windows(spans, attempts, every)), iterations)


@dataclass(frozen=True)
class SortedWindows:
    """Every attempt's windows sorted out (`latest_windows`): the rows' (`latest`), the superseded ones, and each
    attempt's, by run id."""

    latest: Windows
    superseded: Windows
    by_attempt: dict[str, Windows]

    @classmethod
    def of(cls, every: Windows, torn: Windows | None = None) -> SortedWindows:
        """`every` attempt's windows sorted out, with the `torn` ones (`windows.torn_windows`) superseded."""
        latest, superseded = latest_windows(every)
        if torn is None or not len(torn):
            return cls(latest, superseded, every.by_attempt())
        return cls(latest, superseded.concat(torn), every.concat(torn).by_attempt())


def frames_of(attempts: list[Attempt], windows: SortedWindows, iterations: tuple[int, int] | None) -> ReportFrames:
    """The report's frames (`report_frames`) of the `attempts` and their `windows`."""
    return ReportFrames(
        select_windows(windows.latest, iterations),
        select_windows(windows.superseded, iterations),
        outside_attempts(attempts, windows.by_attempt),
        with_windows(attempts, windows.by_attempt, windows.superseded),
        windows.latest.iterations,
    )


def with_windows(attempts: list[Attempt], by_attempt: dict[str, Windows], superseded: Windows) -> list[Attempt]:
    """The attempts with their first and last iteration and their superseded iterations filled in."""
    lost: dict[str, list[int]] = {}
    for window in superseded:
        lost.setdefault(window.run_id, []).append(window.iteration)
    out = []
    for attempt in attempts:
        held = by_attempt.get(attempt.run_id)
        first, last = least_and_most(held.iterations if held is not None else array("q"))
        out.append(
            replace(
                attempt,
                first_iteration=first,
                last_iteration=last,
                superseded=tuple(sorted(lost.get(attempt.run_id, []))),
            )
        )
    return out


def outside_stretches(extent: tuple[int, int] | None, windows: Windows) -> Stretches:
    """The parts of `extent` covered by no window, sorted and disjoint: with the windows in start order, the
    reach before each window is the latest end so far (a running maximum, on Arrow columns), and a window starting
    past it leaves a gap (cut at the extent's end); the last reach short of the extent's end leaves the tail."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from rollup.base.arrays import int64_array, int64_column

    outside = Stretches(array("q"), array("q"))
    if extent is None:
        return outside
    cursor, run_end = extent
    starts, ends = windows.stretches.starts, windows.stretches.ends
    if not rising(starts, strictly=False):  # one attempt's are in order, mostly
        order = sorted(range(len(windows)), key=starts.__getitem__)
        starts, ends = array("q", (starts[i] for i in order)), array("q", (ends[i] for i in order))
    reach = pc.cumulative_max(pa.concat_arrays([pa.array([cursor], pa.int64()), int64_array(ends)]))
    before, last = reach.slice(0, len(starts)), reach[len(starts)].as_py()
    cut = pc.min_element_wise(int64_array(starts), pa.scalar(run_end, pa.int64()))
    gaps = pa.table({"start": before, "end": cut}).filter(pc.greater(cut, before))
    outside = Stretches(int64_column(gaps, "start"), int64_column(gaps, "end"))
    if last < run_end:
        outside.starts.append(last)
        outside.ends.append(run_end)
    return outside


def outside_attempts(attempts: Sequence[Attempt], by_attempt: dict[str, Windows]) -> Stretches:
    """Each attempt's stretches outside its windows (`outside_stretches`; `by_attempt`: the windows by run id),
    attempt after attempt."""
    none = Windows(array("q"), Stretches(array("q"), array("q")), array("q"), ())
    outside = Stretches(array("q"), array("q"))
    for attempt in attempts:
        found = outside_stretches(attempt.extent, by_attempt.get(attempt.run_id, none))
        outside.starts.extend(found.starts)
        outside.ends.extend(found.ends)
    return outside
