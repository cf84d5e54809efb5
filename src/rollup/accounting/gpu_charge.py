"""GPU-seconds charged (SPEC section 12): each window swept per class of GPUs (`gpus.GpuModel`), the figures per
pool, and a report's GPU figures.

Each class of GPUs is swept as the wall clock is (`attribution.charged_by_key`): the spans that occupy it (its
processes', those carrying `goodput.fleet` of one of its fleets, those `--place` names for one), within each window.
The sweep's answer is kept beside the cache (`derived.kept_columns`) as the wall clock's is. Sampled ranks make a
GPU count `W / R` times: the figures are held times the least multiple that makes every weight whole, and rounded
to whole nanoseconds, the five of a window together, so they still add up to its `gpus * wall`.
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from rollup.base.schema import BUCKETS, sql_text
from rollup.store.attempts import attempt_sql
from rollup.store.derived import kept_columns, stretches_key

from .attribution import charged_by_key
from .gpus import GpuModel, gpu_count
from .intervals import Stretches
from .rows import seconds, share

if TYPE_CHECKING:
    import pyarrow as pa

    from rollup.store.spanset import SpanSet


@dataclass(slots=True)
class GpuFigures:
    """GPU-nanoseconds of a window (or of several summed), each times `scale` (the least multiple that makes every
    class's weight whole, 1 without sampling): held in all (`gpu_n`), per bucket, unaccounted. `rounded` and `json`
    give whole nanoseconds."""

    scale: int = 1
    gpu_n: int = 0
    bucket_n: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0))
    unaccounted_n: int = 0

    def add(self, other: GpuFigures) -> None:
        self.gpu_n += other.gpu_n
        for bucket in BUCKETS:
            self.bucket_n[bucket] += other.bucket_n[bucket]
        self.unaccounted_n += other.unaccounted_n

    def rounded(self) -> tuple[int, dict[str, int], int]:
        """Whole nanoseconds: the held total rounded, the five parts apportioned to add up to it exactly."""
        if self.scale == 1:
            return self.gpu_n, dict(self.bucket_n), self.unaccounted_n
        total = round(Fraction(self.gpu_n, self.scale))
        parts = [self.bucket_n[b] for b in BUCKETS] + [self.unaccounted_n]
        floors = [part // self.scale for part in parts]
        left = total - sum(floors)
        order = sorted(range(len(parts)), key=lambda i: (-(parts[i] % self.scale), i))
        for i in order[: max(0, left)]:
            floors[i] += 1
        return total, dict(zip(BUCKETS, floors[:4], strict=True)), floors[4]

    @property
    def goodput(self) -> float | None:
        total, by_bucket, _ = self.rounded()
        return share(by_bucket["productive"], total)

    def seconds(self) -> list[float]:
        """Held, each bucket (BUCKETS order) and unaccounted, in GPU-seconds."""
        total, by_bucket, unaccounted = self.rounded()
        return [seconds(ns) for ns in (total, *(by_bucket[b] for b in BUCKETS), unaccounted)]

    @property
    def busy(self) -> float | None:
        """The share of its GPU-seconds charged to some bucket other than idle: its GPUs were working."""
        total, by_bucket, _ = self.rounded()
        return share(total - by_bucket["idle"] - (total - sum(by_bucket.values())), total)

    def json(self) -> dict[str, Any]:
        total, by_bucket, unaccounted = self.rounded()
        out: dict[str, Any] = {"gpu_s": seconds(total)}
        out |= {f"{b}_gpu_s": seconds(by_bucket[b]) for b in BUCKETS}
        return out | {"unaccounted_gpu_s": seconds(unaccounted), "goodput": share(by_bucket["productive"], total)}


def _scale(model: GpuModel) -> int:
    return math.lcm(1, *(c.weight.denominator for c in model.classes))


def _occupancy(model: GpuModel) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Which spans occupy each class: by process (`attempt`, `process`, `host_pid`, `class`) and by fleet
    (`attempt`, `fleet`, `class`: a span's own goodput.fleet, or what `--place` names it for); and each class's
    pool (a position in `model.pools`) and weight times the scale (`class`, `pool`, `weight`)."""
    import pyarrow as pa

    scale = _scale(model)
    pool_number = {pool.name: number for number, pool in enumerate(model.pools)}
    by_process: dict[str, list[Any]] = {"attempt": [], "process": [], "host_pid": [], "class": []}
    by_fleet: dict[str, list[Any]] = {"attempt": [], "fleet": [], "class": []}
    for number, gpu_class in enumerate(model.classes):
        for member in gpu_class.members:
            holder = model.holders[member]
            row: tuple[Any, ...] = (gpu_class.attempt, holder.process, holder.host_pid, number)
            for column, value in zip(by_process, row, strict=True):
                by_process[column].append(value)
        for fleet in gpu_class.fleets:
            for column, value in zip(by_fleet, (gpu_class.attempt, fleet, number), strict=True):
                by_fleet[column].append(value)
    types = {"attempt": pa.string(), "process": pa.string(), "host_pid": pa.string(), "fleet": pa.string(),
             "class": pa.int64()}  # fmt: skip
    weights = pa.table({
        "class": pa.array(range(len(model.classes)), pa.int64()),
        "pool": pa.array([pool_number[c.pool] for c in model.classes], pa.int64()),
        "weight": pa.array([int(c.weight * scale) for c in model.classes], pa.int64()),
    })  # fmt: skip
    return (
        pa.table({k: pa.array(v, types[k]) for k, v in by_process.items()}),
        pa.table({k: pa.array(v, types[k]) for k, v in by_fleet.items()}),
        weights,
    )


def _placed_sql(placed: Mapping[str, str]) -> str:
    """SQL: the fleet a span works for: its own goodput.fleet, else the one `--place` names for its name or group."""
    cases = " ".join(
        f"WHEN s.name = {sql_text(key)} OR s.span_group = {sql_text(key)} THEN {sql_text(fleet)}"
        for key, fleet in placed.items()
    )
    return f"coalesce(s.fleet, CASE {cases} END)" if cases else "s.fleet"


@dataclass
class GpuCharges:
    """Per window (by position): its figures per pool (by name)."""

    by_window: list[dict[str, GpuFigures]]
    scale: int = 1

    def window(self, position: int) -> GpuFigures:
        return self.total([position])

    def total(self, positions: Sequence[int] | None = None, pool: str | None = None) -> GpuFigures:
        out = GpuFigures(self.scale)
        for position in range(len(self.by_window)) if positions is None else positions:
            for name, figures in self.by_window[position].items():
                if pool in (None, name):
                    out.add(figures)
        return out


def charge_gpus(
    spans: SpanSet,
    model: GpuModel,
    stretches: Sequence[tuple[int, int]],
    attempts: Sequence[str],
    precedence: Sequence[str],
) -> GpuCharges:
    """Each stretch (of attempt `attempts[i]`) charged per GPU class of its attempt, instant by instant as the wall
    clock is: the first active bucket of the spans occupying the class, else unaccounted; summed per pool."""
    scale = _scale(model)
    if not stretches or not model.classes:
        return GpuCharges([{} for _ in stretches], scale)
    members, fleets, weights = _occupancy(model)

    def sweep() -> tuple[dict[str, array], dict[str, Any]]:
        found = _swept_gpus(spans, stretches, precedence, model, members, fleets, weights)
        columns = {"position": array("q"), "pool": array("q"), **{f"r{i}": array("q") for i in range(len(BUCKETS))}}
        for (position, pool), by_rank in found.items():
            columns["position"].append(position)
            columns["pool"].append(pool)
            for i, ns in enumerate(by_rank):
                columns[f"r{i}"].append(ns)
        return columns, {}

    of = Stretches.of(stretches)
    occupancy = [table.to_pydict() for table in (members, fleets, weights)]
    key: list[bytes | str] = [stretches_key(of.starts, of.ends), "\x00".join(attempts), ",".join(precedence),
                              json.dumps([occupancy, sorted(model.placed.items())], sort_keys=True)]  # fmt: skip
    columns, _ = kept_columns(spans, "gpus", key, sweep)  # a re-run on cached files reads the sweep's answer
    busy = {(p, n): [columns[f"r{i}"][row] for i in range(len(BUCKETS))]
            for row, (p, n) in enumerate(zip(columns["position"], columns["pool"], strict=True))}  # fmt: skip
    return _by_window(model, stretches, attempts, precedence, busy, scale)


def _swept_gpus(
    spans: SpanSet,
    stretches: Sequence[tuple[int, int]],
    precedence: Sequence[str],
    model: GpuModel,
    members: pa.Table,
    fleets: pa.Table,
    weights: pa.Table,
) -> dict[tuple[int, int], list[int]]:
    """`charge_gpus`' sweep: per (stretch position, pool number), the GPU-nanoseconds (times the scale) charged to
    each bucket in precedence order, from every class's own sweep weighted by its GPUs."""
    import pyarrow as pa
    import pyarrow.compute as pc

    busy: dict[tuple[int, int], list[int]] = {}
    with (
        spans.registered("gpu_members", members) as members_table,
        spans.registered("gpu_fleets", fleets) as fleets_table,
    ):
        attempt_of_span = attempt_sql("s.run_id")
        placed = _placed_sql(model.placed)

        def keyed(spans_sql: str) -> str:
            return f"""
                SELECT s.start_ns, s.end_ns, m.class AS process, s.bucket FROM ({spans_sql}) s
                JOIN {members_table} m ON m.attempt = {attempt_of_span}
                     AND m.process = s.process AND m.host_pid IS NOT DISTINCT FROM s.host_pid
                UNION ALL
                SELECT s.start_ns, s.end_ns, f.class AS process, s.bucket FROM ({spans_sql}) s
                JOIN {fleets_table} f ON f.attempt = {attempt_of_span} AND f.fleet = {placed}
            """

        ranks = [f"r{i}" for i in range(len(BUCKETS))]
        for positions, table in charged_by_key(spans, stretches, precedence, keyed):
            joined = table.rename_columns(["stretch", "class", *ranks]).join(weights, "class")
            weighted = (
                pa.table(
                    {"stretch": joined["stretch"], "pool": joined["pool"]}
                    | {r: pc.multiply(joined[r].fill_null(0), joined["weight"]) for r in ranks}
                )
                .group_by(["stretch", "pool"])
                .aggregate([(r, "sum") for r in ranks])
            )
            stretch_column, pool_column = weighted["stretch"].to_pylist(), weighted["pool"].to_pylist()
            sums = [weighted[f"{r}_sum"].to_pylist() for r in ranks]
            for row, (stretch, pool) in enumerate(zip(stretch_column, pool_column, strict=True)):
                busy[(positions[stretch], pool)] = [int(column[row]) for column in sums]
    return busy


def _by_window(
    model: GpuModel,
    stretches: Sequence[tuple[int, int]],
    attempts: Sequence[str],
    precedence: Sequence[str],
    busy: Mapping[tuple[int, int], Sequence[int]],
    scale: int,
) -> GpuCharges:
    """Each stretch's figures per pool of its attempt, from the sweep's busy GPU-nanoseconds."""
    by_window: list[dict[str, GpuFigures]] = [{} for _ in stretches]
    held: dict[tuple[str, int], int] = {}  # (attempt, pool number) -> GPUs held x scale
    pool_number = {pool.name: number for number, pool in enumerate(model.pools)}
    for gpu_class in model.classes:
        key = (gpu_class.attempt, pool_number[gpu_class.pool])
        held[key] = held.get(key, 0) + int(gpu_class.weight * scale)
    pools_of: dict[str, list[tuple[int, int]]] = {}
    for (attempt, number), count in sorted(held.items()):
        pools_of.setdefault(attempt, []).append((number, count))
    for position, ((start, end), attempt) in enumerate(zip(stretches, attempts, strict=True)):
        wall = end - start
        for number, count in pools_of.get(attempt, []):
            by_rank = busy.get((position, number), [0, 0, 0, 0])
            figures = GpuFigures(scale, wall * count, dict(zip(precedence, by_rank, strict=True)))
            figures.bucket_n = {b: figures.bucket_n[b] for b in BUCKETS}
            figures.unaccounted_n = wall * count - sum(by_rank)
            by_window[position][model.pools[number].name] = figures
    return GpuCharges(by_window, scale)


# --- the report's GPU figures ---------------------------------------------------------------------------------------


@dataclass
class GpuReport:
    """A report's GPU figures: per window of its rows, per pool (`windows`; row i's window is `row_window[i]`), the
    superseded windows' (rework), and the job's GPU-nanoseconds held (each attempt's GPUs times its extent), all
    times `scale` (`GpuFigures`)."""

    model: GpuModel
    windows: list[dict[str, GpuFigures]]
    row_window: list[int]
    rework: GpuFigures
    job_gpu_n: int
    scale: int

    def row(self, position: int) -> GpuFigures:
        """Row `position`'s window, all pools."""
        out = GpuFigures(self.scale)
        for figures in self.windows[self.row_window[position]].values():
            out.add(figures)
        return out

    def row_pools(self, position: int) -> dict[str, GpuFigures]:
        """Row `position`'s window, per pool (the pools of its attempt)."""
        return self.windows[self.row_window[position]]

    def total(self, pool: str | None = None) -> GpuFigures:
        """Every row's window once (of `pool` alone, if given)."""
        out = GpuFigures(self.scale)
        for by_pool in self.windows:
            for name, figures in by_pool.items():
                if pool in (None, name):
                    out.add(figures)
        return out

    @property
    def job_gpu_ns(self) -> int:
        return round(Fraction(self.job_gpu_n, self.scale))

    def job_json(self, productive_ns: int) -> dict[str, Any]:
        return {"gpu_s": seconds(self.job_gpu_ns), "productive_gpu_s": seconds(productive_ns),
                "goodput": share(productive_ns, self.job_gpu_ns)}  # fmt: skip

    @property
    def count(self) -> int | float:
        """The job's GPUs as JSON writes them."""
        return gpu_count(self.model.count)

    def json(self) -> dict[str, Any]:
        """SPEC section 12's `gpus` object."""
        productive = self.total().rounded()[1]["productive"]
        return {
            "count": gpu_count(self.model.count),
            "pools": [pool.json() for pool in self.model.pools],
            "job": self.job_json(productive),
        }


def gpu_report(
    spans: SpanSet,
    model: GpuModel,
    windows: Sequence[tuple[str, int, int, int]],
    rows: Sequence[tuple[str, int, int, int]],
    rework: Sequence[tuple[str, int, int]],
    extents: Sequence[tuple[str, int, int]],
    precedence: Sequence[str],
    charge: Callable[..., GpuCharges] | None = None,
) -> GpuReport:
    """The GPU figures of a report whose windows are `windows` ((attempt, iteration, start, end) each: two
    iterations whose windows coincide are two windows, as the wall clock's total counts them) and whose rows are
    `rows` (their windows' keys: `--by process` gives a window once per process, and none where no process has a
    bucketed span, which still counts in the total), whose superseded windows are `rework` ((attempt, start, end),
    each charged) and whose attempts span `extents`. `charge`: how the stretches are charged (`charge_gpus`, or a
    watcher's, which keeps each stretch's answer)."""
    distinct: dict[tuple[str, int, int, int], int] = {}
    for window in windows:
        distinct.setdefault(window, len(distinct))
    for row in rows:
        distinct.setdefault(row, len(distinct))
    keys = list(distinct)
    stretches = [(start, end) for _, _, start, end in keys] + [(start, end) for _, start, end in rework]
    attempts = [attempt for attempt, _, _, _ in keys] + [attempt for attempt, _, _ in rework]
    charges = (charge or charge_gpus)(spans, model, stretches, attempts, precedence)
    scale = charges.scale
    charged = charges.by_window[: len(keys)]
    lost = charges.total(range(len(keys), len(stretches)))
    held = {a: int(model.held_in(a) * scale) for a in {c.attempt for c in model.classes}}
    job = sum(held.get(attempt, 0) * (end - start) for attempt, start, end in extents)
    return GpuReport(model, charged, [distinct[row] for row in rows], lost, job, scale)
