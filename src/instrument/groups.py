"""Buckets, span groups and efficiency categories: the vocabulary every span is tagged with.

A goodput rollup can only be as good as the tags it reads, so the tables here are the single source of truth that
the span helpers consult. They mirror `nemo_rl.telemetry.instrumentation` value for value.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import ClassVar

from ._log import warn_once
from .wire import (  # noqa: F401 - re-exported: the reference module defines them beside the groups
    RL_ALGORITHM,
    RL_BUCKET_ATTR,
    RL_EFFICIENCY_CATEGORY_ATTR,
    RL_IDLE_POLLS_ATTR,
    RL_ITERATION_ATTR,
    RL_SPAN_GROUP_ATTR,
)


class Bucket(str, enum.Enum):
    """Shared goodput buckets, in their default precedence order."""

    PRODUCTIVE = "productive"
    OVERHEAD = "overhead"
    IDLE = "idle"
    WASTED = "wasted"


BUCKETS: tuple[str, ...] = tuple(bucket.value for bucket in Bucket)
"""The bucket tokens in their default precedence order, as they stand in `rl.bucket`."""


class _GroupNames(type):
    """Lets `RLSpanGroup` be read as the collection of its groups, as the reference's enum-like use expects:
    `list(RLSpanGroup)` lists every group once (aliases are not groups), `"generation" in RLSpanGroup` is True."""

    def __iter__(cls) -> Iterator[str]:
        return iter(_GROUP_ORDER)

    def __len__(cls) -> int:
        return len(_GROUP_ORDER)

    def __contains__(cls, group: object) -> bool:
        return group in ALL_GROUPS


class RLSpanGroup(metaclass=_GroupNames):
    """Span group names. Leaf groups carry a bucket; umbrella groups are timed and nested, never bucketed.

    The `U_` aliases have the same string values as their plain names: writing `RLSpanGroup.U_ROLLOUT` at a call
    site tells a reader, without a lookup, that this span is absent from a goodput rollup. Iterating the class
    gives every group once, in the order below; `ALL_GROUPS` holds them as a set.
    """

    # Leaf groups.
    GENERATION = "generation"
    REWARD = "reward"
    POLICY_UPDATE = "policy_update"
    LOGPROB = "logprob"
    ADVANTAGE = "advantage"
    DATA_PROCESSING = "data_processing"
    DATA_PLANE = "data_plane"
    CHECKPOINT = "checkpoint"
    EFFICIENCY = "efficiency"
    # Umbrella groups.
    JOB = "job"
    STEP = "step"
    ROLLOUT = "rollout"
    MODEL_INIT = "model_init"
    EVALUATE = "evaluate"
    SETUP = "setup"
    PER_PROMPT = "per_prompt"
    U_JOB = JOB
    U_STEP = STEP
    U_ROLLOUT = ROLLOUT
    U_MODEL_INIT = MODEL_INIT
    U_EVALUATE = EVALUATE
    U_SETUP = SETUP
    U_PER_PROMPT = PER_PROMPT

    ALL_GROUPS: ClassVar[frozenset[str]]
    """Every group declared above (set after the class body, which cannot read its own attributes)."""

    @classmethod
    def resolve(cls, spec: str | Iterable[str]) -> frozenset[str] | EveryGroupBut:
        """The groups a `span_groups` spec selects, as `configure` reads it: see :func:`resolve_span_groups`."""
        return resolve_span_groups(spec)


# Read off the class rather than listed by hand, so a group added above is never reported as unknown (a typo).
_GROUP_ORDER: tuple[str, ...] = tuple(
    dict.fromkeys(
        value
        for name, value in vars(RLSpanGroup).items()
        if isinstance(value, str) and name.isupper() and not name.startswith("U_")
    )
)
RLSpanGroup.ALL_GROUPS = ALL_GROUPS = frozenset(_GROUP_ORDER)


UMBRELLA_GROUPS: frozenset[str] = frozenset(
    {
        RLSpanGroup.JOB,
        RLSpanGroup.STEP,
        RLSpanGroup.ROLLOUT,
        RLSpanGroup.MODEL_INIT,
        RLSpanGroup.EVALUATE,
        RLSpanGroup.SETUP,
        RLSpanGroup.PER_PROMPT,
    }
)
"""Groups that are timed but never bucketed.

