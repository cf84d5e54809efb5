"""GPU-seconds (SPEC section 12): what each process holds, the pools its GPUs make, and each window charged per GPU.

The expected figures are derived here by brute force from the trace as it was written, never from the rollup's
code: every GPU is listed one by one (`(host, id)` in an attempt, a count's GPUs private to their process, a
`--gpus` fleet's N shared by its processes), each window is cut at every span edge, and each piece of each GPU goes
to the first active bucket, in precedence order, among the bucketed spans that occupy that GPU (its holders', and
those whose own `goodput.fleet` or a `--place` names one of its fleets), in exact Fractions of a nanosecond.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PROPERTY_TESTS, json_report
from rollup import GoodputError
from rollup.accounting import GpuOptions
from rollup.report.as_json import report_json
from rollup.report.build import ReportOptions, build_report
from rollup.store.span_store import open_store
from tracebuild import ORIGIN_NS, S, ns, step, write_trace

BUCKETS = ("productive", "overhead", "idle", "wasted")
PARTS = (*BUCKETS, "unaccounted")
GPU_KEYS = {"gpu_s", "productive_gpu_s", "overhead_gpu_s", "idle_gpu_s", "wasted_gpu_s", "unaccounted_gpu_s",
            "goodput"}  # fmt: skip
Resources = dict[str, dict[str, Any]]


# --- the brute-force model --------------------------------------------------------------------------------------


def fleet_of(resource: Mapping[str, Any]) -> str:
    return resource.get("goodput.fleet") or resource.get("rl.worker_group") or resource["service.name"]


def attempt_of(resource: Mapping[str, Any]) -> str:
    return resource.get("goodput.run.id") or resource.get("nemo.run.id") or ""


def ids_of(resource: Mapping[str, Any]) -> list[str]:
    value = resource.get("goodput.gpu.ids")
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    return [part.strip() for part in str(value).split(",") if part.strip()]


@dataclass(frozen=True)
class Gpu:
    """One GPU (or one of a count) of one attempt: the processes holding it, their fleets, what it counts for."""

    attempt: str
    holders: frozenset[str]
    fleets: frozenset[str]
    weight: Fraction


def listed_gpus(resources: Resources, spans: Sequence[S], counts: Mapping[str, int] | None = None) -> list[Gpu]:
    """Every GPU of the processes that wrote `spans`, one by one."""
    counts = counts or {}
    present = sorted({s.process for s in spans})
    fleet = {p: fleet_of(resources[p]) for p in present}
    attempt = {p: attempt_of(resources[p]) for p in present}
    held: list[tuple[str, frozenset[str]]] = []
    sharing: dict[tuple[str, str, str], set[str]] = {}
    for process in present:
        if fleet[process] in counts:
            continue
        resource = resources[process]
        if ids := ids_of(resource):
            for gpu_id in ids:
                sharing.setdefault((attempt[process], resource.get("host.name", ""), gpu_id), set()).add(process)
        else:
            held += [(attempt[process], frozenset({process}))] * int(resource.get("goodput.gpus", 0))
    held += [(where[0], frozenset(holders)) for where, holders in sharing.items()]
    for name, number in counts.items():
        for run in sorted({attempt[p] for p in present if fleet[p] == name}):
            held += [(run, frozenset(p for p in present if fleet[p] == name and attempt[p] == run))] * number
    multiplier: dict[str, Fraction] = {}
    for name in set(fleet.values()) - set(counts):
        members = [resources[p] for p in present if fleet[p] == name]
        worlds = [int(r["dl.world_size"]) for r in members if "dl.world_size" in r]
        ranks = {str(r["dl.rank"]) for r in members if "dl.rank" in r}
        if worlds and ranks and len(ranks) < max(worlds):
            multiplier[name] = Fraction(max(worlds), len(ranks))
    return [
        Gpu(
            run,
            holders,
            frozenset(fleet[p] for p in holders),
            max(multiplier.get(fleet[p], Fraction(1)) for p in holders),
        )
        for run, holders in held
    ]


def pool_names(gpus: Sequence[Gpu]) -> dict[str, str]:
    """Fleet -> its pool's name: fleets sharing a GPU merged until no two groups share one."""
    groups: list[set[str]] = []
    for gpu in gpus:
        merged, rest = set(gpu.fleets), []
        for group in groups:
            if group & merged:
                merged |= group
            else:
                rest.append(group)
        groups = [*rest, merged]
    return {fleet: "+".join(sorted(group)) for group in groups for fleet in group}


def rel_ns(seconds: float) -> int:
    return ns(seconds) - ORIGIN_NS


def occupies(span: S, gpu: Gpu, resources: Resources, place: Mapping[str, str]) -> bool:
    if span.bucket not in BUCKETS or span.end <= span.start or attempt_of(resources[span.process]) != gpu.attempt:
        return False
    works_for = span.attrs.get("goodput.fleet") or place.get(span.name) or place.get(span.group or "")
    return span.process in gpu.holders or works_for in gpu.fleets


def charged(spans: Sequence[S], low: int, high: int, precedence: Sequence[str]) -> dict[str, int]:
    """Nanoseconds of [low, high) per part: each piece between two span edges to the first active bucket."""
    edges = sorted({low, high, *(t for s in spans for t in (rel_ns(s.start), rel_ns(s.end)) if low < t < high)})
    out = dict.fromkeys(PARTS, 0)
    for start, end in zip(edges, edges[1:], strict=False):
        active = {s.bucket for s in spans if rel_ns(s.start) <= start and rel_ns(s.end) >= end}
        out[next((b for b in precedence if b in active), "unaccounted")] += end - start
    return out


