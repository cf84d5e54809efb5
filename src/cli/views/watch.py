"""What `goodput watch` shows of each refresh (`rollup.watch.LiveState`, SPEC section 13): the screen it redraws, or
the JSON Lines line it prints instead (`--format jsonl`).

The screen fits the terminal exactly, top to bottom: what was read and how fresh it is (and what the watcher still
waits for), goodput now (the total, the last 1, 5 and 15 minutes of trace time, the GPUs'), the check's counts, the
newest iterations' rows with the total, and the newest notes. The rows are the report's figures (`rollup.FIGURES`),
each written as the report's table writes it. Too narrow for every column, the table loses columns from the right
(unaccounted, then the buckets) and never cuts a figure; too short for every row, it loses the oldest rows first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len, set_cell_size
from rich.console import Group, RenderableType
from rich.text import Text

from rollup.accounting import Figures
from rollup.report import FIGURES

from .narrow import fold
from .notes import count
from .report import cell
from .tables import cell_text, table_text

if TYPE_CHECKING:
    from rollup.accounting import GpuFigures
    from rollup.watch import LiveState

NOTES_SHOWN = 3  # the newest notes; the older ones were on the screen at earlier refreshes
# A run that wrote no span for longer than this, and than this many refresh intervals, looks stopped: exporters
# flush every few seconds, so a minute of silence is more than a slow step. Until then, a span whose parent was not
# read is most likely under a span still open (the job's, its step's): the check's `orphan-span` counts wait for it.
STOPPED_AFTER_NS = 60 * 10**9
STOPPED_INTERVALS = 3

# The table's columns are the report's wall-clock figures; span-seconds say nothing about the run's progress.
_SHOWN = tuple(figure for figure in FIGURES if figure.header is not None and not figure.spans)
_HEADERS = ("iter", *(figure.header or "" for figure in _SHOWN))
# Where the table is too wide: the parts of the wall clock go from the right, the iteration, wall and goodput stay.
_DROP_ORDER = tuple(1 + _SHOWN.index(figure) for figure in reversed(_SHOWN) if figure.stacked)
_GOODPUT = next(figure for figure in FIGURES if figure.key == "goodput")
# A boxed table's lines besides its rows: the top, the header and its rule, the total, the bottom.
_TABLE_FRAME = 5


@dataclass(frozen=True)
class WatchStatus:
    """What the watcher knows at a refresh besides the refresh itself (`LiveState`).

    `now_ns`: the watcher's own clock at the refresh (`time.time_ns()`), so the screen can say how long ago the
    newest span ended. `errors` and `warnings`: `goodput check`'s counts as they stand (None: not known yet);
    `orphans`: how many of those warnings are `orphan-span` ones, each a span whose parent was not read. `notes`:
    one-line notes so far, oldest first (a file skipped, a corrupt record).
    """

    now_ns: int
    interval_s: float
    errors: int | None
    warnings: int | None
    notes: tuple[str, ...] = ()
    orphans: int = 0


def watch_screen(state: LiveState, status: WatchStatus, width: int, height: int) -> RenderableType:
    """One refresh as the screen shows it, in at most `height` lines of at most `width` cells: the header, goodput
    now and the check's counts first (folded to the width), the newest notes last (each cut to the width), and
    between them the table of as many of the newest rows as the lines left hold. What does not fit the height goes
    from the bottom."""
    top = _packed(_header(state, status), width) + _packed(_goodput(state), width) + _check(state, status, width)
    notes = [_cut(" ".join(note.splitlines()), width) for note in status.notes[-NOTES_SHOWN:]]
    lines = top + _table(state, width, height - len(top) - len(notes)) + notes
    return Group(*(Text(line, no_wrap=True, overflow="ellipsis") for line in lines[: max(height, 0)]))


def watch_json_line(state: LiveState) -> str:
    """One refresh as one JSON line (no newline in it, nor at its end): SPEC 13's object (`rollup.watch.watch_json`,
    which keeps its keys in SPEC's order)."""
    from rollup.watch import watch_json

    return json.dumps(watch_json(state))


def _header(state: LiveState, status: WatchStatus) -> list[str]:
    """`1234 spans in 5 files`, the newest complete iteration, and how long ago the newest span ended (or that the
    run looks stopped); what the watcher waits for, while it does (`LiveState.waits`)."""
    if state.newest_end_ns is None:
        return list(state.waits) or [f"waiting for the first span in {count(state.files, 'file')}"]
    newest = state.newest_iteration
    segments = [
        f"{count(state.spans, 'span')} in {count(state.files, 'file')}",
        "no complete iteration yet" if newest is None else f"newest iteration {newest}",
        _freshness(status.now_ns - state.newest_end_ns, status.interval_s),
    ]
    return segments + list(state.waits)


def looks_stopped(state: LiveState, status: WatchStatus) -> bool:
    """Whether the run wrote no span for longer than max(STOPPED_AFTER_NS, STOPPED_INTERVALS intervals) of the
    watcher's clock; not before its first span."""
    if state.newest_end_ns is None:
        return False
    return _silent(status.now_ns - state.newest_end_ns, status.interval_s)


def _silent(ago_ns: int, interval_s: float) -> bool:
    return ago_ns > max(STOPPED_AFTER_NS, STOPPED_INTERVALS * interval_s * 1e9)


