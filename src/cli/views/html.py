"""The report as one self-contained HTML page (SPEC section 11): what a person opens to see where the wall clock went.

A stacked bar per iteration (the four buckets and the unaccounted rest, so each bar is the window's wall clock) with
the goodput as a line on a second axis; the whole-run figures and the attempts as small tables; the breakdown of the
total by span name (or group) when the report has one; the `check` summary when it was computed. The charts are
plotly's, with its JavaScript inlined once, so the page opens without network access (a file mailed or archived
with a run). plotly is imported only here, when a page is asked for.

Every string that comes from a trace (span names, run ids, process names, rule names) is escaped with `html.escape`,
in the tables and in the charts alike: plotly draws a small HTML subset in its labels (`<b>`, `<br>`), and a span
name is not markup. Seconds go into the charts rounded to the microsecond and the goodput to 1e-6, which keeps a
ten-thousand-iteration page a few hundred kilobytes above plotly's own 4.8 MB.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING, Any

from rollup.report import FIGURES

from .charts import (
    BUCKET_COLOURS,
    CHART_NAMES,
    critical_figure,
    gpu_figure,
    iterations_figure,
    name_labels,
    names_figure,
    plot_divs,
    process_figures,
    stacked_part,
)
from .gpus import gpu_line
from .notes import number_ranges

if TYPE_CHECKING:
    from rollup import Report
    from rollup.accounting import Figures, NameShare
    from rollup.critical import CriticalPaths
    from rollup.store import Attempt

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px 32px; color: #222; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
p.lead { margin: 0 0 12px; color: #444; } p.note { color: #666; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e4e4e4; text-align: right; white-space: nowrap; }
th { background: #f5f5f5; } td.text, th.text { text-align: left; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 5px; border-radius: 2px; }
.error { color: #b3261e; font-weight: 600; } .warning { color: #9a6700; font-weight: 600; } .ok { color: #2e7d32; }
.plot { width: 100%; }
"""


def check_counts(findings: Iterable[Any]) -> dict[str, Any]:
    """The `check` summary the page shows: `{"errors": n, "warnings": n, "rules": {rule: {"severity", "count"}}}`,
    rules with errors first, then in the order the findings come (`check_findings` sorts them by rule).

    `findings` are `rollup.checks.check.Finding`s (anything with `rule` and `severity`)."""
    rules: dict[str, dict[str, Any]] = {}
    for finding in findings:
        entry = rules.setdefault(finding.rule, {"severity": finding.severity, "count": 0})
        entry["count"] += 1
    ordered = sorted(rules.items(), key=lambda item: item[1]["severity"] != "error")
    return {
        "errors": sum(e["count"] for _, e in ordered if e["severity"] == "error"),
        "warnings": sum(e["count"] for _, e in ordered if e["severity"] == "warning"),
        "rules": dict(ordered),
    }


def report_html(report: Report, checks: dict[str, Any] | None, critical: CriticalPaths | None = None) -> str:
    """The page for a report (SPEC sections 6-8), the `check_counts` summary (None: the checks were not run for
    this report) and what the steps waited on (SPEC section 14; None: not walked)."""
    rows = list(report.iterations)
    figures: list[tuple[str, dict[str, Any], int]] = []  # (div id, plotly figure, height in pixels)
    if rows and report.by_process:
        figures += process_figures(rows)
    elif rows:
        figures.append(("goodput-iterations", iterations_figure(rows), 460))
    if rows and report.gpus is not None:
        figures.append(("goodput-gpus", gpu_figure(report), 420))
    names, key = report.total_names or [], report.by or "name"
    if names:
        chart = names_figure(names, key)
        figures.append(("goodput-names", chart, chart["layout"]["height"]))
    if critical is not None and critical.first() is not None:
        chart = critical_figure(critical.names)
        figures.append(("goodput-critical", chart, chart["layout"]["height"]))
    plots = dict(plot_divs(figures))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>goodput report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>goodput report</h1>",
        f'<p class="lead">{_headline(report)}</p>',
        "<h2>Wall clock by iteration</h2>",
        *(
            [plots[div] for div, _, _ in figures if div.startswith("goodput-iterations")]
            or ['<p class="note">No iteration windows in these traces.</p>']
        ),
        '<p class="note">Each instant of an iteration\'s window is charged once, to the first active bucket; what '
        "no bucketed span covered is unaccounted. The line is the iteration's goodput (productive / wall), right "
        "axis.</p>",
        "<h2>Whole run</h2>",
        _whole_run_table(report),
    ]
    if "goodput-gpus" in plots and report.gpus is not None:
        parts += [
            "<h2>GPU-seconds by iteration and pool</h2>",
            plots["goodput-gpus"],
            '<p class="note">Each GPU of a pool is charged instant by instant from the bucketed spans that occupy it '
            f"(its processes', and those placed on its fleets). {escape(gpu_line(report.gpus))}</p>",
        ]
    if report.by_process and report.process_totals:
        parts += ["<h2>By process</h2>", _process_table(report.process_totals)]
    if names:
        title = "span name" if key == "name" else "span group"
        parts += [f"<h2>The total by {title}</h2>", plots["goodput-names"], _names_table(names, key)]
    if "goodput-critical" in plots and critical is not None:
        parts += ["<h2>What the steps waited on</h2>", _critical_lead(critical), plots["goodput-critical"],
                  _critical_tables(critical)]  # fmt: skip
    parts += ["<h2>Attempts</h2>", _attempts_table(report.attempts)]
    parts += ["<h2>Checks</h2>", _checks_section(checks), "</body></html>"]
    return "\n".join(parts) + "\n"


