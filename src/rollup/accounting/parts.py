"""A range of the report's frames accounted on its own: what `report` and `check` compute of the spans, in parts
that add up exactly.

A report's frames are its rows' windows, the superseded windows (rework) and the stretches outside every window. A
part holds some of them (all of them, when the accounting runs in this process) and the spans they need: every span
overlapping one of its frames, and every span whose effective iteration is one of its windows' (span-seconds count
those wherever they ran). A frame's figures depend on those spans alone, and are integer nanoseconds, so the parts
of one report, however it was cut, add up to the figures of one part holding every frame. `checks.parts` is
`check`'s part, `critical.build.critical_part` the critical path's.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .attribution import Charge, Frame, FrameCharges, charge_each_process, charge_stretches, total_charge
from .breakdown import BREAKDOWN_KEYS, NameShare, NameWalls, charged_name_walls, name_share_columns
from .rows import Figures, IterationRows, zero_buckets
from .span_seconds import span_seconds_ns, window_span_ns
from .windows import Window, Windows, stretches_of

if TYPE_CHECKING:
    from rollup.store.spanset import SpanSet

    from .frames import ReportFrames
    from .intervals import Stretches


@dataclass
class ReportPart:
    """A part of the report: the rows of its windows (with `--by process`, a row per window and process), each
    row's window as its position among the report's windows (`positions`), the figures of its windows summed
    (`total`: the plain rows', whatever `by`), and the charges of its superseded windows (`rework`) and of its
    stretches outside every window (`outside`), each summed; with `--by name` / `--by group`, its names' shares
    summed over its windows (`names`)."""

    positions: array
    rows: IterationRows
    total: Figures
    rework: Charge
    outside: Charge
    names: list[NameShare] | None = None


class ReportRunner(Protocol):
    """Computes the report's parts over `spans` elsewhere (`on_ray.RayRunner`: a Ray task per range of
    windows; a watcher's `watch.kept.KeptRunner`: only the frames new spans touched); without one, `build_report`
    computes one part here (`account_frames`)."""

    def report_parts(
        self, spans: SpanSet, frames: ReportFrames, precedence: Sequence[str], by: str | None
    ) -> list[ReportPart]: ...


def account_here(spans: SpanSet, frames: ReportFrames, precedence: Sequence[str], by: str | None) -> ReportPart:
    """The one part holding every frame, computed in this process."""
    return account_frames(spans, frames.windows, frames.lost.stretches, frames.outside, precedence, by)


def account_frames(
    spans: SpanSet,
    windows: Windows,
    lost: Stretches,
    outside: Stretches,
    precedence: Sequence[str],
    by: str | None,
    positions: array | None = None,
) -> ReportPart:
    """The part of `windows` (at `positions` among the report's windows; default 0, 1, ...), the superseded
    windows' stretches `lost` and the `outside` stretches, over `spans`. What a long run holds per window is let go
    as soon as it is summed or copied."""
    if positions is None:
        positions = array("q", range(len(windows)))
    window_charges, lost_charges, names_wall = charge_frames(
        spans, windows, lost + outside, precedence, by, summed_from=len(lost)
    )
    rest = lost_charges.rest
    assert rest is not None  # summed_from given: the outside stretches are charged as one
    rework = total_charge(lost_charges)
    del lost_charges
    rows = IterationRows.of_windows(windows, window_charges.columns(), window_span_ns(spans, windows))
    del window_charges
    part = ReportPart(positions, rows, rows.total(), rework, rest)
    if by == "process":
        part.rows, row_windows = process_rows(spans, windows, precedence)
        part.positions = array("q", (positions[w] for w in row_windows))
    elif by is not None and names_wall is not None:
        shares, part.names = name_share_columns(spans, windows, names_wall, by=by)
        rows.set_name_columns(shares)
    return part


def charge_frames(
    spans: SpanSet,
    windows: Sequence[Window],
    others: Sequence[tuple[int, int]],
    order: Sequence[str],
    by: str | None,
    *,
    summed_from: int | None = None,
) -> tuple[FrameCharges, FrameCharges, NameWalls | None]:
    """The charges of `windows` and of the `others` stretches (each list in the order given), and with `by` "name"
    or "group" each window's wall nanoseconds per (name, bucket): those windows are charged by the sweep that shares
    them among the names (`breakdown.charged_name_walls`), never swept twice. `summed_from`: the others from that
    position on are charged as one (the others' `rest`, `attribution.charge_stretches`)."""
    if by in BREAKDOWN_KEYS:
        window_charges, wall = charged_name_walls(spans, windows, order, by=by)
        return window_charges, charge_stretches(spans, others, order, summed_from=summed_from), wall
    held = None if summed_from is None else len(windows) + summed_from
    charged = charge_stretches(spans, stretches_of(windows) + others, order, summed_from=held)
    other_charges = charged[len(windows) :]
    other_charges.rest = charged.rest
    return charged[: len(windows)], other_charges, None


def process_rows(spans: SpanSet, windows: Windows, order: Sequence[str]) -> tuple[IterationRows, array]:
    """A row per (window, process), each charging only that process's spans, and each row's window (its position
    in `windows`).

    A process has a row in a window where one of its bucketed spans overlaps the window or where it has
    span-seconds (spans of that iteration, wherever they ran); a window where it had nothing is unaccounted for it
    (`report.process_totals`).
    """
    frames = [Frame(i, w.start_ns, w.end_ns) for i, w in enumerate(windows)]
    charged = charge_each_process(spans, frames, order)  # the processes with a bucketed span there
    span_ns = span_seconds_ns(spans, by_process=True)
    counted: dict[tuple[str, int], set[str]] = {}
    for (run_id, iteration, process), by_bucket in span_ns.items():
        if any(by_bucket.values()):
            counted.setdefault((run_id, iteration), set()).add(process)
    rows = IterationRows()
    row_windows = array("q")
    for frame in frames:
        w = windows[frame.frame_id]
        charges = charged.get(frame.frame_id, {})
        for process in sorted(set(charges) | counted.get((w.run_id, w.iteration), set())):
            wall = frame.end_ns - frame.start_ns
            charge = charges.get(process) or Charge(wall, zero_buckets(), wall)  # nothing of its own: unaccounted
            rows.append(w.iteration, w.start_ns, w.end_ns, charge, span_ns.get((w.run_id, w.iteration, process)),
                        process=process, run_id=w.run_id)  # fmt: skip
            row_windows.append(frame.frame_id)
    return rows, row_windows
