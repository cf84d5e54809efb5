"""The toy job's two fleets on GPUs Ray hands out (SPEC section 12), read back from the resources its processes wrote.

Apart (the default), each of the four actors holds a GPU of its own; with `--colocated`, generation rank i and
training rank i hold the same one, so the two fleets share exactly their GPUs. The ids are what `ray.get_gpu_ids()`
gave each actor on the session's cluster (which declares four GPUs, none of which need exist), written by
`instrument.configure()` as `goodput.gpu.ids`; a GPU is `(host.name, id)`, a fleet `goodput.fleet`, else
`rl.worker_group`, else `service.name`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import invoke
from examples.grpo_toy import fleets, job

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
GENERATION, TRAINING = fleets.GENERATION_FLEET, fleets.TRAINING_FLEET


def holdings(path: Path) -> dict[str, dict[int, frozenset[tuple[str, str]]]]:
    """Fleet -> rank -> the GPUs the process of that rank holds, from every process's resource; a process that
    holds no GPU (the driver) is left out."""
    result = invoke(["query", str(path), "--format", "json", "SELECT DISTINCT process, resource FROM spans"])
    assert result.exit_code == 0, result.output
    fleets_seen: dict[str, dict[int, frozenset[tuple[str, str]]]] = defaultdict(dict)
    for row in json.loads(result.stdout):
        resource = row["resource"]
        if "goodput.gpu.ids" not in resource:
            continue
        fleet = resource.get("goodput.fleet") or resource.get("rl.worker_group") or resource["service.name"]
        rank = int(resource["dl.rank"])
        assert rank not in fleets_seen[fleet], (fleet, rank, row["process"])  # one process per rank
        fleets_seen[fleet][rank] = frozenset(
            (resource["host.name"], gpu) for gpu in json.loads(resource["goodput.gpu.ids"])
        )
    return dict(fleets_seen)


def gpus_of(fleet: dict[int, frozenset[tuple[str, str]]]) -> set[tuple[str, str]]:
    return set().union(*fleet.values())


def assert_apart(held: dict[str, dict[int, frozenset[tuple[str, str]]]], fleet_ranks: dict[str, int]) -> None:
    """Each fleet has its ranks, each rank holds one GPU, and no two processes hold the same one."""
    assert {fleet: sorted(ranks) for fleet, ranks in held.items()} == {
        fleet: list(range(n)) for fleet, n in fleet_ranks.items()
    }
    gpus = [gpu for ranks in held.values() for ids in ranks.values() for gpu in ids]
    assert all(len(ids) == 1 for ranks in held.values() for ids in ranks.values()), held
    assert len(set(gpus)) == len(gpus) == fleets.CLUSTER_GPUS, held


@pytest.mark.slow
@pytest.mark.ray
def test_apart_every_actor_of_both_fleets_holds_a_gpu_of_its_own(toy_sync_run):
    assert_apart(holdings(toy_sync_run), {GENERATION: 2, TRAINING: 2})


@pytest.mark.slow
@pytest.mark.ray
def test_colocated_generation_rank_i_and_training_rank_i_hold_the_same_gpu(toy_buggy_colocated_run):
    held = holdings(toy_buggy_colocated_run)  # --buggy changes spans, not where actors run
    assert sorted(held) == [GENERATION, TRAINING]
    assert sorted(held[GENERATION]) == sorted(held[TRAINING]) == [0, 1]
    for rank, ids in held[GENERATION].items():
        assert len(ids) == 1 and held[TRAINING][rank] == ids, (rank, held)
    assert held[GENERATION][0] != held[GENERATION][1]  # the pairs are on different GPUs
    assert gpus_of(held[GENERATION]) == gpus_of(held[TRAINING])  # the fleets share exactly their GPUs
    assert len(gpus_of(held[GENERATION])) == fleets.gpus_needed("sync", colocated=True) == 2


@pytest.mark.slow
@pytest.mark.ray
def test_the_async_run_holds_a_gpu_for_its_stream_its_validation_and_each_training_rank(toy_async_run):
    assert_apart(holdings(toy_async_run), {fleets.STREAM_FLEET: 1, fleets.VALIDATION_FLEET: 1, TRAINING: 2})


def test_colocated_async_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        job.parse_args(["--mode", "async", "--colocated"])
    assert exited.value.code == 2
    assert "--colocated is for --mode sync" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("cluster_gpus", "mode", "colocated", "says"),
    [
        (0, "sync", False, "the Ray cluster has 0 GPUs and this job needs 4 (one per actor)"),
        (2, "sync", False, "or run with --colocated (2 GPUs)"),
        (3, "async", False, "the Ray cluster has 3 GPUs and this job needs 4"),
        (1, "sync", True, "the Ray cluster has 1 GPU and this job needs 2 (paired)"),
        (4, "sync", False, None),
        (4, "async", False, None),
        (2, "sync", True, None),
    ],
)
def test_a_joined_cluster_with_too_few_gpus_is_refused_naming_what_it_has(cluster_gpus, mode, colocated, says):
    problem = fleets.missing_gpus(cluster_gpus, mode, colocated)
    if says is None:
        assert problem is None
    else:
        assert problem is not None and says in problem and "ray start --head --num-gpus 4" in problem, problem
        assert ("--colocated" in problem) == (mode == "sync" and not colocated and cluster_gpus >= 2)


@pytest.mark.slow
def test_the_committed_samples_hold_their_gpus_as_regenerated():
    """examples/regenerate_sample_traces.py runs grpo_sync apart and grpo_buggy colocated."""
    sync, buggy = holdings(SAMPLES / "grpo_sync"), holdings(SAMPLES / "grpo_buggy")
    assert sync and buggy, "sample_traces/ carry no GPU attributes: run examples/regenerate_sample_traces.py"
    assert_apart(sync, {GENERATION: 2, TRAINING: 2})
    assert gpus_of(buggy[GENERATION]) == gpus_of(buggy[TRAINING]) and len(gpus_of(buggy[TRAINING])) == 2
    assert all(buggy[GENERATION][rank] == buggy[TRAINING][rank] for rank in buggy[TRAINING])