@dataclass
class Expected:
    """A window's (or a total's) GPU figures in one pool: GPUs, and GPU-nanoseconds held and per part."""

    gpus: Fraction = Fraction(0)
    held_ns: Fraction = Fraction(0)
    parts: dict[str, Fraction] | None = None

    def add(self, gpus: Fraction, held_ns: Fraction, parts: Mapping[str, Fraction]) -> None:
        self.gpus += gpus
        self.held_ns += held_ns
        self.parts = {k: (self.parts or dict.fromkeys(PARTS, Fraction(0)))[k] + parts[k] for k in PARTS}


def expected_charges(
    resources: Resources,
    spans: Sequence[S],
    windows: Sequence[tuple[str, int, int]],
    *,
    counts: Mapping[str, int] | None = None,
    place: Mapping[str, str] | None = None,
    precedence: Sequence[str] = BUCKETS,
) -> dict[tuple[int, str], Expected]:
    """(window position, pool) -> its figures; `windows` are (attempt, start, end) in nanoseconds from the origin."""
    gpus = listed_gpus(resources, spans, counts)
    pool_of = pool_names(gpus)
    out: dict[tuple[int, str], Expected] = {}
    for position, (run, low, high) in enumerate(windows):
        for gpu in (g for g in gpus if g.attempt == run):
            occupying = [s for s in spans if occupies(s, gpu, resources, place or {})]
            parts = charged(occupying, low, high, precedence)
            pool = pool_of[min(gpu.fleets)]
            entry = out.setdefault((position, pool), Expected())
            entry.add(gpu.weight, gpu.weight * (high - low), {k: gpu.weight * v for k, v in parts.items()})
    return out


def sampled_fleets(resources: Resources, spans: Sequence[S], counts: Mapping[str, int] | None = None) -> set[str]:
    gpus = listed_gpus(resources, spans, counts)
    return {f for g in gpus if g.weight != 1 for f in g.fleets}


# --- reading the report's figures -------------------------------------------------------------------------------


def to_ns(seconds: float) -> int:
    return round(seconds * 1e9)


def gpu_ns(item: Mapping[str, Any]) -> dict[str, int]:
    """A `gpu` object's figures in whole nanoseconds: `held` and each part."""
    return {"held": to_ns(item["gpu_s"]), **{part: to_ns(item[f"{part}_gpu_s"]) for part in PARTS}}


def assert_matches(item: Mapping[str, Any], expected: Expected) -> None:
    """Exact where the brute force is a whole nanosecond; within the rounding of a sampled fraction where not, the
    parts still adding up to the held total exactly."""
    got = gpu_ns(item)
    assert set(item) == GPU_KEYS
    assert abs(got["held"] - expected.held_ns) <= Fraction(1, 2), (got, expected)
    assert expected.parts is not None
    for part in PARTS:
        assert math.floor(expected.parts[part]) <= got[part] <= math.ceil(expected.parts[part]), (part, got, expected)
    assert sum(got[part] for part in PARTS) == got["held"]
    if got["held"] == 0:
        assert item["goodput"] is None
    else:
        assert item["goodput"] == pytest.approx(got["productive"] / got["held"], abs=1e-12)


def library_report(path: Path, **options: Any) -> dict[str, Any]:
    with open_store([str(path)], use_cache=False) as store:
        return report_json(build_report(store, ReportOptions(**options)))


def library_reports(path: Path, *options: dict[str, Any]) -> list[dict[str, Any] | GoodputError]:
    """The report of each set of options, from one store; a GoodputError where the options are refused."""
    out: list[dict[str, Any] | GoodputError] = []
    with open_store([str(path)], use_cache=False) as store:
        for chosen in options:
            try:
                out.append(report_json(build_report(store, ReportOptions(**chosen))))
            except GoodputError as error:
                out.append(error)
    return out


