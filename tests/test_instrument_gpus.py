"""What a process holds (SPEC section 12), as configure() writes it on the resource: `goodput.gpu.ids` (an OTLP array
of strings) or `goodput.gpus` (a count), and `goodput.fleet`.

The overrides in order (`configure(gpus=..., fleet=...)`, the job's resource attributes, `GOODPUT_GPUS` /
`GOODPUT_FLEET`), bad values warned once and never raised, nothing left in the environment or in baggage for the
processes started later; and on the session's Ray cluster (4 declared GPUs) actors and tasks recording the GPUs Ray
assigned them, whether they call configure() bare or are set up from a carrier, colocated on one GPU or not, and a
driver told nothing recording none. Everything is read back from the trace files the processes wrote.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from urllib.parse import unquote

import pytest
import ray

import instrument
from conftest import instrument_warnings, read_json_lines_records
from instrument import RLSpanGroup, accepts_trace_context, dispatch_with_trace_context, managed_span, umbrella_span
from instrument.wire import ENV_FLEET, ENV_GPUS, RESOURCE_FLEET, RESOURCE_GPU_IDS, RESOURCE_GPUS

HOLDING_KEYS = (RESOURCE_GPU_IDS, RESOURCE_GPUS, RESOURCE_FLEET)


def ids(*gpus: str) -> dict:
    """`goodput.gpu.ids` as OTLP JSON spells an array of strings."""
    return {"arrayValue": {"values": [{"stringValue": gpu} for gpu in gpus]}}


def count(gpus: int) -> dict:
    return {"intValue": str(gpus)}  # OTLP JSON writes an int64 as a string


def text(value: str) -> dict:
    return {"stringValue": value}


def holdings_in(path: Path) -> dict:
    """The holding keys of the resource of an OTLP JSON Lines trace file, their values as OTLP JSON spells them."""
    (record, *_) = read_json_lines_records(path)
    (resource_spans,) = record["resourceSpans"]
    attributes = {kv["key"]: kv["value"] for kv in resource_spans["resource"]["attributes"]}
    return {key: value for key, value in attributes.items() if key in HOLDING_KEYS}


def written(tmp_path: Path, **configure_args) -> dict:
    """configure() this process with `configure_args`, write one span, and read back what its file says it holds."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    instrument.configure(exporter="json-file", path=folder, span_groups="all", service_name="job", **configure_args)
    with umbrella_span(RLSpanGroup.U_JOB, "rl.toy.job"):
        pass
    instrument.shutdown()
    (path,) = folder.iterdir()
    return holdings_in(path)


def file_of(folder: Path, pid: int) -> Path:
    """The trace file the process `pid` wrote in `folder` (`<service>-<host>-<pid>.jsonl`)."""
    (path,) = [path for path in folder.iterdir() if path.name.endswith(f"-{pid}.jsonl")]
    return path


# --- told by the job ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        (2, {RESOURCE_GPUS: count(2)}),
        (["0", "3"], {RESOURCE_GPU_IDS: ids("0", "3")}),
        ((0, 3), {RESOURCE_GPU_IDS: ids("0", "3")}),  # Ray's ints are written as strings
        (["1", " 1 ", ""], {RESOURCE_GPU_IDS: ids("1")}),  # one GPU named twice is held once
        ("0,1", {RESOURCE_GPU_IDS: ids("0", "1")}),  # text is read as GOODPUT_GPUS is
        ("4", {RESOURCE_GPUS: count(4)}),
    ],
)
def test_configure_gpus_writes_a_count_or_an_array_of_ids(tmp_path, gpus, expected):
    assert written(tmp_path, gpus=gpus) == expected


