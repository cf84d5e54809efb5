"""The report (`rollup.Report`) as the per-iteration table a person reads, or as flat rows for CSV and Markdown.

Below `total` and `outside`: `rework` and `downtime` when the job lost work or time between attempts (SPEC section
7), and, when there was more than one attempt, the job's own wall clock and goodput. A run of one attempt reads as
it always did. The columns are the report's figures (`rollup.FIGURES`), each shown as its unit says.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rollup.report import FIGURES

from .breakdown import breakdown_text
from .formats import OutputFormat, json_chunks, json_text, render_rows
from .narrow import Fit, fold
from .notes import number_ranges
from .tables import table_text

if TYPE_CHECKING:
    from rollup import Report
    from rollup.accounting import Figures
    from rollup.critical import CriticalPaths
    from rollup.report import Figure, Recent, WholeRun

REPORT_TITLE = "Wall clock by iteration (each instant charged once)"
# The row keys head each part of a table split to fit; process names keep their tail.
_KEY_FITS = {"iter": Fit("figure", key=True), "process": Fit("elide", key=True)}

# A figure far above its median over the iterations (SPEC section 10) is marked, and the mark explained below.
OUTLIER_MARK = "*"
OUTLIER_NOTE = f"{OUTLIER_MARK} outlier: more than 3 scaled MADs (and 1 ms) above the median of the iterations"


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def whole_run_rows(report: Report) -> list[WholeRun]:
    """The whole-run rows below the iterations: total, outside, then rework and downtime where they say something
    (not zero), and the job when there was more than one attempt."""
    shown = []
    for row in report.whole_run():
        if row.label in ("rework", "downtime") and row.figures.wall_ns <= 0:
            continue
        if row.label == "job" and len(report.attempts) <= 1:
            continue
        shown.append(row)
    return shown


def job_line(report: Report) -> str | None:
    """`job: 1234.567 s wall clock, 61.2% goodput over 2 attempts`, when there was more than one attempt."""
    attempts = len(report.attempts)
    if attempts <= 1:
        return None
    job = report.job
    goodput = _percent(job.goodput) if job.goodput is not None else "no"
    return f"job: {job.wall_s:.3f} s wall clock, {goodput} goodput over {attempts} attempts"


def cell(figure: Figure, figures: Figures, flagged: Sequence[str] = ()) -> str:
    """One figure of a row as the table shows it: seconds to the millisecond, a share in percent, a ratio as `1.31x`;
    an outlier marked."""
    value = figure.value(figures)
    if value is None:
        return ""
    if figure.unit == "share":
        return _percent(value)
    if figure.unit == "ratio":
        return f"{value:.2f}x"
    return f"{value:.3f}" + (OUTLIER_MARK if figure.key in flagged else "")


def report_rows(report: Report, *, total_only: bool = False) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of the report for CSV and Markdown: one row an iteration (none with `total_only`), with
    `--by process` a `total` row per process, then `total`, `outside` and the job's rows (see `whole_run_rows`, and
    the job when there were several attempts); a figure a row does not have is left empty."""
    by_process = report.by_process
    shown = [figure for figure in FIGURES if figure.csv]
    head = ["iteration"] + (["process"] if by_process else []) + [figure.key for figure in shown]

    def row(label: Any, process: Any, figures: Figures, keys: frozenset[str] | None) -> list[Any]:
        values = [figure.value(figures) if keys is None or figure.key in keys else None for figure in shown]
        return [label] + ([process] if by_process else []) + values

    rows = [] if total_only else [row(r.iteration, r.process, r.figures, None) for r in report.iterations]
    rows += [row("total", process, figures, None) for process, figures in report.process_totals.items()]
    rows += [row(w.label, None, w.figures, w.keys) for w in whole_run_rows(report)]
    return head, rows


def report_table(report: Report, *, width: int, total_only: bool = False) -> str:
    """The report as a boxed table: seconds to the millisecond, goodput in percent, span-seconds and their ratio;
    with `--by process`, each process's totals over every window below its rows (`total_only`: those alone).

    Too narrow for it (80 columns), the span-seconds columns go first, then headers wrap onto two lines and process
    names give way (see `narrow`); a figure is never cut.
    """
    by_process = report.by_process
    shown = [figure for figure in FIGURES if figure.header is not None]
    headers = ["iter"] + (["process"] if by_process else []) + [figure.header or "" for figure in shown]

    def cells(label: str, process: str | None, figures: Figures, flagged: Sequence[str],
              keys: frozenset[str] | None) -> list[str]:  # fmt: skip
        out = [label] + ([process or ""] if by_process else [])
        for figure in shown:
            # A share of start-up or of lost work is not what a reader of the column compares: left out there.
            hidden = keys is not None and (figure.key not in keys or (label != "total" and not figure.whole_run))
            out.append("" if hidden else cell(figure, figures, flagged))
        return out

    rows = (
        []
        if total_only
        else [cells(str(r.iteration), r.process, r.figures, r.outliers, None) for r in report.iterations]
    )
    section_at = len(rows)
    rows += [cells("total", process, figures, (), None) for process, figures in report.process_totals.items()]
    rows += [cells(w.label, None, w.figures, (), w.keys) for w in whole_run_rows(report) if w.label != "job"]
    right = [header != "process" for header in headers]
    fits = [_KEY_FITS.get(header) or Fit("figure") for header in headers[: 1 + by_process]]
    fits += [Fit("figure", drop=figure.drop, short=figure.short) for figure in shown]
    line = job_line(report)
    if not total_only and any(r.outliers for r in report.iterations):
        line = (f"{line}\n" if line else "") + OUTLIER_NOTE
    if report.gpus is not None:
        from .gpus import gpu_line

        line = (f"{line}\n" if line else "") + "\n".join(fold(gpu_line(report.gpus), width))
    return table_text(
        headers,
        rows,
        title=REPORT_TITLE,
        title_justify="left",
        right=right,
        section_at=section_at or None,
        width=width,
        fits=fits,
    ) + (f"{line}\n" if line else "")