def pools_of(payload: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {pool["pool"]: pool for pool in payload["gpus"]["pools"]}


def resource(label: str, pid: int, *, service: str = "toy", host: str = "h0", **attributes: Any) -> dict[str, Any]:
    return {"service.name": service, "service.instance.id": label, "host.name": host, "process.pid": pid,
            **attributes}  # fmt: skip


def windows_of(payload: Mapping[str, Any], attempt: str = "") -> list[tuple[str, int, int]]:
    return [(attempt, i["start_ns"] - ORIGIN_NS, i["end_ns"] - ORIGIN_NS) for i in payload["iterations"]]


# --- 1. the invariants over random traces -----------------------------------------------------------------------

FLEETS = ("A", "B", "C")
HOSTS = ("h0", "h1")
GPU_IDS = ("0", "1", "2")
FLEET_KEYS = ("goodput.fleet", "rl.worker_group", "service.name")  # the attribute a fleet is named by
LEAF_NAMES = ("rl.grpo.generation", "rl.grpo.logprob", "rl.idle.refit_bubble", "rl.grpo.policy_training")
REMOTE = "rl.grpo.remote_work"  # the spans that carry their own goodput.fleet (never named by --place)
grid = st.integers(0, 60).map(lambda k: k / 2)  # 0.5 s steps in [0, 30]


@dataclass
class Drawn:
    spans: list[S]
    resources: Resources
    counts: dict[str, int]
    place: dict[str, str]
    precedence: tuple[str, ...]


@st.composite
def gpu_traces(draw) -> Drawn:
    """1-4 workers on two hosts in fleets A-C (named by goodput.fleet, rl.worker_group or service.name), holding
    ids (some shared: colocated), a count, or nothing, some fleets exporting fewer ranks than their world size; a
    driver holding nothing; 1-3 steps and up to 12 leaves, nested and concurrent, some with their own
    goodput.fleet; maybe a --gpus and a --place, and a random precedence."""
    workers = [f"w{i}" for i in range(draw(st.integers(1, 4)))]
    fleet = {w: draw(st.sampled_from(FLEETS)) for w in workers}
    named_by = {f: draw(st.sampled_from(FLEET_KEYS)) for f in FLEETS}
    extra_ranks = {f: draw(st.none() | st.integers(0, 3)) for f in FLEETS}
    resources: Resources = {"driver": resource("driver", 1, service="driver")}
    rank = Counter[str]()
    for index, worker in enumerate(workers):
        attributes: dict[str, Any] = {named_by[fleet[worker]]: fleet[worker]}
        holding = draw(st.sampled_from(["ids", "ids-text", "count", "none"]))
        if holding.startswith("ids"):
            ids = draw(st.lists(st.sampled_from(GPU_IDS), min_size=1, max_size=2, unique=True))
            attributes["goodput.gpu.ids"] = ids if holding == "ids" else ",".join(ids)
        elif holding == "count":
            attributes["goodput.gpus"] = draw(st.integers(1, 2))
        if extra_ranks[fleet[worker]] is not None:
            attributes["dl.rank"] = rank[fleet[worker]]
            rank[fleet[worker]] += 1
        resources[worker] = resource(worker, 10 + index, host=draw(st.sampled_from(HOSTS)), **attributes)
    for worker in workers:
        if (extra := extra_ranks[fleet[worker]]) is not None:
            resources[worker]["dl.world_size"] = rank[fleet[worker]] + extra
    processes = ["driver", *workers]
    spans: list[S] = []
    for n in draw(st.lists(st.integers(1, 5), min_size=1, max_size=3, unique=True)):
        start, end = sorted(draw(st.lists(grid, min_size=2, max_size=2, unique=True)))
        spans.append(step(f"step{n}", n, start, end, process=draw(st.sampled_from(processes))))
    for j in range(draw(st.integers(0, 12))):
        start, end = sorted(draw(st.lists(grid, min_size=2, max_size=2)))  # zero-length leaves too
        remote = draw(st.sampled_from([None, None, *FLEETS]))
        spans.append(
            S(
                f"leaf{j}",
                REMOTE if remote else draw(st.sampled_from(LEAF_NAMES)),
                start,
                end,
                parent=draw(st.none() | st.sampled_from([s.label for s in spans])),
                bucket=draw(st.sampled_from([*BUCKETS, None])),
                process=draw(st.sampled_from(processes)),
                attrs={"goodput.fleet": remote} if remote else {},
            )
        )
    present = sorted({fleet_of(resources[s.process]) for s in spans})
    counts = dict([draw(st.tuples(st.sampled_from(present), st.integers(1, 3)))]) if draw(st.booleans()) else {}
    place = (
        dict([draw(st.tuples(st.sampled_from(LEAF_NAMES), st.sampled_from(present)))]) if draw(st.booleans()) else {}
    )
    return Drawn(spans, resources, counts, place, tuple(draw(st.permutations(BUCKETS))))


def _options(drawn: Drawn) -> dict[str, Any]:
    gpus = GpuOptions(
        tuple(f"{k}={v}" for k, v in drawn.counts.items()), tuple(f"{k}={v}" for k, v in drawn.place.items())
    )
    return {"gpus": gpus, "precedence": ",".join(drawn.precedence)}


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=7)
@given(drawn=gpu_traces())
def test_every_window_and_pool_adds_up_to_its_gpus_times_wall_and_matches_the_brute_force_charge(
    tmp_path_factory, drawn
):
    path = write_trace(tmp_path_factory.mktemp("gpus") / "run.otlp", drawn.spans, resources=drawn.resources)
    steps = sorted((s for s in drawn.spans if s.group == "step"), key=lambda s: s.iteration)
    windows = [("", rel_ns(s.start), rel_ns(s.end)) for s in steps]
    expected = expected_charges(drawn.resources, drawn.spans, windows, counts=drawn.counts, place=drawn.place,
                                precedence=drawn.precedence)  # fmt: skip
    pools = sorted({pool for _, pool in expected})
    payload, plain = library_reports(path, {"by": "pool", **_options(drawn)}, _options(drawn))
    assert isinstance(plain, dict)
    if not pools and not drawn.counts:  # no GPU at all: the report is the wall-clock one, and --by pool refused
        assert "gpus" not in plain and all("gpu" not in item for item in plain["iterations"])
        assert isinstance(payload, GoodputError) and str(payload).startswith("--by: pool")
        return
    assert isinstance(payload, dict)
    assert [(i["iteration"], i["pool"]) for i in payload["iterations"]] == [
        (steps[position].iteration, pool) for position, pool in sorted(expected)
    ]
    sampled = sampled_fleets(drawn.resources, drawn.spans, drawn.counts)
    for item in payload["iterations"]:
        position = next(p for p, s in enumerate(steps) if s.iteration == item["iteration"])
        want = expected[(position, item["pool"])]
        assert_matches(item["gpu"], want)
        assert Fraction(item["gpus"]).limit_denominator(1000) == want.gpus
        held, wall = to_ns(item["gpu"]["gpu_s"]), to_ns(item["wall_s"])
        assert abs(held - want.gpus * wall) <= Fraction(1, 2)  # productive + ... + unaccounted == gpus * wall_s
    for pool in payload["pools"]:
        total = Expected()
        for (_, name), figures in expected.items():
            if name == pool["pool"]:
                assert figures.parts is not None
                total.add(Fraction(0), figures.held_ns, figures.parts)
        assert_matches(pool["gpu"], total)
    assert [p["pool"] for p in payload["gpus"]["pools"]] == pools
    for pool in payload["gpus"]["pools"]:
        assert pool["fleets"] == sorted(pool["pool"].split("+"))
        assert pool["sampled"] == bool(sampled & set(pool["fleets"]))
    everything = Expected()
    for figures in expected.values():
        assert figures.parts is not None
        everything.add(Fraction(0), figures.held_ns, figures.parts)
    assert_matches(payload["total"]["gpu"], everything)
    for position, item in enumerate(plain["iterations"]):
        row = Expected()
        for (where, _), figures in expected.items():
            if where == position:
                assert figures.parts is not None
                row.add(figures.gpus, figures.held_ns, figures.parts)
        assert_matches(item["gpu"], row)  # without --by pool, each row's gpu is its window's, all pools


