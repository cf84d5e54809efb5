"""What the commands show: data in (Arrow tables, the report's JSON object, findings), text out. No typer here."""

from .check import check_text, spans_title
from .diff import diff_text, verdict_line
from .formats import OutputFormat, arrow_rows, format_for_output, json_chunks, json_text, render_rows, tabular_format
from .gates import goodput_gate_verdict, goodput_share, percent_over
from .html import check_counts
from .notes import count, internal_error_text, iteration_range, no_iterations_note, version_text
from .progress import LoadProgress
from .report import report_chunks, report_rows, report_table, report_text
from .tables import cell_text, jsonable, rich_table_text, table_text

__all__ = [
    "LoadProgress",
    "arrow_rows",
    "check_counts",
    "check_text",
    "internal_error_text",
    "iteration_range",
    "spans_title",
    "count",
    "diff_text",
    "verdict_line",
    "format_for_output",
    "goodput_gate_verdict",
    "goodput_share",
    "percent_over",
    "no_iterations_note",
    "OutputFormat",
    "cell_text",
    "json_chunks",
    "json_text",
    "jsonable",
    "render_rows",
    "report_rows",
    "report_table",
    "report_chunks",
    "report_text",
    "version_text",
    "rich_table_text",
    "table_text",
    "tabular_format",
]