They enclose other spans, and often overlap other instances of themselves (concurrent rollouts), so a bucket on
them would count the same wall clock twice. Start-up (`setup`) is among them: its phases nest freely, and the
waits inside it are measured by `init/*` efficiency spans instead.
"""
# NeMo-RL's name for the same set, the values of the `U_` aliases (`nemo_rl.telemetry.span_groups`).
UMBRELLA_GROUP_VALUES: frozenset[str] = UMBRELLA_GROUPS

_DEFAULT_GROUP_BUCKET: Mapping[str, Bucket] = MappingProxyType(
    {
        RLSpanGroup.GENERATION: Bucket.PRODUCTIVE,
        RLSpanGroup.REWARD: Bucket.PRODUCTIVE,
        RLSpanGroup.POLICY_UPDATE: Bucket.PRODUCTIVE,
        RLSpanGroup.LOGPROB: Bucket.OVERHEAD,
        RLSpanGroup.ADVANTAGE: Bucket.OVERHEAD,
        RLSpanGroup.DATA_PROCESSING: Bucket.OVERHEAD,
        RLSpanGroup.DATA_PLANE: Bucket.OVERHEAD,
        RLSpanGroup.CHECKPOINT: Bucket.OVERHEAD,
    }
)

EFFICIENCY_CATEGORY_BUCKET: Mapping[str, Bucket] = MappingProxyType(
    {
        "init/total": Bucket.OVERHEAD,
        "idle/buffer_starvation": Bucket.IDLE,
        "idle/refit_bubble": Bucket.IDLE,
        "idle/validation": Bucket.IDLE,
        "idle/buffer_full_backoff": Bucket.IDLE,
        "idle/generation_limit_pause": Bucket.IDLE,
        "idle/refit_event_wait": Bucket.IDLE,
        "wasted/failed_trajectory": Bucket.WASTED,
    }
)
"""Bucket of each efficiency category (the Timer label).

Only categories measured on one thread against wall time belong here: a category summed across concurrent threads
is thread-seconds, and bucketing it would overcount.
"""

COLLECTOR_LOOP_CATEGORIES: frozenset[str] = frozenset({"idle/refit_event_wait", "idle/generation_limit_pause"})
"""Waits of the async collector loop. They overlap the trainer's own spans, so they are emitted unbucketed."""

# The efficiency category covering start-up, measured once before the training loop; and the wall-clock categories
# whose value covers the whole run rather than one step (NeMo-RL's names, `nemo_rl.telemetry.vocabulary`).
INIT_TOTAL_CATEGORY = "init/total"
RUN_WINDOW_WALL_CLOCK_CATEGORIES: frozenset[str] = frozenset({INIT_TOTAL_CATEGORY})
UNBUCKETED_SPAN_CATEGORIES: frozenset[str] = COLLECTOR_LOOP_CATEGORIES | RUN_WINDOW_WALL_CLOCK_CATEGORIES
"""Categories whose spans carry no bucket: visible in a trace, invisible to a rollup.

`init/total` covers start-up phases that have spans of their own; the collector waits overlap the trainer.
"""