@st.composite
def one_gpu_traces(draw) -> tuple[list[S], Resources, tuple[str, ...]]:
    """Random steps and leaves in 1-3 processes of any fleets, every one of them holding GPU 0 of one host."""
    processes = [f"p{i}" for i in range(draw(st.integers(1, 3)))]
    resources = {
        p: resource(p, 10 + i, service=draw(st.sampled_from(FLEETS)), **{"goodput.gpu.ids": ["0"]})
        for i, p in enumerate(processes)
    }
    spans: list[S] = []
    for n in draw(st.lists(st.integers(1, 5), min_size=1, max_size=3, unique=True)):
        start, end = sorted(draw(st.lists(grid, min_size=2, max_size=2, unique=True)))
        spans.append(step(f"step{n}", n, start, end, process=draw(st.sampled_from(processes))))
    for j in range(draw(st.integers(0, 12))):
        start, end = sorted(draw(st.lists(grid, min_size=2, max_size=2)))
        parent = draw(st.none() | st.sampled_from([s.label for s in spans]))
        bucket, process = draw(st.sampled_from([*BUCKETS, None])), draw(st.sampled_from(processes))
        spans.append(S(f"leaf{j}", draw(st.sampled_from(LEAF_NAMES)), start, end, parent, bucket, process=process))
    return spans, resources, tuple(draw(st.permutations(BUCKETS)))


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=7)
@given(drawn=one_gpu_traces())
def test_a_pool_of_one_gpu_whose_processes_hold_every_bucketed_span_is_the_wall_clock_view(tmp_path_factory, drawn):
    spans, resources, precedence = drawn
    path = write_trace(tmp_path_factory.mktemp("one") / "run.otlp", spans, resources=resources)
    payload = library_report(path, precedence=",".join(precedence))
    assert payload["gpus"]["count"] == 1 and len(payload["gpus"]["pools"]) == 1
    for item in [*payload["iterations"], payload["total"]]:
        gpu = item["gpu"]
        assert gpu["gpu_s"] == item["wall_s"]
        assert [gpu[f"{part}_gpu_s"] for part in PARTS] == [item[f"{part}_s"] for part in PARTS]
        assert gpu["goodput"] == item["goodput"]


# --- 2. pools and fleets ----------------------------------------------------------------------------------------


def one_step(processes: Sequence[str], wall: float = 10.0) -> list[S]:
    """A 10 s step in the driver, and in each process a productive span of its own, 1 s longer than the last's."""
    spans = [step("s1", 1, 0, wall)]
    spans += [S(f"work-{p}", "rl.grpo.generation", 0, 1 + i, parent="s1", bucket="productive", process=p)
              for i, p in enumerate(processes)]  # fmt: skip
    return spans


def pools_report(tmp_path: Path, resources: Resources, *extra: str) -> tuple[dict[str, Any], list[S]]:
    spans = one_step([p for p in resources if p != "driver"])
    resources = {"driver": resource("driver", 1, service="driver"), **resources}
    return json_report(write_trace(tmp_path / "run.otlp", spans, resources=resources), *extra), spans


