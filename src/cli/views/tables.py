"""Boxed text tables, drawn as rich draws them: one cell per value, numbers right-justified, a rule before totals.

rich measures and lays out every cell, about 1.3 ms a row (14 s for a 10,000-iteration report), so a table that
fits the width as it is gets drawn here, line by line, to the same characters; one that must fold goes to rich when
rich would fold only text, and keep it readable; else it is fitted as `narrow` says, every figure whole.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .narrow import Fit, fit_table_text

# rich may fold a text column to this many cells (or its own width); below that the table is fitted instead.
RICH_TEXT_MIN = 30


def cell_text(value: Any) -> str:
    """A plain Python value (as Arrow hands them out) as the text of a table, CSV or Markdown cell."""
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.6f}".rstrip("0").rstrip(".") if abs(value) < 1e15 else f"{value:.6g}"
    if isinstance(value, (list, dict)):
        return json.dumps(jsonable(value), separators=(",", ":"))
    return str(value)


def jsonable(value: Any) -> Any:
    """Arrow's Python values made JSON-ready: maps (lists of pairs) become objects, NaN becomes null."""
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): jsonable(v) for k, v in value}
        return [jsonable(v) for v in value]
    if isinstance(value, tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


Justify = Literal["left", "center", "right"]


def table_text(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int,
    title: str | None = None,
    title_justify: Justify = "center",
    right: Sequence[bool] = (),
    section_at: int | None = None,
    fits: Sequence[Fit] | Callable[[], Sequence[Fit]] | None = None,
) -> str:
    """A boxed text table as rich draws one (heavy head, a rule before row `section_at`), at `width` columns.

    `right` says which columns are right-justified; `fits` (or a function giving them, called only when needed) how
    each gives way when the table is too wide: by default a right-justified column is a figure, never cut, and the
    others are text.
    """
    right = list(right) + [False] * (len(headers) - len(right))
    widths = [cell_len(header) for header in headers]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], cell_len(cell))
    table_width = sum(widths) + 3 * len(widths) + 1
    if table_width > width:
        given = fits() if callable(fits) else fits
        given = list(given) if given is not None else [Fit("figure" if flush else "text") for flush in right]
        if not _rich_folds_only_text(widths, right, given, width):
            return fit_table_text(
                headers, rows, given, width=width, right=right, title=title, title_justify=title_justify,
                section_at=section_at,
            )  # fmt: skip
    if table_width > width or (title is not None and cell_len(title) > table_width):
        return rich_table_text(headers, rows, title, title_justify, right, section_at, width)

    def line(cells: Sequence[str], edge: str, middle: str) -> str:
        padded = (
            " " + (cell.rjust if flush else cell.ljust)(size - cell_len(cell) + len(cell)) + " "
            for cell, size, flush in zip(cells, widths, right, strict=False)
        )
        return (edge + middle.join(padded) + edge).rstrip()

    def rule(left: str, fill: str, middle: str, end: str) -> str:
        return left + middle.join(fill * (size + 2) for size in widths) + end

    out = []
    if title is not None:
        pad = 0 if title_justify == "left" else (table_width - cell_len(title)) // 2
        out.append(" " * pad + title)
    out += [rule("┏", "━", "┳", "┓"), line(headers, "┃", "┃"), rule("┡", "━", "╇", "┩")]
    for index, row in enumerate(rows):
        if index == section_at:
            out.append(rule("├", "─", "┼", "┤"))
        out.append(line(row, "│", "│"))
    out.append(rule("└", "─", "┴", "┘"))
    return "\n".join(out) + "\n"


def _rich_folds_only_text(widths: Sequence[int], right: Sequence[bool], fits: Sequence[Fit], width: int) -> bool:
    """Whether rich, fitting these columns (content widths) into `width`, would fold text columns only, each to no
    less than RICH_TEXT_MIN cells: it narrows the widest left-justified columns to a common width first, and cuts
    every column alike when that is not enough."""
    room = width - 3 * len(widths) - 1  # the content's share of the width, without borders and padding
    fixed = sum(w for w, flush in zip(widths, right, strict=True) if flush)
    folding = [w for w, flush in zip(widths, right, strict=True) if not flush]
    level = max(folding, default=0)
    while level > 0 and fixed + sum(min(w, level) for w in folding) > room:
        level -= 1
    if level < RICH_TEXT_MIN or fixed + sum(min(w, level) for w in folding) > room:
        return False
    capped = (fit for w, flush, fit in zip(widths, right, fits, strict=True) if w > level and not flush)
    return all(fit.kind in ("text", "elide") for fit in capped)


def rich_table_text(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    title: str | None,
    title_justify: Justify,
    right: Sequence[bool],
    section_at: int | None,
    width: int,
) -> str:
    """The same table laid out by rich itself: what `table_text` draws when the table must fold to fit."""
    table = Table(title=title, title_justify=title_justify)
    for header, flush in zip(headers, right, strict=False):  # numbers are never folded; text folds to fit
        table.add_column(header, justify="right" if flush else "left", overflow="fold", no_wrap=flush)
    for index, row in enumerate(rows):
        if index == section_at:
            table.add_section()
        table.add_row(*(escape(cell) for cell in row))
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)
    console.print(table)
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())