class EveryGroupBut:
    """Every span group but those `excluded`, a job's own new groups included: what `all` and `per_step` enable.

    A set without end, so a type of its own rather than a frozenset, which would quietly answer iteration, `len`,
    `bool` and the set operators for the excluded groups instead. `in`, `|`, `&`, `-`, `^`, the comparisons and
    their named methods mean what they mean for "every group but these", with frozensets (or any set) on either
    side; a result that has an end is a frozenset. `bool()` is True. Iterating and `len()` raise TypeError: what
    exists of it is `RLSpanGroup.ALL_GROUPS & enabled`.
    """

    __slots__ = ("excluded",)
    excluded: frozenset[str]

    def __init__(self, excluded: Iterable[str] = ()) -> None:
        object.__setattr__(self, "excluded", frozenset((excluded,) if isinstance(excluded, str) else excluded))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self) -> tuple[type[EveryGroupBut], tuple[tuple[str, ...]]]:
        return EveryGroupBut, (tuple(sorted(self.excluded)),)

    def __contains__(self, group: object) -> bool:
        return group not in self.excluded

    def __bool__(self) -> bool:
        return True

    def _refuse(self, what: str) -> TypeError:
        but = f" but {', '.join(map(repr, sorted(self.excluded)))}" if self.excluded else ""
        return TypeError(
            f"{self!r} stands for every span group{but}, a job's own groups included, so it cannot be {what}: "
            "`RLSpanGroup.ALL_GROUPS & groups` gives goodput's groups among them, and configure(span_groups=) "
            "takes a preset's name ('all', 'per_step') rather than its value"
        )

    def __iter__(self) -> Iterator[str]:
        raise self._refuse("iterated")

    def __len__(self) -> int:
        raise self._refuse("counted")

    def __repr__(self) -> str:
        held = ", ".join(map(repr, sorted(self.excluded)))
        return f"EveryGroupBut({{{held}}})" if held else "EveryGroupBut()"

    def __hash__(self) -> int:
        return hash((EveryGroupBut, self.excluded))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EveryGroupBut):
            return self.excluded == other.excluded
        if isinstance(other, AbstractSet):
            return False  # a set with an end is never every group but some
        return NotImplemented

    def __or__(self, other: AbstractSet[str] | EveryGroupBut) -> EveryGroupBut:
        if isinstance(other, EveryGroupBut):
            return EveryGroupBut(self.excluded & other.excluded)
        if isinstance(other, AbstractSet):
            return EveryGroupBut(self.excluded - other)
        return NotImplemented

    def __ror__(self, other: AbstractSet[str]) -> EveryGroupBut:
        return self.__or__(other)

    def __and__(self, other: AbstractSet[str] | EveryGroupBut) -> frozenset[str] | EveryGroupBut:
        if isinstance(other, EveryGroupBut):
            return EveryGroupBut(self.excluded | other.excluded)
        if isinstance(other, AbstractSet):
            return frozenset(other) - self.excluded
        return NotImplemented

    def __rand__(self, other: AbstractSet[str]) -> frozenset[str] | EveryGroupBut:
        return self.__and__(other)

    def __sub__(self, other: AbstractSet[str] | EveryGroupBut) -> frozenset[str] | EveryGroupBut:
        if isinstance(other, EveryGroupBut):
            return other.excluded - self.excluded
        if isinstance(other, AbstractSet):
            return EveryGroupBut(self.excluded | other)
        return NotImplemented

    def __rsub__(self, other: AbstractSet[str]) -> frozenset[str]:
        if isinstance(other, AbstractSet):
            return frozenset(other) & self.excluded
        return NotImplemented

    def __xor__(self, other: AbstractSet[str] | EveryGroupBut) -> frozenset[str] | EveryGroupBut:
        if isinstance(other, EveryGroupBut):
            return self.excluded ^ other.excluded
        if isinstance(other, AbstractSet):
            return EveryGroupBut(self.excluded ^ other)
        return NotImplemented

    def __rxor__(self, other: AbstractSet[str]) -> frozenset[str] | EveryGroupBut:
        return self.__xor__(other)

    def __le__(self, other: AbstractSet[str] | EveryGroupBut) -> bool:
        if isinstance(other, EveryGroupBut):
            return other.excluded <= self.excluded
        if isinstance(other, AbstractSet):
            return False  # without end, so never inside a set with one
        return NotImplemented

    def __ge__(self, other: AbstractSet[str] | EveryGroupBut) -> bool:
        if isinstance(other, EveryGroupBut):
            return self.excluded <= other.excluded
        if isinstance(other, AbstractSet):
            return self.excluded.isdisjoint(other)
        return NotImplemented

    def __lt__(self, other: AbstractSet[str] | EveryGroupBut) -> bool:
        return self <= other and self != other

    def __gt__(self, other: AbstractSet[str] | EveryGroupBut) -> bool:
        return self >= other and self != other

    # The named methods take any iterable of names, as frozenset's do.
    def union(self, *others: Iterable[str]) -> EveryGroupBut:
        result = self
        for other in others:
            result = result | _as_set(other)
        return result

    def intersection(self, *others: Iterable[str]) -> frozenset[str] | EveryGroupBut:
        result: frozenset[str] | EveryGroupBut = self
        for other in others:
            result = result & _as_set(other)
        return result

    def difference(self, *others: Iterable[str]) -> frozenset[str] | EveryGroupBut:
        result: frozenset[str] | EveryGroupBut = self
        for other in others:
            result = result - _as_set(other)
        return result

    def symmetric_difference(self, other: Iterable[str]) -> frozenset[str] | EveryGroupBut:
        return self ^ _as_set(other)

    def issubset(self, other: Iterable[str]) -> bool:
        return self <= _as_set(other)

    def issuperset(self, other: Iterable[str]) -> bool:
        return self >= _as_set(other)

    def isdisjoint(self, other: Iterable[str]) -> bool:
        return not (self & _as_set(other))