def test_two_fleets_sharing_gpus_on_one_host_are_one_pool_named_by_both_sorted(tmp_path):
    payload, _ = pools_report(tmp_path, {
        "train": resource("train", 2, **{"goodput.fleet": "Trainer", "goodput.gpu.ids": ["0", "1"]}),
        "roll": resource("roll", 3, **{"goodput.fleet": "Rollout", "goodput.gpu.ids": "1,0"}),
    })  # fmt: skip
    assert payload["gpus"]["pools"] == [{"pool": "Rollout+Trainer", "fleets": ["Rollout", "Trainer"], "gpus": 2,
                                         "sampled": False}]  # fmt: skip
    assert payload["gpus"]["count"] == 2
    # both GPUs are occupied by the longer of the two spans (train's 1 s, roll's 2 s): 2 GPUs x 2 s productive
    assert payload["iterations"][0]["gpu"]["productive_gpu_s"] == 2 * (2.0 - 0.0)
    assert payload["iterations"][0]["gpu"]["gpu_s"] == 2 * 10.0


def test_sharing_is_transitive(tmp_path):
    payload, _ = pools_report(tmp_path, {
        "a": resource("a", 2, service="A", **{"goodput.gpu.ids": ["0"]}),
        "b": resource("b", 3, service="B", **{"goodput.gpu.ids": ["0", "1"]}),
        "c": resource("c", 4, service="C", **{"goodput.gpu.ids": ["1"]}),
    })  # fmt: skip
    assert payload["gpus"]["pools"] == [{"pool": "A+B+C", "fleets": ["A", "B", "C"], "gpus": 2, "sampled": False}]


def test_the_same_id_on_two_hosts_is_two_gpus(tmp_path):
    payload, _ = pools_report(tmp_path, {
        "a": resource("a", 2, host="node-1", service="A", **{"goodput.gpu.ids": ["0"]}),
        "b": resource("b", 3, host="node-2", service="B", **{"goodput.gpu.ids": ["0"]}),
    })  # fmt: skip
    assert payload["gpus"]["count"] == 2
    assert [(p["pool"], p["gpus"]) for p in payload["gpus"]["pools"]] == [("A", 1), ("B", 1)]
    # each GPU is occupied by its own process's span alone: 1 s on A's, 2 s on B's
    assert payload["iterations"][0]["gpu"]["productive_gpu_s"] == 1.0 + 2.0


def test_fleets_sharing_nothing_are_pools_of_their_own_and_the_driver_holding_nothing_is_in_none(tmp_path):
    resources = {
        "gen": resource("gen", 2, **{"goodput.fleet": "gen", "goodput.gpu.ids": ["0", "1"]}),
        "train": resource("train", 3, **{"goodput.fleet": "train", "goodput.gpus": 3}),
    }
    payload, spans = pools_report(tmp_path, resources)
    assert payload["gpus"]["pools"] == [
        {"pool": "gen", "fleets": ["gen"], "gpus": 2, "sampled": False},
        {"pool": "train", "fleets": ["train"], "gpus": 3, "sampled": False},
    ]
    assert payload["gpus"]["count"] == 2 + 3
    assert all("driver" not in pool["fleets"] for pool in payload["gpus"]["pools"])
    full = {"driver": resource("driver", 1, service="driver"), **resources}
    expected = expected_charges(full, spans, windows_of(payload))
    assert_matches(payload["iterations"][0]["gpu"], _summed(expected, 0))


def _summed(expected: Mapping[tuple[int, str], Expected], position: int) -> Expected:
    out = Expected()
    for (where, _), figures in expected.items():
        if where == position:
            assert figures.parts is not None
            out.add(figures.gpus, figures.held_ns, figures.parts)
    return out


def test_fleet_is_goodput_fleet_else_rl_worker_group_else_service_name(tmp_path):
    payload, _ = pools_report(tmp_path, {
        "a": resource("a", 2, service="svc-a", **{"goodput.fleet": "F", "rl.worker_group": "G",
                                                  "goodput.gpu.ids": ["0"]}),
        "b": resource("b", 3, service="svc-b", **{"rl.worker_group": "G", "goodput.gpu.ids": ["1"]}),
        "c": resource("c", 4, service="svc-c", **{"goodput.gpu.ids": ["2"]}),
    })  # fmt: skip
    assert [pool["fleets"] for pool in payload["gpus"]["pools"]] == [["F"], ["G"], ["svc-c"]]


# --- 3. nemo-lens traces: no GPU attributes, --gpus and --place ------------------------------------------------


def lens(rank: int, pid: int, group: str | None = None, world: int | None = None) -> dict[str, Any]:
    """A nemo-lens resource: the instance id `<run>-rank<N>` (the driver's the same as rank 0's), the run id, and
    for a worker its group, rank and world size."""
    out: dict[str, Any] = {"service.name": "nemo-rl", "service.instance.id": f"run7-rank{rank}", "host.name": "node0",
                           "process.pid": pid, "nemo.run.id": "run7"}  # fmt: skip
    if group is not None:
        out |= {"rl.worker_group": group, "dl.rank": rank, "dl.world_size": world}
    return out


LENS = {"driver": lens(0, 10), "policy": lens(0, 11, "policy", 8), "vllm": lens(0, 12, "vllm", 4)}


def lens_spans(driver_span_attrs: dict[str, Any] | None = None) -> list[S]:
    """Two steps: the driver times policy training (productive) itself, the policy rank 0 computes logprobs
    (overhead), the vLLM rank 0 generates (productive)."""
    spans: list[S] = []
    for n, t in ((1, 0.0), (2, 10.0)):
        spans += [
            step(f"s{n}", n, t, t + 10),
            S(f"pt{n}", "rl.grpo.policy_training", t + 2, t + 6, parent=f"s{n}", bucket="productive",
              group="policy_update", attrs=driver_span_attrs or {}),
            S(f"lp{n}", "rl.grpo.logprob", t + 5, t + 7.5, parent=f"s{n}", bucket="overhead", process="policy",
              group="logprob"),
            S(f"g{n}", "rl.grpo.generation", t, t + 3 + n, parent=f"s{n}", bucket="productive", process="vllm",
              group="generation"),
        ]  # fmt: skip
    return spans


