"""What Ray says of the process it runs, read without importing Ray: `instrument` never imports Ray itself, so
these read only a Ray the process has imported already (every Ray worker has)."""

from __future__ import annotations

import sys
from typing import Any

from ._log import logger, warn_once


def _ray_of_a_worker() -> Any | None:
    """The imported `ray` module when this process is a Ray worker (an actor or a task); None in a driver (Ray's
    SCRIPT_MODE: the names and GPU ids read here are a worker's) and in a process that has not imported Ray."""
    ray = sys.modules.get("ray")
    worker_module = sys.modules.get("ray._private.worker")
    if ray is None or worker_module is None:
        return None
    return ray if worker_module.global_worker.mode == worker_module.WORKER_MODE else None


def is_ray_worker() -> bool:
    """Whether this process is a Ray worker (an actor or a task), read without importing Ray."""
    try:
        return _ray_of_a_worker() is not None
    except Exception:  # a Ray without these internals
        return False


def ray_worker_name() -> str | None:
    """The class of the Ray actor, or the function of the Ray task, this process runs; None elsewhere.

    Reads only a Ray already imported by the process: `instrument` never imports Ray itself.
    """
    try:
        ray = _ray_of_a_worker()
        if ray is None:
            return None  # a driver names itself
        context = ray.get_runtime_context()
        if context.get_actor_id():
            descriptor = context.current_actor._ray_actor_creation_function_descriptor
            return str(descriptor.class_name) or None
        task = context.get_task_name()
        return str(task).rsplit(".", 1)[-1] if task else None
    except Exception:  # a Ray without these internals: keep the default name
        return None


def ray_gpu_ids() -> list[str]:
    """The GPUs Ray assigned to this actor or task (`ray.get_gpu_ids()`), as strings in a stable order; none in a
    driver, where Ray documents the call as meaningless, and none when Ray cannot say (warned once, never raised).

    Ray builds the list from a set, so the ids are sorted (numerically where they are numbers): two reads of one
    process give the same attribute. A GPU task's worker runs one task and exits (Ray's `max_calls=1` for GPU tasks),
    so ids read when the worker is configured stay true for its life; an actor keeps its GPUs for its own.
    """
    try:
        ray = _ray_of_a_worker()
        if ray is None:
            return []
        ids = [str(gpu).strip() for gpu in ray.get_gpu_ids()]
    except Exception as error:
        warn_once("ray-gpu-ids", "goodput: Ray could not say which GPUs this worker holds (%s); recording none", error)
        logger.debug("goodput: ray.get_gpu_ids() failed", exc_info=True)
        return []
    return sorted(filter(None, ids), key=lambda gpu: (0, int(gpu), "") if gpu.isdecimal() else (1, 0, gpu))
