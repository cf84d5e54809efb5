"""Buckets, span groups and efficiency categories: the vocabulary every span is tagged with.

A goodput rollup can only be as good as the tags it reads, so the tables here are the single source of truth that
the span helpers consult. They mirror `nemo_rl.telemetry.instrumentation` value for value.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from types import MappingProxyType

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


class RLSpanGroup:
    """Span group names. Leaf groups carry a bucket; umbrella groups are timed and nested, never bucketed.

    The `U_` aliases have the same string values as their plain names: writing `RLSpanGroup.U_ROLLOUT` at a call
    site tells a reader, without a lookup, that this span is absent from a goodput rollup.
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

UNBUCKETED_SPAN_CATEGORIES: frozenset[str] = COLLECTOR_LOOP_CATEGORIES | {"init/total"}
"""Categories whose spans carry no bucket: visible in a trace, invisible to a rollup.

`init/total` covers start-up phases that have spans of their own; the collector waits overlap the trainer.
"""

ALL_GROUPS: frozenset[str] = frozenset(_DEFAULT_GROUP_BUCKET) | {RLSpanGroup.EFFICIENCY} | UMBRELLA_GROUPS


class EveryGroupBut(frozenset):
    """The enabled set of `all` and `per_step`: every group, a job's own new leaves included, except those held.

    A subclass of frozenset so the span helpers' hot-path `group in enabled` test stays one expression.
    """

    def __contains__(self, group: object) -> bool:
        return not frozenset.__contains__(self, group)

    def __repr__(self) -> str:
        return f"EveryGroupBut({sorted(self)!r})"


SPAN_GROUP_PRESETS: Mapping[str, frozenset[str]] = MappingProxyType(
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


def resolve_span_groups(span_groups: str | Iterable[str]) -> frozenset[str]:
    """The enabled groups for a preset name, a comma-separated list, or an iterable of names and presets.

    Names outside the known groups are kept: a job may add leaf groups of its own.
    """
    names = span_groups.split(",") if isinstance(span_groups, str) else span_groups
    only: set[str] = set()
    all_but: set[str] | None = None
    for raw in names:
        name = str(raw).strip()
        preset = SPAN_GROUP_PRESETS.get(name)
        if isinstance(preset, EveryGroupBut):
            all_but = set(preset) if all_but is None else all_but & set(preset)
        elif preset is not None:
            only |= preset
        elif name:
            only.add(name)
    if all_but is not None:
        return EveryGroupBut(all_but - only)
    return frozenset(only)