def _all_keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _all_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _all_keys(v)}
    return set()


@pytest.mark.slow
def test_a_nemo_lens_trace_without_gpus_is_exactly_the_plain_report(tmp_path):
    spans = lens_spans()
    lensed = json_report(write_trace(tmp_path / "lens.otlp", spans, resources=LENS))
    bare = {p: {k: v for k, v in r.items() if not k.startswith(("dl.", "rl."))} for p, r in LENS.items()}
    plain = json_report(write_trace(tmp_path / "plain.otlp", spans, resources=bare))
    assert not _all_keys(lensed) & {"gpu", "gpus", "pools"}
    assert lensed == plain


def test_gpus_option_gives_the_fleet_n_gpus_that_every_span_of_its_processes_occupies(tmp_path):
    spans = lens_spans()
    payload = json_report(write_trace(tmp_path / "lens.otlp", spans, resources=LENS), "--gpus", "policy=8")
    # dl.world_size 8 with one rank read would count the fleet 8x: --gpus names the whole fleet instead
    assert payload["gpus"]["count"] == 8
    assert payload["gpus"]["pools"] == [{"pool": "policy", "fleets": ["policy"], "gpus": 8, "sampled": False}]
    expected = expected_charges(LENS, spans, windows_of(payload, "run7"), counts={"policy": 8})
    for position, item in enumerate(payload["iterations"]):
        assert_matches(item["gpu"], expected[(position, "policy")])
        assert item["gpu"]["overhead_gpu_s"] == 8 * (7.5 - 5)  # the policy rank's logprob span, on all 8
        assert item["gpu"]["productive_gpu_s"] == 0.0  # the driver's policy_training is on no GPU of its own
    assert payload["gpus"]["job"]["gpu_s"] == 8 * (20.0 - 0.0)


@pytest.mark.parametrize(
    ("extra", "span_attrs"),
    [
        (["--place", "rl.grpo.policy_training=policy"], None),
        (["--place", "policy_update=policy"], None),  # by rl.span_group
        ([], {"goodput.fleet": "policy"}),  # the span's own attribute
    ],
    ids=["by-name", "by-span-group", "by-span-attribute"],
)
def test_a_driver_span_placed_on_a_fleet_occupies_its_gpus(tmp_path, extra, span_attrs):
    spans = lens_spans(span_attrs)
    payload = json_report(write_trace(tmp_path / "lens.otlp", spans, resources=LENS), "--gpus", "policy=8", *extra)
    place = {"rl.grpo.policy_training": "policy"} if extra else {}
    expected = expected_charges(LENS, spans, windows_of(payload, "run7"), counts={"policy": 8}, place=place)
    for position, item in enumerate(payload["iterations"]):
        assert_matches(item["gpu"], expected[(position, "policy")])
        # policy_training [2, 6) is productive on all 8; the logprob span's [5, 7.5) is overhead only past 6
        assert item["gpu"]["productive_gpu_s"] == 8 * (6 - 2)
        assert item["gpu"]["overhead_gpu_s"] == 8 * (7.5 - 6)


# --- 4. sampled ranks -------------------------------------------------------------------------------------------


def test_a_fleet_exporting_one_of_its_eight_ranks_counts_eight_gpus_and_is_marked_sampled(tmp_path):
    resources = {
        "driver": resource("driver", 1, service="driver"),
        "train0": resource("train0", 2, service="trainer", **{"dl.world_size": 8, "dl.rank": 0,
                                                              "goodput.gpu.ids": ["3"]}),
        "gen0": resource("gen0", 3, service="gen", **{"dl.world_size": 2, "dl.rank": 0, "goodput.gpu.ids": ["0"]}),
        "gen1": resource("gen1", 4, service="gen", **{"dl.world_size": 2, "dl.rank": 1, "goodput.gpu.ids": ["1"]}),
    }  # fmt: skip
    spans = [
        step("s1", 1, 0, 10),
        S("t", "rl.grpo.policy_training", 4, 9, parent="s1", bucket="productive", process="train0"),
        S("w", "rl.idle.refit_bubble", 3, 5, parent="s1", bucket="idle", process="train0"),
        S("g0", "rl.grpo.generation", 0, 4, parent="s1", bucket="productive", process="gen0"),
        S("g1", "rl.grpo.generation", 0, 3, parent="s1", bucket="productive", process="gen1"),
    ]
    path = write_trace(tmp_path / "run.otlp", spans, resources=resources)
    payload = json_report(path, "--by", "pool")
    assert payload["gpus"]["count"] == 8 + 2
    assert payload["gpus"]["pools"] == [
        {"pool": "gen", "fleets": ["gen"], "gpus": 2, "sampled": False},
        {"pool": "trainer", "fleets": ["trainer"], "gpus": 8, "sampled": True},
    ]
    rows = {item["pool"]: item for item in payload["iterations"]}
    trainer = rows["trainer"]["gpu"]
    assert trainer["productive_gpu_s"] == 8 * (9 - 4)  # the one GPU read, counted 8 times
    assert trainer["idle_gpu_s"] == 8 * (4 - 3)  # idle [3, 5) until productive takes over at 4
    assert trainer["gpu_s"] == rows["trainer"]["gpus"] * rows["trainer"]["wall_s"] == 8 * 10.0
    expected = expected_charges(resources, spans, windows_of(payload)[:1])
    for name, item in rows.items():
        assert_matches(item["gpu"], expected[(0, name)])


