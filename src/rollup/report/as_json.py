"""The report as SPEC's JSON object (sections 6-8 and 12): `report_json` and the pieces the views share with it.

Rows are written as they are asked for (`rows_json`), so writing the JSON of 500k iterations never holds it all.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rollup.accounting.breakdown import BREAKDOWN_KEYS
from rollup.accounting.rows import Figures, IterationRow, NameShare, seconds
from rollup.base.made import MadeOnRead
from rollup.store.attempts import Attempt

from .build import Report, _many_small_objects
from .figures import FIGURES

if TYPE_CHECKING:
    from rollup.accounting.gpu_charge import GpuFigures


def figures_json(figures: Figures, keys: frozenset[str] | None = None) -> dict[str, Any]:
    """A row's figures as SPEC section 6 writes them, in FIGURES' order: seconds to the nanosecond, floats always;
    `goodput` null where there is no wall clock; `span_seconds` by bucket. `keys`: only those figures (a whole-run
    row's, `WholeRun.keys`)."""
    out: dict[str, Any] = {}
    for key, inner, value in _json_plan(keys):
        if inner is None:
            out[key] = value(figures)
        else:
            out.setdefault(key, {})[inner] = value(figures)
    return out


@functools.cache
def _json_plan(keys: frozenset[str] | None) -> tuple[tuple[str, str | None, Callable[[Figures], Any]], ...]:
    """`figures_json`'s figures for `keys`, worked out once: (JSON key, key inside it or None, value)."""
    return tuple(
        (figure.json[0], figure.json[1] if len(figure.json) > 1 else None, figure.value)
        for figure in FIGURES
        if figure.json and (keys is None or figure.key in keys)
    )


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    """One item of the report's `attempts` list (SPEC section 7)."""
    return {
        "run_id": attempt.run_id,
        "start_ns": attempt.start_ns,
        "end_ns": attempt.end_ns,
        "first_iteration": attempt.first_iteration,
        "last_iteration": attempt.last_iteration,
        "processes": attempt.processes,
        "superseded": list(attempt.superseded),
    }


def names_json(names: list[NameShare], by: str) -> list[dict[str, Any]]:
    """SPEC section 8's list: `{"name" (or "group"), "bucket", "wall_s", "span_s"}` per name and bucket."""
    return [{by: n.name, "bucket": n.bucket, "wall_s": seconds(n.wall_ns), "span_s": seconds(n.span_ns)} for n in names]


def rows_json(report: Report) -> MadeOnRead[dict[str, Any]]:
    """A report's rows as SPEC section 6's objects, each made when it is asked for (and then let go): what
    `report_json(report, lazy=True)` holds in place of the list, so that writing the JSON of 500k iterations never
    holds it all."""
    rows = report.iterations
    return MadeOnRead(len(rows), lambda i: row_json(report, rows[i], i))


def row_json(report: Report, row: IterationRow, position: int = 0) -> dict[str, Any]:
    """One item of the report's `iterations` list."""
    gpu = report.gpus.row(position) if report.gpus is not None and report.by != "pool" else None
    return iteration_json(row, gpu, process=report.by_process, by=report.by)


def iteration_json(
    row: IterationRow, gpu: GpuFigures | None = None, *, process: bool = False, by: str | None = None
) -> dict[str, Any]:
    """One item of an `iterations` list (the report's, a watch refresh's): the row, its `process` when the report
    is `--by process`, its `gpu` object when given, its `names` when the report is `--by` a breakdown."""
    item: dict[str, Any] = {"iteration": row.iteration, "start_ns": row.start_ns, "end_ns": row.end_ns}
    if process:
        item["process"] = row.process
    item.update(figures_json(row.figures))
    if gpu is not None:
        item["gpu"] = gpu.json()
    if row.names is not None and by is not None:
        item["names"] = names_json(row.names, by)
    item["outliers"] = list(row.outliers)
    return item


def pool_rows_json(report: Report, position: int, row: IterationRow) -> list[dict[str, Any]]:
    """`--by pool`'s items for one window: the window's item once per pool of its attempt, with the pool's name,
    its GPUs and its own `gpu` object (SPEC section 12)."""
    assert report.gpus is not None
    plain = row_json(report, row, position)
    model = report.gpus.model
    out = []
    for name, figures in sorted(report.gpus.row_pools(position).items()):
        item = {key: plain[key] for key in ("iteration", "start_ns", "end_ns")}
        item |= {"pool": name, "gpus": model.pool_gpus(row.run_id, name)}
        item |= {key: value for key, value in plain.items() if key not in item}
        item["gpu"] = figures.json()
        out.append(item)
    return out


@_many_small_objects
def report_json(report: Report, *, lazy: bool = False) -> dict[str, Any]:
    """The object `report --format json` prints (SPEC sections 6, 7, 8 and 10); `--by process` adds `process` and
    `processes`, `--by name` / `--by group` a `names` list to each row and to the total. `lazy`: `iterations` is a
    `rows_json`, whose items are made as they are read (the CLI writes it a row at a time), not a list."""
    iterations: Sequence[dict[str, Any]]
    if report.by == "pool":
        iterations = [item for i, row in enumerate(report.iterations) for item in pool_rows_json(report, i, row)]
    else:
        iterations = (
            rows_json(report) if lazy else [row_json(report, row, i) for i, row in enumerate(report.iterations)]
        )
    out: dict[str, Any] = {"iterations": iterations}
    gpus = report.gpus
    for row in report.whole_run():
        out[row.label] = figures_json(row.figures, row.keys)
        if row.label == "total" and report.total_names is not None and report.by in BREAKDOWN_KEYS:
            out["total"]["names"] = names_json(report.total_names, report.by)
        if gpus is not None and row.label in ("total", "rework"):
            out[row.label]["gpu"] = (gpus.total() if row.label == "total" else gpus.rework).json()
    if report.recent is not None:
        out["recent"] = report.recent.json()
    out["attempts"] = [attempt_json(a) for a in report.attempts]
    if report.by_process:
        out["processes"] = [{"process": p, **figures_json(f)} for p, f in report.process_totals.items()]
    if gpus is not None:
        out["gpus"] = gpus.json()
        if report.by == "pool":
            out["pools"] = [{"pool": pool.name, "gpus": pool.count, "gpu": gpus.total(pool.name).json()}
                            for pool in gpus.model.pools]  # fmt: skip
            out["bottleneck"] = None if report.bottleneck is None else report.bottleneck.json()
    return out
