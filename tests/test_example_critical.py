"""The toy job's `--slow-phase` and `--straggler` as a user finds a bottleneck with `goodput critical` (SPEC section
14): one sync run with policy training 0.3 s longer and generation actor 1 0.15 s slower at its half of every
rollout, on the session's Ray cluster, against the session's plain sync run.

Why the figures hold. In sync mode policy training is the two ranks' sleeps at once with nothing after them but the
refit, so each step's path holds the later rank's span whole: plan + 0.3 s + its lateness. Generation's halves are
drawn from [0.20, 0.30]: with 0.15 s more, actor 1's half is [0.35, 0.45] and always ends after actor 0's (which
ends by 0.30 plus a dispatch's lateness, NOISE_S below it), so the step waits on actor 1 alone for 0.05 s or more of
each plain step, about 0.15 s on average, against a step of about 1.1 s: over STRAGGLER_SHARE. On the failed step
actor 1's half hangs until its time-out anyway. Training's time on the path, about 0.5 s a step, then exceeds
generation's (at most 0.45 s + lateness). In `diff` training's median on the path moves by EXTRA_S give or take the
two runs' lateness (NOISE_S, as in test_example_slow_phase), generation's by at most the 0.15 s added.
"""

from __future__ import annotations

import json

import pytest

from conftest import invoke, run_toy_job
from examples.grpo_toy import job, schedule

SLOWED, EXTRA_S, NOISE_S = "rl.grpo.policy_training", 0.3, 0.1
STRAGGLER, LATE_S = 1, 0.15


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
    stragglers = [line for line in lines if line.startswith("straggler:")]
    assert len(stragglers) == 1 and stragglers[0].startswith(f"straggler: {straggler_process(slowed_run)} is on")


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
