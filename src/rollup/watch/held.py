"""What a question of the watcher's report answered last time, a row per frame, kept and patched where it changed
(`goodput watch`).

A refresh asks the report's questions again (each window's charge, each stretch outside the windows, each window's
kind, GPU charge and span-seconds) over frames that are mostly last time's: the windows of the run so far, and a few
new ones at the end. A `Held` keeps one question's frames and its answers by position, as columns of 64-bit integers
(and a list where an answer is not integers). New spans make the answers of the frames they land in stale
(`forget`); asked again, the frames that begin as last time's keep their answers but the stale ones, and the
caller works out the rest (`plan`, then `fill`). Nothing is kept per frame but its row: a long run holds tens of
thousands of frames, for days.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

from rollup.base.arrays import int64_array, int64_column, rising

_NOTHING = object()


def common_prefix(old: Sequence[array], new: Sequence[array]) -> int:
    """How many leading rows two sets of columns (alike in number, each column's rows in step) have in common,
    compared in C: whole first (the usual case, last time's frames and a few more), else by halves."""
    if len(old) != len(new) or not old:
        return 0
    most = min(len(old[0]), len(new[0]))

    def alike(count: int) -> bool:
        return all(a[:count] == b[:count] for a, b in zip(old, new, strict=True))

    if alike(most):
        return most
    low, high = 0, most  # alike up to `low` rows, not up to `high`
    while high - low > 1:
        middle = (low + high) // 2
        if alike(middle):
            low = middle
        else:
            high = middle
    return low


class Held:
    """One question's answers, a row per frame: `width` columns of 64-bit integers, and with `values` a list of
    whatever else an answer is. Asking is two steps: `plan` takes the frames asked about and gives the positions
    whose answer is to be worked out; `fill` takes those answers and gives the columns."""

    def __init__(self, width: int, *, values: bool = False) -> None:
        self.columns = [array("q") for _ in range(width)]
        self.values: list[Any] | None = [] if values else None
        self._frames: tuple[array, ...] = ()
        self._context: object = _NOTHING
        self.starts, self.ends = array("q"), array("q")  # each frame's stretch
        self._reach: array | None = None  # the latest end up to each frame, when the starts never fall (else empty)
        self._stale: set[int] = set()
        self._same = 0  # the rows of this asking alike last time's
        self._positions: list[int] = []  # the rows this asking works out

    def __len__(self) -> int:
        return len(self.starts)

    def forget(self, stretches: Sequence[tuple[int, int]]) -> None:
        """Make stale the answers of the frames that one of `stretches` (merged: sorted, apart) shares an instant
        with, ends included (new bucketed spans there: `walk_sql.Touched`)."""
        for start, end in stretches:
            self._stale.update(p for p in self._candidates(start, end) if self.ends[p] >= start)

    def forget_all(self) -> None:
        """Make every answer stale (every span was walked again)."""
        self._context = _NOTHING

    def overlapping(self, start: int, end: int) -> list[int]:
        """The frames that `[start, end)` overlaps for some time."""
        return [p for p in self._candidates(start, end) if self.ends[p] > start and self.starts[p] < end]

    def _candidates(self, start: int, end: int) -> range | list[int]:
        """Positions among which are all the frames meeting `[start, end]`: by halves when the starts never fall."""
        if self._reach is None:  # worked out when first needed: some questions are never asked to forget
            self._reach = _reach(self.starts, self.ends)
        if self._reach or not self.starts:
            return range(bisect.bisect_left(self._reach, start), bisect.bisect_right(self.starts, end))
        return [p for p in range(len(self.starts)) if self.starts[p] <= end]

    def plan(
        self, frames: Sequence[array], context: object, starts: array, ends: array, stale: Iterable[int] = ()
    ) -> list[int]:
        """Take this asking's frames: columns of 64-bit integers, alike rows being alike frames given alike
        `context` (whatever else tells them apart), and each frame's stretch. Returns the positions whose answer is
        to be worked out: of the rows the frames begin with as last time's, those made stale since (or named in
        `stale`); all the rest."""
        same = common_prefix(self._frames, frames) if context == self._context else 0
        self._stale.update(stale)
        positions = sorted(p for p in self._stale if p < same)
        positions.extend(range(same, len(starts)))
        self._frames, self._context = tuple(column[:] for column in frames), context
        self.starts, self.ends = starts[:], ends[:]
        self._reach = None
        self._stale.clear()
        self._same, self._positions = same, positions
        return positions

    def fill(self, rows: Sequence[Sequence[int]], values: Sequence[Any] = ()) -> list[array]:
        """The columns of this asking: last time's rows where the frames began alike, and the answers `rows` (and
        `values`) worked out for the positions `plan` gave, in that order. New arrays each time: the caller may hold
        the last ones."""
        same, positions, count = self._same, self._positions, len(self.starts)
        blank = array("q", bytes(8 * (count - same)))
        columns = [column[:same] + blank for column in self.columns]
        for j, column in enumerate(columns):
            for position, row in zip(positions, rows, strict=True):
                column[position] = row[j]
        if self.values is not None:
            held = self.values[:same] + [None] * (count - same)
            for position, value in zip(positions, values, strict=True):
                held[position] = value
            self.values = held
        self.columns = columns
        return columns


def _reach(starts: array, ends: array) -> array:
    """The running maximum of `ends` (the latest end of each frame and those before it), when `starts` never fall:
    the frames meeting a stretch then lie between two halvings. Empty otherwise."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(starts) < 2:
        return ends[:]
    if not rising(starts, strictly=False):
        return array("q")
    return int64_column(pa.table({"reach": pc.cumulative_max(int64_array(ends))}), "reach")
