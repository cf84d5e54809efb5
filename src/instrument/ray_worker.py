"""What Ray says of the process it runs, read without importing Ray: `instrument` never imports Ray itself, so
these read only a Ray the process has imported already (every Ray worker has)."""

from __future__ import annotations

import sys


def ray_worker_name() -> str | None:
    """The class of the Ray actor, or the function of the Ray task, this process runs; None elsewhere.

    Reads only a Ray already imported by the process: `instrument` never imports Ray itself.
    """
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        worker_module = sys.modules.get("ray._private.worker")
        if worker_module is None or worker_module.global_worker.mode != worker_module.WORKER_MODE:
            return None  # a driver names itself
        context = ray.get_runtime_context()
        if context.get_actor_id():
            descriptor = context.current_actor._ray_actor_creation_function_descriptor
            return str(descriptor.class_name) or None
        task = context.get_task_name()
        return str(task).rsplit(".", 1)[-1] if task else None
    except Exception:  # a Ray without these internals: keep the default name
        return None
