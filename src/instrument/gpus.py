"""What a process holds (SPEC section 12): its GPUs and its fleet, written on its resource by `configure()`.

A job is billed in GPU-hours, and the report charges each GPU from the spans of the processes that hold it, so each
process says what it holds: `goodput.gpu.ids`, ids local to its `host.name` (two processes naming one id on one host
share that GPU, as colocated workers do), or, when ids are not known, `goodput.gpus`, a count of GPUs of its own.
The first source that says something decides: `configure(gpus=...)`, then the job's own resource attributes
(`resource_attributes=` or `OTEL_RESOURCE_ATTRIBUTES` naming either key), then `GOODPUT_GPUS`, then the GPUs Ray
assigned an actor or a task. A process told nothing (the driver, usually) holds none and writes neither key.

Unlike the rest of configure()'s choice, none of this goes into the environment or into a carrier's baggage: what a
process holds is its own, and a driver's value handed on would have every worker claim the driver's GPUs. It is
read once per `configure()`, never on the span path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from opentelemetry.sdk.resources import Resource

from ._log import warn_once
from .ray_worker import ray_gpu_ids
from .wire import ENV_FLEET, ENV_GPUS, RESOURCE_FLEET, RESOURCE_GPU_IDS, RESOURCE_GPUS

GpuSpec = int | str | Iterable[object]
"""What `configure(gpus=...)` takes: a count, ids, or text read as `GOODPUT_GPUS` is."""

_COUNT = re.compile(r"[0-9]+")


def held_gpus(value: GpuSpec, source: str) -> tuple[str, ...] | int | None:
    """`value` as the ids (a tuple) or the count (an int) of the GPUs a process holds; None when it says nothing
    (text that is empty or blank, as the OTel specification reads an empty variable).

    Text with a comma is a list of ids (`"0,1"`; `"3,"` for one id; blanks around ids stripped, empty items dropped),
    a bare non-negative integer is a count (`"4"`). A value that is neither holds no GPU: it is warned once, naming
    `source`, and never raised, since a typo in a cluster-wide variable must not stop any worker.
    """
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        if "," in text:
            return _distinct(item.strip() for item in text.split(","))
        if _COUNT.fullmatch(text):
            return int(text)
    elif isinstance(value, int) and not isinstance(value, bool):
        if value >= 0:
            return value
    elif isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
        try:
            return _distinct(str(item).strip() for item in value)
        except Exception:  # an iterable that fails as it is read: as bad as any other value
            pass
    hint = f" (write {value.strip() + ','!r} for one id)" if isinstance(value, str) else ""
    warn_once(
        f"gpus {source} {value!r}",
        "goodput: %s=%r is neither a count of GPUs nor a list of their ids%s; recording no GPU for this process",
        source, value, hint,
    )  # fmt: skip
    return ()


def _distinct(ids: Iterable[str]) -> tuple[str, ...]:
    """The non-empty ids in their first order, each once: naming a GPU twice does not hold it twice."""
    return tuple(dict.fromkeys(gpu for gpu in ids if gpu))


def with_holdings(resource: Resource, gpus: GpuSpec | None, fleet: str | None) -> Resource:
    """`resource` with the process's GPUs and fleet (`goodput.gpu.ids` or `goodput.gpus`, `goodput.fleet`) as the
    module docstring chooses them; explicit arguments win over the job's resource attributes, which win over
    `GOODPUT_GPUS` / `GOODPUT_FLEET` and over Ray."""
    attributes = dict(resource.attributes)
    held = held_gpus(gpus, "gpus") if gpus is not None else None
    if held is None and RESOURCE_GPU_IDS not in attributes and RESOURCE_GPUS not in attributes:
        held = held_gpus(os.environ.get(ENV_GPUS, ""), ENV_GPUS)
        if held is None:
            held = tuple(ray_gpu_ids())  # empty in a driver: Ray's ids are a worker's
    if held is not None:
        attributes.pop(RESOURCE_GPU_IDS, None)
        attributes.pop(RESOURCE_GPUS, None)
        if isinstance(held, int) and held:
            attributes[RESOURCE_GPUS] = held
        elif isinstance(held, tuple) and held:
            attributes[RESOURCE_GPU_IDS] = held
    chosen_fleet = str(fleet).strip() if fleet is not None else ""
    if not chosen_fleet and RESOURCE_FLEET not in attributes:
        chosen_fleet = os.environ.get(ENV_FLEET, "").strip()
    if chosen_fleet:
        attributes[RESOURCE_FLEET] = chosen_fleet
    if attributes == dict(resource.attributes):
        return resource
    return Resource(attributes, resource.schema_url)
