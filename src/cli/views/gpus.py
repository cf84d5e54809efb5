"""The GPU-seconds of a report (SPEC section 12) as a person reads them: the line under the plain table, and the
`--by pool` table with the line that names the bottleneck."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .formats import OutputFormat, render_rows
from .narrow import Fit, fold
from .tables import table_text

if TYPE_CHECKING:
    from rollup import Report
    from rollup.accounting import GpuFigures, GpuReport

POOL_TITLE = "GPU-seconds by iteration and pool (each GPU's instants charged once)"
POOL_HEADERS = ["iter", "pool", "gpus", "gpu s", "prod s", "ovhd s", "idle s", "waste s", "unacct s", "goodput"]


def _count(value: int | float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.2f}"


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value * 100:.1f}%"


def gpu_line(gpus: GpuReport) -> str:
    """`gpus: 4 in 2 pools (generation 2, training 2); GPU goodput 45.0% over the iterations; job 0.017 GPU-hours,
    45.0% of them productive`."""
    model = gpus.model
    pools = ", ".join(f"{pool.name} {_count(pool.count)}" for pool in model.pools)
    noun = "pool" if len(model.pools) == 1 else "pools"
    goodput = gpus.total().goodput
    total = gpus.total().rounded()[1]["productive"]
    job_hours = gpus.job_gpu_ns / 3.6e12
    job_goodput = gpus.job_json(total)["goodput"]
    sampled = " (sampled ranks scaled up)" if any(pool.sampled for pool in model.pools) else ""
    return (
        f"gpus: {_count(gpus.count)} in {len(model.pools)} {noun} ({pools}){sampled}; "
        f"GPU goodput {_percent(goodput) or 'none'} over the iterations; "
        f"job {job_hours:.3f} GPU-hours, {_percent(job_goodput) or 'none'} of them productive"
    )


def bottleneck_line(report: Report) -> str | None:
    """The pool the others waited on (its processes the most on the steps' critical path), in one line; None with
    fewer than two pools, or none on the path."""
    found = report.bottleneck
    if found is None:
        return None
    return f"bottleneck: {found.pool}, its processes on the steps' critical path {_percent(found.share)} of the time"


ROW_KEYS = ["iteration", "pool", "gpus", "gpu_s", "productive_gpu_s", "overhead_gpu_s", "idle_gpu_s", "wasted_gpu_s",
            "unaccounted_gpu_s", "goodput"]  # fmt: skip


def _values(label: Any, pool: str, gpus: int | float, figures: GpuFigures) -> list[Any]:
    return [label, pool, gpus, *figures.seconds(), figures.goodput]


def pool_rows(report: Report, *, total_only: bool = False) -> tuple[list[str], list[list[Any]]]:
    """`--by pool` as rows of plain values (CSV and Markdown take them so): a row per window and pool (with the GPUs
    the pool holds in the window's attempt), then each pool's total over the windows (with the most it holds)."""
    gpus = report.gpus
    assert gpus is not None
    counts = {pool.name: pool.count for pool in gpus.model.pools}
    rows: list[list[Any]] = []
    if not total_only:
        for position, row in enumerate(report.iterations):
            for name, figures in sorted(gpus.row_pools(position).items()):
                rows.append(_values(row.iteration, name, gpus.model.pool_gpus(row.run_id, name), figures))
    rows += [_values("total", pool.name, counts[pool.name], gpus.total(pool.name)) for pool in gpus.model.pools]
    return ROW_KEYS, rows


def pool_text(report: Report, fmt: OutputFormat, *, width: int, total_only: bool = False) -> str:
    """`report --by pool` as a table (with the GPU line and the bottleneck under it, folded to `width`), CSV or
    Markdown."""
    headers, rows = pool_rows(report, total_only=total_only)
    if fmt is not OutputFormat.table:
        return render_rows(headers, rows, fmt, width=width)
    assert report.gpus is not None
    lines = [gpu_line(report.gpus)]
    if (bottleneck := bottleneck_line(report)) is not None:
        lines.append(bottleneck)
    cells = [[str(r[0]), r[1], _count(r[2]), *(f"{v:.3f}" for v in r[3:9]), _percent(r[9])] for r in rows]
    fits = [Fit("figure", key=True), Fit("elide", key=True)] + [Fit("figure") for _ in POOL_HEADERS[2:]]
    section_at = len(rows) - len(report.gpus.model.pools)
    table = table_text(POOL_HEADERS, cells, title=POOL_TITLE, title_justify="left",
                       right=[h != "pool" for h in POOL_HEADERS], section_at=section_at or None, width=width,
                       fits=fits)  # fmt: skip
    return table + "".join(f"{part}\n" for line in lines for part in fold(line, width))
