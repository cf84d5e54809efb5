"""The last stretch of a run (SPEC section 13): `--last DURATION` keeps `[T - DURATION, T]`, `T` the latest span end
read, so the answer depends on the traces alone, not on when the command runs. The stretch starts no earlier than
the run's first attempt's extent: a run 30 s old has a last minute of 30 s, since the time before the job is no
one's unaccounted time (a watcher's rolling stretches are cut the same way: `stretch_before`).

The report's frames are clipped to the stretch (a window partly inside keeps its inside part), and the stretch as a
whole is charged as a window is (`recent`): every instant of it, in a window or not, the interval goodput of
Google's goodput library.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rollup.accounting.intervals import Stretches
from rollup.accounting.rows import Figures, seconds, share
from rollup.base.errors import OptionError
from rollup.store.attempts import Attempt
from rollup.store.spanset import SpanSet

if TYPE_CHECKING:
    from rollup.accounting.frames import ReportFrames
    from rollup.accounting.windows import Windows

_UNITS_NS = {"ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9, "d": 86_400 * 10**9}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|[smhd])")


def parse_duration(text: str, option: str = "--last", *, zero: bool = False) -> int:
    """`20ms`, `90s`, `10m`, `2h`, `1d`, `1.5h` as nanoseconds; OptionError naming `option` otherwise (a bare number
    included: a unit is never guessed). Zero is refused unless `zero`."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        raise OptionError(option, f"expected a duration such as 20ms, 90s, 10m or 2h, got {text!r}")
    nanoseconds = round(float(found.group(1)) * _UNITS_NS[found.group(2)])
    if nanoseconds < 0 or (nanoseconds == 0 and not zero):
        raise OptionError(option, f"the duration must be more than zero, got {text!r}")
    return nanoseconds


def last_stretch(spans: SpanSet, duration_ns: int) -> tuple[int, int] | None:
    """`[T - duration, T]` of `spans`, T their latest span end (`SpanSet.newest_end_ns`), starting no earlier than
    their attempts' extents (`stretch_before`); None when they hold no span."""
    newest = spans.newest_end_ns()
    return None if newest is None else stretch_before(newest, duration_ns, spans.attempts())


def stretch_before(newest_ns: int, duration_ns: int, attempts: Sequence[Attempt]) -> tuple[int, int]:
    """`[T - duration, T]`, T `newest_ns`, starting no earlier than the earliest start of the attempts' extents (the
    first attempt's): before it the job had not begun, and charging that time as unaccounted would show a run
    younger than the stretch at a fraction of its goodput (SPEC section 13)."""
    start = newest_ns - duration_ns
    begun = min((attempt.start_ns for attempt in attempts), default=start)
    return min(max(start, begun), newest_ns), newest_ns


def clip_windows(windows: Windows, stretch: tuple[int, int]) -> Windows:
    """The windows that share time with `stretch`, each cut to its inside part; a zero-length window inside it is
    kept as it is."""
    low, high = stretch
    starts, ends = windows.stretches.starts, windows.stretches.ends
    kept = windows.take(i for i in range(len(windows)) if _inside(starts[i], ends[i], low, high))
    return type(windows)(kept.iterations, _clipped(kept.stretches, low, high), kept.attempts, kept.run_ids)


def clip_stretches(stretches: Stretches, stretch: tuple[int, int]) -> Stretches:
    """`stretches` cut to `stretch`, those left empty dropped."""
    low, high = stretch
    kept = [i for i in range(len(stretches)) if _inside(stretches.starts[i], stretches.ends[i], low, high)]
    return _clipped(stretches.take(kept), low, high)


def clip_pairs(pairs: list[tuple[int, int]], stretch: tuple[int, int]) -> list[tuple[int, int]]:
    """(start, end) pairs cut to `stretch`, those left empty dropped."""
    low, high = stretch
    return [(max(s, low), min(e, high)) for s, e in pairs if _inside(s, e, low, high)]


def clip_attempt(attempt: Attempt, stretch: tuple[int, int]) -> Attempt:
    """An attempt whose extent is cut to `stretch` (an empty one where they share no time)."""
    low, high = stretch
    start, end = max(attempt.start_ns, low), min(attempt.end_ns, high)
    return replace(attempt, start_ns=start, end_ns=max(start, end))


def clip_frames(frames: ReportFrames, stretch: tuple[int, int]) -> ReportFrames:
    """The report's frames cut to `stretch`: its rows' windows, the superseded ones and the stretches outside
    every window. The attempts stay as they were (what ran in them), `held` too."""
    return replace(
        frames,
        windows=clip_windows(frames.windows, stretch),
        lost=clip_windows(frames.lost, stretch),
        outside=clip_stretches(frames.outside, stretch),
    )


def _inside(start: int, end: int, low: int, high: int) -> bool:
    return min(end, high) > max(start, low) or (start == end and low <= start <= high)


def _clipped(stretches: Stretches, low: int, high: int) -> Stretches:
    return Stretches(
        array("q", (max(s, low) for s in stretches.starts)), array("q", (min(e, high) for e in stretches.ends))
    )


@dataclass(frozen=True)
class Recent:
    """A stretch of the run charged whole (`recent` in SPEC section 13): its bounds and its wall clock by bucket."""

    start_ns: int
    end_ns: int
    figures: Figures

    def json(self) -> dict[str, object]:
        """SPEC section 13's `recent` object."""
        f = self.figures
        return {
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "wall_s": seconds(f.wall_ns),
            **{f"{bucket}_s": seconds(ns) for bucket, ns in f.bucket_ns.items()},
            "unaccounted_s": seconds(f.unaccounted_ns),
            "goodput": share(f.bucket_ns["productive"], f.wall_ns),
        }


class LastStretch:
    """A store seen through `--last` (`check`, `spans`, `timeline`): its spans that share time with the last
    stretch of `duration_ns` up to their latest end, each with the lineage the whole run gave it (a worker's span
    keeps the iteration of the step that dispatched it, however long before that step began). Everything else is
    the store's."""

    def __init__(self, store: Any, duration_ns: int) -> None:
        self.store, self.duration_ns = store, duration_ns
        self._sets: dict[str | None, SpanSet] = {}

    def spans(self, attempt: str | None = None) -> SpanSet:
        if attempt not in self._sets:
            whole = self.store.spans(attempt)
            stretch = last_stretch(whole, self.duration_ns)
            if stretch is None:
                self._sets[attempt] = whole
            else:
                name = f"last_stretch_{len(self._sets) + 1}"
                low, high = stretch
                whole.run(
                    f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {whole.lineage} "
                    f"WHERE start_ns <= {high} AND end_ns >= {low}"
                )
                self._sets[attempt] = SpanSet(whole.connection, name, name, run_id=whole.run_id)
        return self._sets[attempt]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)
