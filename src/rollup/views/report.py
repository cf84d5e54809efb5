"""The report (SPEC section 6's JSON object) as the per-iteration table a person reads, or as flat rows.

Below `total` and `outside`: `rework` and `downtime` when the job lost work or time between attempts (SPEC section
7), and, when there was more than one attempt, the job's own wall clock and goodput. A run of one attempt reads as
it always did.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from instrument.groups import BUCKETS

from .breakdown import breakdown_text
from .formats import OutputFormat, json_chunks, json_text, render_rows
from .narrow import Fit
from .tables import table_text

REPORT_TITLE = "Wall clock by iteration (each instant charged once)"
_SHORT = {"productive": "prod", "overhead": "ovhd", "idle": "idle", "wasted": "waste"}
# How the table gives way at a narrow width: the span-seconds (a cross-check beside the wall clock) go first, then
# the unaccounted seconds (the wall clock less the four buckets); iteration and process head each part of a split.
_FITS = {
    "iter": Fit("figure", key=True),
    "process": Fit("elide", key=True),
    "unacct s": Fit("figure", drop=2),
    "goodput": Fit("figure", short="good-put"),
    "span s": Fit("figure", drop=1),
    "span/wall": Fit("figure", drop=1),
}


# A figure far above its median over the iterations (SPEC section 10) is marked, and the mark explained below.
OUTLIER_MARK = "*"
OUTLIER_NOTE = f"{OUTLIER_MARK} outlier: more than 3 scaled MADs (and 1 ms) above the median of the iterations"


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def _job_rows(payload: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The whole-run rows below the iterations: total, outside, then rework, downtime and job where they say
    something (rework and downtime when not zero, job when there was more than one attempt)."""
    rows = [("total", payload["total"]), ("outside", payload["outside"])]
    for label in ("rework", "downtime"):
        item = payload.get(label)
        if item and item["wall_s"] > 0:
            rows.append((label, item))
    if len(payload.get("attempts", ())) > 1:
        rows.append(("job", payload["job"]))
    return rows


# Rows of the whole run beside the iterations: the table leaves their goodput out (the JSON has it), since a share of
# start-up or of lost work is not what a reader of the column compares.
_WHOLE_RUN_ROWS = ("outside", "rework", "downtime")


def job_line(payload: dict[str, Any]) -> str | None:
    """`job: 1234.567 s wall clock, 61.2% goodput over 2 attempts`, when there was more than one attempt."""
    attempts = len(payload.get("attempts", ()))
    if attempts <= 1:
        return None
    job = payload["job"]
    goodput = _percent(job["goodput"]) if job.get("goodput") is not None else "no"
    return f"job: {job['wall_s']:.3f} s wall clock, {goodput} goodput over {attempts} attempts"


def report_rows(payload: dict[str, Any], by_process: bool) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of the report for CSV and Markdown: one row an iteration, then `total`, `outside` and the
    job's rows (see `_job_rows`); a figure a row does not have is left empty."""
    head = ["iteration"] + (["process"] if by_process else []) + ["wall_s"] + [f"{b}_s" for b in BUCKETS]
    head += ["unaccounted_s", "goodput"] + [f"span_{b}_s" for b in BUCKETS]

    def row(label: Any, process: Any, item: dict[str, Any]) -> list[Any]:
        values = [label] + ([process] if by_process else []) + [item["wall_s"]]
        values += [item.get(f"{b}_s") for b in BUCKETS] + [item.get("unaccounted_s"), item.get("goodput")]
        spans = item.get("span_seconds") or {}
        return values + [spans.get(b) for b in BUCKETS]

    rows = [row(it["iteration"], it.get("process"), it) for it in payload["iterations"]]
    rows += [row(label, None, item) for label, item in _job_rows(payload)]
    return head, rows


def report_table(payload: dict[str, Any], by_process: bool, *, width: int) -> str:
    """The report as a boxed table: seconds to the millisecond, goodput in percent, span-seconds and their ratio.

    Too narrow for it (80 columns), the span-seconds columns go first, then headers wrap onto two lines and process
    names keep their tail; a figure is never cut (see `narrow`).
    """
    headers = ["iter"] + (["process"] if by_process else []) + ["wall s", *[f"{_SHORT[b]} s" for b in BUCKETS]]
    headers += ["unacct s", "goodput", "span s", "span/wall"]

    def seconds(value: float | None, key: str = "", flagged: Sequence[str] = ()) -> str:
        return "" if value is None else f"{value:.3f}" + (OUTLIER_MARK if key in flagged else "")

    def cells(label: str, process: str | None, item: dict[str, Any]) -> list[str]:
        span_total = sum((item.get("span_seconds") or {}).values())
        wall = item["wall_s"]
        flagged = item.get("outliers") or ()
        out = [label] + ([process or ""] if by_process else []) + [seconds(wall, "wall_s", flagged)]
        out += [seconds(item.get(f"{b}_s"), f"{b}_s", flagged) for b in BUCKETS]
        out.append(seconds(item.get("unaccounted_s")))
        goodput = item.get("goodput") if label not in _WHOLE_RUN_ROWS else None  # a share of what, there?
        out.append(_percent(goodput) if goodput is not None else "")
        out.append(f"{span_total:.3f}" if "span_seconds" in item else "")
        out.append(f"{span_total / wall:.2f}x" if "span_seconds" in item and wall > 0 else "")
        return out

    rows = [cells(str(item["iteration"]), item.get("process"), item) for item in payload["iterations"]]
    rows += [cells(label, None, item) for label, item in _job_rows(payload) if label != "job"]
    right = [header != "process" for header in headers]
    fits = [_FITS.get(header, Fit("figure")) for header in headers]
    line = job_line(payload)
    if any(item.get("outliers") for item in payload["iterations"]):
        line = (f"{line}\n" if line else "") + OUTLIER_NOTE
    return table_text(
        headers,
        rows,
        title=REPORT_TITLE,
        title_justify="left",
        right=right,
        section_at=len(payload["iterations"]),
        width=width,
        fits=fits,
    ) + (f"{line}\n" if line else "")


def report_chunks(
    payload: dict[str, Any],
    by_process: bool,
    fmt: OutputFormat,
    *,
    width: int,
    checks: dict[str, Any] | None = None,
    total_only: bool = False,
) -> Iterable[str]:
    """`report_text` in pieces: the JSON an item at a time (the payload may hold its rows lazily, see
    `rollup.report_json`), every other format whole."""
    if fmt is OutputFormat.json:
        return json_chunks(payload)
    return [report_text(payload, by_process, fmt, width=width, checks=checks, total_only=total_only)]


def report_text(
    payload: dict[str, Any],
    by_process: bool,
    fmt: OutputFormat,
    *,
    width: int,
    checks: dict[str, Any] | None = None,
    total_only: bool = False,
) -> str:
    """The report in `fmt`: SPEC 6's JSON object, the table, its rows as CSV or Markdown, JSON Lines, or the HTML
    page (with `checks`, the `html.check_counts` summary, when the checks were run)."""
    if fmt is OutputFormat.json:
        return json_text(payload)
    if fmt is OutputFormat.html:
        from .html import report_html  # imports plotly: only for the page

        return report_html(payload, checks)
    if fmt is OutputFormat.jsonl:
        from .jsonl import report_jsonl

        return report_jsonl(payload)
    if "names" in payload["total"]:  # --by name / --by group: the breakdown is what the table and rows show
        return breakdown_text(payload, fmt, width=width, total_only=total_only)
    if fmt is OutputFormat.table:
        return report_table(payload, by_process, width=width)
    return render_rows(*report_rows(payload, by_process), fmt, width=width)
