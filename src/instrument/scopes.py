"""The scopes that shape the spans opened inside them: iteration, bucket, per-prompt work.

Each is a context variable, so it follows nested calls and coroutines (not raw threads: a carrier takes the
iteration and bucket scopes to another thread or process, see `context`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from ._log import warn_once
from .groups import Bucket
from .provider import _ITERATION

_BUCKET_OVERRIDE: ContextVar[str | None] = ContextVar("goodput_bucket_override", default=None)  # a Bucket value
_PER_PROMPT_SCOPE: ContextVar[bool] = ContextVar("goodput_per_prompt_scope", default=False)


@contextmanager
def bucket_scope(bucket: Bucket | str) -> Iterator[None]:
    """Reclassify every leaf span opened inside this block as `bucket`.

    For phases whose goodput meaning is set by the caller, not by the callee's group: validation generates through
    the same path as training, but its tokens are discarded. Only the group-derived bucket changes: umbrellas stay
    unbucketed, an explicit `rl.bucket` is kept, and efficiency spans keep their category's bucket, so wrapping a
    region cannot start double counting. Propagates to nested calls and coroutines, not to raw threads.
    """
    token = _BUCKET_OVERRIDE.set(Bucket(bucket).value)
    try:
        yield
    finally:
        _BUCKET_OVERRIDE.reset(token)


@contextmanager
def iteration_scope(iteration: int | None) -> Iterator[None]:
    """Stamp `rl.iteration` on every span opened inside this block.

    Wrap a training step once and its whole subtree becomes filterable by step, including spans added later and
    those of auto-instrumented libraries on the configured provider. A span that passes the attribute itself keeps
    its own value. Does not cross threads or processes: the rollup follows parent links for those. `None` (a step
    not known yet, a loop that has none) makes a scope that changes nothing, as does a value that is not an
    integer, or one OTLP cannot carry (outside 64 bits), which is reported once: telemetry never raises into the
    loop, and the spans are kept.
    """
    if iteration is None:
        yield
        return
    try:
        value = int(iteration)
    except (TypeError, ValueError):
        warn_once(
            f"iteration-scope:{type(iteration).__name__}",
            "goodput: iteration_scope(%r) is not an integer iteration; spans inside it carry no rl.iteration",
            iteration,
            stack_info=True,
        )
        yield
        return
    if not -(2**63) <= value < 2**63:
        warn_once(
            "iteration-scope:out-of-range",
            "goodput: iteration_scope(%d) is outside the 64-bit range an OTLP attribute holds; spans inside it carry "
            "no rl.iteration",
            value,
            stack_info=True,
        )
        yield
        return
    token = _ITERATION.set(value)
    try:
        yield
    finally:
        _ITERATION.reset(token)


@contextmanager
def per_prompt_scope() -> Iterator[None]:
    """Mark this block as per-prompt work, so spans that consult :func:`in_per_prompt_scope` move to `per_prompt`.

    One group switch then turns off every per-prompt span at once. Propagates to nested calls and coroutines, not
    to raw threads or other processes.
    """
    token = _PER_PROMPT_SCOPE.set(True)
    try:
        yield
    finally:
        _PER_PROMPT_SCOPE.reset(token)


def in_per_prompt_scope() -> bool:
    """Whether the caller is running inside :func:`per_prompt_scope`."""
    return _PER_PROMPT_SCOPE.get()
