"""goodput's instrumentation: bucket-tagged OpenTelemetry spans for RL training jobs.

The public names are those of `nemo_rl.telemetry.instrumentation`, with the same meaning, plus `configure` and
`shutdown`. Importing this package imports neither Ray nor any exporter, nor even the OpenTelemetry SDK: each name
is loaded from its module on first use, so `rollup`, which reads only the vocabulary (`instrument.groups`,
`instrument.wire`), never pays for the SDK. `configure()` wires the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

# Public name -> the module (under this package) that defines it.
_HOMES: dict[str, str] = {
    **dict.fromkeys(
        [
            "NO_SPAN", "managed_span", "umbrella_span", "streaming_umbrella_span", "trace_fn", "umbrella_trace_fn",
            "efficiency_span", "start_efficiency_span", "startup_span", "setup_span", "evaluate_span",
            "checkpoint_finalize_span", 
            "goodput_span_attributes", "safe_set_span_attributes", "is_span_group_enabled", "span_cm",
        ],
        "spans",
    ),
    **dict.fromkeys(
        ["current_trace_carrier", "remote_trace_context", "remote_trace_parent", "attached_context",
         "trace_context_kwargs", "TRACE_CARRIER_KWARG"],
        "context",
    ),
    **dict.fromkeys(["dispatch_with_trace_context", "accepts_trace_context"], "ray_dispatch"),
    **dict.fromkeys(["bucket_scope", "iteration_scope", "per_prompt_scope", "in_per_prompt_scope"], "scopes"),
    **dict.fromkeys(
        ["Bucket", "RLSpanGroup", "UMBRELLA_GROUPS", "UMBRELLA_GROUP_VALUES", "EFFICIENCY_CATEGORY_BUCKET",
         "COLLECTOR_LOOP_CATEGORIES", "UNBUCKETED_SPAN_CATEGORIES", "INIT_TOTAL_CATEGORY",
         "RUN_WINDOW_WALL_CLOCK_CATEGORIES", "SPAN_GROUP_PRESETS", "EveryGroupBut", "bucket_for_span_group",
         "bucket_for_efficiency_category"],
        "groups",
    ),
    **dict.fromkeys(
        ["RL_ALGORITHM", "RL_BUCKET_ATTR", "RL_EFFICIENCY_CATEGORY_ATTR", "RL_ITERATION_ATTR", "RL_IDLE_POLLS_ATTR",
         "RL_SPAN_GROUP_ATTR", "RL_CHECKPOINT_ASYNC_SAVE_ATTR", "RL_CHECKPOINT_ASYNC_ATTR"],
        "wire",
    ),
    **dict.fromkeys(["configure", "shutdown", "force_flush", "dropped_spans"], "provider"),
    "logger": "_log",
}  # fmt: skip

__all__ = list(_HOMES)

# The reference module's private state and helpers, for code written against it (NeMo-RL's tests clear the
# warn-once sets between tests): the very objects goodput uses, not copies. Not in `__all__`.
_PRIVATE_HOMES: dict[str, str] = {
    **dict.fromkeys(
        ["_LEAF_GROUP_AT_UMBRELLA_CALL", "_warn_leaf_group_at_umbrella_call", "_no_span_activation",
         "_efficiency_span_name_and_attrs", "_F"],
        "spans",
    ),
    **dict.fromkeys(["_CARRIER_REFUSED", "_dispatch_method_name", "_advertise_carrier"], "ray_dispatch"),
    **dict.fromkeys(["_BUCKET_OVERRIDE", "_PER_PROMPT_SCOPE"], "scopes"),
    "_DEFAULT_GROUP_BUCKET": "groups",
}  # fmt: skip


__getattr__, __dir__ = lazy_exports(__name__, {**_HOMES, **_PRIVATE_HOMES})

if TYPE_CHECKING:  # what type checkers and editors see: the same names, imported eagerly
    from ._log import logger
    from .context import (
        TRACE_CARRIER_KWARG,
        attached_context,
        current_trace_carrier,
        remote_trace_context,
        remote_trace_parent,
        trace_context_kwargs,
    )
    from .groups import (
        COLLECTOR_LOOP_CATEGORIES,
        EFFICIENCY_CATEGORY_BUCKET,
        INIT_TOTAL_CATEGORY,
        RUN_WINDOW_WALL_CLOCK_CATEGORIES,
        SPAN_GROUP_PRESETS,
        UMBRELLA_GROUP_VALUES,
        UMBRELLA_GROUPS,
        UNBUCKETED_SPAN_CATEGORIES,
        Bucket,
        EveryGroupBut,
        RLSpanGroup,
        bucket_for_efficiency_category,
        bucket_for_span_group,
    )
    from .provider import configure, dropped_spans, force_flush, shutdown
    from .ray_dispatch import accepts_trace_context, dispatch_with_trace_context
    from .scopes import bucket_scope, in_per_prompt_scope, iteration_scope, per_prompt_scope
    from .spans import (
        NO_SPAN,
        checkpoint_finalize_span,
        efficiency_span,
        evaluate_span,
        goodput_span_attributes,
        is_span_group_enabled,
        managed_span,
        safe_set_span_attributes,
        setup_span,
        span_cm,
        start_efficiency_span,
        startup_span,
        streaming_umbrella_span,
        trace_fn,
        umbrella_span,
        umbrella_trace_fn,
    )
    from .wire import (
        RL_ALGORITHM,
        RL_BUCKET_ATTR,
        RL_CHECKPOINT_ASYNC_ATTR,
        RL_CHECKPOINT_ASYNC_SAVE_ATTR,
        RL_EFFICIENCY_CATEGORY_ATTR,
        RL_IDLE_POLLS_ATTR,
        RL_ITERATION_ATTR,
        RL_SPAN_GROUP_ATTR,
    )