# --- tables -------------------------------------------------------------------------------------------------------


def _headline(report: Report) -> str:
    """`66.9% goodput over 6 iterations (4.792 s of wall clock); the job: 16.2% of 19.837 s over 2 attempts`."""
    total = report.total
    iterations = len(set(report.iterations.column("iteration")))
    job, attempts = report.job, len(report.attempts)
    return (
        f"<b>{_percent(total.goodput)}</b> goodput over {iterations:,} iteration{'s' * (iterations != 1)} "
        f"({total.wall_s:.3f} s of wall clock)"
        f"; the whole job: <b>{_percent(job.goodput)}</b> of {job.wall_s:.3f} s"
        f" over {attempts} attempt{'s' * (attempts != 1)}"
    )


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], text_columns: Sequence[int] = (0,)) -> str:
    """A table of cells that are already HTML (escaped where they came from a trace); `text_columns` left-aligned."""

    def cell(tag: str, index: int, content: str) -> str:
        css = ' class="text"' if index in text_columns else ""
        return f"<{tag}{css}>{content}</{tag}>"

    lines = ["<table><thead><tr>" + "".join(cell("th", i, h) for i, h in enumerate(head)) + "</tr></thead><tbody>"]
    lines += ["<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>" for row in rows]
    return "\n".join(lines) + "\n</tbody></table>"


def _swatch(bucket: str) -> str:
    return f'<span class="swatch" style="background:{BUCKET_COLOURS[bucket]}"></span>{bucket}'


# The tables' figures: every one but the span-seconds (the whole-run table adds their sum).
_TABLE_FIGURES = [figure for figure in FIGURES if not figure.spans]
_FIGURE_HEAD = ["", *(_swatch(stacked_part(f)) + " s" if f.stacked else f.header or f.key for f in _TABLE_FIGURES)]
_SPAN_TOTAL = next(figure for figure in FIGURES if figure.key == "span_s")


def _figure_cells(figures: Figures, keys: frozenset[str] | None = None, *, goodput: bool = True) -> list[str]:
    """The row's figures (those of `keys`, when given), seconds to the millisecond and shares in percent."""
    cells = []
    for figure in _TABLE_FIGURES:
        value = figure.value(figures) if keys is None or figure.key in keys else None
        if figure.unit == "share":
            cells.append(_percent(value) if goodput else "")
        else:
            cells.append(_seconds(value))
    return cells


def _whole_run_table(report: Report) -> str:
    """total (the iterations' sum), outside, rework, downtime and the job, with span-seconds beside the total."""
    rows = []
    for row in report.whole_run():
        span_cell = _seconds(_SPAN_TOTAL.value(row.figures)) if _SPAN_TOTAL.key in row.keys else ""
        # As in the table: a goodput of start-up or of lost work is not what a reader compares.
        goodput = row.label in ("total", "job")
        rows.append([row.label, *_figure_cells(row.figures, row.keys, goodput=goodput), span_cell])
    table = _table([*_FIGURE_HEAD, "span s"], rows)
    return table + (
        '\n<p class="note">outside: the run\'s time in no iteration window (start-up, gaps, shutdown); rework: '
        "windows a later attempt ran again; downtime: time between attempts; job: all of it, and the share of it "
        "that was kept productive work. span s: the naive sum of bucketed span durations.</p>"
    )


