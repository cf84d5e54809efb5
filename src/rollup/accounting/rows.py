"""The report's rows: `Figures` (a stretch of time's nanoseconds by bucket), `IterationRow` (a window's row), and
`IterationRows`, the rows of a report held as columns.

A report of a long run has a row per iteration (hundreds of thousands at tens of millions of spans; more with
`--by process`). As objects, a row is about a kilobyte (two dicts, a dozen integer objects); as columns of 64-bit
integers it is about 120 bytes. `IterationRows` keeps the columns and makes an `IterationRow` when one is asked for,
so the memory a report holds grows with its iterations by that much alone, and the JSON is written from rows made and
let go one at a time (`report_json(..., lazy=True)`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from instrument.groups import BUCKETS

if TYPE_CHECKING:
    from .attribution import Charge, ChargeColumns
    from .windows import Windows

NS_PER_S = 1_000_000_000


def seconds(ns: int) -> float:
    """Integer nanoseconds as seconds, exact to the nanosecond: one correctly rounded division of two integers gives
    the float nearest `ns` / 10^9, whose shortest form has at most nine decimals (1.137898161, never the
    1.1378981609999999 of summed floats). Every figure is summed in integer nanoseconds and divided once, here."""
    return ns / NS_PER_S


def share(part_ns: int, whole_ns: int) -> float | None:
    """`part_ns / whole_ns`; None where there is no wall clock to share (an empty range, a zero-length window)."""
    return part_ns / whole_ns if whole_ns > 0 else None


def zero_buckets() -> dict[str, int]:
    return dict.fromkeys(BUCKETS, 0)


@dataclass(frozen=True, slots=True)
class NameShare:
    """One name's (or group's) part of one bucket in one window: wall-clock and span-seconds nanoseconds."""

    name: str
    bucket: str
    wall_ns: int
    span_ns: int

    @property
    def wall_s(self) -> float:
        return self.wall_ns / NS_PER_S

    @property
    def span_s(self) -> float:
        return self.span_ns / NS_PER_S


@dataclass(frozen=True)
class NameColumns:
    """Every window's shares by name (`breakdown.shares_by_name`, sorted alike within a window), as columns sorted by
    window: per share its window's position, its name (a position in `keys`), its bucket (a position in BUCKETS), its
    wall and span-seconds nanoseconds (`IterationRows.set_name_columns` holds them so)."""

    positions: array
    keys: list[str]
    key_ids: array
    buckets: array
    wall_ns: array
    span_ns: array


@dataclass(slots=True)
class Figures:
    """Wall-clock nanoseconds of one stretch of time by bucket, plus the naive span-seconds when they apply.

    Held as integer nanoseconds so sums are exact; the seconds (`wall_s`, `productive_s`, ...) derive from them.
    """

    wall_ns: int = 0
    bucket_ns: dict[str, int] = field(default_factory=zero_buckets)
    unaccounted_ns: int = 0
    span_ns: dict[str, int] = field(default_factory=zero_buckets)

    @property
    def wall_s(self) -> float:
        return seconds(self.wall_ns)

    @property
    def productive_s(self) -> float:
        return seconds(self.bucket_ns["productive"])

    @property
    def overhead_s(self) -> float:
        return seconds(self.bucket_ns["overhead"])

    @property
    def idle_s(self) -> float:
        return seconds(self.bucket_ns["idle"])

    @property
    def wasted_s(self) -> float:
        return seconds(self.bucket_ns["wasted"])

    @property
    def unaccounted_s(self) -> float:
        return seconds(self.unaccounted_ns)

    @property
    def span_seconds(self) -> dict[str, float]:
        return {b: seconds(self.span_ns[b]) for b in BUCKETS}

    @property
    def goodput(self) -> float | None:
        """productive / wall; None where there is no wall clock."""
        return share(self.bucket_ns["productive"], self.wall_ns)

    @classmethod
    def from_ns(cls, charge: Charge, span_ns: dict[str, int] | None = None) -> Figures:
        return cls(charge.wall_ns, charge.bucket_ns, charge.unaccounted_ns, span_ns or zero_buckets())


def sum_figures(parts: Sequence[Figures]) -> Figures:
    return Figures(
        sum(part.wall_ns for part in parts),
        {b: sum(part.bucket_ns[b] for part in parts) for b in BUCKETS},
        sum(part.unaccounted_ns for part in parts),
        {b: sum(part.span_ns[b] for part in parts) for b in BUCKETS},
    )


@dataclass(slots=True)
class IterationRow:
    """One row of the report: iteration `iteration`'s window and its figures (of one process, with `--by process`).

    `run_id` is the attempt whose window it is (the latest one with a window for `iteration`).
    """

    iteration: int
    start_ns: int
    end_ns: int
    figures: Figures
    process: str | None = None
    run_id: str = ""
    names: list[NameShare] | None = None  # with `--by name` / `--by group` (SPEC section 8)
    outliers: list[str] = field(default_factory=list)  # the figures that stand out (SPEC section 10)


# The integer columns of `IterationRows`, in order: the window, then its figures.
_COLUMNS = ("iteration", "start_ns", "end_ns", "wall_ns", *(f"{b}_ns" for b in BUCKETS), "unaccounted_ns",
            *(f"span_{b}_ns" for b in BUCKETS))  # fmt: skip
_NO_LABEL = -1


class IterationRows(Sequence[IterationRow]):
    """A report's rows as columns of integers (see the module's docstring); indexing or iterating makes
    `IterationRow`s, which are copies: set a row's names or outliers with `set_names` / `set_outliers`."""

    def __init__(self, rows: Iterable[IterationRow] = ()) -> None:
        self._columns = [array("q") for _ in _COLUMNS]
        self._labels: list[str] = []  # each run id and process once
        self._label_ids: dict[str, int] = {}
        self._run_ids = array("q")
        self._processes = array("q")
        self._names: dict[int, list[NameShare]] = {}
        self._has_names = False
        self._name_columns: tuple[array, ...] | None = None  # row starts, names, buckets, wall, span
        self._outliers: dict[int, list[str]] = {}
        for row in rows:
            self.append_row(row)

    @classmethod
    def of_windows(cls, windows: Windows, charged: ChargeColumns, span_ns: Sequence[array]) -> IterationRows:
        """The rows of `windows` (one each, no process) from their charges as columns (`FrameCharges.columns`)
        and span-seconds (a column per bucket, BUCKETS order), built column by column, no row made on the way. The
        rows hold the very columns given (the windows', the charges', the span-seconds'), not copies: a long run's
        windows are a few MB a column."""
        rows = cls()
        stretches = windows.stretches
        rows._columns = [windows.iterations, stretches.starts, stretches.ends, charged.walls,
                         *(charged.by_bucket[b] for b in BUCKETS), charged.unaccounted, *span_ns]  # fmt: skip
        if any(len(column) != len(windows) for column in rows._columns):
            raise ValueError("a column's length differs from the windows'")
        label_of = [rows._label(run_id) for run_id in windows.run_ids]
        from rollup.base.arrays import alike  # pyarrow: a report is being made

        attempts = windows.attempts
        if attempts and alike(attempts):  # one attempt's, mostly: no loop over the rows
            rows._run_ids = array("q", [label_of[attempts[0]]]) * len(attempts)
        else:
            rows._run_ids = array("q", (label_of[attempt] for attempt in attempts))
        rows._processes = array("q", [_NO_LABEL]) * len(windows)
        return rows

    def append(
        self,
        iteration: int,
        start_ns: int,
        end_ns: int,
        charge: Charge | Figures,
        span_ns: dict[str, int] | None = None,
        *,
        process: str | None = None,
        run_id: str = "",
    ) -> None:
        """A row from a window's charge and span-seconds, with no object of its own."""
        values = (iteration, start_ns, end_ns, charge.wall_ns, *(charge.bucket_ns[b] for b in BUCKETS),
                  charge.unaccounted_ns, *(span_ns[b] if span_ns else 0 for b in BUCKETS))  # fmt: skip
        for column, value in zip(self._columns, values, strict=True):
            column.append(value)
        self._run_ids.append(self._label(run_id))
        self._processes.append(_NO_LABEL if process is None else self._label(process))

    def append_row(self, row: IterationRow) -> None:
        index = len(self)
        figures = row.figures
        self.append(row.iteration, row.start_ns, row.end_ns, figures, figures.span_ns, process=row.process,
                    run_id=row.run_id)  # fmt: skip
        if row.names is not None:
            self.set_names(index, row.names)
        if row.outliers:
            self._outliers[index] = list(row.outliers)

    def _label(self, text: str) -> int:
        found = self._label_ids.get(text)
        if found is None:
            found = self._label_ids[text] = len(self._labels)
            self._labels.append(text)
        return found

    def __len__(self) -> int:
        return len(self._run_ids)

    @overload
    def __getitem__(self, index: int) -> IterationRow: ...
    @overload
    def __getitem__(self, index: slice) -> list[IterationRow]: ...
    def __getitem__(self, index: int | slice) -> IterationRow | list[IterationRow]:
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("row index out of range")
        return self._row(index)

    def __iter__(self) -> Iterator[IterationRow]:
        return (self._row(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __repr__(self) -> str:
        return f"IterationRows({len(self)} rows)"

    def _row(self, i: int) -> IterationRow:
        c = self._columns
        buckets = len(BUCKETS)
        figures = Figures(
            c[3][i],
            {b: c[4 + k][i] for k, b in enumerate(BUCKETS)},
            c[4 + buckets][i],
            {b: c[5 + buckets + k][i] for k, b in enumerate(BUCKETS)},
        )
        process = self._processes[i]
        return IterationRow(
            c[0][i], c[1][i], c[2][i], figures,
            None if process == _NO_LABEL else self._labels[process], self._labels[self._run_ids[i]],
            self._names_of(i) if self._has_names else None, list(self._outliers.get(i, ())),
        )  # fmt: skip

    def set_name_columns(self, shares: NameColumns) -> None:
        """Every row's breakdown by name at once, from columns sorted by row (`breakdown.name_share_columns`; a row
        with no share gets an empty one): held as columns, 40 bytes a share where a NameShare with its ints takes
        ~150; a row's NameShares are made when it is asked for."""
        starts = array("q", bytes(8 * (len(self) + 1)))
        for position in shares.positions:
            starts[position + 1] += 1
        for index in range(len(self)):
            starts[index + 1] += starts[index]
        label_of = [self._label(key) for key in shares.keys]
        names = array("q", (label_of[key] for key in shares.key_ids))
        self._name_columns = (starts, names, shares.buckets, shares.wall_ns, shares.span_ns)
        self._has_names = True

    def _names_of(self, index: int) -> list[NameShare] | None:
        held = self._names.get(index)
        if held is not None or self._name_columns is None:
            return held
        starts, names, buckets, wall, span = self._name_columns
        labels = self._labels
        return [
            NameShare(labels[names[at]], BUCKETS[buckets[at]], wall[at], span[at])
            for at in range(starts[index], starts[index + 1])
        ]

    def set_names(self, index: int, names: list[NameShare]) -> None:
        """Row `index`'s breakdown by name (`--by name` / `--by group` give every row one, maybe empty)."""
        self._has_names = True
        self._names[index] = names

    def set_outliers(self, index: int, flagged: list[str]) -> None:
        if flagged:
            self._outliers[index] = list(flagged)
        else:
            self._outliers.pop(index, None)

    def set_outliers_of(self, flagged: dict[int, list[str]]) -> None:
        """`set_outliers` of each row of `flagged` (by index), whose lists it keeps."""
        for index, found in flagged.items():
            if not found:
                self._outliers.pop(index, None)
        self._outliers.update((index, found) for index, found in flagged.items() if found)

    def column(self, name: str) -> array[int]:
        """One integer column, by its name in `Figures` terms: `wall_ns`, `productive_ns`, ..., `unaccounted_ns`,
        `span_productive_ns`, ..., or `iteration`, `start_ns`, `end_ns`."""
        return self._columns[_COLUMNS.index(name)]

    def positions_by_process(self) -> dict[str | None, array]:
        """Each process's rows, by position (in order), the processes in the order they first appear; one process's
        (not by process: every row's) without a loop over the rows."""
        from rollup.base.arrays import alike  # pyarrow: a report is being made

        labels = self._processes
        if labels and alike(labels):
            first = labels[0]
            return {None if first == _NO_LABEL else self._labels[first]: _positions(len(labels))}
        by_label: dict[int, array] = {}
        for index, label in enumerate(labels):
            by_label.setdefault(label, array("q")).append(index)
        return {None if label == _NO_LABEL else self._labels[label]: held for label, held in by_label.items()}

    def total(self) -> Figures:
        """The rows' figures summed (exact integers)."""
        return self._summed(range(len(self)))

    def totals_by_process(self) -> dict[str | None, Figures]:
        """Each process's rows' figures summed (exact integers), read from the columns: no row is made."""
        by_process: dict[int, array] = {}
        for index, process in enumerate(self._processes):
            by_process.setdefault(process, array("q")).append(index)
        return {
            None if process == _NO_LABEL else self._labels[process]: self._summed(indices)
            for process, indices in by_process.items()
        }

    def _summed(self, indices: Sequence[int]) -> Figures:
        buckets = len(BUCKETS)
        c = self._columns
        every = len(indices) == len(self)

        from rollup.base.arrays import column_sum  # pyarrow, imported when a report is summed

        def total(column: array) -> int:
            return column_sum(column) if every else sum(column[i] for i in indices)

        return Figures(
            total(c[3]),
            {b: total(c[4 + k]) for k, b in enumerate(BUCKETS)},
            total(c[4 + buckets]),
            {b: total(c[5 + buckets + k]) for k, b in enumerate(BUCKETS)},
        )

    def __reduce__(self) -> tuple[Any, ...]:  # pickled as its rows (a Ray task's part of a report)
        return (IterationRows, (list(self),))


_RANGE = array("q")  # 0, 1, 2, ...: `_positions` hands out copies of its start


def _positions(count: int) -> array:
    """array("q", range(count)), copied from one held (made once a length, not an int at a time)."""
    global _RANGE
    if len(_RANGE) < count:
        _RANGE = array("q", range(max(count, 2 * len(_RANGE))))
    return _RANGE[:count]
