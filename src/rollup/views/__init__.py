"""What the commands show: data in (Arrow tables, the report's JSON object, findings), text out. No typer here."""

from .formats import OutputFormat, arrow_rows, format_for_output, json_text, render_rows
from .notes import count, no_iterations_note
from .progress import LoadProgress
from .report import report_rows, report_table
from .tables import cell_text, jsonable, rich_table_text, table_text

__all__ = [
    "LoadProgress",
    "arrow_rows",
    "count",
    "format_for_output",
    "no_iterations_note",
    "OutputFormat",
    "cell_text",
    "json_text",
    "jsonable",
    "render_rows",
    "report_rows",
    "report_table",
    "rich_table_text",
    "table_text",
]
