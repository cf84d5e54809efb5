"""Rows of plain values as the output formats every command shares: a table, JSON, CSV or Markdown."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any

from .narrow import Fit, Kind
from .tables import cell_text, jsonable, table_text

# How the commands' columns give way at a narrow width (see `narrow`): ids only a script needs go first, then the
# span group (the span's name says it again); `iteration` has a short header; process names keep their tail.
_DROP = {"trace_id": 1, "span_id": 1, "parent_span_id": 1, "related_span_id": 1, "span_group": 2}
_SHORT = {"iteration": "iter"}


# SPEC section 6: with --output and no --format, the format follows the file's extension. `jsonl` and `html` are
# `report`'s alone: another command given such a file refuses it (`tabular_format`) rather than fill it with a table.
EXTENSION_FORMATS = {
    ".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".md": "markdown", ".markdown": "markdown", ".html": "html",
}  # fmt: skip


class OutputFormat(str, Enum):
    """`--format`: how a command writes its result."""

    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"
    html = "html"  # report only: one self-contained page (SPEC section 11)
    jsonl = "jsonl"  # report only: one JSON object a line


# The formats only `report` writes: a page of charts, and one line per iteration for a dashboard.
REPORT_ONLY_FORMATS = (OutputFormat.html, OutputFormat.jsonl)


class TabularFormat(str, Enum):
    """`--format` of every command but `report`: the formats every command writes (`OutputFormat`'s first four)."""

    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


def tabular_format(fmt: OutputFormat) -> OutputFormat:
    """`fmt` when a command other than `report` can write it; ValueError naming the formats it can otherwise (the
    CLI turns it into a bad --format, exit 2)."""
    if fmt in REPORT_ONLY_FORMATS:
        known = ", ".join(f.value for f in OutputFormat if f not in REPORT_ONLY_FORMATS)
        raise ValueError(f"{fmt.value} is a format of `goodput report` only; this command writes {known}")
    return fmt


def json_text(payload: Any) -> str:
    """JSON with one array item a line: readable, and written by the C encoder (indent= falls back to pure Python,
    seconds for a report of ten thousand iterations)."""
    return "".join(json_chunks(payload))


def json_chunks(payload: Any) -> Iterator[str]:
    """`json_text` in pieces, an item of a list at a time: a list may be any sequence whose items are made as they
    are asked for (`report_json(..., lazy=True)`), so a report of many iterations is never whole in memory."""
    if _is_list(payload):
        if not payload:
            yield "[]\n"
            return
        yield from _items(payload, "  ", "[\n")
        yield "\n]\n"
        return
    for index, (key, value) in enumerate(payload.items()):
        lead = "{\n" if index == 0 else ",\n"
        if _is_list(value) and value:
            yield from _items(value, "    ", f"{lead}  {json.dumps(key)}: [\n")
            yield "\n  ]"
        else:
            yield f"{lead}  {json.dumps(key)}: {json.dumps(list(value) if _is_list(value) else value)}"
    yield "{\n\n}\n" if not payload else "\n}\n"


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | tuple)


def _items(items: Sequence[Any], indent: str, lead: str) -> Iterator[str]:
    """The items a line each, comma-separated, the first after `lead`; a few hundred lines a piece."""
    batch = [lead]
    for index, item in enumerate(items):
        batch.append(("" if index == 0 else ",\n") + indent + json.dumps(item))
        if len(batch) >= 256:
            yield "".join(batch)
            batch = []
    yield "".join(batch)


def render_rows(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    fmt: OutputFormat,
    *,
    width: int,
    title: str | None = None,
) -> str:
    """Rows of plain Python values as text in `fmt` (JSON: a list of objects, one per row); tables at `width`."""
    if fmt is OutputFormat.json:
        return json_text([{c: jsonable(v) for c, v in zip(columns, row, strict=True)} for row in rows])
    if fmt is OutputFormat.csv:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([cell_text(v) for v in row] for row in rows)
        return buffer.getvalue()
    if fmt is OutputFormat.markdown:
        lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
        lines += ["| " + " | ".join(cell_text(v).replace("|", "\\|") for v in row) + " |" for row in rows]
        return "\n".join(lines) + "\n"
    cells = [[cell_text(v) for v in row] for row in rows]
    return table_text(columns, cells, title=title, width=width, fits=lambda: column_fits(columns, rows))


def column_fits(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Fit]:
    """How each column gives way at a narrow width: numbers, dates and ids are never cut, ids and the span group
    are left out first, process names are shortened, other text folds."""
    fits = []
    for index, column in enumerate(columns):
        values = [row[index] for row in rows if row[index] is not None]
        if column.endswith("_id") or (values and all(isinstance(v, (bytes, bytearray)) for v in values)):
            kind: Kind = "id"
        elif all(_is_figure(v) for v in values):
            kind = "figure"
        elif column == "process":
            kind = "elide"
        else:
            kind = "text"
        fits.append(Fit(kind, _DROP.get(column, 1 if kind == "id" else 0), _SHORT.get(column)))
    return fits


def _is_figure(value: Any) -> bool:
    """A number (not a bool), a date or a time: what a table must show whole."""
    return (isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)) or hasattr(value, "isoformat")


def format_for_output(output: Path | None) -> OutputFormat:
    """The format an `--output` file's extension names (SPEC section 6); a table for none or another."""
    name = EXTENSION_FORMATS.get(output.suffix.lower()) if output is not None else None
    return OutputFormat(name) if name is not None else OutputFormat.table


def arrow_rows(table: Any) -> tuple[list[str], list[list[Any]]]:
    """An Arrow table's column names and its rows as lists of plain Python values."""
    columns = table.column_names
    data = table.to_pydict()
    return columns, [[data[c][i] for c in columns] for i in range(table.num_rows)]
