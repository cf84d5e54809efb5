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
from typing import Any

from instrument.groups import BUCKETS

from ..errors import GoodputError

# One colour per bucket wherever it appears (the bars, the name breakdown, the tables' swatches), and one for the
# wall clock no bucketed span covered.
BUCKET_COLOURS = {
    "productive": "#2e9e44",
    "overhead": "#4c78a8",
    "idle": "#f2a541",
    "wasted": "#d6404e",
    "unaccounted": "#c4c4c4",
}
GOODPUT_COLOUR = "#222222"
OUTLIER_COLOUR = "#8e44ad"
# The name breakdown's chart shows this many names (largest wall clock first); its table lists them all.
CHART_NAMES = 40

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

    `findings` are `rollup.checks.Finding`s (anything with `rule` and `severity`)."""
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


def report_html(payload: dict[str, Any], checks: dict[str, Any] | None) -> str:
    """The page for a report (the JSON object of SPEC sections 6-8) and the `check_counts` summary (None: the checks
    were not run for this report)."""
    rows = payload["iterations"]
    figures: list[tuple[str, dict[str, Any], int]] = []  # (div id, plotly figure, height in pixels)
    if rows:
        figures.append(("goodput-iterations", _iterations_figure(rows), 460))
    names, key = _names(payload["total"])
    if names:
        chart = _names_figure(names, key)
        figures.append(("goodput-names", chart, chart["layout"]["height"]))
    plots = dict(_plot_divs(figures))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>goodput report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>goodput report</h1>",
        f'<p class="lead">{_headline(payload)}</p>',
        "<h2>Wall clock by iteration</h2>",
        plots.get("goodput-iterations", '<p class="note">No iteration windows in these traces.</p>'),
        '<p class="note">Each instant of an iteration\'s window is charged once, to the first active bucket; what '
        "no bucketed span covered is unaccounted. The line is the iteration's goodput (productive / wall), right "
        "axis.</p>",
        "<h2>Whole run</h2>",
        _whole_run_table(payload),
    ]
    if payload.get("processes"):
        parts += ["<h2>By process</h2>", _process_table(payload["processes"])]
    if names:
        title = "span name" if key == "name" else "span group"
        parts += [f"<h2>The total by {title}</h2>", plots["goodput-names"], _names_table(names, key)]
    parts += ["<h2>Attempts</h2>", _attempts_table(payload.get("attempts") or [])]
    parts += ["<h2>Checks</h2>", _checks_section(checks), "</body></html>"]
    return "\n".join(parts) + "\n"


# --- charts -------------------------------------------------------------------------------------------------------


def _plotly_io() -> Any:
    """plotly's `io` module, imported on first use: only the HTML report needs it."""
    try:
        import plotly.io
    except ImportError:
        raise GoodputError("the HTML report needs plotly, which is not installed: pip install 'plotly>=5'") from None
    return plotly.io


def _plot_divs(figures: Sequence[tuple[str, dict[str, Any], int]]) -> Iterable[tuple[str, str]]:
    """Each figure as a `<div>` with its script; plotly's JavaScript is inlined once, before the first."""
    pio = _plotly_io()
    config = {"displaylogo": False, "responsive": True}
    for index, (div_id, figure, height) in enumerate(figures):
        yield (
            div_id,
            pio.to_html(
                figure,
                include_plotlyjs=index == 0,
                full_html=False,
                div_id=div_id,  # fixed ids: the same report gives the same page
                config=config,
                default_height=f"{height}px",
                validate=False,  # built from plain lists here; validating 10,000-point traces costs seconds
            ),
        )


def _label(text: str) -> str:
    """A string from a trace as plotly should draw it: as text. plotly reads `<b>`, `<br>` and the like as markup and
    decodes `&lt;` `&gt;` `&amp;` (not `&quot;`, so quotes stay as they are: they are not markup there)."""
    return escape(text, quote=False)


def _s(value: float | None) -> float | None:
    """Seconds to the microsecond, for the charts."""
    return None if value is None else round(value, 6)


