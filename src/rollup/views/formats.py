"""Rows of plain values as the output formats every command shares: a table, JSON, CSV or Markdown."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from enum import Enum
from typing import Any

from .tables import cell_text, jsonable, table_text


class OutputFormat(str, Enum):
    """`--format`: how a command writes its result."""

    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


def json_text(payload: Any) -> str:
    """JSON with one array item a line: readable, and written by the C encoder (indent= falls back to pure Python,
    seconds for a report of ten thousand iterations)."""
    if isinstance(payload, list):
        if not payload:
            return "[]\n"
        return "[\n" + ",\n".join("  " + json.dumps(item) for item in payload) + "\n]\n"
    parts = []
    for key, value in payload.items():
        if isinstance(value, list) and value:
            items = ",\n".join("    " + json.dumps(item) for item in value)
            parts.append(f"  {json.dumps(key)}: [\n{items}\n  ]")
        else:
            parts.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


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
    return table_text(columns, [[cell_text(v) for v in row] for row in rows], title=title, width=width)
