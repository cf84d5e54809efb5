"""Bucket-tagged spans, umbrella spans, efficiency spans and the scopes that shape them.

Every helper returns a context manager that yields the span, or None when its group is disabled; a disabled group
costs one dict lookup. Every span emitted here carries `rl.span_group`, and leaf spans carry `rl.bucket`, which is
what lets a rollup charge wall clock without double counting.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager as ContextManager
from contextlib import contextmanager, nullcontext
from typing import Any, Final, TypeVar, cast

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from ._log import logger, warn_once
from .context import attached_context, wrap_in_context
from .groups import (
    _DEFAULT_GROUP_BUCKET,
    UMBRELLA_GROUPS,
    UNBUCKETED_SPAN_CATEGORIES,
    Bucket,
    RLSpanGroup,
    bucket_for_efficiency_category,
    report_unknown_group,
)
from .provider import _ITERATION, STATE
from .scopes import _BUCKET_OVERRIDE, bucket_scope
from .wire import (
    CHECKPOINT_FINALIZE_SPAN_NAME,
    EVALUATE_SPAN_NAME,
    RL_ALGORITHM,
    RL_BUCKET_ATTR,
    RL_CHECKPOINT_ASYNC_SAVE_ATTR,
    RL_EFFICIENCY_CATEGORY_ATTR,
    RL_ITERATION_ATTR,
    RL_SPAN_GROUP_ATTR,
    SETUP_SPAN_NAME,
    STARTUP_SPAN_NAME,
    efficiency_span_name,
)

_F = TypeVar("_F", bound=Callable[..., Any])

NO_SPAN: Final[ContextManager[None]] = nullcontext()
"""What every helper returns for a disabled group: enters to None, costs nothing."""


def safe_set_span_attributes(span: Any | None, attributes: dict[str, Any]) -> None:
    """Like `span.set_attributes`, but a no-op when `span` is None.

    Every helper here yields None for a disabled group, so an unguarded call would turn "telemetry is off" into an
    AttributeError in code that has nothing to do with telemetry, on the path nobody exercises locally.
    """
    if span is None:
        return
    try:
        span.set_attributes(attributes)
    except Exception:
        warn_once("set-attributes", "goodput: could not set span attributes %r", attributes, stack_info=True)


def goodput_span_attributes(group: str) -> dict[str, str]:
    """Attributes to merge into a span of `group`: its bucket, or nothing for an umbrella.

    An enclosing :func:`bucket_scope` replaces the group's default bucket.
    """
    if group in UMBRELLA_GROUPS:
        return {}
    return {RL_BUCKET_ATTR: _BUCKET_OVERRIDE.get() or _DEFAULT_BUCKET_TEXT.get(group, _OVERHEAD)}


_DEFAULT_BUCKET_TEXT = {group: bucket.value for group, bucket in _DEFAULT_GROUP_BUCKET.items()}
_OVERHEAD = Bucket.OVERHEAD.value


def _span_attributes(group: str, bucketed: bool, attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Group, bucket and iteration, then the caller's own attributes on top. On every span's path: kept lean."""
    if bucketed:
        merged: dict[str, Any] = {
            RL_SPAN_GROUP_ATTR: group,
            RL_BUCKET_ATTR: _BUCKET_OVERRIDE.get() or _DEFAULT_BUCKET_TEXT.get(group, _OVERHEAD),
        }
    else:
        merged = {RL_SPAN_GROUP_ATTR: group}
    iteration = _ITERATION.get()
    if iteration is not None:  # stamped here rather than by the provider's processor: cheaper before start
        merged[RL_ITERATION_ATTR] = iteration
    if attributes:
        merged.update(attributes)
        bucket = merged.get(RL_BUCKET_ATTR)
        if isinstance(bucket, Bucket):
            merged[RL_BUCKET_ATTR] = bucket.value
    return merged


def _first_sight(group: str) -> bool:
    """Whether a group the gate has not seen is enabled. The gate holds all of goodput's groups from the start, so
    this is a job's own group or a typo: reported once, then answered by the gate like any other."""
    gate = STATE.gate
    enabled = STATE.enabled  # read after the gate, which configure() replaces after it: never older than the gate
    report_unknown_group(group, in_spec=False)
    gate[group] = on = group in enabled
    return on