def _iterations_figure(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The stacked bars (one trace per bucket and unaccounted) and the goodput line on a second axis; with `--by
    process` the x axis has two levels, iteration and process. Outlier rows (SPEC 10) get a marker above the bar."""
    if "process" in rows[0]:
        x: Any = [[r["iteration"] for r in rows], [_label(str(r.get("process") or "")) for r in rows]]
    else:
        x = [r["iteration"] for r in rows]
    many = len(rows) > 200  # a line and markers that stay readable over thousands of bars
    traces: list[dict[str, Any]] = []
    for bucket in (*BUCKETS, "unaccounted"):
        traces.append({
            "type": "bar",
            "name": bucket,
            "x": x,
            "y": [_s(r.get(f"{bucket}_s")) for r in rows],
            "marker": {"color": BUCKET_COLOURS[bucket], "line": {"width": 0}},
            "hovertemplate": f"{bucket} %{{y:.3f}} s<extra></extra>",
        })  # fmt: skip
    traces.append({
        "type": "scatter",
        "mode": "lines" if many else "lines+markers",
        "name": "goodput",
        "x": x,
        "y": [None if r.get("goodput") is None else round(r["goodput"], 6) for r in rows],
        "customdata": [_s(r["wall_s"]) for r in rows],
        "yaxis": "y2",
        "line": {"color": GOODPUT_COLOUR, "width": 1 if many else 1.5},
        "opacity": 0.6 if many else 1,
        "marker": {"size": 5},
        "hovertemplate": "goodput %{y:.1%} of %{customdata:.3f} s wall<extra></extra>",
    })  # fmt: skip
    outliers = [i for i, r in enumerate(rows) if r.get("outliers")]
    if outliers:
        traces.append({
            "type": "scatter",
            "mode": "markers",
            "name": "outlier",
            "x": _pick(x, outliers),
            "y": [_s(rows[i]["wall_s"]) for i in outliers],
            "text": [_label(", ".join(rows[i]["outliers"])) for i in outliers],
            "marker": {"symbol": "triangle-down", "size": 6 if many else 9, "color": OUTLIER_COLOUR},
            "hovertemplate": "outlier: %{text}<extra></extra>",
        })  # fmt: skip
    layout: dict[str, Any] = {
        "barmode": "stack",
        "bargap": 0 if many else 0.15,
        "hovermode": "x unified",
        "margin": {"l": 60, "r": 60, "t": 30, "b": 50},
        "legend": {"orientation": "h", "x": 0, "y": 1.08, "traceorder": "normal"},
        "xaxis": {"title": {"text": "iteration"}},
        "yaxis": {"title": {"text": "wall clock (s)"}, "rangemode": "tozero", "gridcolor": "#e6e6e6"},
        "yaxis2": {
            "title": {"text": "goodput"}, "overlaying": "y", "side": "right", "range": [0, 1.05],
            "tickvals": [0, 0.25, 0.5, 0.75, 1], "tickformat": ".0%", "showgrid": False,
        },
        "plot_bgcolor": "#ffffff",
    }  # fmt: skip
    if "process" not in rows[0] and len(rows) <= 60:
        layout["xaxis"]["dtick"] = 1
    return {"data": traces, "layout": layout}


def _pick(x: Any, indices: list[int]) -> Any:
    if x and isinstance(x[0], list):
        return [[level[i] for i in indices] for level in x]
    return [x[i] for i in indices]


def _names(total: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The total's breakdown (SPEC 8) and whether it is keyed by `name` or by `group`; empty when there is none."""
    names = total.get("names") or []
    key = "group" if names and "group" in names[0] and "name" not in names[0] else "name"
    return names, key


def _name_labels(names: list[dict[str, Any]], key: str) -> list[str]:
    """Each name escaped, with its bucket added where one name has time in several buckets."""
    counts: dict[str, int] = {}
    for item in names:
        counts[item[key]] = counts.get(item[key], 0) + 1
    return [_label(item[key] or "(none)") + (f" [{item['bucket']}]" if counts[item[key]] > 1 else "") for item in names]


def _names_figure(names: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Horizontal bars, the largest wall clock on top, one trace per bucket so the colours match the iteration
    chart; span-seconds in the hover."""
    shown = sorted(names, key=lambda item: -item["wall_s"])[:CHART_NAMES]
    labels = _name_labels(shown, key)
    traces = []
    for bucket in BUCKETS:
        picked = [i for i, item in enumerate(shown) if item["bucket"] == bucket]
        if not picked:
            continue
        traces.append({
            "type": "bar",
            "orientation": "h",
            "name": bucket,
            "y": [labels[i] for i in picked],
            "x": [_s(shown[i]["wall_s"]) for i in picked],
            "customdata": [_s(shown[i].get("span_s")) for i in picked],
            "marker": {"color": BUCKET_COLOURS[bucket]},
            "hovertemplate": "%{y}: %{x:.3f} s wall, %{customdata:.3f} span-s<extra>" + bucket + "</extra>",
        })  # fmt: skip
    return {
        "data": traces,
        "layout": {
            "barmode": "stack",
            "height": 90 + 22 * len(shown),
            "margin": {"l": 20, "r": 30, "t": 30, "b": 40},
            "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "traceorder": "normal"},
            "xaxis": {
                "title": {"text": "wall clock (s), summed over the iterations"},
                "rangemode": "tozero",
                "gridcolor": "#e6e6e6",
            },
            "yaxis": {"categoryorder": "array", "categoryarray": labels, "autorange": "reversed", "automargin": True},
            "plot_bgcolor": "#ffffff",
        },
    }


# --- tables -------------------------------------------------------------------------------------------------------


def _headline(payload: dict[str, Any]) -> str:
    """`66.9% goodput over 6 iterations (4.792 s of wall clock); the job: 16.2% of 19.837 s over 2 attempts`."""
    total, rows = payload["total"], payload["iterations"]
    iterations = len({r["iteration"] for r in rows})
    text = (
        f"<b>{_percent(total.get('goodput'))}</b> goodput over {iterations:,} iteration{'s' * (iterations != 1)} "
        f"({total['wall_s']:.3f} s of wall clock)"
    )
    job, attempts = payload.get("job"), len(payload.get("attempts") or [])
    if job is not None:
        text += (
            f"; the whole job: <b>{_percent(job.get('goodput'))}</b> of {job['wall_s']:.3f} s"
            f" over {attempts} attempt{'s' * (attempts != 1)}"
        )
    return text


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


_FIGURE_HEAD = ["", "wall s", *(_swatch(b) + " s" for b in BUCKETS), _swatch("unaccounted") + " s", "goodput"]


def _figure_cells(item: dict[str, Any], *, goodput: bool = True) -> list[str]:
    cells = [_seconds(item.get("wall_s"))] + [_seconds(item.get(f"{b}_s")) for b in BUCKETS]
    return cells + [_seconds(item.get("unaccounted_s")), _percent(item.get("goodput")) if goodput else ""]


def _whole_run_table(payload: dict[str, Any]) -> str:
    """total (the iterations' sum), outside, rework, downtime and the job, with span-seconds beside the total."""
    rows = []
    for label in ("total", "outside", "rework", "downtime", "job"):
        item = payload.get(label)
        if item is not None:
            spans = item.get("span_seconds")
            span_cell = _seconds(sum(spans.values())) if spans else ""
            # As in the table: a goodput of start-up or of lost work is not what a reader compares.
            rows.append([label, *_figure_cells(item, goodput=label in ("total", "job")), span_cell])
    table = _table([*_FIGURE_HEAD, "span s"], rows)
    return table + (
        '\n<p class="note">outside: the run\'s time in no iteration window (start-up, gaps, shutdown); rework: '
        "windows a later attempt ran again; downtime: time between attempts; job: all of it, and the share of it "
        "that was kept productive work. span s: the naive sum of bucketed span durations.</p>"
    )


def _process_table(processes: list[dict[str, Any]]) -> str:
    rows = [[escape(str(p.get("process") or "")), *_figure_cells(p)] for p in processes]
    return _table(["process", *_FIGURE_HEAD[1:]], rows)


def _names_table(names: list[dict[str, Any]], key: str) -> str:
    labels = _name_labels(names, key)
    rows = [
        [label, _swatch(item["bucket"]) if item["bucket"] in BUCKET_COLOURS else escape(str(item["bucket"])),
         _seconds(item["wall_s"]), _seconds(item.get("span_s"))]
        for label, item in zip(labels, names, strict=True)
    ]  # fmt: skip
    note = f'\n<p class="note">The chart shows the {CHART_NAMES} largest.</p>' if len(names) > CHART_NAMES else ""
    return _table([key, "bucket", "wall s", "span s"], rows, text_columns=(0, 1)) + note


def _utc(ns: int | None) -> str:
    if ns is None:
        return ""
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def number_ranges(numbers: Sequence[int]) -> str:
    """`1-3, 7, 9-10`."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and runs[-1][1] == number - 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def _attempts_table(attempts: list[dict[str, Any]]) -> str:
    if not attempts:
        return '<p class="note">No attempts (no spans).</p>'
    rows = []
    for a in attempts:
        first, last = a.get("first_iteration"), a.get("last_iteration")
        iterations = "" if first is None else (f"{first}" if first == last else f"{first}-{last}")
        wall = (a["end_ns"] - a["start_ns"]) / 1e9 if a.get("start_ns") is not None else None
        rows.append([
            escape(a.get("run_id") or "(no run id)"), _utc(a.get("start_ns")), _utc(a.get("end_ns")), _seconds(wall),
            iterations, str(a.get("processes", "")), number_ranges(a.get("superseded") or []),
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
