"""The toy job's `--slow-phase` and `--straggler` as a user finds a bottleneck with `goodput critical` (SPEC section
14): one sync run with policy training 0.3 s longer and generation actor 1 0.15 s slower at its half of every
rollout, on the session's Ray cluster, against the session's plain sync run.

Why the figures hold. In sync mode policy training is the two ranks' sleeps at once, under the driver's
`rl.grpo.policy_training.fan_out`, with nothing after them but the refit, so each step's path holds the later rank's
span whole (plan + 0.3 s + its lateness) and 10% off training saves about 0.05 s a step; 10% off generation saves
at most 10% of the later half, 0.045 s, and every other phase less. Generation's halves are drawn from [0.20, 0.30]:
with 0.15 s more, actor 1's half is [0.35, 0.45] and always ends after actor 0's (which ends by 0.30 plus a
dispatch's lateness, NOISE_S below it); on the failed step actor 1's half hangs until its time-out and is generated
again after actor 0's has ended. So actor 1 ends every rollout's fan-out of `rl.grpo.generation` last, alone for
0.05 s or more of each (SPEC section 14's straggler: the fan-out's last span, alone for its end minus the
second-latest end), and is the worker the generation fleet waited on most. The step that validates fans
`rl.grpo.generation` out once more, under `rl.grpo.evaluate`, which either actor may end last. In `diff` training's
median on the path moves by EXTRA_S give or take the two runs' lateness (NOISE_S, as in test_example_slow_phase),
generation's by at most the 0.15 s added.
"""

from __future__ import annotations

import json

import pytest

from conftest import TOY_STEPS, invoke, run_toy_job
from examples.grpo_toy import fleets, job, schedule

SLOWED, EXTRA_S, NOISE_S = "rl.grpo.policy_training", 0.3, 0.1
STRAGGLER, LATE_S = 1, 0.15
VALIDATING_STEPS = TOY_STEPS // schedule.VALIDATE_EVERY  # each fans generation out once more


@pytest.fixture(scope="module")
def slowed_run(ray_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("critical") / "slowed"
    return run_toy_job(out, "--mode", "sync", "--slow-phase", f"{SLOWED}:{EXTRA_S}",
                       "--straggler", f"{STRAGGLER}:{LATE_S}")  # fmt: skip


def straggler_process(path) -> str:
    """Generation actor 1's process: the one whose half of step 2 hangs (`rl.wasted.failed_trajectory`)."""
    result = invoke(["query", str(path), "--format", "json",
                     "SELECT DISTINCT process FROM spans WHERE name = 'rl.wasted.failed_trajectory'"])  # fmt: skip
    (row,) = json.loads(result.stdout)
    return row["process"]


@pytest.mark.slow
@pytest.mark.ray
def test_critical_names_the_slowed_phase_first_and_the_slow_worker_as_the_straggler(slowed_run):
    payload = json.loads(invoke(["critical", str(slowed_run), "--format", "json"]).stdout)
    first = payload["names"][0]
    assert (first["name"], first["bucket"]) == (SLOWED, "productive"), payload["names"]
    table = invoke(["critical", str(slowed_run)])
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[1].startswith(f"speed up first: {SLOWED} (productive)")
    late = straggler_process(slowed_run)
    generation = [row for row in payload["stragglers"] if row["fleet"] == fleets.GENERATION_FLEET]
    most = max(generation, key=lambda row: row["alone_s"])
    assert (most["process"], most["name"]) == (late, "rl.grpo.generation"), generation
    assert most["slowest"] >= TOY_STEPS and most["fan_outs"] == TOY_STEPS + VALIDATING_STEPS, most
    # Alone 0.35 - 0.30 s or more in each rollout, 0.35 + 0.10 - 0.30 s in the failed one, less lateness.
    assert most["alone_s"] >= 0.05 * (TOY_STEPS - 1) + 0.15 - NOISE_S, most
    waited_on = [line for line in lines if line.startswith(f"waited on most in {fleets.GENERATION_FLEET}:")]
    assert len(waited_on) == 1 and waited_on[0].split(": ", 1)[1].startswith(f"{late} ended"), lines


@pytest.mark.slow
@pytest.mark.ray
def test_diff_sees_the_slowed_phase_rise_on_the_path_by_the_seconds_added(toy_sync_run, slowed_run):
    payload = json.loads(invoke(["diff", str(toy_sync_run), str(slowed_run), "--format", "json"]).stdout)
    first, *others = payload["critical"]
    assert (first["name"], first["bucket"]) == (SLOWED, "productive"), payload["critical"]
    assert EXTRA_S - NOISE_S <= first["delta_s"] <= EXTRA_S + NOISE_S, first
    generation = next(c for c in others if (c["name"], c["bucket"]) == ("rl.grpo.generation", "productive"))
    assert generation["delta_s"] <= LATE_S + NOISE_S
    verdict = invoke(["diff", str(toy_sync_run), str(slowed_run)]).stdout.splitlines()[0]
    assert verdict.split(": ", 1)[1].startswith(f"{SLOWED} (productive) +")


def test_the_plan_of_a_straggler_is_one_actor_slower_at_every_half():
    plans = schedule.make_plan(0, 4)
    late = schedule.straggling(plans, STRAGGLER, LATE_S)
    for plan, after in zip(plans, late, strict=True):
        assert after.generation_s[STRAGGLER] == pytest.approx(plan.generation_s[STRAGGLER] + LATE_S)
        assert after.generation_s[0] == plan.generation_s[0]
    assert job.parse_args(["--straggler", "1:0.15"]).straggler == (1, 0.15)


@pytest.mark.parametrize("value", ["2:0.1", "-1:0.1", "one:0.1", "1", "1:soon", "1:-0.2", "1:inf"])
def test_a_malformed_straggler_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as exited:
        job.parse_args([f"--straggler={value}"])
    assert exited.value.code == 2
    assert "argument --straggler: expected RANK:SECONDS" in capsys.readouterr().err