def is_span_group_enabled(group: str) -> bool:
    """Whether spans of `group` are recorded now; False before `configure()` and after `shutdown()`.

    The check every span helper makes first, for call sites that build costly attributes only when they will be
    recorded. An unknown name is reported once, as at a span helper.
    """
    try:
        return STATE.gate[group]
    except KeyError:
        return _first_sight(group)


def _managed_span(
    group: str, name: str, tracer: trace.Tracer | None, bucketed: bool, attributes: Mapping[str, Any]
) -> ContextManager[Any]:
    """The one place spans are opened as current: gate on the group, tag, start."""
    try:
        if not STATE.gate[group]:
            return NO_SPAN
    except KeyError:
        if not _first_sight(group):
            return NO_SPAN
    tracer = tracer or STATE.tracer
    if tracer is None:
        return NO_SPAN
    return tracer.start_as_current_span(name, attributes=_span_attributes(group, bucketed, attributes))


def managed_span(group: str, name: str, tracer: trace.Tracer | None = None, **attributes: Any) -> ContextManager[Any]:
    """A span of `group`, current for the block, with `rl.bucket` injected for leaf groups.

    Callers may override the bucket by passing `rl.bucket` explicitly. Umbrella groups receive no bucket.
    """
    # The body of _managed_span, inlined: this is the call on every leaf span's path.
    try:
        if not STATE.gate[group]:
            return NO_SPAN
    except KeyError:  # a group not seen before: on no later span's path
        if not _first_sight(group):
            return NO_SPAN
    tracer = tracer or STATE.tracer
    if tracer is None:
        return NO_SPAN
    bucketed = group not in UMBRELLA_GROUPS
    return tracer.start_as_current_span(name, attributes=_span_attributes(group, bucketed, attributes))


# The span names `umbrella_span` was handed a leaf group for, each reported once (the reference module's name; a
# test clears it to hear the warning again).
_LEAF_GROUP_AT_UMBRELLA_CALL: set[str] = set()


def _warn_leaf_group_at_umbrella_call(group: str, name: str) -> None:
    """Report `umbrella_span` being handed a leaf group, once per span name, with the call site.

    A warning rather than an exception: umbrella spans open at very different points of a run, so a raise would
    turn a mistyped group into a job that dies hours in, even with tracing switched off.
    """
    if name in _LEAF_GROUP_AT_UMBRELLA_CALL:
        return
    _LEAF_GROUP_AT_UMBRELLA_CALL.add(name)
    logger.warning(
        "goodput: umbrella_span(%r, %r) was handed a leaf group; the span is emitted as a bucketed leaf",
        group,
        name,
        stack_info=True,
    )


def umbrella_span(group: str, name: str, tracer: trace.Tracer | None = None, **attributes: Any) -> ContextManager[Any]:
    """Span for an umbrella group: timed and nested, never bucketed.

    Reach for it whenever a span can overlap another instance of itself: concurrent spans sum past the wall clock
    they happened in, so a bucket on them multiplies rather than measures. Spell the group with its `U_` alias.
    Handed a leaf group, this warns and emits the span as a leaf.
    """
    if group not in UMBRELLA_GROUPS:
        _warn_leaf_group_at_umbrella_call(group, name)
        return _managed_span(group, name, tracer, True, attributes)
    return _managed_span(group, name, tracer, False, attributes)


def _no_span_activation() -> ContextManager[Any]:
    """Activation for a disabled group: nothing to attach, nothing to detach."""
    return NO_SPAN


@contextmanager
def _started_span(group: str, name: str, tracer: trace.Tracer | None, bucketed: bool, attributes: Mapping[str, Any]):
    """A span started but not made current, ended when the block leaves; yields None for a disabled group."""
    tracer = tracer or STATE.tracer
    if not is_span_group_enabled(group) or tracer is None:
        yield None
        return
    span = tracer.start_span(name, attributes=_span_attributes(group, bucketed, attributes))
    try:
        yield span
    except BaseException as exc:
        if not isinstance(exc, GeneratorExit):
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        span.end()


