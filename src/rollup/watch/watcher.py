"""A run watched while it is written (`goodput watch`, SPEC section 13): each refresh reads what the files gained, and
re-charges only the frames those spans touched.

The report is built as `report` builds it (`report.build_report`), on the watcher's spans (`watch.spans.LiveSpans`)
and with a runner and sweeps of its own that keep every frame's answer by position (a window's charge, a superseded
window's or an outside stretch's charge, a window's kind, its GPU charge: `kept`, `held`): one stretch's
answer depends only on the bucketed spans active in it, so after a refresh only the frames a new bucketed span
landed in, and the new ones, are asked again, of a slice of the newest spans (`newest`); a kind is kept with its
set of names and takes a landing name's hash in place. A window's span-seconds are sums the watcher keeps per
iteration. What is asked of the run as a whole (attempts, windows, holdings, the step rules) reads the summary:
every span folded to a few rows, the step spans apart; the windows are found again only when a step span arrives.
So a refresh costs what the new spans touched, the newest windows mostly, plus the rolling stretches of `recent`,
plus a few passes in C over every window's row (copies, sums, medians).
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from rollup.accounting.rows import Figures
from rollup.base.connection import (
    ENV_MEMORY_LIMIT,
    ONE_THREAD_SPANS,
    SpillDirectory,
    connect,
    memory_limit_bytes,
    out_of_memory,
)
from rollup.base.schema import ACCOUNTING_SCHEMA, SPAN_SCHEMA
from rollup.read.tail import Tailer
from rollup.report.build import ReportOptions, build_report
from rollup.report.recent import Recent, stretch_before
from rollup.store.spanset import SpanSet

from .kept import KeptRunner, KeptSweeps, charged
from .spans import LiveSpans
from .state import RECENT, LiveState
from .waits import Waits, is_wait_note

if TYPE_CHECKING:
    from rollup.checks.check import Check

# What a watcher reads of each span: what the accounting reads, and the span's file (to drop it when replaced).
_READ_SCHEMA = pa.schema([*ACCOUNTING_SCHEMA, SPAN_SCHEMA.field("source_file")])
_SLICES = itertools.count(1)
# The most bytes of records a refresh takes in at a time: a large run already written is read a part at a time,
# each walked and stored before the next is read, so what is held in memory follows this, not the run.
POLL_BYTES = 32 * 10**6
# What a watcher's DuckDB may hold in memory unless GOODPUT_MEMORY_LIMIT says otherwise: a watch stays open for days
# beside the job, so it holds a fixed amount, not a share of the machine; the rest of the run stays in its database
# file on disk (bench/watch.py: its peak is the cached report's plus about this).
WATCH_LIMIT_BYTES = 512 * 10**6


class LiveRun:
    """`paths` followed as they grow; `refresh()` reads what they gained and gives the report as it stands."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]], options: ReportOptions | None = None) -> None:
        if options is not None and (options.by is not None or options.attempt is not None):
            raise ValueError("a watcher reports every attempt, a row per window")
        self.options = options or ReportOptions()
        self.tailer = Tailer(paths, _READ_SCHEMA, poll_bytes=POLL_BYTES)
        self.waits = Waits(paths)
        self._folder = tempfile.TemporaryDirectory(prefix="goodput-watch-")
        self._spill = SpillDirectory(Path(self._folder.name) / "spill")
        # A database file of its own: what the run holds beyond the memory limit stays on disk, not in memory.
        self.connection = connect(
            self._spill, limit_bytes=watch_limit_bytes(), database=Path(self._folder.name) / "live.duckdb"
        )
        self.connection.execute("SET threads = 1")  # until the run outgrows ONE_THREAD_SPANS (`store`)
        self._one_thread = True
        self.live = LiveSpans(self.connection)
        self.runner = KeptRunner(self)
        self.sweeps = KeptSweeps(self)

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
            notes.extend(note for note in batch.notes if not is_wait_note(note))  # said while they hold: `waits`
            if batch.spans.num_rows or batch.reset:
                touched = self.live.add(batch.spans, batch.reset)
                self.runner.forget(touched)
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
        if newest is not None:  # each stretch from the job's start at the earliest (`stretch_before`)
            stretches = [stretch_before(newest, length, report.attempts) for length in RECENT.values()]
            with self.sliced(stretches) as spans:
                charges = charged(spans, stretches, self.options.order)
            for (label, _), stretch, charge in zip(RECENT.items(), stretches, charges, strict=True):
                recent[label] = Recent(*stretch, Figures.from_ns(charge))
        return LiveState.of(report, recent, self.live.count, batch.files, newest, notes, waits=self.waits.now())

    def check(self) -> Check:
        """`goodput check` of the spans read so far (the screen's counts): every rule over every span's own columns
        (the summary the report reads folds them)."""
        from rollup.checks.check import CheckOptions, check_findings

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
