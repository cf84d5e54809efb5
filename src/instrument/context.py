"""W3C trace-context hand-off: carry the active span to another thread or process and reopen it there.

Ray does not propagate OpenTelemetry context, and `threading.Thread` does not inherit context variables, so a
worker's spans start a trace of their own unless the parent is handed over explicitly. These helpers are the two
ends of that hand-off; each is a no-op when there is nothing to hand over, so call sites need no telemetry branch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context

from ._log import warn_once
from .wire import BAGGAGE_BUCKET_SCOPE, BAGGAGE_ITERATION

TRACE_CARRIER_KWARG = "_otel_carrier"

# The goodput scopes travel with the parent as W3C baggage, so a Ray worker's spans are filed and bucketed as the
# caller's would be: a validation pass's remote generation is overhead there too, not productive.


def _with_carried_scopes(context: Any) -> Any:
    from .provider import _ITERATION, STATE
    from .scopes import _BUCKET_OVERRIDE

    for key, value in STATE.handed_on.items():  # the caller's set-up, for a worker that never called configure()
        context = baggage.set_baggage(key, value, context)
    iteration, bucket = _ITERATION.get(), _BUCKET_OVERRIDE.get()
    if iteration is not None:
        context = baggage.set_baggage(BAGGAGE_ITERATION, str(iteration), context)
    if bucket is not None:
        context = baggage.set_baggage(BAGGAGE_BUCKET_SCOPE, bucket, context)
    return context


def _enter_carried_scopes(context: Any) -> list[tuple[Any, Any]]:
    """Re-enter the iteration and bucket scopes a carrier brought along; tokens to reset, innermost last."""
    from .groups import Bucket
    from .provider import _ITERATION
    from .scopes import _BUCKET_OVERRIDE

    tokens: list[tuple[Any, Any]] = []
    iteration = baggage.get_baggage(BAGGAGE_ITERATION, context)
    bucket = baggage.get_baggage(BAGGAGE_BUCKET_SCOPE, context)
    try:
        if iteration is not None:
            tokens.append((_ITERATION, _ITERATION.set(int(str(iteration)))))
        if bucket is not None:
            tokens.append((_BUCKET_OVERRIDE, _BUCKET_OVERRIDE.set(Bucket(str(bucket)).value)))
    except ValueError:
        warn_once("baggage", "goodput: ignoring malformed goodput baggage %r / %r", iteration, bucket)
    return tokens


def current_trace_carrier() -> dict[str, str]:
    """W3C `traceparent` carrier for the active span, to hand to another process.

    Capture it on the driver inside the span that should be the parent, hand it to the worker, and reopen it there
    with :func:`remote_trace_context`. Empty when no span is recording, which is the case whenever the enclosing
    span's group is disabled, so the caller needs no telemetry-specific branch. The enclosing iteration and bucket
    scopes ride along as W3C baggage and are re-entered on the other side.
    """
    if not trace.get_current_span().is_recording():
        return {}
    carrier: dict[str, str] = {}
    try:
        propagate.inject(carrier, context=_with_carried_scopes(otel_context.get_current()))
    except Exception:  # a misconfigured OTEL_PROPAGATORS must not reach the training loop
        warn_once("inject", "goodput: could not inject the trace context; spans will not be parented", stack_info=True)
        return {}
    return carrier


def remote_trace_parent(carrier: Mapping[str, str] | None) -> Any | None:
    """The OTel context the carrier names, or None when there is nothing to attach."""
    if not carrier:
        return None
    try:
        context = propagate.extract(dict(carrier))
    except Exception:
        warn_once("extract", "goodput: unreadable trace carrier %r; the span is left unparented", carrier)
        return None
    if not trace.get_current_span(context).get_span_context().is_valid:
        warn_once("extract-invalid", "goodput: trace carrier %r names no valid span; left unparented", carrier)
        return None
    return context


@contextmanager
def attached_context(context: Any | None) -> Iterator[None]:
    """Attach `context` for the duration of the block; a no-op for None.

    Also re-enters the `iteration_scope` and `bucket_scope` the context carries as baggage (see
    :func:`current_trace_carrier`), so work handed to another thread or process is tagged as the caller's would be.
    """
    if context is None:
        yield
        return
    token = otel_context.attach(context)
    scopes = _enter_carried_scopes(context)
    try:
        yield
    finally:
        for variable, scope_token in reversed(scopes):
            variable.reset(scope_token)
        otel_context.detach(token)


@contextmanager
def remote_trace_context(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Parent every span opened in this block to the span in `carrier`.

    A no-op for an empty carrier, so an uninstrumented run keeps emitting root spans instead of failing. Attach per
    thread, not once per process: a fresh `threading.Thread` starts with an empty context.
    """
    with attached_context(remote_trace_parent(carrier)):
        yield


