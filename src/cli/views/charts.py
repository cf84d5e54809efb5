"""The report page's charts (`html.report_html`) as plotly figure dicts, and the colours every part of the page
shares. plotly itself is imported only where a page is written (`plot_divs`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from instrument.groups import BUCKETS
from rollup import GoodputError
from rollup.report import FIGURES

if TYPE_CHECKING:
    from rollup import Report
    from rollup.accounting import IterationRow, NameShare
    from rollup.critical import PathShare
    from rollup.report import Figure

# One colour per bucket wherever it appears (the bars, the name breakdown, the tables' swatches), and one for the
# wall clock no bucketed span covered: one for each stacked figure (`rollup.FIGURES`).
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


def _plotly_io() -> Any:
    """plotly's `io` module, imported on first use: only the HTML report needs it."""
    try:
        import plotly.io
    except ImportError:
        raise GoodputError("the HTML report needs plotly, which is not installed: pip install 'plotly>=5'") from None
    return plotly.io


def plot_divs(figures: Sequence[tuple[str, dict[str, Any], int]]) -> Iterable[tuple[str, str]]:
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


def stacked_part(figure: Figure) -> str:
    """A stacked figure's name: its bucket, or `unaccounted`."""
    return figure.key.removesuffix("_s")


def process_figures(rows: list[IterationRow]) -> list[tuple[str, dict[str, Any], int]]:
    """With `--by process`: one small chart per process (`iterations_figure` of its rows, titled with its name),
    in the order of the processes' first rows, all on one scale of seconds and one range of iterations, so that
    their bars compare at a glance and each goodput line joins that process's own iterations only."""
    by_process: dict[str, list[IterationRow]] = {}
    for row in rows:
        by_process.setdefault(str(row.process or ""), []).append(row)
    top = max((r.figures.wall_s for r in rows), default=0.0) * 1.05 or 1.0
    span = [min(r.iteration for r in rows) - 0.5, max(r.iteration for r in rows) + 0.5]
    out = []
    for number, (process, of_process) in enumerate(by_process.items()):
        chart = iterations_figure(of_process, title=process, legend=number == 0, count=len(rows) // len(by_process))
        chart["layout"]["yaxis"]["range"] = [0, top]
        chart["layout"]["xaxis"]["range"] = span
        out.append((f"goodput-iterations-{number}", chart, 300 if number == 0 else 260))
    return out


def iterations_figure(
    rows: list[IterationRow], *, title: str | None = None, legend: bool = True, count: int | None = None
) -> dict[str, Any]:
    """The stacked bars (one trace per stacked figure: the buckets and unaccounted) and the goodput line on a second
    axis, iterations on the x axis. Outlier rows (SPEC 10) get a marker above the bar. `title` names the chart (a
    process's, `process_figures`), `legend` whether it shows the legend, `count` the rows that decide how dense
    the chart is drawn (default: its own)."""
    x: Any = [r.iteration for r in rows]
    many = (count or len(rows)) > 200  # a line and markers that stay readable over thousands of bars
    traces: list[dict[str, Any]] = []
    for figure in FIGURES:
        if not figure.stacked:
            continue
        part = stacked_part(figure)
        traces.append({
            "type": "bar",
            "name": part,
            "x": x,
            "y": [_s(figure.value(r.figures)) for r in rows],
            "marker": {"color": BUCKET_COLOURS[part], "line": {"width": 0}},
            "hovertemplate": f"{part} %{{y:.3f}} s<extra></extra>",
            **({"width": 1.0 if many else 0.85} if title is not None else {}),  # a process's rows may skip windows
        })  # fmt: skip
    traces.append({
        "type": "scatter",
        "mode": "lines" if many else "lines+markers",
        "name": "goodput",
        "x": x,
        "y": [None if (g := r.figures.goodput) is None else round(g, 6) for r in rows],
        "customdata": [_s(r.figures.wall_s) for r in rows],
        "yaxis": "y2",
        "line": {"color": GOODPUT_COLOUR, "width": 1 if many else 1.5},
        "opacity": 0.6 if many else 1,
        "marker": {"size": 5},
        "hovertemplate": "goodput %{y:.1%} of %{customdata:.3f} s wall<extra></extra>",
    })  # fmt: skip
    outliers = [i for i, r in enumerate(rows) if r.outliers]
    if outliers:
        traces.append({
            "type": "scatter",
            "mode": "markers",
            "name": "outlier",
            "x": [x[i] for i in outliers],
            "y": [_s(rows[i].figures.wall_s) for i in outliers],
            "text": [_label(", ".join(rows[i].outliers)) for i in outliers],
            "marker": {"symbol": "triangle-down", "size": 6 if many else 9, "color": OUTLIER_COLOUR},
            "hovertemplate": "outlier: %{text}<extra></extra>",
        })  # fmt: skip
    layout: dict[str, Any] = {
        "barmode": "stack",
        "bargap": 0 if many else 0.15,
        "hovermode": "x unified",
        "margin": {"l": 60, "r": 60, "t": 30 + (30 if title is not None else 0) + (20 if legend else 0), "b": 50},
        "showlegend": legend,
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "traceorder": "normal"},
        "xaxis": {"title": {"text": "iteration"}},
        "yaxis": {"title": {"text": "wall clock (s)"}, "rangemode": "tozero", "gridcolor": "#e6e6e6"},
        "yaxis2": {
            "title": {"text": "goodput"}, "overlaying": "y", "side": "right", "range": [0, 1.05],
            "tickvals": [0, 0.25, 0.5, 0.75, 1], "tickformat": ".0%", "showgrid": False,
        },
        "plot_bgcolor": "#ffffff",
    }  # fmt: skip
    if title is not None:
        layout["title"] = {"text": _label(title), "x": 0, "xanchor": "left", "font": {"size": 14}}
        layout["legend"]["y"] = 1.0
    if (count or len(rows)) <= 60:
        layout["xaxis"]["dtick"] = 1
    return {"data": traces, "layout": layout}