def test_a_sampled_fraction_of_a_nanosecond_is_rounded_so_the_parts_still_add_up(tmp_path):
    """World size 3 with ranks 0 and 1 read: each GPU counts 1.5 times, over spans an odd number of ns long."""
    resources = {
        p: resource(p, 2 + r, service="trainer", **{"dl.world_size": 3, "dl.rank": r, "goodput.gpu.ids": [str(r)]})
        for r, p in enumerate(["rank0", "rank1"])
    }
    spans = [
        step("s1", 1, 0, 10.000000001, process="rank0"),
        S("a", "rl.grpo.policy_training", 1, 2.000000003, parent="s1", bucket="productive", process="rank0"),
        S("b", "rl.grpo.logprob", 1.5, 4.000000001, parent="s1", bucket="overhead", process="rank0"),
        S("c", "rl.grpo.policy_training", 0, 5.000000005, parent="s1", bucket="productive", process="rank1"),
        S("d", "rl.idle.refit_bubble", 7, 7.000000007, parent="s1", bucket="idle", process="rank1"),
    ]
    payload = json_report(write_trace(tmp_path / "run.otlp", spans, resources=resources), "--by", "pool")
    assert payload["gpus"]["pools"] == [{"pool": "trainer", "fleets": ["trainer"], "gpus": 3, "sampled": True}]
    expected = expected_charges(resources, spans, windows_of(payload))[(0, "trainer")]
    assert expected.parts is not None and any(v.denominator != 1 for v in expected.parts.values())
    (item,) = payload["iterations"]
    assert_matches(item["gpu"], expected)
    assert to_ns(item["gpu"]["gpu_s"]) == 3 * to_ns(item["wall_s"])


# --- 5. restarts ------------------------------------------------------------------------------------------------


def two_attempts(second_ids: list[str]) -> tuple[list[S], Resources]:
    """Attempt `a` runs steps 1-2 in [0, 10), crashes; attempt `b` resumes at step 2 in [12, 20). Both hold GPUs
    0 and 1 of one host (`b` the ids `second_ids`)."""
    resources = {
        "a": resource("trainer-a", 2, service="trainer", **{"goodput.run.id": "a", "goodput.gpu.ids": ["0", "1"]}),
        "b": resource("trainer-b", 3, service="trainer", **{"goodput.run.id": "b", "goodput.gpu.ids": second_ids}),
    }
    spans = [
        S("ja", "rl.grpo.job", 0, 10, group="job", process="a", trace="ta"),
        step("a1", 1, 0, 5, parent="ja", process="a", trace="ta"),
        S("ga1", "rl.grpo.generation", 0, 4, parent="a1", bucket="productive", process="a", trace="ta"),
        step("a2", 2, 5, 10, parent="ja", process="a", trace="ta"),
        S("ga2", "rl.grpo.generation", 6, 8.5, parent="a2", bucket="productive", process="a", trace="ta"),
        S("la2", "rl.grpo.logprob", 8, 9, parent="a2", bucket="overhead", process="a", trace="ta"),
        S("jb", "rl.grpo.job", 12, 20, group="job", process="b", trace="tb"),
        step("b2", 2, 12, 16, parent="jb", process="b", trace="tb"),
        S("gb2", "rl.grpo.generation", 12, 15, parent="b2", bucket="productive", process="b", trace="tb"),
        step("b3", 3, 16, 20, parent="jb", process="b", trace="tb"),
        S("wb3", "rl.idle.refit_bubble", 16, 17, parent="b3", bucket="idle", process="b", trace="tb"),
    ]
    return spans, resources


def test_restarts_bill_each_attempts_gpus_over_its_extent_and_charge_superseded_windows_to_rework(tmp_path):
    spans, resources = two_attempts(["0", "1"])
    payload = json_report(write_trace(tmp_path / "run.otlp", spans, resources=resources))
    assert [a["run_id"] for a in payload["attempts"]] == ["a", "b"]
    assert payload["gpus"]["count"] == 2  # the same two GPUs in both attempts
    assert payload["gpus"]["job"]["gpu_s"] == 2 * (10 - 0) + 2 * (20 - 12)
    rows = [("a", 0, 5), ("b", 12, 16), ("b", 16, 20)]
    windows = [(run, rel_ns(low), rel_ns(high)) for run, low, high in rows]
    expected = expected_charges(resources, spans, [*windows, ("a", rel_ns(5), rel_ns(10))])
    for position, item in enumerate(payload["iterations"]):
        assert_matches(item["gpu"], expected[(position, "trainer")])
    assert_matches(payload["rework"]["gpu"], expected[(3, "trainer")])
    assert payload["rework"]["gpu"]["productive_gpu_s"] == 2 * (8.5 - 6)
    assert payload["rework"]["gpu"]["overhead_gpu_s"] == 2 * (9 - 8.5)
    productive = sum(expected[(p, "trainer")].parts["productive"] for p in range(3))  # type: ignore[index]
    assert to_ns(payload["total"]["gpu"]["productive_gpu_s"]) == productive
    assert payload["gpus"]["job"]["productive_gpu_s"] == payload["total"]["gpu"]["productive_gpu_s"]
    assert payload["gpus"]["job"]["goodput"] == pytest.approx(productive / (2 * 18e9), abs=1e-12)


