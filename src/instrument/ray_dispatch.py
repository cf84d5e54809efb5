"""Ray hand-off of the trace context: the caller sends its span as a kwarg, the callee reopens it.

Ray does not carry OpenTelemetry context across a `.remote()` call, so without this every actor's spans start a
trace of their own. The two halves are :func:`dispatch_with_trace_context` on the caller and
:func:`accepts_trace_context` on the method. Neither imports Ray: they work on whatever `.remote()` handle they are
given, so importing `instrument` stays cheap.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar, cast

from ._log import logger
from .context import (
    TRACE_CARRIER_KWARG,
    attached_context,
    current_trace_carrier,
    remote_trace_parent,
    trace_context_kwargs,
    wrap_in_context,
)
from .processor import IN_DISPATCHED_CALL, flush_ended_spans
from .provider import STATE
from .worker_setup import configure_from_carrier, configure_without_carrier, service_name_of

__all__ = [
    "TRACE_CARRIER_KWARG",
    "accepts_trace_context",
    "dispatch_with_trace_context",
    "trace_context_kwargs",
]

_F = TypeVar("_F", bound=Callable[..., Any])

#: Where :func:`accepts_trace_context` keeps the decorated original. Not `__wrapped__`: see the decorator.
_ORIGINAL_ATTR = "__trace_context_original__"

# Ray methods whose signature rejected the trace carrier once, by `_dispatch_method_name`: later dispatches skip the
# carrier. The reference module's name for it; one set for the process, emptied (not replaced) by `configure()`.
_CARRIER_REFUSED: set[str] = STATE.carrier_refused


def dispatch_with_trace_context(remote_method: Any, /, *args: Any, **kwargs: Any) -> Any:
    """`remote_method.remote(...)`, plus the caller's trace context.

    The receiving method should be wrapped in :func:`accepts_trace_context`. When it is not, Ray rejects the extra
    kwarg on the caller (it validates against the callee's recorded signature before submitting the task), and this
    retries without it and warns once per method: losing the parent link degrades a trace, raising would abort a
    rollout over an observability kwarg. No kwarg at all is sent when no span is recording, so a run with telemetry
    off calls the method with exactly its own signature.

    Returns whatever `.remote()` returned: an ObjectRef, a list of them, or an ObjectRefGenerator for a handle built
    with `.options(num_returns="streaming")`.
    """
    carrier = current_trace_carrier()
    if not carrier or TRACE_CARRIER_KWARG in kwargs:
        return remote_method.remote(*args, **kwargs)
    name = _dispatch_method_name(remote_method)
    if name in _CARRIER_REFUSED:  # refused once: later dispatches skip the carrier instead of failing again
        return remote_method.remote(*args, **kwargs)
    try:
        return remote_method.remote(*args, **kwargs, **{TRACE_CARRIER_KWARG: carrier})
    except TypeError as exc:
        if f"'{TRACE_CARRIER_KWARG}'" not in str(exc):
            raise  # the caller's own arguments are wrong: that is their bug, not ours to hide
    _CARRIER_REFUSED.add(name)  # warned once per method: clearing the set (as a test does) warns again
    logger.warning(
        "goodput: %s does not accept %r (decorate it with accepts_trace_context); its spans will start a new trace",
        name,
        TRACE_CARRIER_KWARG,
        stack_info=True,
    )
    return remote_method.remote(*args, **kwargs)


def _dispatch_method_name(remote_method: Any) -> str:
    """Name of the method behind a dispatch handle, for `_CARRIER_REFUSED`.

    `.options(...)` on an actor method hands back `_ActorMethodOptionsWrapper`, which keeps the real ActorMethod in
    `_actor_method`; on a remote function it hands back a `FuncWrapper` holding the RemoteFunction only in the
    closure of its `remote`. A repr would embed a fresh address per call and the warning would repeat every time.
    """
    target = getattr(remote_method, "_actor_method", remote_method)
    method_name = getattr(target, "_method_name", None)
    if isinstance(method_name, str):
        actor = getattr(target, "_actor", None)
        if isinstance(actor, weakref.ref):
            actor = actor()
        descriptor = getattr(actor, "_ray_actor_creation_function_descriptor", None)
        class_name = getattr(descriptor, "class_name", None)
        return f"{class_name}.{method_name}" if class_name else method_name
    for cell in getattr(getattr(type(target), "remote", None), "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(getattr(inner, "_function_name", None), str):
            target = inner
            break
    function_name = getattr(target, "_function_name", None)
    if isinstance(function_name, str):
        return function_name
    return getattr(target, "__qualname__", None) or type(target).__qualname__


def _advertise_carrier(method: Any) -> None:
    """Declare the reserved kwarg on the signature Ray actually reads.

    Ray records an actor method's signature from `inspect.unwrap(method)` and validates every `.remote()` call
    against it on the caller, so a wrapper's `**kwargs` alone does not let the carrier through. A no-op when that
    signature already takes `**kwargs` or already declares the parameter, so decorating twice cannot duplicate it.
    """
    target = inspect.unwrap(method)
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # no readable signature: Ray cannot validate against one either
        return
    parameters = list(signature.parameters.values())
    if any(p.kind is inspect.Parameter.VAR_KEYWORD or p.name == TRACE_CARRIER_KWARG for p in parameters):
        return
    parameters.append(inspect.Parameter(TRACE_CARRIER_KWARG, inspect.Parameter.KEYWORD_ONLY, default=None))
    try:
        target.__signature__ = signature.replace(parameters=parameters)
    except AttributeError:  # e.g. a bound method; the carrier will be refused and dispatch degrades with a warning
        return


def accepts_trace_context(method: _F) -> _F:
    """Let a Ray method be parented to its caller's span.

    Strips the reserved carrier kwarg and runs the body with that context attached, so every span the method opens
    (and every span opened by whatever it calls) nests under the caller. It dispatches on the callable's kind: a
    coroutine is awaited inside the context, and a generator gets the context attached around each step only, never
    across a yield, so an abandoned stream never makes OTel fail to detach. It opens no span of its own: the methods
    it decorates open theirs, and one more per call would double the trace's depth.

    Ray reads a method's signature and its `@ray.method` options from `inspect.unwrap(method)`. The wrapper therefore
    carries no `__wrapped__` (the original stays reachable as `__trace_context_original__`): an outer `@ray.method`
    then sets its options on the object Ray reads, the original's `__dict__` is copied so an inner one's carry over,
    and the carrier is declared on the wrapper's own `__signature__`. Either stacking order works.
    """
    service = service_name_of(method)
    name = getattr(method, "__qualname__", service)
    wrapper = wrap_in_context(
        method,
        lambda kwargs: _dispatched_call(_carrier_parent(kwargs, service, name)),
        lambda kwargs: nullcontext(functools.partial(_dispatched_call, _carrier_parent(kwargs, service, name))),
    )
    functools.update_wrapper(wrapper, method)
    del wrapper.__wrapped__  # type: ignore[attr-defined]
    setattr(wrapper, _ORIGINAL_ATTR, method)
    # Without a readable signature, the wrapper's own (*args, **kwargs) stands, which accepts the carrier anyway.
    with contextlib.suppress(TypeError, ValueError):
        wrapper.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    _advertise_carrier(wrapper)
    return cast(_F, wrapper)


def _carrier_parent(kwargs: dict[str, Any], service: str, method: str) -> Any | None:
    """Pop the carrier out of a call's kwargs and return the context it names, if any. A Ray worker that was never
    configured is configured like the caller first, else from the job's settings in its environment, else says once
    that it records nothing (`worker_setup`)."""
    parent = remote_trace_parent(kwargs.pop(TRACE_CARRIER_KWARG, None))
    if STATE.provider is None:
        if parent is not None:
            configure_from_carrier(parent, service)
        configure_without_carrier(service, method)  # nothing once configured above
    return parent


@contextmanager
def _dispatched_call(parent: Any | None) -> Iterator[None]:
    """The body of a dispatched call (or one step of a streamed one) under the caller's context; the spans it ends
    are written as they end and, what remains, before the caller can see the result (`processor`)."""
    token = IN_DISPATCHED_CALL.set(True)
    try:
        with attached_context(parent):
            yield
    finally:
        IN_DISPATCHED_CALL.reset(token)
        flush_ended_spans(STATE.processor)
