"""`goodput check`'s findings as text: one object a finding in JSON, else a table (or CSV, Markdown) and a summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .formats import OutputFormat, column_fits, json_text, render_rows
from .narrow import Fit
from .notes import count as counted
from .tables import cell_text, table_text

if TYPE_CHECKING:
    from rollup import Check, Finding

FINDING_COLUMNS = ["severity", "rule", "iteration", "name", "span_id", "related_span_id", "message"]
GROUPED_COLUMNS = ["severity", "rule", "name", "count", "iterations", "span_id", "message"]


def check_text(check: Check, fmt: OutputFormat, *, width: int, each: bool = False) -> str:
    """SPEC 6's `{"findings", "summary"}` in JSON; a table and an `N errors, N warnings` line; CSV and Markdown
    start with their header even with no finding, so a script reads an empty table.

    The table has a line per rule and span name (SPEC section 10), or with `each` a line per finding; JSON, CSV
    and Markdown always list each finding (Markdown is pasted into a ticket or a pull request, where the ids of
    every finding are wanted).
    """
    findings, summary = check.findings, check.summary
    if fmt is OutputFormat.json:
        return json_text({"findings": [f.as_json() for f in findings], "summary": summary})
    if fmt is OutputFormat.table and not each:
        rows = grouped_rows(findings)
        text = _grouped_table(rows, width) if rows else ""
    else:
        rows = [[getattr(f, column) for column in FINDING_COLUMNS] for f in findings]
        text = render_rows(FINDING_COLUMNS, rows, fmt, width=width) if rows or fmt is not OutputFormat.table else ""
    if fmt is OutputFormat.table:
        text += f"{counted(summary['errors'], 'error')}, {counted(summary['warnings'], 'warning')}\n"
    return text


def grouped_rows(findings: Sequence[Finding]) -> list[list[Any]]:
    """One row (GROUPED_COLUMNS) per rule and span name (and `topic`: missing-group's group), in the order the
    findings come: how many, the range of their iterations ("2", "2-5", "" when none has one), and the example
    of the earliest iteration (the first listed among equals), its span id and message."""
    groups: dict[tuple[str, str, str], list[Finding]] = {}
    for finding in findings:
        groups.setdefault((finding.rule, finding.name, finding.topic), []).append(finding)
    rows = []
    for members in groups.values():
        numbers = [f.iteration for f in members if f.iteration is not None]
        span = f"{min(numbers)}-{max(numbers)}" if numbers and min(numbers) != max(numbers) else ""
        iterations = span or (str(numbers[0]) if numbers else "")
        example = min(members, key=lambda f: (f.iteration is None, f.iteration or 0))
        first = members[0]
        rows.append([first.severity, first.rule, first.name, len(members), iterations, example.span_id,
                     example.message])  # fmt: skip
    return rows


def _grouped_table(rows: list[list[Any]], width: int) -> str:
    """The grouped rows as a table fitted to `width`: the count right-justified, and an iteration range a figure,
    never folded."""
    fits = column_fits(GROUPED_COLUMNS, rows)
    fits[GROUPED_COLUMNS.index("iterations")] = Fit("figure", short="iters")
    cells = [[cell_text(value) for value in row] for row in rows]
    right = [column == "count" for column in GROUPED_COLUMNS]
    return table_text(GROUPED_COLUMNS, cells, width=width, fits=fits, right=right)


def spans_title(window: Any, start_offsets: Sequence[float], durations: Sequence[float]) -> str:
    """The `spans` listing's title: the window's length, or the whole run's without one."""
    count = len(start_offsets)
    if window is not None:
        return f"iteration {window.iteration}: {window.wall_ns / 1e9:.3f}s window, {counted(count, 'span')}"
    last_end = max((s + d for s, d in zip(start_offsets, durations, strict=True)), default=0.0)
    return f"every span: {last_end:.3f}s from the first start to the last end, {counted(count, 'span')}"