def gpu_figure(report: Report) -> dict[str, Any]:
    """A stacked bar of GPU-seconds per iteration and pool (SPEC section 12): the iterations and, within each, the
    pools on the x axis (a multi-category axis), the buckets and unaccounted stacked."""
    gpus = report.gpus
    assert gpus is not None
    cells = [(str(row.iteration), name, figures) for position, row in enumerate(report.iterations)
             for name, figures in sorted(gpus.row_pools(position).items())]  # fmt: skip
    x = [[c[0] for c in cells], [c[1] for c in cells]]
    parts = ["productive", "overhead", "idle", "wasted", "unaccounted"]
    traces = [
        {
            "type": "bar",
            "name": part,
            "x": x,
            "y": [round(c[2].seconds()[1 + index], 9) for c in cells],
            "marker": {"color": BUCKET_COLOURS[part], "line": {"width": 0}},
            "hovertemplate": f"%{{x}}: {part} %{{y:.3f}} GPU-s<extra></extra>",
        }
        for index, part in enumerate(parts)
    ]
    layout = {
        "barmode": "stack",
        "bargap": 0.15,
        "margin": {"l": 60, "r": 30, "t": 50, "b": 80},
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "traceorder": "normal"},
        "xaxis": {"title": {"text": "iteration / pool"}},
        "yaxis": {"title": {"text": "GPU-seconds"}, "rangemode": "tozero", "gridcolor": "#e6e6e6"},
        "plot_bgcolor": "#ffffff",
    }
    return {"data": traces, "layout": layout}


def name_labels(names: Sequence[NameShare]) -> list[str]:
    """Each name escaped, with its bucket added where one name has time in several buckets."""
    counts: dict[str, int] = {}
    for share in names:
        counts[share.name] = counts.get(share.name, 0) + 1
    return [
        _label(share.name or "(none)") + (f" [{share.bucket}]" if counts[share.name] > 1 else "") for share in names
    ]


def names_figure(names: Sequence[NameShare], key: str) -> dict[str, Any]:
    """Horizontal bars, the largest wall clock on top, one trace per bucket so the colours match the iteration
    chart; span-seconds in the hover."""
    shown = sorted(names, key=lambda share: -share.wall_ns)[:CHART_NAMES]
    bars = [(s.bucket, _s(s.wall_s), _s(s.span_s)) for s in shown]
    hover = "%{y}: %{x:.3f} s wall, %{customdata:.3f} span-s"
    return _bucket_bars(name_labels(shown), bars, hover, "wall clock (s), summed over the iterations")


def critical_figure(names: Sequence[PathShare]) -> dict[str, Any]:
    """The phases' shares of the critical path (SPEC section 14) as horizontal bars, the most on top, coloured by
    bucket as everywhere on the page; seconds on the path in the hover."""
    shown = list(names[:CHART_NAMES])
    counts: dict[str | None, int] = {}
    for share in shown:
        counts[share.key] = counts.get(share.key, 0) + 1
    labels = [_label(s.key or "(none)") + (f" [{s.bucket}]" if counts[s.key] > 1 else "") for s in shown]
    bars = [(s.bucket or "", round(s.share or 0.0, 6), _s(s.critical_s)) for s in shown]
    return _bucket_bars(labels, bars, "%{y}: %{x:.1%} of the path, %{customdata:.3f} s", "share of the critical path",
                        tickformat=".0%")  # fmt: skip


def _bucket_bars(
    labels: Sequence[str],
    bars: Sequence[tuple[str, float | None, float | None]],
    hover: str,
    title: str,
    tickformat: str | None = None,
) -> dict[str, Any]:
    """Horizontal bars in the order given (top first), one trace per bucket: `bars` holds each bar's bucket, value
    and hover figure."""
    traces = []
    for bucket in BUCKETS:
        picked = [i for i, bar in enumerate(bars) if bar[0] == bucket]
        if not picked:
            continue
        traces.append({
            "type": "bar",
            "orientation": "h",
            "name": bucket,
            "y": [labels[i] for i in picked],
            "x": [bars[i][1] for i in picked],
            "customdata": [bars[i][2] for i in picked],
            "marker": {"color": BUCKET_COLOURS[bucket]},
            "hovertemplate": hover + "<extra>" + bucket + "</extra>",
        })  # fmt: skip
    xaxis: dict[str, Any] = {"title": {"text": title}, "rangemode": "tozero", "gridcolor": "#e6e6e6"}
    if tickformat is not None:
        xaxis["tickformat"] = tickformat
    return {
        "data": traces,
        "layout": {
            "barmode": "stack",
            "height": 90 + 22 * len(labels),
            "margin": {"l": 20, "r": 30, "t": 30, "b": 40},
            "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "traceorder": "normal"},
            "xaxis": xaxis,
            "yaxis": {"categoryorder": "array", "categoryarray": labels, "autorange": "reversed", "automargin": True},
            "plot_bgcolor": "#ffffff",
        },
    }