def trace_context_kwargs() -> dict[str, Any]:
    """Carrier kwarg for a Ray call, or `{}` when there is nothing to send.

    For dispatch that takes a method by name and forwards `**kwargs`, spread this at the call site. Empty rather
    than a None carrier, so a run with no recording span calls the method with exactly its original signature.
    """
    carrier = current_trace_carrier()
    return {TRACE_CARRIER_KWARG: carrier} if carrier else {}


CallScope = Callable[[dict[str, Any]], Any]  # kwargs -> context manager around one call
StreamScope = Callable[[dict[str, Any]], Any]  # kwargs -> context manager yielding the per-step activation


def wrap_in_context(fn: Callable[..., Any], call_scope: CallScope, stream_scope: StreamScope) -> Callable[..., Any]:
    """A wrapper of `fn`'s own kind (function, coroutine, generator, async generator) that runs it in a context.

    A call runs inside `call_scope(kwargs)`, a coroutine until its awaited result. A generator runs inside
    `stream_scope(kwargs)`, which yields an activation entered around each step only, never across a `yield`: a
    context attached at a yield would be detached later, by the garbage collector, when a consumer abandons the
    stream (Ray does, for a cancelled streaming call), and OTel would log "Failed to detach context". Values and
    exceptions sent into the wrapper reach the body, as `yield from` would pass them. The scopes may pop kwargs.
    """
    if inspect.isasyncgenfunction(fn):

        async def async_generator_steps(*args: Any, **kwargs: Any) -> Any:
            with stream_scope(kwargs) as activate:
                generator = fn(*args, **kwargs)
                sent: Any = None
                thrown: BaseException | None = None
                try:
                    while True:
                        with activate():
                            try:
                                item = await (generator.asend(sent) if thrown is None else generator.athrow(thrown))
                            except StopAsyncIteration:
                                return
                        sent, thrown = None, None
                        try:
                            sent = yield item
                        except GeneratorExit:
                            raise
                        except BaseException as exc:  # forwarded to the body
                            thrown = exc
                finally:
                    with activate():
                        await generator.aclose()

        return async_generator_steps
    if inspect.isgeneratorfunction(fn):

        def generator_steps(*args: Any, **kwargs: Any) -> Any:
            with stream_scope(kwargs) as activate:
                generator = fn(*args, **kwargs)
                sent: Any = None
                thrown: BaseException | None = None
                try:
                    while True:
                        with activate():
                            try:
                                item = generator.send(sent) if thrown is None else generator.throw(thrown)
                            except StopIteration as stop:
                                return stop.value
                        sent, thrown = None, None
                        try:
                            sent = yield item
                        except GeneratorExit:
                            raise
                        except BaseException as exc:  # forwarded to the body
                            thrown = exc
                finally:
                    with activate():
                        generator.close()

        return generator_steps
    if inspect.iscoroutinefunction(fn):

        async def awaited_in_scope(*args: Any, **kwargs: Any) -> Any:
            with call_scope(kwargs):
                return await fn(*args, **kwargs)

        return awaited_in_scope

    def called_in_scope(*args: Any, **kwargs: Any) -> Any:
        with call_scope(kwargs):
            return fn(*args, **kwargs)

    return called_in_scope