@pytest.mark.parametrize(
    ("variable", "expected"),
    [
        ("0,1", {RESOURCE_GPU_IDS: ids("0", "1")}),
        ("4", {RESOURCE_GPUS: count(4)}),
        ("3,", {RESOURCE_GPU_IDS: ids("3")}),  # one id: the comma says it is an id, not a count
        (" 0 , ,GPU-5b3c ", {RESOURCE_GPU_IDS: ids("0", "GPU-5b3c")}),  # blanks stripped, empty items dropped
    ],
)
def test_goodput_gpus_is_a_count_or_a_comma_separated_list_of_ids(tmp_path, monkeypatch, variable, expected):
    monkeypatch.setenv(ENV_GPUS, variable)
    assert written(tmp_path) == expected


@pytest.mark.parametrize(
    ("configure_args", "variable"),
    [({"gpus": 0}, None), ({"gpus": []}, None), ({}, "0"), ({}, ","), ({"gpus": 0}, "4")],
    ids=["count-0", "no-ids", "variable-0", "variable-comma", "argument-0-over-variable"],
)
def test_holding_no_gpu_writes_neither_key(tmp_path, monkeypatch, configure_args, variable):
    if variable is not None:
        monkeypatch.setenv(ENV_GPUS, variable)
    assert written(tmp_path, **configure_args) == {}


@pytest.mark.parametrize(
    ("configure_args", "variable"),
    [
        ({"gpus": "two"}, None),
        ({"gpus": -1}, None),
        ({"gpus": True}, None),  # a bool is no count
        ({"gpus": 1.5}, None),
        ({}, "-2"),
        ({}, "GPU-5b3c"),  # one id needs its comma: "GPU-5b3c,"
        ({}, "0 1"),
        ({"gpus": "three"}, "0,1"),  # a bad argument still overrides: it does not fall back to the variable
    ],
    ids=[
        "word",
        "negative",
        "bool",
        "float",
        "variable-negative",
        "variable-id-alone",
        "variable-blank-inside",
        "bad-argument-over-variable",
    ],
)
def test_a_value_that_is_neither_a_count_nor_ids_writes_nothing_and_is_warned_once(
    tmp_path, monkeypatch, caplog, configure_args, variable
):
    if variable is not None:
        monkeypatch.setenv(ENV_GPUS, variable)
    caplog.set_level(logging.WARNING, logger="instrument")
    assert written(tmp_path, **configure_args) == {}
    assert written(tmp_path, **configure_args) == {}  # configured again: no second warning
    (message,) = instrument_warnings(caplog)
    bad = configure_args.get("gpus", variable)
    assert repr(bad) in message and "recording no GPU" in message
    if bad == "GPU-5b3c":
        assert "'GPU-5b3c,'" in message  # what to write instead


@pytest.mark.parametrize(
    ("configure_args", "environment", "expected"),
    [
        ({"gpus": 2, "resource_attributes": {RESOURCE_GPU_IDS: ["5"]}}, {ENV_GPUS: "0,1"}, {RESOURCE_GPUS: count(2)}),
        ({"gpus": ["1"], "resource_attributes": {RESOURCE_GPUS: 3}}, {}, {RESOURCE_GPU_IDS: ids("1")}),
        ({"resource_attributes": {RESOURCE_GPU_IDS: ["5"]}}, {ENV_GPUS: "0,1"}, {RESOURCE_GPU_IDS: ids("5")}),
        ({}, {"OTEL_RESOURCE_ATTRIBUTES": "goodput.gpus=3", ENV_GPUS: "1"}, {RESOURCE_GPUS: text("3")}),
        ({"gpus": "  "}, {ENV_GPUS: "4"}, {RESOURCE_GPUS: count(4)}),  # blank text says nothing, as an unset variable
        ({"fleet": "Trainer"}, {}, {RESOURCE_FLEET: text("Trainer")}),
        ({}, {ENV_FLEET: "Rollout"}, {RESOURCE_FLEET: text("Rollout")}),
        ({"fleet": "Trainer"}, {ENV_FLEET: "Rollout"}, {RESOURCE_FLEET: text("Trainer")}),
        (
            {"fleet": "Trainer", "resource_attributes": {RESOURCE_FLEET: "Critic"}},
            {ENV_FLEET: "Rollout"},
            {RESOURCE_FLEET: text("Trainer")},
        ),
        ({"resource_attributes": {RESOURCE_FLEET: "Critic"}}, {ENV_FLEET: "Rollout"}, {RESOURCE_FLEET: text("Critic")}),
        ({}, {ENV_FLEET: "  "}, {}),
    ],
)
def test_arguments_win_over_resource_attributes_which_win_over_the_variables(
    tmp_path, monkeypatch, configure_args, environment, expected
):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert written(tmp_path, **configure_args) == expected