def streaming_umbrella_span(
    group: str, name: str, tracer: trace.Tracer | None = None, **attributes: Any
) -> ContextManager[Callable[[], ContextManager[Any]]]:
    """An umbrella span over an async generator, made current one step at a time.

    A context attached across a `yield` is detached later by the garbage collector when Ray abandons a cancelled
    stream, and OTel logs "Failed to detach context". So the span covers the whole stream, but it is attached only
    around each step. Yields a callable returning a context manager to wrap each `__anext__`; a no-op when the group
    is disabled.
    """
    bucketed = group not in UMBRELLA_GROUPS
    if bucketed:
        _warn_leaf_group_at_umbrella_call(group, name)
    return _streamed(group, name, tracer, bucketed, attributes)


@contextmanager
def _streamed(
    group: str, name: str, tracer: trace.Tracer | None, bucketed: bool, attributes: Mapping[str, Any]
) -> Iterator[Callable[[], ContextManager[Any]]]:
    """A span over a stream of any group, attached one step at a time; the activation is a no-op when disabled."""
    with _started_span(group, name, tracer, bucketed, attributes) as span:
        if span is None:
            yield _no_span_activation
        else:
            span_context = trace.set_span_in_context(span)
            yield lambda: attached_context(span_context)


def _efficiency_span_name_and_attrs(category: str, attributes: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """`(span name, attributes)` for one efficiency category, shared by both ways to open one so they cannot drift."""
    merged: dict[str, Any] = {RL_SPAN_GROUP_ATTR: RLSpanGroup.EFFICIENCY, RL_EFFICIENCY_CATEGORY_ATTR: category}
    if category not in UNBUCKETED_SPAN_CATEGORIES:
        bucket = bucket_for_efficiency_category(category)
        if bucket is not None:
            merged[RL_BUCKET_ATTR] = bucket.value
    merged.update(attributes)
    bucket = merged.get(RL_BUCKET_ATTR)
    if isinstance(bucket, Bucket):
        merged[RL_BUCKET_ATTR] = bucket.value
    return efficiency_span_name(category), merged


def _efficiency_tracer(tracer: trace.Tracer | None) -> trace.Tracer | None:
    """The tracer for an efficiency span, or None when the efficiency group is off (or nothing is configured)."""
    if not STATE.gate[RLSpanGroup.EFFICIENCY]:
        return None
    return tracer or STATE.tracer


def efficiency_span(category: str, tracer: trace.Tracer | None = None, **attributes: Any) -> ContextManager[Any]:
    """Span for one efficiency category (the Timer label, `idle/refit_bubble`), tagged with that category's bucket.

    Wrap a wait, not a phase that does instrumented work: this span carries `rl.bucket`, so bucketed children
    would count the same interval twice. Categories in `UNBUCKETED_SPAN_CATEGORIES` are emitted without a bucket.
    """
    tracer = _efficiency_tracer(tracer)
    if tracer is None:
        return NO_SPAN
    name, merged = _efficiency_span_name_and_attrs(category, attributes)
    return tracer.start_as_current_span(name, attributes=merged)


def start_efficiency_span(category: str, tracer: trace.Tracer | None = None, **attributes: Any) -> Any | None:
    """Start an efficiency span the caller ends by hand, or None when the efficiency group is off.

    For a wait implemented as a poll loop, where the span outlives one iteration. It is not attached, so nothing
    started during the wait (an asyncio task, say) reparents under it. End it on every way out of the loop that
    lets the run continue, and pass `rl.idle.polls` so the duration can be read against the retries it covers.
    """
    tracer = _efficiency_tracer(tracer)
    if tracer is None:
        return None
    name, merged = _efficiency_span_name_and_attrs(category, attributes)
    return tracer.start_span(name, attributes=merged)


def startup_span(tracer: trace.Tracer | None = None, **attributes: Any) -> ContextManager[Any]:
    """Umbrella over everything between process start and the first step, named `rl.startup`.

    Open it in the entrypoint around both `ray.init()` and the algorithm's setup, so the start-up phases arrive as
    one waterfall instead of unrelated root traces.
    """
    return umbrella_span(RLSpanGroup.U_SETUP, STARTUP_SPAN_NAME, tracer, **attributes)


def setup_span(phase: str, tracer: trace.Tracer | None = None, **attributes: Any) -> ContextManager[Any]:
    """One start-up phase, named `rl.setup.<phase>`: unbucketed and freely nestable.

    For a phase that only waits, prefer :func:`efficiency_span` with the matching `init/*` category.
    """
    return umbrella_span(RLSpanGroup.U_SETUP, SETUP_SPAN_NAME.format(phase=phase), tracer, **attributes)


@contextmanager
def evaluate_span(algorithm: str, tracer: trace.Tracer | None = None, **attributes: Any) -> Iterator[Any]:
    """One validation pass, named `rl.<algorithm>.evaluate`; the leaf spans inside it are overhead.

    Validation generates through the same path as training, but its tokens are scored and thrown away, so the
    generation inside it is not goodput. The bucket scope is set even when the evaluate group is off.
    """
    name = EVALUATE_SPAN_NAME.format(algorithm=algorithm)
    with (
        bucket_scope(Bucket.OVERHEAD),
        umbrella_span(RLSpanGroup.U_EVALUATE, name, tracer, **{RL_ALGORITHM: algorithm, **attributes}) as span,
    ):
        yield span


def checkpoint_finalize_span(
    iteration: int | None,
    *,
    async_save: bool | None = None,
    tracer: trace.Tracer | None = None,
    **attributes: Any,
) -> ContextManager[Any]:
    """The asynchronous tail of a checkpoint, named `rl.checkpoint.finalize`, closing when it is durable.

    It runs on a thread that outlives the step that triggered it, so the iteration is passed, not inherited: the
    span stays filed under the step whose weights it holds. Unbucketed because it overlaps the next step's
    productive spans; still in the `checkpoint` group, so one switch turns every checkpoint span on or off.
    `async_save`, where the caller knows it, is recorded as `rl.checkpoint.async_save`, as newer NeMo-RL callers
    pass it; left out, the span carries no such flag (read its duration instead).
    """
    if async_save is not None:
        attributes = {RL_CHECKPOINT_ASYNC_SAVE_ATTR: bool(async_save), **attributes}
    if iteration is not None:
        attributes = {RL_ITERATION_ATTR: int(iteration), **attributes}
    return _managed_span(RLSpanGroup.CHECKPOINT, CHECKPOINT_FINALIZE_SPAN_NAME, tracer, False, attributes)


def span_cm(
    name: str, tracer: trace.Tracer | None = None, record_exception: bool = True, **attributes: Any
) -> ContextManager[Any]:
    """A span in no group, current for the block, as nemo-lens's `span_cm`: recorded whenever telemetry is
    configured, whatever `span_groups` says, and yields None when it is not.

    It carries neither `rl.span_group` nor `rl.bucket`, so a rollup shows and times it but charges it to no bucket;
    the enclosing `iteration_scope` still stamps it. An exception leaving the block marks the span as failed, and is
    recorded on it as an event unless `record_exception` is False.
    """
    tracer = tracer or STATE.tracer
    if tracer is None:
        return NO_SPAN
    iteration = _ITERATION.get()
    if iteration is not None:
        attributes = {RL_ITERATION_ATTR: iteration, **attributes}
    if isinstance(attributes.get(RL_BUCKET_ATTR), Bucket):
        attributes[RL_BUCKET_ATTR] = attributes[RL_BUCKET_ATTR].value
    return tracer.start_as_current_span(name, attributes=attributes, record_exception=record_exception)


def _span_decorator(
    open_span: Callable[[], ContextManager[Any]], open_started: Callable[[], Any]
) -> Callable[[_F], _F]:
    """Wrap sync functions, coroutines and (async) generators so the span covers the body as it actually runs."""

    def decorate(fn: _F) -> _F:
        wrapper = wrap_in_context(fn, lambda kwargs: open_span(), lambda kwargs: open_started())
        return cast(_F, functools.wraps(fn)(wrapper))

    return decorate


def trace_fn(group: str, name: str, tracer: trace.Tracer | None = None) -> Callable[[_F], _F]:
    """Decorator that wraps a function in a bucket-tagged :func:`managed_span`; `async def` and generators too."""
    bucketed = group not in UMBRELLA_GROUPS
    return _span_decorator(
        lambda: managed_span(group, name, tracer),
        lambda: _streamed(group, name, tracer, bucketed, {}),
    )


def umbrella_trace_fn(group: str, name: str, tracer: trace.Tracer | None = None) -> Callable[[_F], _F]:
    """Decorator form of :func:`umbrella_span`, for whole-function umbrellas such as `rl.<algo>.job`."""
    return _span_decorator(
        lambda: umbrella_span(group, name, tracer),
        lambda: streaming_umbrella_span(group, name, tracer),
    )
