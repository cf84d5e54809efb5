"""`goodput critical` against the truth (SPEC section 14): simulated jobs (tests/schedules.py) run once, read by
goodput, then run again with one phase 10% shorter; what goodput predicted from the first run must be what the
second one did.

For each schedule and each bucketed span name in it:
- step by step, `--speedup NAME=10%`'s `predicted_wall_s` is the re-run's step wall clock within 10% of the saving
  or 2 ms; its `median_saving_s`, and the name's `saves_s` where the name is on the path, the re-run's median saving
  within the same;
- the table's lead (`names[0]`) is the phase whose re-run saves the most, where that saving is clearly ahead (1.2x
  the runner-up and 2 ms a step or more), and no phase whose re-run saves time is missing from `names`;
- the stragglers are exactly those of the fan-outs the schedule sent, worked out here from the simulated ends.

The counter-example (`unrecorded-wait`) keeps a dependency out of the trace; the test holds that its prediction
misses, so the limitation SPEC states stays a known one.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import invoke, read_framed_records, read_json_lines_records
from schedules import (
    GENERATION,
    ISSUE,
    NS,
    REFIT_BUBBLE,
    SCHEDULES,
    STEP,
    STRAGGLER,
    TRAINING,
    UNRECORDED,
    WORKER_LOGPROB,
    Run,
    Schedule,
    simulate,
)
from tracebuild import ORIGIN_NS

pytestmark = pytest.mark.slow

ABSOLUTE_S, RELATIVE = 0.002, 0.10  # a prediction may miss by 10% of the saving, or by 2 ms
LEAD_MARGIN = 1.2  # the lead is checked where the best saving is this many times the runner-up's


def allowed_s(saving_s: float) -> float:
    return max(RELATIVE * abs(saving_s), ABSOLUTE_S)


def critical(path: Path, *extra: str) -> dict:
    """`goodput critical PATH --format json` (the session's private cache), which must succeed."""
    result = invoke(["critical", str(path), "--format", "json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@dataclass
class Written:
    """A schedule simulated once, its trace files, and what `goodput critical` says of them."""

    schedule: Schedule
    run: Run
    path: Path
    critical: dict


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Each schedule's run written and read once for the module."""
    done: dict[str, Written] = {}

    def get(schedule: Schedule) -> Written:
        if schedule.id not in done:
            run = simulate(schedule)
            path = run.write(tmp_path_factory.mktemp(schedule.id))
            done[schedule.id] = Written(schedule, run, path, critical(path))
        return done[schedule.id]

    return get


def real_savings_s(run: Run, schedule: Schedule, name: str) -> dict[int, float]:
    """Per iteration, the wall clock the re-run with `name` 10% shorter saved."""
    sped = simulate(schedule, speedup=name).step_walls_ns()
    return {iteration: (wall - sped[iteration]) / NS for iteration, wall in run.step_walls_ns().items()}


CASES = [
    pytest.param(schedule, name, id=f"{schedule.id}:{name}")
    for schedule in SCHEDULES
    for name in simulate(schedule).bucketed_names()
    if name not in schedule.unrecorded_names
]


@pytest.mark.parametrize(("schedule", "name"), CASES)
def test_a_phase_10pct_shorter_saves_what_the_re_run_saves_step_by_step(written, schedule, name):
    """`--speedup NAME=10%` against the schedule run again with NAME 10% shorter, iteration by iteration, and the
    median saving (`median_saving_s`, and `saves_s` where NAME is on the path) against the re-run's."""
    w = written(schedule)
    out = critical(w.path, "--speedup", f"{name}=10%")["speedup"]
    assert out["names"] == {name: 10}
    walls = w.run.step_walls_ns()
    real = real_savings_s(w.run, schedule, name)
    rows = {row["iteration"]: row for row in out["iterations"]}
    assert sorted(rows) == sorted(walls)
    misses = []
    for iteration, wall_ns in sorted(walls.items()):
        row = rows[iteration]
        assert row["wall_s"] == pytest.approx(wall_ns / NS, abs=1e-9)
        re_run_s = wall_ns / NS - real[iteration]
        if abs(row["predicted_wall_s"] - re_run_s) > allowed_s(real[iteration]):
            misses.append((iteration, row["wall_s"], row["predicted_wall_s"], re_run_s))
    assert not misses, f"(iteration, wall_s, predicted_wall_s, re-run wall_s): {misses}"
    median_s = statistics.median(real.values())
    assert abs(out["median_saving_s"] - median_s) <= allowed_s(median_s), (out["median_saving_s"], median_s)
    for listed in (n for n in w.critical["names"] if n["name"] == name):
        assert abs(listed["saves_s"] - median_s) <= allowed_s(median_s), (listed, median_s)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.id)
def test_the_lead_phase_is_the_one_whose_re_run_saves_the_most(written, schedule):
    """The table's "speed up first" (`names[0]`) is the phase a re-run says to speed up first, wherever one is
    clearly ahead; and a phase whose re-run saves time is among `names` (the table cannot lead with one it does
    not list)."""
    w = written(schedule)
    names = w.run.bucketed_names()
    real = {name: statistics.median(real_savings_s(w.run, schedule, name).values()) for name in names}
    (best, best_s), (_, runner_up_s) = sorted(real.items(), key=lambda item: -item[1])[:2]
    lead = w.critical["names"][0]["name"]
    if best_s >= ABSOLUTE_S and best_s >= LEAD_MARGIN * runner_up_s:
        assert lead == best, f"lead {lead}; re-run savings {real}; names {w.critical['names']}"
    else:  # no clear winner: the lead is one of the near-best
        assert real[lead] >= best_s / LEAD_MARGIN - ABSOLUTE_S, f"lead {lead}; re-run savings {real}"
    listed = {n["name"] for n in w.critical["names"]}
    buying = {name for name, saving in real.items() if saving > ABSOLUTE_S}
    assert buying <= listed, f"phases whose re-run saves time but are not in names: {buying - listed}, {real}"


def expected_stragglers(run: Run) -> list[dict]:
    """SPEC section 14's straggler rows of the fan-outs the schedule sent: per fan-out, the call that ended last
    ran alone for its end minus the second-latest end, and the others waited, in GPU-seconds, for the difference
    of their ends times the GPUs their process holds."""
    rows: dict[tuple[str, str, str], dict] = {}
    for fan_out in run.fan_outs:
        (fleet,) = {call.process.service for call in fan_out.calls}
        assert len({call.process for call in fan_out.calls}) == len(fan_out.calls) >= 2
        *others, last = sorted(fan_out.calls, key=lambda call: call.end_ns)
        assert others[-1].end_ns < last.end_ns, "a tie for the last end: the schedule should not have one"
        for call in fan_out.calls:
            row = rows.setdefault(
                (fleet, fan_out.phase.name, call.process.label),
                {"fan_outs": 0, "slowest": 0, "alone_ns": 0, "waited_gpu_ns": 0},
            )
            row["fan_outs"] += 1
        row = rows[(fleet, fan_out.phase.name, last.process.label)]
        row["slowest"] += 1
        row["alone_ns"] += last.end_ns - others[-1].end_ns
        row["waited_gpu_ns"] += sum((last.end_ns - call.end_ns) * call.process.gpu_count for call in others)
    return [
        {"fleet": fleet, "name": name, "process": process, "fan_outs": row["fan_outs"], "slowest": row["slowest"],
         "alone_s": row["alone_ns"] / NS, "waited_gpu_s": row["waited_gpu_ns"] / NS}
        for (fleet, name, process), row in rows.items()
        if row["slowest"]
    ]  # fmt: skip


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.id)
def test_stragglers_are_the_fan_outs_slowest_workers(written, schedule):
    """Every straggler row, exact, against the fan-outs the schedule sent; sorted by `alone_s` descending."""
    w = written(schedule)
    got = w.critical["stragglers"]
    assert [row["alone_s"] for row in got] == sorted((row["alone_s"] for row in got), reverse=True)

    def key(row: dict) -> tuple:
        return row["fleet"], row["name"], row["process"]

    expected = sorted(expected_stragglers(w.run), key=key)
    assert [key(row) for row in sorted(got, key=key)] == [key(row) for row in expected]
    for row, want in zip(sorted(got, key=key), expected, strict=True):
        assert (row["fan_outs"], row["slowest"]) == (want["fan_outs"], want["slowest"]), row
        assert row["alone_s"] == pytest.approx(want["alone_s"], abs=1e-9), row
        assert row["waited_gpu_s"] == pytest.approx(want["waited_gpu_s"], abs=1e-9), row


def test_the_straggler_schedule_has_a_straggler_in_each_fleet(written):
    """The schedule is what its docstring says: rollout-3 ends last but at step 3, rollout-1 then; validation-1
    at both validations."""
    rows = {(row["fleet"], row["process"]): row for row in expected_stragglers(written(STRAGGLER).run)}
    assert {key: (row["fan_outs"], row["slowest"]) for key, row in rows.items()} == {
        ("grpo-rollout", "rollout-3"): (4, 3),
        ("grpo-rollout", "rollout-1"): (4, 1),
        ("grpo-validation", "validation-1"): (2, 2),
    }
    # validation-1 at steps 2 and 4, 0.15 s and 0.17 s, against validation-0's 0.10 s (both send at once)
    assert rows[("grpo-validation", "validation-1")]["alone_s"] == pytest.approx((0.15 - 0.10) + (0.17 - 0.10))


def test_the_issue_step_waited_on_the_threads_generation_not_on_the_refit(written):
    """The issue's reproduction: each step is training, then the refit wait; the wait ends 5 ms after the next
    step's generation, which the driver's thread started 45 ms into the step. The path is training, then that
    generation from training's end to its own, then the wait's last 5 ms: nothing waiting."""
    w = written(ISSUE)
    seconds = ISSUE.durations
    training_s = seconds[TRAINING.name]  # 0.30
    generation_ends_s = seconds[STEP.name] + seconds[GENERATION.name]  # 0.045 + 0.40
    wall_s = generation_ends_s + seconds[REFIT_BUBBLE.name]  # + 0.005 = 0.45: training 0.30, the wait 0.15
    assert (training_s, wall_s - training_s) == (0.30, pytest.approx(0.15))
    steps = {s.iteration: s.start_ns for s in w.run.spans if s.phase == STEP}
    for window in w.critical["iterations"]:
        start_ns = ORIGIN_NS + steps[window["iteration"]]
        path = [(p["name"], (p["start_ns"] - start_ns) / NS, (p["end_ns"] - start_ns) / NS) for p in window["path"]]
        assert path == [
            (TRAINING.name, 0, pytest.approx(training_s)),
            (GENERATION.name, pytest.approx(training_s), pytest.approx(generation_ends_s)),
            (REFIT_BUBBLE.name, pytest.approx(generation_ends_s), pytest.approx(wall_s)),
        ]
        assert window["waiting_s"] == 0
        assert window["wall_s"] == pytest.approx(wall_s)
    first = w.critical["names"][0]
    assert (first["name"], first["saves_s"]) == (GENERATION.name, pytest.approx(0.1 * seconds[GENERATION.name]))


def test_a_wait_the_trace_does_not_show_is_not_predicted(written):
    """The counter-example: the driver waits for its logprob shards in no span of its own, so nothing recorded
    says the advantage started because they ended. A real re-run with logprob 10% shorter saves 10% of the slower
    shard every step; goodput, following what the trace records, predicts nothing saved. That is SPEC's stated
    limit ("a dependency the spans do not show cannot be predicted"); if this starts passing the other way, the
    prediction learnt something the trace does not say."""
    w = written(UNRECORDED)
    name = WORKER_LOGPROB.name
    shard_s = max(UNRECORDED.durations[name].values())
    real = real_savings_s(w.run, UNRECORDED, name)
    assert real == {iteration: pytest.approx(0.1 * shard_s) for iteration in real}
    out = critical(w.path, "--speedup", f"{name}=10%")["speedup"]
    for row in out["iterations"]:
        predicted_saving_s = row["wall_s"] - row["predicted_wall_s"]
        assert predicted_saving_s < real[row["iteration"]] / 2, row
    assert out["median_saving_s"] < 0.1 * shard_s / 2
    assert name in {n["name"] for n in w.critical["names"]}  # on the path: the step did wait on it


def span_attributes(path: Path) -> list[tuple[str, dict, dict]]:
    """(name, attributes, resource attributes) of every span of a trace file the simulator wrote."""
    if path.suffix == ".jsonl":
        spans = []
        for record in read_json_lines_records(path):
            for resource_spans in record["resourceSpans"]:
                resource = {a["key"]: a["value"] for a in resource_spans["resource"]["attributes"]}
                for scope in resource_spans["scopeSpans"]:
                    spans += [
                        (span["name"], {a["key"] for a in span["attributes"]}, resource) for span in scope["spans"]
                    ]
        return spans
    return [
        (span.name, {a.key for a in span.attributes}, {a.key: a.value for a in resource_spans.resource.attributes})
        for record in read_framed_records(path)
        for resource_spans in record.resource_spans
        for scope in resource_spans.scope_spans
        for span in scope.spans
    ]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.id)
def test_the_simulated_files_carry_the_vocabulary_goodput_reads(written, schedule):
    """One file per process (the driver's JSON Lines, the workers' framed protobuf), each process's resource naming
    it, and every span with its group; bucketed spans with their iteration, as SPEC section 1 has them."""
    w = written(schedule)
    files = sorted(w.path.iterdir())
    assert sorted(f.stem for f in files) == sorted(p.label for p in w.run.processes)
    for file in files:
        spans = span_attributes(file)
        assert spans
        for name, attributes, resource in spans:
            assert {"service.name", "service.instance.id", "host.name", "process.pid"} <= set(resource), file
            assert "rl.span_group" in attributes, name
            assert ("rl.bucket" in attributes) <= ("rl.iteration" in attributes), name