def test_what_a_process_holds_is_neither_left_in_the_environment_nor_handed_on(tmp_path, monkeypatch):
    """Other choices of configure() reach the processes started later; GPUs and a fleet would reach the wrong ones."""
    monkeypatch.delenv(ENV_GPUS, raising=False)
    monkeypatch.delenv(ENV_FLEET, raising=False)
    instrument.configure(exporter="json-file", path=tmp_path, span_groups="all", gpus=["0", "1"], fleet="Trainer")
    assert ENV_GPUS not in os.environ and ENV_FLEET not in os.environ
    with umbrella_span(RLSpanGroup.U_STEP, "rl.toy.step"):
        carrier = instrument.current_trace_carrier()
    handed_on = dict(unquote(item).split("=", 1) for item in carrier["baggage"].split(","))
    assert "goodput.run_id" in handed_on
    assert not [key for key in handed_on if "gpu" in key or "fleet" in key], handed_on


def test_a_process_told_nothing_writes_neither_key(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_GPUS, raising=False)
    monkeypatch.delenv(ENV_FLEET, raising=False)
    assert written(tmp_path) == {}


# --- on a Ray cluster with 4 GPUs -----------------------------------------------------------------------------------


# The actors and the task below say what `ray.get_gpu_ids()` gives them as configure() writes ids: strings, in
# numeric order. Each spells it out: Ray sends an actor class or a task by value, and a helper of this module it
# called would have to be imported on the worker, where this folder is not on the path.


@ray.remote(num_cpus=0)
class Holder:
    """Calls configure() bare, as workers do; the session cluster's workers inherit JSON Lines files to write."""

    def __init__(self):
        instrument.configure()

    def held(self):
        """Its pid, once its file holds a span, and the GPUs Ray says it holds."""
        with managed_span(RLSpanGroup.GENERATION, "rl.toy.generation"):
            pass
        instrument.force_flush()
        return os.getpid(), sorted(map(str, ray.get_gpu_ids()), key=int)


@ray.remote(num_cpus=0)
class Receiver:
    """Never calls configure(): set up from its first carrier, its spans written before the call returns."""

    @accepts_trace_context
    def held(self):
        with managed_span(RLSpanGroup.GENERATION, "rl.toy.generation"):
            pass
        return os.getpid(), sorted(map(str, ray.get_gpu_ids()), key=int)


@ray.remote(num_cpus=0, num_gpus=1)
@accepts_trace_context
def score():
    """A task set up from its carrier: Ray runs one GPU task per worker process."""
    with managed_span(RLSpanGroup.REWARD, "rl.toy.reward"):
        pass
    return os.getpid(), sorted(map(str, ray.get_gpu_ids()), key=int)


def held_by(actors: list, folder: Path) -> list[tuple[dict, list[str]]]:
    """For each actor: what its file says it holds, and what Ray told the actor itself."""
    try:
        answers = ray.get([actor.held.remote() for actor in actors])
    finally:
        for actor in actors:
            ray.kill(actor)  # no atexit handler runs: the file was flushed before the call returned
    return [(holdings_in(file_of(folder, pid)), ray_ids) for pid, ray_ids in answers]