def _process_table(processes: dict[str, Figures]) -> str:
    rows = [[escape(process), *_figure_cells(figures)] for process, figures in processes.items()]
    return _table(["process", *_FIGURE_HEAD[1:]], rows)


def _names_table(names: Sequence[NameShare], key: str) -> str:
    labels = name_labels(names)
    rows = [
        [label, _swatch(share.bucket) if share.bucket in BUCKET_COLOURS else escape(str(share.bucket)),
         _seconds(share.wall_s), _seconds(share.span_s)]
        for label, share in zip(labels, names, strict=True)
    ]  # fmt: skip
    note = f'\n<p class="note">The chart shows the {CHART_NAMES} largest.</p>' if len(names) > CHART_NAMES else ""
    return _table([key, "bucket", "wall s", "span s"], rows, text_columns=(0, 1)) + note


def _critical_lead(critical: CriticalPaths) -> str:
    """The table's lead lines (`views.critical.headline`) as the section's opening paragraph."""
    from .critical import headline

    return '<p class="lead">' + "<br>".join(escape(line) for line in headline(critical)) + "</p>"


def _critical_tables(critical: CriticalPaths) -> str:
    """The processes' shares of the path, and how the path is read (SPEC section 14)."""
    rows = [[escape(p.key or ""), _seconds(p.critical_s), _seconds(p.per_step_s), _percent(p.share)]
            for p in critical.processes]  # fmt: skip
    return _table(["process", "critical s", "per step s", "share"], rows) + (
        '\n<p class="note">Each step is explained back from its end along the dependencies the trace records: the '
        "children a span waited for, the order of one process's spans, the span elsewhere whose end woke a wait; "
        "what none of them explains is waiting. What a phase's speed-up saves is not read off the path: the run is "
        "re-timed with the phase 10% shorter (<code>goodput critical</code>'s saves s), and a phase beside a longer "
        "one saves nothing.</p>"
    )


def _utc(ns: int | None) -> str:
    if ns is None:
        return ""
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _attempts_table(attempts: Sequence[Attempt]) -> str:
    if not attempts:
        return '<p class="note">No attempts (no spans).</p>'
    rows = []
    for a in attempts:
        first, last = a.first_iteration, a.last_iteration
        iterations = "" if first is None else (f"{first}" if first == last else f"{first}-{last}")
        wall = (a.end_ns - a.start_ns) / 1e9
        rows.append([
            escape(a.run_id or "(no run id)"), _utc(a.start_ns), _utc(a.end_ns), _seconds(wall), iterations,
            str(a.processes), number_ranges(a.superseded),
        ])  # fmt: skip
    head = ["run id", "start", "end", "wall s", "iterations", "processes", "superseded"]
    return _table(head, rows, text_columns=(0, 1, 2)) + (
        '\n<p class="note">An iteration run again by a later attempt is reported from the later one; the earlier '
        "window is superseded (rework).</p>"
    )


def _checks_section(checks: dict[str, Any] | None) -> str:
    if checks is None:
        return '<p class="note">The checks were not run for this report (<code>goodput check</code> runs them).</p>'
    errors, warnings = checks.get("errors", 0), checks.get("warnings", 0)
    if not errors and not warnings:
        return '<p class="ok">No findings: every check passed.</p>'
    summary = (
        f'<p><span class="{"error" if errors else "ok"}">{errors} error{"s" * (errors != 1)}</span>, '
        f'<span class="{"warning" if warnings else "ok"}">{warnings} warning{"s" * (warnings != 1)}</span> '
        "(<code>goodput check</code> lists each finding).</p>"
    )
    rows = [
        [escape(rule), f'<span class="{escape(str(e["severity"]))}">{escape(str(e["severity"]))}</span>',
         str(e["count"])]
        for rule, e in (checks.get("rules") or {}).items()
    ]  # fmt: skip
    return summary + _table(["rule", "severity", "findings"], rows, text_columns=(0, 1))
