"""`report --by name` / `--by group` (SPEC section 8) as text: a block per iteration, then the total's block.

Each block lists the names under their bucket with the wall seconds charged to them, their span-seconds and their
share of the block's wall clock; the rows come in the JSON's order (bucket order, then wall seconds descending).
CSV and Markdown get one flat row per (iteration, name, bucket), the total's rows labelled `total`.
"""

from __future__ import annotations

from typing import Any

from .formats import OutputFormat, render_rows
from .narrow import Fit
from .tables import table_text

_FITS = [Fit("text"), Fit("elide"), Fit("figure"), Fit("figure", drop=1), Fit("figure")]
_HEADERS = ["bucket", "{key}", "wall s", "span s", "share"]


def breakdown_key(payload: dict[str, Any]) -> str:
    """`name` or `group`: what the report's `names` lists are keyed by (`name` when they are all empty)."""
    for item in (payload["total"], *payload["iterations"]):
        for entry in item.get("names") or ():
            return "group" if "group" in entry else "name"
    return "name"


def _block(title: str, names: list[dict[str, Any]], wall_s: float, key: str, width: int) -> str:
    rows = []
    previous = None
    for entry in names:
        bucket = entry["bucket"]
        share = f"{100 * entry['wall_s'] / wall_s:.1f}%" if wall_s > 0 else ""
        rows.append(
            [bucket if bucket != previous else "", entry[key] or '""', f"{entry['wall_s']:.3f}",
             f"{entry['span_s']:.3f}", share]
        )  # fmt: skip
        previous = bucket
    if not rows:
        return f"{title}\n  no bucketed span\n"
    headers = [h.format(key=key) for h in _HEADERS]
    right = [False, False, True, True, True]
    return table_text(headers, rows, title=title, title_justify="left", right=right, width=width, fits=_FITS)


def _goodput(item: dict[str, Any]) -> str:
    goodput = item.get("goodput")
    return f", goodput {100 * goodput:.1f}%" if goodput is not None else ""


def breakdown_table(payload: dict[str, Any], *, width: int, total_only: bool = False) -> str:
    """One block per iteration (none with `total_only`), then the total's."""
    key = breakdown_key(payload)
    blocks = []
    if not total_only:
        for row in payload["iterations"]:
            title = f"iteration {row['iteration']}: {row['wall_s']:.3f} s window{_goodput(row)}"
            blocks.append(_block(title, row.get("names") or [], row["wall_s"], key, width))
    total = payload["total"]
    title = f"total: {total['wall_s']:.3f} s over {len(payload['iterations'])} iterations{_goodput(total)}"
    blocks.append(_block(title, total.get("names") or [], total["wall_s"], key, width))
    return "\n".join(blocks)


def breakdown_rows(payload: dict[str, Any], *, total_only: bool = False) -> tuple[list[str], list[list[Any]]]:
    """Flat rows for CSV and Markdown: iteration (or `total`), name or group, bucket, wall_s, span_s, share."""
    key = breakdown_key(payload)
    head = ["iteration", key, "bucket", "wall_s", "span_s", "share"]
    items = [] if total_only else [(row["iteration"], row) for row in payload["iterations"]]
    items.append(("total", payload["total"]))
    rows = []
    for label, item in items:
        wall = item["wall_s"]
        for entry in item.get("names") or []:
            share = entry["wall_s"] / wall if wall > 0 else None
            rows.append([label, entry[key], entry["bucket"], entry["wall_s"], entry["span_s"], share])
    return head, rows


def breakdown_text(payload: dict[str, Any], fmt: OutputFormat, *, width: int, total_only: bool = False) -> str:
    """The breakdown as a table (blocks), or as flat CSV / Markdown rows."""
    if fmt is OutputFormat.table:
        return breakdown_table(payload, width=width, total_only=total_only)
    return render_rows(*breakdown_rows(payload, total_only=total_only), fmt, width=width)
