"""The report (SPEC section 6's JSON object) as the per-iteration table a person reads, or as flat rows."""

from __future__ import annotations

from typing import Any

from instrument.groups import BUCKETS

from .tables import table_text

REPORT_TITLE = "Wall clock by iteration (each instant charged once)"
_SHORT = {"productive": "prod", "overhead": "ovhd", "idle": "idle", "wasted": "waste"}


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def report_rows(payload: dict[str, Any], by_process: bool) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of the report for CSV and Markdown: one row an iteration, then `total` and `outside`."""
    head = ["iteration"] + (["process"] if by_process else []) + ["wall_s"] + [f"{b}_s" for b in BUCKETS]
    head += ["unaccounted_s", "goodput"] + [f"span_{b}_s" for b in BUCKETS]

    def row(label: Any, process: Any, item: dict[str, Any]) -> list[Any]:
        values = [label] + ([process] if by_process else []) + [item["wall_s"]]
        values += [item[f"{b}_s"] for b in BUCKETS] + [item["unaccounted_s"], item.get("goodput")]
        spans = item.get("span_seconds") or {}
        return values + [spans.get(b) for b in BUCKETS]

    rows = [row(it["iteration"], it.get("process"), it) for it in payload["iterations"]]
    rows.append(row("total", None, payload["total"]))
    rows.append(row("outside", None, payload["outside"]))
    return head, rows


def report_table(payload: dict[str, Any], by_process: bool, *, width: int) -> str:
    """The report as a boxed table: seconds to the millisecond, goodput in percent, span-seconds and their ratio."""
    headers = ["iter"] + (["process"] if by_process else []) + ["wall s", *[f"{_SHORT[b]} s" for b in BUCKETS]]
    headers += ["unacct s", "goodput", "span s", "span/wall"]

    def cells(label: str, process: str | None, item: dict[str, Any]) -> list[str]:
        span_total = sum((item.get("span_seconds") or {}).values())
        wall = item["wall_s"]
        out = [label] + ([process or ""] if by_process else []) + [f"{wall:.3f}"]
        out += [f"{item[f'{b}_s']:.3f}" for b in BUCKETS] + [f"{item['unaccounted_s']:.3f}"]
        out.append(_percent(item["goodput"]) if "goodput" in item else "")
        out.append(f"{span_total:.3f}" if "span_seconds" in item else "")
        out.append(f"{span_total / wall:.2f}x" if "span_seconds" in item and wall > 0 else "")
        return out

    rows = [cells(str(item["iteration"]), item.get("process"), item) for item in payload["iterations"]]
    rows += [cells("total", None, payload["total"]), cells("outside", None, payload["outside"])]
    right = [header != "process" for header in headers]
    return table_text(
        headers,
        rows,
        title=REPORT_TITLE,
        title_justify="left",
        right=right,
        section_at=len(payload["iterations"]),
        width=width,
    )