def _freshness(ago_ns: int, interval_s: float) -> str:
    """`newest span 3 s ago`; once the run looks stopped (`looks_stopped`), the question whether the job has."""
    if _silent(ago_ns, interval_s):
        return f"no new span for {_duration(ago_ns)}: has the job stopped?"
    return f"newest span {_duration(ago_ns)} ago"


def _duration(ns: int) -> str:
    """`42 s`, `5 min`, `3 h`, whole units; a span that ends ahead of the watcher's clock (another machine's) ended
    `0 s` ago."""
    whole_s = max(ns, 0) // 10**9
    if whole_s < 100:
        return f"{whole_s} s"
    if whole_s < 100 * 60:
        return f"{whole_s // 60} min"
    return f"{whole_s // 3600} h"


def _goodput(state: LiveState) -> list[str]:
    """`goodput 63.6%`, `last 1m 60.2%, 5m 61.0%, 15m -` (trace time; `-` where a stretch has no figures) and, when
    the run holds GPUs, `GPU goodput 26.0% (4 GPUs)`."""
    recent = [
        f"{label} {_share(None if stretch is None else stretch.figures)}" for label, stretch in state.recent.items()
    ]
    segments = [f"goodput {_share(state.total)}", "last " + ", ".join(recent)]
    gpus = state.gpus
    if gpus is not None:
        held = gpus.count
        segments.append(f"GPU goodput {_share(_gpu_figures(gpus.total))} ({cell_text(held)} GPU{'s' * (held != 1)})")
    return segments


def _check(state: LiveState, status: WatchStatus, width: int) -> list[str]:
    """`check: 0 errors, 2 warnings`, as far as the counts are known. While the run writes (`looks_stopped`), the
    `orphan-span` warnings are not counted but said apart, `14 spans wait for a parent` (SPEC section 13): a parent
    still open is written when it ends, and the job span ends last."""
    warnings, waiting = status.warnings, 0
    if warnings is not None and not looks_stopped(state, status):
        warnings, waiting = warnings - status.orphans, status.orphans
    known = [count(n, noun) for n, noun in ((status.errors, "error"), (warnings, "warning")) if n is not None]
    if not known:
        return []
    said = [f"check: {', '.join(known)}"]
    if waiting:
        said.append(f"{count(waiting, 'span')} wait{'s' * (waiting == 1)} for a parent")
    return _packed(said, width)


def _share(figures: Figures | None) -> str:
    """The goodput of a stretch's figures (a row, the total, a recent stretch, GPU-seconds) as the report writes it;
    `-` where it is not known (no figures, no wall clock)."""
    if figures is None:
        return "-"
    return cell(_GOODPUT, figures) or "-"


def _gpu_figures(gpu: GpuFigures) -> Figures:
    """GPU-seconds as the report's `Figures`, the GPU-seconds held in place of the wall clock (whole nanoseconds, as
    the report writes them), so that `report.cell` writes a GPU goodput as the report does."""
    held_ns, bucket_ns, unaccounted_ns = gpu.rounded()
    return Figures(held_ns, bucket_ns, unaccounted_ns)


def _table(state: LiveState, width: int, room: int) -> list[str]:
    """The newest rows that fit in `room` lines (newest last) and the total, as the report's boxed table; the
    columns `_DROP_ORDER` names go one by one until the table fits `width`. Nothing when there is no row yet, or
    when not even the total fits."""
    rows = state.rows
    if not rows or room < _TABLE_FRAME:
        return []
    fitting = room - _TABLE_FRAME - 1  # each row takes a line, and the first one a rule above the total too
    shown = rows[max(len(rows) - fitting, 0) :] if fitting > 0 else ()
    labelled = [(str(row.iteration), row.figures) for row in shown] + [("total", state.total)]
    cells = [[label, *(cell(figure, figures) for figure in _SHOWN)] for label, figures in labelled]
    kept = list(range(len(_HEADERS)))
    dropping = list(_DROP_ORDER)
    while _table_width(cells, kept) > width:
        if not dropping:
            return []
        kept.remove(dropping.pop(0))
    text = table_text(
        [_HEADERS[i] for i in kept],
        [[row[i] for i in kept] for row in cells],
        width=width,
        right=[True] * len(kept),
        section_at=len(shown) or None,
    )
    return text.splitlines()


def _table_width(cells: Sequence[Sequence[str]], kept: Sequence[int]) -> int:
    """The width of the boxed table of `kept` columns, as `tables.table_text` draws it when it fits."""
    widths = [max(cell_len(_HEADERS[i]), *(cell_len(row[i]) for row in cells)) for i in kept]
    return sum(widths) + 3 * len(widths) + 1


def _packed(segments: Sequence[str], width: int) -> list[str]:
    """The segments joined by `; ` in lines of at most `width` cells, a segment moving whole to the next line
    rather than breaking; one wider than a line folds between words (`narrow.fold`)."""
    lines: list[str] = []
    line = ""
    for segment in segments:
        joined = f"{line}; {segment}" if line else segment
        if cell_len(joined) <= width:
            line = joined
            continue
        if line:
            lines.append(line)
        *full, line = fold(segment, width)
        lines += full
    return lines + ([line] if line else [])


def _cut(text: str, width: int) -> str:
    """`text` in `width` cells, ending in `…` where it was cut."""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, width - 1) + "…"
