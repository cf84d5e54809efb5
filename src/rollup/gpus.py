"""GPU-seconds (SPEC section 12): what each process holds, the pools its GPUs make, and every window charged per GPU.

A GPU is `(host.name, id)` in one attempt; the processes whose `goodput.gpu.ids` name it share it, a process with a
count holds that many of its own, and `--gpus FLEET=N` gives a fleet N of its own instead. GPUs that the same
processes hold are occupied by the same spans, so they are charged alike: they are one *class*, charged once and
counted as many times as it has GPUs (512 GPUs on 64 processes are 64 classes, not 512 sweeps). A class's spans are
its processes' bucketed spans, those carrying `goodput.fleet` of one of its fleets, and those `--place` names for
one; each class is swept as the wall clock is (`attribution.charged_by_key`), within each window.

Sampled ranks make a GPU count `W / R` times; the figures are then exact fractions of a nanosecond until they are
rounded, the five of a window together, so that they still add up to the window's `gpus * wall`.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from .attempts import ATTEMPT_SQL
from .attribution import charged_by_key
from .derived import kept_columns, stretches_key
from .errors import OptionError
from .intervals import Stretches
from .read.values import UNKNOWN_SERVICE
from .rows import seconds, share
from .schema import BUCKETS, sql_text

if TYPE_CHECKING:
    import pyarrow as pa

    from .spanset import SpanSet

GPU_KEYS = ("productive", "overhead", "idle", "wasted")
# A whole number as `--gpus` and the resources write one: ASCII digits only (str.isdigit also takes "²", which int()
# refuses).
WHOLE_NUMBER = re.compile(r"[0-9]+")


def _pairs(values: Sequence[str], option: str, what: str) -> list[tuple[str, str]]:
    out = []
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name.strip() or not rest.strip():
            raise OptionError(option, f"expected {what}, got {value!r}")
        out.append((name.strip(), rest.strip()))
    return out


@dataclass(frozen=True)
class GpuOptions:
    """`--gpus FLEET=N` (the fleet holds N GPUs of its own) and `--place NAME=FLEET` (spans of that name or
    `rl.span_group` occupy the fleet's GPUs), as given on the command line; checked when made."""

    gpus: tuple[str, ...] = ()
    place: tuple[str, ...] = ()
    counts: dict[str, int] = field(init=False, default_factory=dict)
    placed: dict[str, str] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        for fleet, text in _pairs(self.gpus, "--gpus", "FLEET=N, N a whole number of GPUs"):
            if not WHOLE_NUMBER.fullmatch(text):
                raise OptionError("--gpus", f"expected FLEET=N, N a whole number of GPUs, got {fleet}={text}")
            self.counts[fleet] = int(text)
        for name, fleet in _pairs(self.place, "--place", "NAME=FLEET (a span name or rl.span_group, a fleet)"):
            self.placed[name] = fleet

    @property
    def given(self) -> bool:
        return bool(self.counts or self.placed)


@dataclass(frozen=True)
class Holder:
    """One process, as its `holding` column says (SPEC section 12): its fleet, host, GPU ids or count, and the
    ranks it samples (`dl.world_size`, `dl.rank`)."""

    attempt: str
    process: str
    host_pid: str | None
    fleet: str
    host: str
    ids: tuple[str, ...]
    count: int
    world_size: int | None
    rank: str | None


def _ids(text: str) -> tuple[str, ...] | None:
    """GPU ids from `goodput.gpu.ids`' text: an array (rendered as JSON) or a comma-separated string; None when it
    is neither (a map, an array of arrays)."""
    if text.startswith("["):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
            return tuple(str(v) for v in value)
        if value is not None:
            return None
    if text.startswith("{"):
        return None
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _whole(text: str | None) -> int | None:
    return int(text) if text is not None and WHOLE_NUMBER.fullmatch(text.strip()) else None


def read_holders(spans: SpanSet) -> tuple[list[Holder], list[str]]:
    """Every process of `spans` with what it holds, and the notes about holdings that could not be read."""
    rows = spans.rows(
        f"SELECT DISTINCT {ATTEMPT_SQL}, process, host_pid, service, holding FROM {spans.own} ORDER BY ALL"
    )
    holders, unreadable = [], []
    for attempt, process, host_pid, service, text in rows:
        held: dict[str, str] = json.loads(text) if text else {}
        ids: tuple[str, ...] | None = ()
        if "goodput.gpu.ids" in held:
            ids = _ids(held["goodput.gpu.ids"])
            if ids is None:
                unreadable.append((process, held["goodput.gpu.ids"]))
                ids = ()
        fleet = held.get("goodput.fleet") or held.get("rl.worker_group") or service or UNKNOWN_SERVICE
        holders.append(
            Holder(attempt, process, host_pid, fleet, held.get("host.name") or "", ids or (),
                   0 if ids else (_whole(held.get("goodput.gpus")) or 0), _whole(held.get("dl.world_size")),
                   held.get("dl.rank"))
        )  # fmt: skip
    notes = []
    if unreadable:
        process, text = unreadable[0]
        more = f" (and {len(unreadable) - 1} more)" if len(unreadable) > 1 else ""
        notes.append(
            f"goodput.gpu.ids of {process}{more} is neither a list nor a comma-separated string ({text!r}): "
            "read as holding no GPU"
        )
    return holders, notes


@dataclass(frozen=True)
class GpuClass:
    """GPUs of one attempt held by the same processes (`members`, positions in `GpuModel.holders`): charged alike.
    `weight`: how many GPUs they count for (their number, times a sampled fleet's `W / R`)."""

    attempt: str
    members: tuple[int, ...]
    fleets: tuple[str, ...]
    pool: str
    weight: Fraction


@dataclass(frozen=True)
class Pool:
    """Fleets that share GPUs (transitively), named by them joined with `+`; `gpus`: the most it holds in one
    attempt; `sampled`: some fleet of it exported fewer ranks than its `dl.world_size`."""

    name: str
    fleets: tuple[str, ...]
    gpus: Fraction
    sampled: bool

    @property
    def count(self) -> int | float:
        """Its GPUs as JSON writes them (`gpu_count`)."""
        return gpu_count(self.gpus)

    def json(self) -> dict[str, Any]:
        return {"pool": self.name, "fleets": list(self.fleets), "gpus": self.count, "sampled": self.sampled}


def gpu_count(count: Fraction) -> int | float:
    """A GPU count as JSON writes it: a whole number as an int, a sampled fleet's fraction as a float."""
    return int(count) if count.denominator == 1 else float(count)


@dataclass
class GpuModel:
    """What the processes hold: their classes of GPUs and the pools, and the notes on what could not be read."""

    holders: list[Holder]
    classes: list[GpuClass]
    pools: list[Pool]
    notes: list[str]
    placed: dict[str, str]
    counted: frozenset[str] = frozenset()  # the fleets --gpus gave a count

    def held_in(self, attempt: str, pool: str | None = None) -> Fraction:
        """The GPUs held in `attempt` (of `pool` alone, if given)."""
        return sum((c.weight for c in self.classes if c.attempt == attempt and pool in (None, c.pool)), Fraction(0))

    def pool_gpus(self, attempt: str, pool: str) -> int | float:
        """The GPUs `pool` holds in `attempt`, as JSON writes them: what a window of that attempt is charged for
        (`Pool.count` is the most it holds in any attempt)."""
        return gpu_count(self.held_in(attempt, pool))

    @property
    def count(self) -> Fraction:
        """The job's GPUs: the most held in one attempt (`gpu_count` writes it)."""
        return max((self.held_in(a) for a in {c.attempt for c in self.classes}), default=Fraction(0))

    @property
    def fleets(self) -> list[str]:
        return sorted({h.fleet for h in self.holders})


def gpu_model(spans: SpanSet, options: GpuOptions, notes: list[str] | None = None) -> GpuModel | None:
    """The GPUs of `spans`' processes as SPEC section 12 says, or None when no process holds one and no `--gpus`
    was given (the report is then exactly the wall-clock one). An unknown fleet in `--gpus` or `--place` is an
    OptionError naming the fleets there are. What could not be read is said in `notes` (appended to), with a
    model or without."""
    holders, unread = read_holders(spans)
    if notes is not None:
        notes.extend(unread)
    fleets = sorted({h.fleet for h in holders})
    for option, named in (("--gpus", options.counts), ("--place", {v: k for k, v in options.placed.items()})):
        unknown = sorted(set(named) - set(fleets))
        if unknown:
            raise OptionError(option, f"no fleet named {', '.join(unknown)}; the fleets are {', '.join(fleets)}")
    sharing: dict[tuple[str, str, str], set[int]] = {}  # (attempt, host, id) -> the processes holding that GPU
    classes: dict[tuple[str, frozenset[int]], Fraction] = {}  # (attempt, members) -> how many GPUs
    for position, holder in enumerate(holders):
        if holder.fleet in options.counts:
            continue
        for gpu_id in holder.ids:
            sharing.setdefault((holder.attempt, holder.host, gpu_id), set()).add(position)
        if holder.count:
            key = (holder.attempt, frozenset({position}))
            classes[key] = classes.get(key, Fraction(0)) + holder.count
    for (attempt, _, _), holding in sharing.items():
        key = (attempt, frozenset(holding))
        classes[key] = classes.get(key, Fraction(0)) + 1
    multiplier = _sampling(holders, set(options.counts))
    for fleet, count in options.counts.items():
        for attempt in sorted({h.attempt for h in holders if h.fleet == fleet}):
            whole_fleet = frozenset(i for i, h in enumerate(holders) if h.fleet == fleet and h.attempt == attempt)
            if count:
                classes[(attempt, whole_fleet)] = Fraction(count)
    if not classes and not options.counts:  # --place alone names no GPU: the report stays the wall-clock one
        return None
    pool_of = _pools([{holders[i].fleet for i in held_by} for _, held_by in classes])
    made = []
    for (attempt, held_by), number in sorted(classes.items(), key=lambda item: (item[0][0], sorted(item[0][1]))):
        of = tuple(sorted({holders[i].fleet for i in held_by}))
        scale = max((multiplier.get(f, Fraction(1)) for f in of), default=Fraction(1))
        made.append(GpuClass(attempt, tuple(sorted(held_by)), of, pool_of[of[0]], number * scale))
    pools = []
    for name in sorted(set(pool_of.values())):
        fleets_of = tuple(sorted(f for f, p in pool_of.items() if p == name))
        held = max((sum((c.weight for c in made if c.pool == name and c.attempt == a), Fraction(0))
                    for a in {c.attempt for c in made}), default=Fraction(0))  # fmt: skip
        pools.append(Pool(name, fleets_of, held, any(multiplier.get(f, Fraction(1)) != 1 for f in fleets_of)))
    return GpuModel(holders, made, pools, unread, dict(options.placed), frozenset(options.counts))


def _sampling(holders: Sequence[Holder], counted: set[str]) -> dict[str, Fraction]:
    """Per fleet that exported fewer distinct `dl.rank`s (R) than its `dl.world_size` (W), W / R; `--gpus` fleets
    (`counted`) are whole."""
    out = {}
    for fleet in sorted({h.fleet for h in holders} - counted):
        of = [h for h in holders if h.fleet == fleet]
        world = max((h.world_size for h in of if h.world_size), default=None)
        ranks = {h.rank for h in of if h.rank is not None}
        if world and ranks and len(ranks) < world:
            out[fleet] = Fraction(world, len(ranks))
    return out


def _pools(groups: Sequence[set[str]]) -> dict[str, str]:
    """Each fleet's pool name: fleets in one group share a GPU, and sharing is transitive."""
    parent: dict[str, str] = {}

    def root(fleet: str) -> str:
        while parent.setdefault(fleet, fleet) != fleet:
            fleet = parent[fleet]
        return fleet

    for group in groups:
        first, *rest = sorted(group)
        root(first)
        for other in rest:
            parent[root(other)] = root(first)
    members: dict[str, list[str]] = {}
    for fleet in list(parent):
        members.setdefault(root(fleet), []).append(fleet)
    return {fleet: "+".join(sorted(group)) for group in members.values() for fleet in group}


def gpu_labels(model: GpuModel) -> dict[str, str]:
    """Per process name: `fleet F, pool P, GPUs 0,1` (or `4 GPUs`, `no GPU`), what a timeline labels it with."""
    counts: dict[int, Fraction] = {}
    for gpu_class in model.classes:
        for member in gpu_class.members:
            counts[member] = counts.get(member, Fraction(0)) + gpu_class.weight
    pool_of = {fleet: pool.name for pool in model.pools for fleet in pool.fleets}
    out: dict[str, str] = {}
    for position, holder in enumerate(model.holders):
        if holder.ids and holder.fleet not in model.counted:
            what = f"GPU{'s' * (len(holder.ids) != 1)} {','.join(holder.ids)}"
        elif position in counts:
            what = f"{gpu_count(counts[position])} GPUs" + (" (the fleet's)" if holder.fleet in model.counted else "")
        else:
            what = "no GPU"
        pool = f", pool {pool_of[holder.fleet]}" if holder.fleet in pool_of else ""
        out[holder.process] = f"fleet {holder.fleet}{pool}, {what}"
    return out


# --- charging ------------------------------------------------------------------------------------------------------


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
        attempt_of_span = ATTEMPT_SQL.replace("run_id", "s.run_id")
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

    def bottleneck(self) -> tuple[Pool, float, list[tuple[Pool, float]]] | None:
        """The pool whose GPUs were busiest over the rows (some bucket but idle charged), with that share, and the
        others' shares; None with fewer than two pools."""
        if len(self.model.pools) < 2:
            return None
        shares = [(pool, self.total(pool.name).busy or 0.0) for pool in self.model.pools]
        shares.sort(key=lambda item: (-item[1], item[0].name))
        return shares[0][0], shares[0][1], shares[1:]


def gpu_report(
    spans: SpanSet,
    model: GpuModel,
    windows: Sequence[tuple[str, int, int, int]],
    rows: Sequence[tuple[str, int, int, int]],
    rework: Sequence[tuple[str, int, int]],
    extents: Sequence[tuple[str, int, int]],
    precedence: Sequence[str],
) -> GpuReport:
    """The GPU figures of a report whose windows are `windows` ((attempt, iteration, start, end) each: two
    iterations whose windows coincide are two windows, as the wall clock's total counts them) and whose rows are
    `rows` (their windows' keys: `--by process` gives a window once per process, and none where no process has a
    bucketed span, which still counts in the total), whose superseded windows are `rework` ((attempt, start, end),
    each charged) and whose attempts span `extents`."""
    distinct: dict[tuple[str, int, int, int], int] = {}
    for window in windows:
        distinct.setdefault(window, len(distinct))
    for row in rows:
        distinct.setdefault(row, len(distinct))
    keys = list(distinct)
    stretches = [(start, end) for _, _, start, end in keys] + [(start, end) for _, start, end in rework]
    attempts = [attempt for attempt, _, _, _ in keys] + [attempt for attempt, _, _ in rework]
    charges = charge_gpus(spans, model, stretches, attempts, precedence)
    scale = charges.scale
    charged = charges.by_window[: len(keys)]
    lost = charges.total(range(len(keys), len(stretches)))
    held = {a: int(model.held_in(a) * scale) for a in {c.attempt for c in model.classes}}
    job = sum(held.get(attempt, 0) * (end - start) for attempt, start, end in extents)
    return GpuReport(model, charged, [distinct[row] for row in rows], lost, job, scale)
