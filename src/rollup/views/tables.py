"""Boxed text tables, drawn as rich draws them: one cell per value, numbers right-justified, a rule before totals.

rich measures and lays out every cell, about 1.3 ms a row (14 s for a 10,000-iteration report), so a table that
fits the width as it is gets drawn here, line by line, to the same characters; one that must fold goes to rich.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from typing import Any, Literal

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table


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
) -> str:
    """A boxed text table as rich draws one (heavy head, a rule before row `section_at`), at `width` columns.

    `right` says which columns are right-justified.
    """
    right = list(right) + [False] * (len(headers) - len(right))
    widths = [cell_len(header) for header in headers]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], cell_len(cell))
    table_width = sum(widths) + 3 * len(widths) + 1
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