def dispatched(remote_methods: list, folder: Path) -> list[tuple[dict, list[str]]]:
    """Call each through a carrier from a driver writing JSON Lines into `folder`; what each wrote and Ray said."""
    instrument.configure(service_name="driver", exporter="json-file", path=folder, span_groups="all")
    with umbrella_span(RLSpanGroup.U_STEP, "rl.toy.step"):
        answers = ray.get([dispatch_with_trace_context(method) for method in remote_methods])
    return [(holdings_in(file_of(folder, pid)), ray_ids) for pid, ray_ids in answers]


@pytest.mark.ray
@pytest.mark.slow
def test_actors_that_configure_bare_record_the_gpus_ray_assigned_each(ray_cluster, ray_inherited_trace_dir):
    actors = [Holder.options(num_gpus=1).remote() for _ in range(2)]
    (first, first_ray), (second, second_ray) = held_by(actors, ray_inherited_trace_dir)
    assert len(first_ray) == len(second_ray) == 1 and first_ray != second_ray  # one GPU each, not the same one
    assert first == {RESOURCE_GPU_IDS: ids(*first_ray)}
    assert second == {RESOURCE_GPU_IDS: ids(*second_ray)}


@pytest.mark.ray
@pytest.mark.slow
def test_actors_colocated_on_one_gpu_record_the_same_id(ray_cluster, ray_inherited_trace_dir):
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    group = placement_group([{"GPU": 1}])  # one GPU for both, as NeMo-RL's colocated generation and training
    ray.get(group.ready(), timeout=60)
    try:
        on_one_gpu = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0)
        actors = [Holder.options(num_gpus=0.5, scheduling_strategy=on_one_gpu).remote() for _ in range(2)]
        (first, first_ray), (second, second_ray) = held_by(actors, ray_inherited_trace_dir)
    finally:
        remove_placement_group(group)
    assert len(first_ray) == 1 and first_ray == second_ray
    assert first == second == {RESOURCE_GPU_IDS: ids(*first_ray)}


@pytest.mark.ray
@pytest.mark.slow
def test_an_actor_and_a_task_set_up_from_a_carrier_record_their_gpus_with_no_call_of_their_own(ray_cluster, tmp_path):
    receiver = Receiver.options(num_gpus=1).remote()
    # A worker of its own (a runtime env no other test asks for): one an earlier test's task configured would
    # keep that test's set-up, as a job's reused worker keeps its job's.
    fresh = score.options(runtime_env={"env_vars": {"FRESH_WORKER_FOR": tmp_path.name}})
    try:
        (actor_holds, actor_ray), (task_holds, task_ray) = dispatched([receiver.held, fresh], tmp_path)
    finally:
        ray.kill(receiver)
    assert len(actor_ray) == len(task_ray) == 1
    assert actor_holds == {RESOURCE_GPU_IDS: ids(*actor_ray)}
    assert task_holds == {RESOURCE_GPU_IDS: ids(*task_ray)}


@pytest.mark.ray
@pytest.mark.slow
def test_goodput_gpus_in_an_actors_runtime_env_overrides_the_ids_ray_assigned(ray_cluster, tmp_path):
    told = {"env_vars": {ENV_GPUS: "7,", ENV_FLEET: "Rollout"}}
    receiver = Receiver.options(num_gpus=1, runtime_env=told).remote()
    try:
        ((holds, ray_ids),) = dispatched([receiver.held], tmp_path)
    finally:
        ray.kill(receiver)
    assert len(ray_ids) == 1 and ray_ids != ["7"]
    assert holds == {RESOURCE_GPU_IDS: ids("7"), RESOURCE_FLEET: text("Rollout")}


@pytest.mark.ray
def test_a_driver_told_nothing_holds_no_gpu_on_a_cluster_that_has_some(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_GPUS, raising=False)
    assert ray_cluster.cluster_resources().get("GPU") == 4
    assert written(tmp_path) == {}  # Ray's ids are a worker's: a driver does not ask for them
