"""A Ray worker set up like its caller: on a cluster the job joined, no environment variable of the driver reaches it.

`configure()` writes its choice to the environment, which workers of a cluster the job started itself (`ray.init()`)
inherit. A cluster started before the job (`ray start`, `ray job submit`, KubeRay) runs its workers with the
environment of whoever started it, so there the choice travels with each trace carrier instead, as W3C baggage
(`wire.BAGGAGE_*`): a worker that never called `configure()` is configured from the first carrier it receives,
under the name of its actor class or task function. What the worker holds (its GPUs, its fleet) never travels:
configure() reads it in the worker itself, from Ray's ids or the worker's own `GOODPUT_GPUS` (`gpus.py`).

A decorated method called with no carrier (a bare `.remote()`, an `.options(...).remote()`) has nothing to follow:
the worker is then configured from the job's settings in its environment where a cluster the job started put them
there (its spans are roots of their own trace), and otherwise says once, in its log, that nothing of it is recorded
and why: a worker silently left out would make the job look smaller than it is (its GPUs uncounted).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from opentelemetry import baggage

from ._log import logger, warn_once
from .ray_worker import is_ray_worker
from .wire import (
    BAGGAGE_EXPORTER,
    BAGGAGE_RUN_ID,
    BAGGAGE_SPAN_GROUPS,
    BAGGAGE_TRACE_OWNER,
    BAGGAGE_TRACE_PATH,
    ENV_EXPORTER,
    ENV_RUN_ID,
    ENV_SPAN_GROUPS,
    ENV_TRACE_OWNER_PID,
    ENV_TRACE_PATH,
)

_adopt_lock = threading.Lock()

# What configure() leaves in the environment of the processes a job starts (it always writes the groups and the run
# id): a worker that finds one of them is a worker of a cluster the job started, or one given the job's settings.
_JOB_SETTINGS = (ENV_SPAN_GROUPS, ENV_RUN_ID, ENV_EXPORTER, ENV_TRACE_PATH)

# The process (by pid) that found no carrier and no settings and said so: later calls skip the look.
_said_unrecorded_pid = 0


def service_name_of(function: Any) -> str:
    """The name a worker running `function` goes by: its class for a method (`Worker.generate` -> `Worker`), else
    the function's own."""
    parts = getattr(function, "__qualname__", getattr(function, "__name__", "worker")).split(".")
    return parts[-2] if len(parts) >= 2 and parts[-2] != "<locals>" else parts[-1]


def configure_from_carrier(context: Any, service_name: str) -> None:
    """Configure this process like the caller whose carrier brought `context`, unless it is configured already or
    the carrier holds no goodput set-up (a caller without goodput, or one that hands none on). Never raises."""
    from .provider import STATE, configure

    if STATE.provider is not None:
        return
    run_id = baggage.get_baggage(BAGGAGE_RUN_ID, context)
    if not run_id:
        return
    with _adopt_lock:
        if STATE.provider is not None:  # another thread of this actor got here first
            return
        exporter = baggage.get_baggage(BAGGAGE_EXPORTER, context)
        path = baggage.get_baggage(BAGGAGE_TRACE_PATH, context)
        owner = baggage.get_baggage(BAGGAGE_TRACE_OWNER, context)
        if owner:  # a single trace file stays the caller's: this process writes a sibling of it
            os.environ.setdefault(ENV_TRACE_OWNER_PID, str(owner))
        choice: dict[str, Any] = {
            "service_name": service_name,
            "span_groups": str(baggage.get_baggage(BAGGAGE_SPAN_GROUPS, context) or "") or None,
            "exporter": str(exporter) if exporter else None,
            "path": str(path) if path else None,
            "run_id": str(run_id),
        }
        try:
            configure(**choice)
        except Exception as error:  # the caller's exporter cannot be built here (a package this node lacks)
            logger.warning("goodput: this worker cannot use its caller's exporter (%s); writing files instead", error)
            try:
                configure(**{**choice, "exporter": None})
            except Exception:
                warn_once("configure-from-carrier", "goodput: could not configure this worker like its caller")
                logger.debug("goodput: configure from carrier failed", exc_info=True)


def configure_without_carrier(service_name: str, method: str) -> None:
    """In a Ray worker never configured, whose decorated `method` was called with no goodput set-up to follow (no
    carrier, or one without goodput's baggage): configure it from the job's settings in its environment, else warn
    once that nothing of this worker is recorded and why. Nothing in a driver or any other process, where a
    decorated function called directly is the caller's own code. Never raises."""
    global _said_unrecorded_pid
    from .provider import STATE, configure

    if STATE.provider is not None or _said_unrecorded_pid == os.getpid() or not is_ray_worker():
        return
    with _adopt_lock:
        if STATE.provider is not None:  # another thread of this actor got here first
            return
        if not any(os.environ.get(name) for name in _JOB_SETTINGS):
            _said_unrecorded_pid = os.getpid()
            warn_once(
                "no-carrier",
                "goodput: %s was called with no goodput trace carrier (a bare .remote() or .options(...).remote(), "
                "not dispatch_with_trace_context inside a recording span) and this worker's environment has none of "
                "the job's GOODPUT_* settings (a cluster started before the job: ray start, ray job submit, KubeRay): "
                "nothing of this worker is recorded until a call brings a carrier or it calls instrument.configure()",
                method,
            )  # fmt: skip
            return
        try:
            configure(service_name=service_name)
        except Exception:  # an exporter the environment names that this node cannot build, and no fallback
            warn_once("configure-without-carrier", "goodput: could not configure this worker from its environment")
            logger.debug("goodput: configure from the environment failed", exc_info=True)
