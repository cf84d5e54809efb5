"""What a question of the watcher's report answered last time, kept as columns and patched where it changed
(`goodput watch`).

A refresh asks the report's questions again (each window's charge, each stretch outside the windows, each window's
kind and span-seconds) over frames that are mostly last time's: the windows of the run so far, and a few new ones at
the end. A `Journal` holds the answers by key and notes which keys changed (new spans landed in their frames) since
each reader last read them; a `Held` keeps one question's keys and answer columns, and asked again takes the frames
that begin as last time's as they were but for the keys the journal names, so a refresh looks at what changed, not
at every window: a long run holds tens of thousands, and a loop over them in Python costs milliseconds each time.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Callable, Iterable, Sequence
from itertools import compress
from typing import Any

Key = tuple[Any, ...]
_REQUIRED = object()


class Journal:
    """Answers by key (`by_key`), and for each reader (`reader()`) the keys changed or dropped since it last read
    them. `generation` counts the times every answer was dropped at once (`cleared`): a reader then reads all anew."""

    def __init__(self) -> None:
        self.by_key: dict[Key, Any] = {}
        self.generation = 0
        self._readers: list[set[Key]] = []

    def __getitem__(self, key: Key) -> Any:
        return self.by_key[key]

    def __setitem__(self, key: Key, value: Any) -> None:
        self.by_key[key] = value

    def reader(self) -> set[Key]:
        """A set the journal fills with the keys that change from now on; the reader empties it as it reads."""
        changed: set[Key] = set()
        self._readers.append(changed)
        return changed

    def changed(self, keys: Iterable[Key]) -> None:
        """Note that the answers of `keys` changed (or were dropped)."""
        keys = list(keys)
        if keys:
            for changed in self._readers:
                changed.update(keys)

    def cleared(self) -> None:
        """Drop every answer."""
        self.by_key.clear()
        self.generation += 1
        for changed in self._readers:
            changed.clear()

    def missing(self, keys: Sequence[Key]) -> list[int]:
        """The positions of the keys without an answer, looked up in C (`map`, `compress`)."""
        return list(compress(range(len(keys)), map(operator.not_, map(self.by_key.__contains__, keys))))


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
    """One question's keys and answers as columns of 64-bit integers (`width` of them), from the last time it was
    asked, over `journal`'s answers. Each asking is two steps: `plan` takes the frames asked about and says which
    keys need an answer worked out; once the journal has them, `patched` gives the columns."""

    def __init__(self, journal: Journal, width: int) -> None:
        self.journal = journal
        self._changed = journal.reader()
        self._frames: tuple[array, ...] = ()
        self._context: object = None
        self._generation = -1
        self.keys: list[Key] = []
        self.columns = [array("q") for _ in range(width)]
        self._at: dict[Key, int] = {}  # each key's position (while keys are unique: `_unique`)
        self._unique = True
        self._same = 0  # rows alike last time's in the current asking
        self._stale: list[int] = []  # of those, the ones whose answer changed

    def plan(self, frames: Sequence[array], context: object, make_keys: Callable[[int], list[Key]]) -> list[Key]:
        """Take this asking's frames: columns of 64-bit integers (alike rows make alike keys, given alike
        `context`, whatever else the keys hold). The keys are last time's for the rows the frames begin with as
        last time's did, `make_keys(start)` (the keys of the rows from `start` on) for the rest. Returns the keys
        whose answer the journal lacks, for the caller to work out before `patched`."""
        journal = self.journal
        same = 0
        if context == self._context and self._generation == journal.generation:
            same = common_prefix(self._frames, frames)
        at = self._at
        if same == 0:
            at.clear()
            self._unique = True
        else:
            for key in self.keys[same:]:
                at.pop(key, None)
        keys = self.keys[:same] + make_keys(same)
        for position in range(same, len(keys)):
            key = keys[position]
            if key in at:
                self._unique = False
            at[key] = position
        changed = self._changed
        if not changed or not same:
            stale: list[int] = []
        elif self._unique:
            stale = sorted({p for p in map(at.get, changed) if p is not None and p < same})
        else:  # a key held twice: each of its rows
            stale = [p for p in range(same) if keys[p] in changed]
        changed.clear()
        self._frames = tuple(column[:] for column in frames)
        self._context, self._generation, self.keys, self._same, self._stale = (
            context, journal.generation, keys, same, stale
        )  # fmt: skip
        by_key = journal.by_key
        wanted = [keys[p] for p in stale if keys[p] not in by_key]
        wanted.extend(keys[same + i] for i in journal.missing(keys[same:]))
        return wanted

    def patched(self, row: Callable[[Any], Sequence[int]], default: Any = _REQUIRED) -> list[array]:
        """The columns of the keys `plan` took, `row(answer)` of each key's answer (`default` where the journal
        has none, when given): last time's rows where the frames began alike, but for those whose answer
        changed. New arrays each time: the caller may hold the last ones."""
        by_key = self.journal.by_key
        answer: Callable[[Key], Any] = (
            by_key.__getitem__ if default is _REQUIRED else lambda key: by_key.get(key, default)
        )  # fmt: skip
        same, keys = self._same, self.keys
        columns = [column[:same] for column in self.columns]
        rows = [row(answer(key)) for key in keys[same:]]
        for j, column in enumerate(columns):
            column.extend(values[j] for values in rows)
        for position in self._stale:
            values = row(answer(keys[position]))
            for j, column in enumerate(columns):
                column[position] = values[j]
        self.columns = columns
        return columns