def report_chunks(
    report: Report,
    fmt: OutputFormat,
    *,
    width: int,
    checks: dict[str, Any] | None = None,
    total_only: bool = False,
    critical: CriticalPaths | None = None,
) -> Iterable[str]:
    """`report_text` in pieces: the JSON an item at a time (its rows made as they are written, `rollup.report_json`),
    every other format whole."""
    if fmt is OutputFormat.json:
        from rollup import report_json

        return json_chunks(report_json(report, lazy=True))
    return [report_text(report, fmt, width=width, checks=checks, total_only=total_only, critical=critical)]


def report_text(
    report: Report,
    fmt: OutputFormat,
    *,
    width: int,
    checks: dict[str, Any] | None = None,
    total_only: bool = False,
    critical: CriticalPaths | None = None,
) -> str:
    """The report in `fmt`: SPEC 6's JSON object, the table, its rows as CSV or Markdown, JSON Lines, or the HTML
    page (with `checks`, the `html.check_counts` summary, when the checks were run, and `critical`, the steps'
    critical paths, when they were walked)."""
    if fmt is OutputFormat.json:
        from rollup import report_json

        return json_text(report_json(report))
    if fmt is OutputFormat.html:
        from .html import report_html  # imports plotly: only for the page

        return report_html(report, checks, critical)
    if fmt is OutputFormat.jsonl:
        from rollup import report_json

        from .jsonl import report_jsonl

        return report_jsonl(report_json(report))
    if report.by == "pool":
        from .gpus import pool_text

        return pool_text(report, fmt, width=width, total_only=total_only)
    if report.total_names is not None:  # --by name / --by group: the breakdown is what the table and rows show
        return breakdown_text(report, fmt, width=width, total_only=total_only)
    if fmt is OutputFormat.table:
        return report_table(report, width=width, total_only=total_only)
    return render_rows(*report_rows(report, total_only=total_only), fmt, width=width)


def report_notes(report: Report) -> list[str]:
    """The one-line notes said under a report (on stderr, so every format's output stays as it is): iterations
    whose step span was lost, and attempts that look like another job rather than a resumption."""
    from rollup.store import attempt_label

    notes = [f"note: {note}" for note in report.notes]
    if report.recent is not None:
        notes.append(f"note: {recent_line(report.recent)}")
    if report.lost_steps:
        numbers = number_ranges(report.lost_steps)
        noun = "iteration" if len(report.lost_steps) == 1 else "iterations"
        notes.append(
            f"note: {noun} {numbers}: spans were read but not the step span (its process ended before writing it), "
            "so that time is counted outside; `goodput check` lists it as lost-step"
        )
    if report.duplicate_steps:
        count = len(report.duplicate_steps)
        notes.append(
            f"note: {count} iteration{'s' * (count != 1)} ({number_ranges(report.duplicate_steps)}) "
            f"{'have' if count != 1 else 'has'} two step spans that do not overlap: two runs without run ids read as "
            "one? Each such window covers both runs and everything between; `goodput check` lists them as "
            "duplicate-step"
        )
    for later, earlier in report.fresh_starts:
        notes.append(
            f"note: attempt {attempt_label(later.run_id)} starts at iteration {later.first_iteration}, at or below "
            f"attempt {attempt_label(earlier.run_id)}'s first ({earlier.first_iteration}): a new job, or a restart "
            "from nothing, in the same folder? Its rework and downtime are not a resumption's; read one job with "
            "--attempt ID"
        )
    return notes


def recent_line(recent: Recent) -> str:
    """`--last`'s stretch charged whole, in one line: its length, goodput and buckets (SPEC section 13)."""
    figures = recent.figures
    goodput = figures.goodput
    shown = "-" if goodput is None else f"{goodput:.1%}"
    buckets = ", ".join(f"{bucket} {ns / 1e9:.3f} s" for bucket, ns in figures.bucket_ns.items() if ns)
    return f"the last {figures.wall_ns / 1e9:.3f} s of trace time (up to the latest span end): goodput {shown}" + (
        f" ({buckets}, unaccounted {figures.unaccounted_ns / 1e9:.3f} s)" if buckets else ""
    )
