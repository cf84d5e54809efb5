"""The toy job's `--slow-phase NAME:SECONDS` (issue 12) as a user finds a regression with it: a normal run and a run
with one phase slowed, both on the session's Ray cluster, compared by `goodput diff` (SPEC section 9), which must
name that phase first, by about the seconds added.

Why the figures hold. The slowed phase is policy training: a sleep in one span on each training actor, the two ranks
at once, in every step, with no other productive span active beside them in sync mode, so its per-step `wall_s` in
`--by name` is the stretch the ranks' spans cover. `PolicyWorker` sleeps whatever the plan has left, so a span never
ends early: per step the slowed run's stretch lasts plan + EXTRA_S + the ranks' lateness (a wake-up, the second
dispatch's head start), the baseline's plan + its own (same seed, same plan). The medians then differ by EXTRA_S give
or take the larger lateness of the two runs; NOISE_S bounds that. Measured on a loaded machine (load average 17 on
two cores, three plain 3-step runs diffed pairwise): policy training moved by at most 0.008 s and any phase by at
most 0.033 s (generation: two actors and a Ray round trip), so NOISE_S = 0.1 is over 12 times what training showed
and 3 times the noisiest phase, and EXTRA_S - NOISE_S = 0.2 still clears every unslowed phase's movement: the slowed
phase is first whenever the delta is within NOISE_S of EXTRA_S.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TOY_SEED, TOY_STEPS, invoke, run_toy_job
from examples.grpo_toy import job, schedule

STEPS, SEED = TOY_STEPS, TOY_SEED  # step 1 plain, step 2 the failed one with a checkpoint, step 3 validation
SLOWED = "rl.grpo.policy_training"
EXTRA_S = 0.3
NOISE_S = 0.1  # see the module docstring
SAMPLE_SYNC = Path(__file__).resolve().parents[1] / "sample_traces" / "grpo_sync"


@pytest.fixture(scope="module")
def normal_and_slowed(toy_sync_run, tmp_path_factory) -> tuple[Path, Path]:
    """The session's plain sync run, and the same job (same seed, same steps) with one phase slowed."""
    slowed = tmp_path_factory.mktemp("slow-phase") / "slowed"
    return toy_sync_run, run_toy_job(slowed, "--mode", "sync", "--slow-phase", f"{SLOWED}:{EXTRA_S}")


@pytest.mark.slow
@pytest.mark.ray
def test_diff_names_the_slowed_phase_first_by_the_seconds_added(normal_and_slowed):
    normal, slowed = normal_and_slowed
    result = invoke(["diff", str(normal), str(slowed), "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["baseline"]["iterations"] == payload["candidate"]["iterations"] == STEPS
    first, *others = payload["names"]
    assert (first["name"], first["bucket"]) == (SLOWED, "productive"), payload["names"]
    assert EXTRA_S - NOISE_S <= first["delta_s"] <= EXTRA_S + NOISE_S, first
    assert first["delta_s"] == pytest.approx(first["candidate_s"] - first["baseline_s"])
    assert all(abs(other["delta_s"]) < first["delta_s"] for other in others)
    assert payload["delta"]["wall_s"] > 0, payload["delta"]


@pytest.mark.slow
@pytest.mark.ray
def test_both_runs_are_clean(normal_and_slowed):
    for path in normal_and_slowed:
        result = invoke(["check", str(path)])
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("rl.grpo.genration:0.3", "no phase named 'rl.grpo.genration'"),
        ("rl.grpo.step:0.3", "no phase named 'rl.grpo.step'"),  # an umbrella, not a phase with a duration
        ("rl.grpo.generation", "expected NAME:SECONDS"),
        ("rl.grpo.generation:soon", "expected NAME:SECONDS"),
        ("rl.grpo.generation:-0.1", "expected NAME:SECONDS"),
        ("rl.grpo.generation:nan", "expected NAME:SECONDS"),
        (":0.3", "expected NAME:SECONDS"),
    ],
)
def test_an_unknown_or_malformed_phase_is_a_usage_error_naming_the_phases(value, says, capsys):
    with pytest.raises(SystemExit) as exited:
        job.parse_args(["--slow-phase", value])
    assert exited.value.code == 2
    stderr = capsys.readouterr().err
    assert "argument --slow-phase" in stderr and says in stderr
    assert all(name in stderr for name in schedule.PLANNED_PHASES)


def test_a_phase_is_named_as_the_trace_as_its_efficiency_category_or_by_its_last_part():
    values = ["idle/refit_bubble:0.1", "rl.grpo.reward:0.05", "rl.grpo.reward:1", "policy_training:0.2"]
    options = job.parse_args([arg for value in values for arg in ("--slow-phase", value)])
    assert options.slow_phase == [
        ("rl.idle.refit_bubble", 0.1),
        ("rl.grpo.reward", 0.05),
        ("rl.grpo.reward", 1.0),
        ("rl.grpo.policy_training", 0.2),
    ]


def test_every_slowable_phase_is_a_span_name_the_job_writes():
    # The committed sample is the job's own sync run: every phase the switch offers must be a name a user sees there.
    result = invoke(["query", str(SAMPLE_SYNC), "--format", "json", "SELECT DISTINCT name FROM spans"])
    assert result.exit_code == 0, result.output
    written = {row["name"] for row in json.loads(result.stdout)}
    assert set(schedule.PLANNED_PHASES) <= written


def test_the_plan_of_a_slowed_phase_grows_by_the_seconds_in_every_step():
    plans = schedule.make_plan(SEED, 6)
    slowed = schedule.slowed(plans, {SLOWED: EXTRA_S, "rl.grpo.generation": 0.2})
    normal_s, slowed_s = (schedule.planned_step_work_s(p, "sync") for p in (plans, slowed))
    for plan, after in zip(plans, slowed, strict=True):
        assert after.train_s == pytest.approx(plan.train_s + EXTRA_S)
        assert after.generation_s == pytest.approx(tuple(s + 0.2 for s in plan.generation_s))
        # A failed step's rollout waits for the hung half (fail_s) while actor 0's slowed half ends sooner.
        rollout_s = max(plan.generation_s) if not plan.failed else max(plan.generation_s[0], plan.fail_s)
        slowed_rollout_s = max(after.generation_s) if not plan.failed else max(after.generation_s[0], after.fail_s)
        rollout_grows_s = slowed_rollout_s - rollout_s
        assert 0.0 <= rollout_grows_s <= 0.2
        assert slowed_s[plan.step] == pytest.approx(normal_s[plan.step] + EXTRA_S + rollout_grows_s)
