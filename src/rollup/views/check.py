"""`goodput check`'s findings as text: one object a finding in JSON, else a table (or CSV, Markdown) and a summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .formats import OutputFormat, json_text, render_rows

FINDING_COLUMNS = ["severity", "rule", "iteration", "name", "span_id", "related_span_id", "message"]


def check_text(findings: Sequence[Any], summary: dict[str, int], fmt: OutputFormat, *, width: int) -> str:
    """SPEC 6's `{"findings", "summary"}` in JSON; a table and an `N errors, N warnings` line; CSV and Markdown
    start with their header even with no finding, so a script reads an empty table."""
    if fmt is OutputFormat.json:
        return json_text({"findings": [f.as_json() for f in findings], "summary": summary})
    rows = [[getattr(f, column) for column in FINDING_COLUMNS] for f in findings]
    text = render_rows(FINDING_COLUMNS, rows, fmt, width=width) if rows or fmt is not OutputFormat.table else ""
    if fmt is OutputFormat.table:
        text += f"{summary['errors']} errors, {summary['warnings']} warnings\n"
    return text


def spans_title(window: Any, start_offsets: Sequence[float], durations: Sequence[float]) -> str:
    """The `spans` listing's title: the window's length, or the whole run's without one."""
    count = len(start_offsets)
    if window is not None:
        return f"iteration {window.iteration}: {window.wall_ns / 1e9:.3f}s window, {count} spans"
    last_end = max((s + d for s, d in zip(start_offsets, durations, strict=True)), default=0.0)
    return f"every span: {last_end:.3f}s from the first start to the last end, {count} spans"
