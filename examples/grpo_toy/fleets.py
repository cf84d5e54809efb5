"""Where the toy job's actors run: a generation fleet and a training fleet, on GPUs Ray hands out (SPEC section 12).

Each actor asks Ray for a GPU (or half of one) and `instrument.configure()` records the ids Ray gave it
(`ray.get_gpu_ids()`, the resource `goodput.gpu.ids`), so a trace says what the scheduler did, not what the job meant.
A fleet is the service name its actors run under (`grpo-generation`, `grpo-training`; the async run's
`grpo-rollout-stream` and `grpo-validation`): SPEC section 12 falls back to `service.name` when no `goodput.fleet`
says otherwise, and the name is already the one a reader sees in `--by process`, so nothing more is declared.

- Apart (the default): every actor holds a GPU of its own, four in all, as a NeMo-RL run with generation and training
  on separate GPUs does. The training GPUs wait while generation runs and the other way round: what GPU goodput
  charges and wall-clock goodput cannot see.
- `--colocated` (sync only): one placement group with one single-GPU bundle per pair; generation actor i and training
  actor i each take half of bundle i, so Ray gives both the same id. NeMo-RL's colocated mode, vLLM and the policy
  taking turns on the same GPUs: the same work on two GPUs.

A cluster the job starts declares `CLUSTER_GPUS` (`ray.init(num_gpus=4)` works on a machine without any: Ray only
counts them); a cluster it joins is used as it is, and refused up front when it has too few, since Ray would
otherwise leave the actors pending for ever. Actors ask for no CPU: a toy cluster has two, and the actors sleep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from .schedule import N_GENERATION_ACTORS, N_TRAINING_ACTORS

CLUSTER_GPUS = 4  # what the job declares for a cluster of its own: enough for both fleets apart, in either mode
COLOCATED_SHARE = 0.5  # of its pair's GPU, for each of generation actor i and training actor i
GENERATION_FLEET = "grpo-generation"
TRAINING_FLEET = "grpo-training"
STREAM_FLEET, VALIDATION_FLEET = "grpo-rollout-stream", "grpo-validation"  # the async run's generation side
N_ASYNC_GENERATION_ACTORS = 2  # the rollout engine and the validation actor, a GPU each


class NotEnoughGPUs(RuntimeError):
    """The Ray cluster the job joined cannot hold its fleets."""


@dataclass
class Layout:
    """The Ray options of every actor, in rank order, and the placement group they share when colocated."""

    generation: list[dict[str, Any]]  # sync: the rollout ranks; async: the rollout engine, then the validation one
    training: list[dict[str, Any]]
    placement_group: Any | None = None


def gpus_needed(mode: str, colocated: bool) -> int:
    """GPUs the job holds: one per actor apart (sync: two rollout ranks, async: the rollout engine and the
    validation actor; plus the training ranks), one per pair colocated."""
    if colocated:
        return N_TRAINING_ACTORS
    generation = N_GENERATION_ACTORS if mode == "sync" else N_ASYNC_GENERATION_ACTORS
    return generation + N_TRAINING_ACTORS


def missing_gpus(cluster_gpus: float, mode: str, colocated: bool) -> str | None:
    """Why a cluster with `cluster_gpus` GPUs cannot run the job, or None when it can."""
    needed = gpus_needed(mode, colocated)
    if cluster_gpus >= needed:
        return None
    hint = ""
    if not colocated and mode == "sync" and cluster_gpus >= gpus_needed(mode, colocated=True):
        hint = f", or run with --colocated ({gpus_needed(mode, colocated=True)} GPUs)"
    return (
        f"the Ray cluster has {cluster_gpus:g} GPU{'' if cluster_gpus == 1 else 's'} and this job needs {needed} "
        f"({'paired' if colocated else 'one per actor'}): start the cluster with "
        f"`ray start --head --num-gpus {CLUSTER_GPUS}` or let the job start its own{hint}"
    )


async def place(mode: str, colocated: bool) -> Layout:
    """Reserve the job's GPUs (colocated: wait for the placement group) and say how each actor asks for its share."""
    if not colocated:
        own_gpu = {"num_cpus": 0, "num_gpus": 1}
        n_generation = N_GENERATION_ACTORS if mode == "sync" else N_ASYNC_GENERATION_ACTORS
        return Layout([dict(own_gpu) for _ in range(n_generation)], [dict(own_gpu) for _ in range(N_TRAINING_ACTORS)])
    if mode != "sync" or N_GENERATION_ACTORS != N_TRAINING_ACTORS:
        raise ValueError("colocation pairs every sync rollout rank with a training rank")
    group = placement_group([{"GPU": 1} for _ in range(N_TRAINING_ACTORS)], strategy="PACK")
    await group.ready()

    def half_of(bundle: int) -> dict[str, Any]:
        strategy = PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=bundle)
        return {"num_cpus": 0, "num_gpus": COLOCATED_SHARE, "scheduling_strategy": strategy}

    pairs = range(N_TRAINING_ACTORS)
    return Layout([half_of(i) for i in pairs], [half_of(i) for i in pairs], placement_group=group)


def release(layout: Layout) -> None:
    """Give the placement group back, so a later job on the same cluster finds its GPUs free."""
    if layout.placement_group is not None:
        remove_placement_group(layout.placement_group)
