"""`report --by name` / `--by group` (SPEC section 8) as text: a block per iteration, then the total's block.

Each block lists the names under their bucket with the wall seconds charged to them, their span-seconds and their
share of the block's wall clock; the rows come in the JSON's order (bucket order, then wall seconds descending).
CSV and Markdown get one flat row per (iteration, name, bucket), the total's rows labelled `total`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .formats import OutputFormat, render_rows
from .narrow import Fit
from .notes import count
from .tables import table_text

if TYPE_CHECKING:
    from rollup import Report
    from rollup.accounting import Figures, NameShare

_FITS = [Fit("text"), Fit("elide"), Fit("figure"), Fit("figure", drop=1), Fit("figure")]
_HEADERS = ["bucket", "{key}", "wall s", "span s", "share"]


def _block(title: str, names: Sequence[NameShare], wall_s: float, key: str, width: int) -> str:
    rows = []
    previous = None
    for share in names:
        wall = share.wall_s
        of_block = f"{100 * wall / wall_s:.1f}%" if wall_s > 0 else ""
        rows.append(
            [share.bucket if share.bucket != previous else "", share.name or '""', f"{wall:.3f}",
             f"{share.span_s:.3f}", of_block]
        )  # fmt: skip
        previous = share.bucket
    if not rows:
        return f"{title}\n  no bucketed span\n"
    headers = [h.format(key=key) for h in _HEADERS]
    right = [False, False, True, True, True]
    return table_text(headers, rows, title=title, title_justify="left", right=right, width=width, fits=_FITS)


def _goodput(figures: Figures) -> str:
    goodput = figures.goodput
    return f", goodput {100 * goodput:.1f}%" if goodput is not None else ""


def breakdown_table(report: Report, *, width: int, total_only: bool = False) -> str:
    """One block per iteration (none with `total_only`), then the total's; one block alone for one iteration, whose
    total is itself."""
    key = report.by or "name"
    blocks = []
    if len(report.iterations) == 1 and not total_only:
        row = report.iterations[0]
        title = f"iteration {row.iteration}: {row.figures.wall_s:.3f} s window{_goodput(row.figures)}"
        return _block(title, row.names or [], row.figures.wall_s, key, width)
    if not total_only:
        for row in report.iterations:
            title = f"iteration {row.iteration}: {row.figures.wall_s:.3f} s window{_goodput(row.figures)}"
            blocks.append(_block(title, row.names or [], row.figures.wall_s, key, width))
    total = report.total
    title = f"total: {total.wall_s:.3f} s over {count(len(report.iterations), 'iteration')}{_goodput(total)}"
    blocks.append(_block(title, report.total_names or [], total.wall_s, key, width))
    return "\n".join(blocks)


def breakdown_rows(report: Report, *, total_only: bool = False) -> tuple[list[str], list[list[Any]]]:
    """Flat rows for CSV and Markdown: iteration (or `total`), name or group, bucket, wall_s, span_s, share."""
    key = report.by or "name"
    head = ["iteration", key, "bucket", "wall_s", "span_s", "share"]
    items: list[tuple[Any, Figures, Sequence[NameShare]]] = []
    if not total_only:
        items = [(row.iteration, row.figures, row.names or []) for row in report.iterations]
    items.append(("total", report.total, report.total_names or []))
    rows = []
    for label, figures, names in items:
        wall = figures.wall_s
        for share in names:
            rows.append([label, share.name, share.bucket, share.wall_s, share.span_s,
                         share.wall_s / wall if wall > 0 else None])  # fmt: skip
    return head, rows


def breakdown_text(report: Report, fmt: OutputFormat, *, width: int, total_only: bool = False) -> str:
    """The breakdown as a table (blocks), or as flat CSV / Markdown rows."""
    if fmt is OutputFormat.table:
        return breakdown_table(report, width=width, total_only=total_only)
    return render_rows(*breakdown_rows(report, total_only=total_only), fmt, width=width)
