"""GPU-seconds (SPEC section 12): what each process holds and the pools its GPUs make (`gpu_charge` charges them).

A GPU is `(host.name, id)` in one attempt; the processes whose `goodput.gpu.ids` name it share it, a process with a
count holds that many of its own, and `--gpus FLEET=N` gives a fleet N of its own instead. GPUs that the same
processes hold are occupied by the same spans, so they are charged alike: they are one *class*, charged once and
counted as many times as it has GPUs (512 GPUs on 64 processes are 64 classes, not 512 sweeps). A class's spans are
its processes' bucketed spans, those carrying `goodput.fleet` of one of its fleets, and those `--place` names for
one. Sampled ranks make a GPU count `W / R` times (a class's weight is then a fraction).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from rollup.base.errors import OptionError
from rollup.read.values import UNKNOWN_SERVICE

if TYPE_CHECKING:
    from rollup.store.spanset import SpanSet

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
    """Every process of `spans` with what it holds (`SpanSet.holdings`), and the notes about holdings that could not
    be read."""
    holders, unreadable = [], []
    for attempt, process, host_pid, service, text in spans.holdings():
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
