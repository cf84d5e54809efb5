"""W3C trace-context hand-off: carry the active span to another thread or process and reopen it there.

Ray does not propagate OpenTelemetry context, and `threading.Thread` does not inherit context variables, so a
worker's spans start a trace of their own unless the parent is handed over explicitly. These helpers are the two
ends of that hand-off; each is a no-op when there is nothing to hand over, so call sites need no telemetry branch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Optional

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

from ._log import warn_once

TRACE_CARRIER_KWARG = "_otel_carrier"


def current_trace_carrier() -> dict[str, str]:
    """W3C `traceparent` carrier for the active span, to hand to another process.

    Capture it on the driver inside the span that should be the parent, hand it to the worker, and reopen it there
    with :func:`remote_trace_context`. Empty when no span is recording, which is the case whenever the enclosing
    span's group is disabled, so the caller needs no telemetry-specific branch.
    """
    if not trace.get_current_span().is_recording():
        return {}
    carrier: dict[str, str] = {}
    try:
        propagate.inject(carrier)
    except Exception:  # a misconfigured OTEL_PROPAGATORS must not reach the training loop
        warn_once("inject", "goodput: could not inject the trace context; spans will not be parented", stack_info=True)
        return {}
    return carrier


def remote_trace_parent(carrier: Optional[Mapping[str, str]]) -> Optional[Any]:
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
def attached_context(context: Optional[Any]) -> Iterator[None]:
    """Attach `context` for the duration of the block; a no-op for None."""
    if context is None:
        yield
        return
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextmanager
def remote_trace_context(carrier: Optional[Mapping[str, str]]) -> Iterator[None]:
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
