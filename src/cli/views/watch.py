"""What `goodput watch` shows of each refresh (SPEC section 13): the screen it redraws, or the JSON Lines line it
prints instead (`--format jsonl`).

The screen fits the terminal exactly, top to bottom: what was read and how fresh it is, goodput now (the total, the
last 1, 5 and 15 minutes of trace time, the GPUs'), the check's counts, the newest iterations' rows with the total,
and the newest notes. The rows are the report's figures (`rollup.FIGURES`), each written as the report's table
writes it. Too narrow for every column, the table loses columns from the right (unaccounted, then the buckets) and
never cuts a figure; too short for every row, it loses the oldest rows first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.console import Group, RenderableType
from rich.text import Text

from instrument.groups import BUCKETS
from rollup.accounting import Figures
from rollup.report import FIGURES

from .narrow import fold
from .notes import count
from .report import cell
from .tables import cell_text, table_text

# SPEC section 13's keys of one refresh, in its order, and the stretches of trace time `recent` covers.
WATCH_KEYS = ("kind", "spans", "files", "iterations", "total", "recent", "gpus")
RECENT_KEYS = ("1m", "5m", "15m")

NOTES_SHOWN = 3  # the newest notes; the older ones were on the screen at earlier refreshes
# A run that wrote no span for longer than this, and than this many refresh intervals, looks stopped: exporters
# flush every few seconds, so a minute of silence is more than a slow step.
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
    """What the watcher knows at a refresh besides the accounting (`payload`).

    `newest_end_ns`: the latest span end read (trace time T; None: nothing read yet). `now_ns`: the watcher's own
    clock at the refresh (`time.time_ns()`), so the screen can say how long ago the newest span ended. `errors` and
    `warnings`: `goodput check`'s counts as they stand (None: not known yet). `notes`: one-line notes so far, oldest
    first (a file skipped, a folder waited for). `waiting_for`: the paths named that do not exist yet.
    """

    newest_end_ns: int | None
    now_ns: int
    interval_s: float
    errors: int | None
    warnings: int | None
    notes: tuple[str, ...] = ()
    waiting_for: tuple[str, ...] = ()


def watch_screen(payload: dict[str, Any], status: WatchStatus, width: int, height: int) -> RenderableType:
    """One refresh (SPEC 13's object, `payload`) as the screen shows it, in at most `height` lines of at most
    `width` cells: the header, goodput now and the check's counts first (folded to the width), the newest notes
    last (each cut to the width), and between them the table of as many of the newest rows as the lines left
    hold. What does not fit the height goes from the bottom."""
    top = _packed(_header(payload, status), width) + _packed(_goodput(payload), width) + _check(status, width)
    notes = [_cut(" ".join(note.splitlines()), width) for note in status.notes[-NOTES_SHOWN:]]
    lines = top + _table(payload, width, height - len(top) - len(notes)) + notes
    return Group(*(Text(line, no_wrap=True, overflow="ellipsis") for line in lines[: max(height, 0)]))


def watch_json_line(payload: dict[str, Any]) -> str:
    """One refresh as one JSON line (no newline in it, nor at its end), keys in SPEC 13's order (`WATCH_KEYS`, and
    `recent`'s `RECENT_KEYS`); a key SPEC does not list follows them, in the payload's order, rather than being
    lost."""
    ordered = _in_order(payload, WATCH_KEYS)
    if isinstance(ordered.get("recent"), dict):
        ordered["recent"] = _in_order(ordered["recent"], RECENT_KEYS)
    return json.dumps(ordered)


def _in_order(mapping: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    first = {key: mapping[key] for key in keys if key in mapping}
    return first | {key: value for key, value in mapping.items() if key not in first}


def _header(payload: dict[str, Any], status: WatchStatus) -> list[str]:
    """`1234 spans in 5 files`, the newest complete iteration, and how long ago the newest span ended (or that the
    run looks stopped); what the watcher waits for."""
    waiting = f"waiting for {', '.join(status.waiting_for)} to appear" if status.waiting_for else None
    if status.newest_end_ns is None:
        return [waiting or f"waiting for the first span in {count(payload['files'], 'file')}"]
    rows = payload["iterations"]
    segments = [
        f"{count(payload['spans'], 'span')} in {count(payload['files'], 'file')}",
        f"newest iteration {rows[-1]['iteration']}" if rows else "no complete iteration yet",
        _freshness(status.now_ns - status.newest_end_ns, status.interval_s),
    ]
    return segments + ([waiting] if waiting else [])


def _freshness(ago_ns: int, interval_s: float) -> str:
    """`newest span 3 s ago`; past max(STOPPED_AFTER_NS, STOPPED_INTERVALS intervals), the question whether the
    job has stopped."""
    if ago_ns > max(STOPPED_AFTER_NS, STOPPED_INTERVALS * interval_s * 1e9):
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


def _goodput(payload: dict[str, Any]) -> list[str]:
    """`goodput 63.6%`, `last 1m 60.2%, 5m 61.0%, 15m -` (trace time; `-` where a stretch has no figures) and, when
    the run holds GPUs, `GPU goodput 26.0% (4 GPUs)`."""
    total = payload["total"]
    recent = payload["recent"]
    segments = [
        f"goodput {_share(total)}",
        "last " + ", ".join(f"{key} {_share(recent[key])}" for key in RECENT_KEYS),
    ]
    gpus = payload["gpus"]
    if gpus is not None and "gpu" in total:
        held = gpus["count"]
        segments.append(f"GPU goodput {_share(total['gpu'], gpu=True)} ({cell_text(held)} GPU{'s' * (held != 1)})")
    return segments


def _check(status: WatchStatus, width: int) -> list[str]:
    """`check: 0 errors, 2 warnings`, as far as the counts are known."""
    known = [count(n, noun) for n, noun in ((status.errors, "error"), (status.warnings, "warning")) if n is not None]
    return _packed([f"check: {', '.join(known)}"], width) if known else []


def _share(seconds: dict[str, Any] | None, *, gpu: bool = False) -> str:
    """The goodput of a row-shaped object (a row, the total, a recent stretch; with `gpu`, a `gpu` object) as the
    report writes it; `-` for none."""
    if seconds is None:
        return "-"
    return cell(_GOODPUT, _figures(seconds, gpu=gpu)) or "-"


def _figures(seconds: dict[str, Any], *, gpu: bool = False) -> Figures:
    """A row-shaped JSON object back as the report's `Figures` (with `gpu`, its GPU-seconds in place of the wall
    clock), so that `report.cell` writes each figure as the report's table does. SPEC 6's seconds are exact to the
    nanosecond, so their decimal form gives the integer nanoseconds back."""
    suffix = "_gpu_s" if gpu else "_s"
    wall = seconds["gpu_s" if gpu else "wall_s"]
    buckets = {bucket: _ns(seconds[f"{bucket}{suffix}"]) for bucket in BUCKETS}
    return Figures(_ns(wall), buckets, _ns(seconds[f"unaccounted{suffix}"]))


def _ns(value: float) -> int:
    return round(Decimal(repr(value)).scaleb(9))


def _table(payload: dict[str, Any], width: int, room: int) -> list[str]:
    """The newest rows that fit in `room` lines (newest last) and the total, as the report's boxed table; the
    columns `_DROP_ORDER` names go one by one until the table fits `width`. Nothing when there is no row yet, or
    when not even the total fits."""
    rows = payload["iterations"]
    if not rows or room < _TABLE_FRAME:
        return []
    fitting = room - _TABLE_FRAME - 1  # each row takes a line, and the first one a rule above the total too
    shown = rows[max(len(rows) - fitting, 0) :] if fitting > 0 else []
    labelled = [(str(row["iteration"]), _figures(row)) for row in shown] + [("total", _figures(payload["total"]))]
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