def _as_set(names: Iterable[str]) -> AbstractSet[str] | EveryGroupBut:
    return names if isinstance(names, AbstractSet | EveryGroupBut) else frozenset(names)


SPAN_GROUP_PRESETS: Mapping[str, frozenset[str] | EveryGroupBut] = MappingProxyType(
    {
        "default": frozenset(
            {
                RLSpanGroup.JOB,
                RLSpanGroup.CHECKPOINT,
                RLSpanGroup.EVALUATE,
                RLSpanGroup.MODEL_INIT,
                RLSpanGroup.SETUP,
            }
        ),
        "per_step": EveryGroupBut({RLSpanGroup.PER_PROMPT}),
        "all": EveryGroupBut(),
    }
)


def bucket_for_span_group(group: str) -> Bucket | None:
    """Return the goodput bucket for a span group, or None if umbrella / unknown.

    Unknown non-umbrella groups default to overhead so new leaves are not silently dropped from the denominator.
    """
    if group in UMBRELLA_GROUPS:
        return None
    return _DEFAULT_GROUP_BUCKET.get(group, Bucket.OVERHEAD)


def bucket_for_efficiency_category(category: str) -> Bucket | None:
    """Return the bucket for an async efficiency category label, if known.

    A category outside the table whose prefix is a bucket token (`idle/...`, `wasted/...`) takes that bucket, so a
    new wait is counted where its name says rather than dropped.
    """
    bucket = EFFICIENCY_CATEGORY_BUCKET.get(category)
    if bucket is not None:
        return bucket
    prefix = category.partition("/")[0]
    try:
        return Bucket(prefix)
    except ValueError:
        return None


def resolve_span_groups(span_groups: str | Iterable[str]) -> frozenset[str] | EveryGroupBut:
    """The enabled groups for a preset name, a comma-separated list, or an iterable of names and presets.

    Preset and group names are matched in any case. A name that is neither is kept as written, since a job may add
    leaf groups of its own, and reported once with the valid names, since it is more often a typo (`per-step`).
    """
    names = span_groups.split(",") if isinstance(span_groups, str) else span_groups
    enabled: frozenset[str] | EveryGroupBut = frozenset()
    for raw in names:
        name = str(raw).strip()
        folded = name.lower()
        preset = SPAN_GROUP_PRESETS.get(folded)
        if preset is not None:
            enabled = enabled | preset
        elif folded in ALL_GROUPS:
            enabled = enabled | {folded}
        elif name:
            report_unknown_group(name, in_spec=True)
            enabled = enabled | {name}
    return enabled


def nearest_group(name: str, *, presets: bool = False) -> str | None:
    """The group goodput knows (or, with `presets`, the preset) that `name` is most likely a typo of; None when it
    is one already or none is close."""
    known = [*_GROUP_ORDER, *(SPAN_GROUP_PRESETS if presets else ())]
    if name.lower() in known:
        return None
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.75)
    return close[0] if close else None


def report_unknown_group(group: object, *, in_spec: bool) -> None:
    """Log, once per name and process, a group name goodput does not know, with the valid names."""
    close = nearest_group(str(group), presets=True)
    hint = f" (did you mean {close!r}?)" if close else ""
    consequence = (
        "in span_groups it turns on only a job's own group of that name"
        if in_spec
        else "where enabled, its spans are recorded as leaves charged to overhead, as a job's own group's are"
    )
    warn_once(
        f"unknown-span-group:{group}",
        "goodput: %r is not a span group or preset goodput knows%s; %s. Groups: %s. Presets (any case): %s",
        group,
        hint,
        consequence,
        ", ".join(_GROUP_ORDER),
        ", ".join(SPAN_GROUP_PRESETS),
        stack_info=not in_spec,  # at a span helper, the call site is what to fix
    )


def group_gate(enabled: frozenset[str] | EveryGroupBut) -> dict[str, bool]:
    """`group -> group in enabled` for every group goodput knows: what the span helpers read, one dict lookup
    whatever kind of set `enabled` is. They add any other name the first time they see it (reporting it then, off
    every later span's path)."""
    return {group: group in enabled for group in _GROUP_ORDER}