def test_an_attempt_holding_more_gpus_is_billed_for_them_over_its_own_extent(tmp_path):
    spans, resources = two_attempts(["0", "1", "2"])
    payload = json_report(write_trace(tmp_path / "run.otlp", spans, resources=resources))
    assert payload["gpus"]["count"] == 3  # the most held in one attempt
    assert payload["gpus"]["job"]["gpu_s"] == 2 * (10 - 0) + 3 * (20 - 12)
    assert [item["gpu"]["gpu_s"] for item in payload["iterations"]] == [2 * 5.0, 3 * 4.0, 3 * 4.0]


def test_by_pool_rows_say_the_gpus_their_own_attempt_holds(tmp_path):
    spans, resources = two_attempts(["0", "1", "2"])
    payload = json_report(write_trace(tmp_path / "run.otlp", spans, resources=resources), "--by", "pool")
    for item in payload["iterations"]:
        assert to_ns(item["gpu"]["gpu_s"]) == item["gpus"] * to_ns(item["wall_s"])
    assert [item["gpus"] for item in payload["iterations"]] == [2, 3, 3]


# --- what a process holds, read from its resource ----------------------------------------------------------------


def test_ids_win_over_a_count_and_an_int_array_names_the_same_gpus_as_strings(tmp_path):
    payload, _ = pools_report(tmp_path, {
        "a": resource("a", 2, service="A", **{"goodput.gpu.ids": [0, 1], "goodput.gpus": 5}),
        "b": resource("b", 3, service="B", **{"goodput.gpu.ids": "1"}),
    })  # fmt: skip
    assert payload["gpus"]["pools"] == [{"pool": "A+B", "fleets": ["A", "B"], "gpus": 2, "sampled": False}]


@pytest.mark.slow
def test_place_alone_on_a_trace_without_gpus_changes_nothing(tmp_path):
    """SPEC: the GPU keys appear only when some process holds a GPU or --gpus is given; --place is neither."""
    path = write_trace(tmp_path / "lens.otlp", lens_spans(), resources=LENS)
    assert json_report(path, "--place", "rl.grpo.policy_training=policy") == json_report(path)


def test_a_count_that_is_not_ascii_digits_is_no_gpu_not_a_crash(tmp_path):
    payload, _ = pools_report(tmp_path, {
        "a": resource("a", 2, service="A", **{"goodput.gpus": "²"}),
        "b": resource("b", 3, service="B", **{"goodput.gpus": 2, "dl.world_size": "²", "dl.rank": 0}),
    })  # fmt: skip
    assert payload["gpus"]["pools"] == [{"pool": "B", "fleets": ["B"], "gpus": 2, "sampled": False}]


@pytest.mark.slow
def test_a_trace_read_as_json_lines_gives_the_same_gpu_figures(tmp_path):
    resources = {
        "driver": resource("driver", 1, service="driver"),
        "a": resource("a", 2, service="A", **{"goodput.gpu.ids": ["0", "1"], "dl.world_size": 4, "dl.rank": 0}),
        "b": resource("b", 3, service="B", **{"goodput.gpu.ids": "1", "goodput.fleet": "B"}),
    }
    spans = one_step(["a", "b"])
    framed = json_report(write_trace(tmp_path / "run.otlp", spans, resources=resources))
    lines = json_report(write_trace(tmp_path / "run.jsonl", spans, "jsonl", resources=resources))
    assert framed["gpus"] == lines["gpus"] and framed["total"]["gpu"] == lines["total"]["gpu"]
    assert framed["gpus"]["pools"][0]["sampled"] is True
    expected = expected_charges(resources, spans, windows_of(framed))
    assert_matches(framed["iterations"][0]["gpu"], _summed(expected, 0))
    assert json.dumps(framed["gpus"]) == json.dumps(lines["gpus"])


def test_by_process_keeps_every_windows_gpu_seconds_in_the_total(tmp_path):
    resources = {"driver": resource("driver", 1, service="driver"),
                 "gen": resource("gen", 2, service="gen", **{"goodput.gpu.ids": ["0"]})}  # fmt: skip
    spans = [step("s1", 1, 0, 10), S("g", "gen", 1, 5, parent="s1", bucket="productive", process="gen"),
             step("s2", 2, 10, 20)]  # fmt: skip
    payload = json_report(write_trace(tmp_path / "run.otlp", spans, resources=resources), "--by", "process")
    assert payload["total"]["wall_s"] == 20.0
    everything = Expected()
    for figures in expected_charges(resources, spans, [("", 0, 10 * 10**9), ("", 10 * 10**9, 20 * 10**9)]).values():
        assert figures.parts is not None
        everything.add(figures.gpus, figures.held_ns, figures.parts)
    assert_matches(payload["total"]["gpu"], everything)
