"""The seeded schedule of the toy GRPO job, and the goodput it implies.

Every simulated phase sleeps for a duration fixed here, some drawn from `--seed`, so a run is a known timeline plus
scheduling noise (Ray dispatch, the event loop, a busy machine). That makes the goodput `goodput report` must find
derivable from the plan alone: `expected_goodput` replays the timeline with zero noise and charges each step window
the way SPEC section 4 does. Noise only ever adds wall clock that no productive span covers (a Ray round trip, a late
wake-up), so a measured step lands a little *below* its expected figure, never far above it: hence the lopsided
`GOODPUT_TOLERANCE`.

Sync step k (every step window is independent, so the figure is closed-form):

    wall       = rollout + reward + logprob + advantage + train + refit [+ validation] [+ checkpoint]
    rollout    = max(generation_s)                      (two actors generate their halves concurrently)
               = max(generation_s[0], FAIL_S) + RETRY_S on the failed step (actor 1's half hangs until the
                 rollout times out, is tagged wasted/failed_trajectory, and is regenerated in RETRY_S)
    productive = (rollout's generation: max(generation_s), or generation_s[0] + RETRY_S) + reward + train
    goodput    = productive / wall

Validation generates through the same actors, but inside `evaluate_span` its generation is overhead; the refit wait
is idle; logprob, advantage and checkpoint staging are overhead; the checkpoint's finalize tail runs on a thread into
the next step and is unbucketed, so it moves nothing. Logprob and training run on the training actors, every rank its
shard for the planned seconds at once, so each phase takes the step its planned seconds whichever process runs it;
the driver's dispatch and wait only add noise.

Async step k (one rollout actor generates batch k as soon as the weights are at most one step stale, i.e. after
step k-2's refit, overlapping step k-1's training): no closed form, because batch k+1's generation covers part of
step k's overhead. `_async_timeline` walks both clocks (the actor's and the trainer's) and `expected_goodput`
charges the union of productive intervals inside each step window.

`--slow-phase` adds seconds to a phase's planned durations (`slowed`), `--straggler` to one generation actor's
(`straggling`), `--faster` takes a share off them (`faster`): each returns a new plan, the one a run of it sleeps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

N_GENERATION_ACTORS = 2  # sync mode; async mode has one rollout engine and one validation actor
N_TRAINING_ACTORS = 2  # both modes: the policy's data-parallel ranks; --colocated pairs rank i with generation i
LOAD_MODEL_S = 0.05
COLLECTIVES_S = 0.03
GENERATION_S = (0.20, 0.30)  # each actor's half of a rollout, drawn uniformly
FAILED_STEP = 2  # step whose rollout loses one trajectory (the last step when there are fewer)
FAIL_S = 0.35  # the hung trajectory's time-out; longer than any generation, so the tail is wasted alone
RETRY_S = 0.10
REWARD_S = 0.05
LOGPROB_S = 0.10
ADVANTAGE_S = 0.01
TRAIN_S = (0.18, 0.22)
REFIT_S = 0.06
VALIDATE_EVERY = 3
VALIDATION_S = 0.08
CHECKPOINT_EVERY = 2
CHECKPOINT_S = 0.05  # staging, in the step (overhead)
FINALIZE_S = 0.15  # the async tail on a thread (unbucketed)
ASYNC_STALENESS = 1  # batch k may be generated with the weights of step k-1-ASYNC_STALENESS

# How far a measured step may sit from `expected_goodput`: noise only lowers it (see the module docstring).
GOODPUT_TOLERANCE = (0.15, 0.03)  # (below, above), absolute goodput


@dataclass(frozen=True)
class StepPlan:
    """What step `step` sleeps for, in seconds."""

    step: int
    generation_s: tuple[float, ...]  # per sync actor; the async rollout engine takes their max for the whole batch
    failed: bool  # one trajectory hangs and times out (actor 1's half in sync mode)
    train_s: float
    validation: bool
    checkpoint: bool
    buggy: bool  # `--buggy` plants its two mistakes in this step
    reward_s: float = REWARD_S
    logprob_s: float = LOGPROB_S
    advantage_s: float = ADVANTAGE_S
    refit_s: float = REFIT_S
    validation_s: float = VALIDATION_S  # when `validation`
    checkpoint_s: float = CHECKPOINT_S  # staging, when `checkpoint`
    fail_s: float = FAIL_S  # the hung trajectory's time-out, when `failed`

    @property
    def batch_generation_s(self) -> float:
        """The async rollout engine generates the whole batch in the time the sync pair takes for it."""
        return max(self.generation_s)


def make_plan(seed: int, steps: int, *, buggy: bool = False) -> list[StepPlan]:
    """The schedule of a run: seeded, so the same `--seed` and `--steps` always sleep the same."""
    rng = np.random.default_rng(seed)
    failed_step = min(FAILED_STEP, steps)
    plan = []
    for step in range(1, steps + 1):
        generation = tuple(float(x) for x in rng.uniform(*GENERATION_S, size=N_GENERATION_ACTORS).round(3))
        plan.append(
            StepPlan(
                step=step,
                generation_s=generation,
                failed=step == failed_step,
                train_s=float(round(rng.uniform(*TRAIN_S), 3)),
                validation=step % VALIDATE_EVERY == 0,
                checkpoint=step % CHECKPOINT_EVERY == 0,
                buggy=buggy and step == failed_step,
            )
        )
    return plan


# What `--slow-phase` and `--faster` change: the span a phase opens (as the trace names it) and the StepPlan field it
# sleeps for. Only phases planned per step: start-up, the finalize thread and the async trainer's buffer starvation
# (a wait that follows from the others) are not. Generation is the rollout's (each actor's half, so the batch);
# validation's generation and the failed step's retry keep their own durations.
PLANNED_PHASES = {
    "rl.grpo.generation": "generation_s",
    "rl.grpo.reward": "reward_s",
    "rl.grpo.logprob": "logprob_s",
    "rl.grpo.advantage": "advantage_s",
    "rl.grpo.policy_training": "train_s",
    "rl.idle.refit_bubble": "refit_s",
    "rl.grpo.evaluate": "validation_s",
    "rl.grpo.checkpointing": "checkpoint_s",
    "rl.wasted.failed_trajectory": "fail_s",
}


def slowed(plans: Sequence[StepPlan], extra_s: Mapping[str, float]) -> list[StepPlan]:
    """`plans` with `extra_s[name]` seconds added to the phase whose span is `name`, in every step.

    The sleep is what grows, so the extra time lands inside that phase's span and `expected_goodput` of the result
    stays the figure a run of it must show. Names outside `PLANNED_PHASES` raise KeyError.
    """
    changes: dict[str, float] = {}
    for name, seconds in extra_s.items():
        changes[PLANNED_PHASES[name]] = changes.get(PLANNED_PHASES[name], 0.0) + seconds

    def one(plan: StepPlan) -> StepPlan:
        fields: dict[str, Any] = {}
        for field, seconds in changes.items():
            value = getattr(plan, field)
            fields[field] = tuple(x + seconds for x in value) if isinstance(value, tuple) else value + seconds
        return replace(plan, **fields)

    return [one(plan) for plan in plans]


def faster(plans: Sequence[StepPlan], pct: Mapping[str, float]) -> list[StepPlan]:
    """`plans` with the phase whose span is `name` `pct[name]` percent shorter, in every step: each of its planned
    durations times `1 - pct / 100`, the same job with that phase faster. Names outside `PLANNED_PHASES` raise
    KeyError."""
    factors = {PLANNED_PHASES[name]: 1.0 - share / 100.0 for name, share in pct.items()}

    def one(plan: StepPlan) -> StepPlan:
        fields: dict[str, Any] = {}
        for field, factor in factors.items():
            value = getattr(plan, field)
            fields[field] = tuple(x * factor for x in value) if isinstance(value, tuple) else value * factor
        return replace(plan, **fields)

    return [one(plan) for plan in plans]


def straggling(plans: Sequence[StepPlan], rank: int, extra_s: float) -> list[StepPlan]:
    """`plans` with generation actor `rank` `extra_s` seconds slower at its half of every rollout, as a worker on a
    slow node would be: a straggler its peer waits for (`goodput critical` names it). The async rollout engine
    generates the whole batch, so its generation grows by the straggler's lateness. Ranks outside the actors raise
    IndexError."""
    if not 0 <= rank < N_GENERATION_ACTORS:
        raise IndexError(rank)

    def one(plan: StepPlan) -> StepPlan:
        halves = tuple(x + extra_s if i == rank else x for i, x in enumerate(plan.generation_s))
        return replace(plan, generation_s=halves)

    return [one(plan) for plan in plans]


def _sync_step(plan: StepPlan) -> tuple[float, float]:
    """(productive, wall) of one sync step, from the formula in the module docstring."""
    if plan.failed:
        rollout = max(plan.generation_s[0], plan.fail_s) + RETRY_S
        generating = plan.generation_s[0] + RETRY_S
    else:
        rollout = generating = max(plan.generation_s)
    wall = rollout + plan.reward_s + plan.logprob_s + plan.advantage_s + plan.train_s + plan.refit_s
    wall += _validation_and_checkpoint_s(plan)
    return generating + plan.reward_s + plan.train_s, wall


def _validation_and_checkpoint_s(plan: StepPlan) -> float:
    """The step's tail after the refit: validation every few steps, checkpoint staging every few others."""
    return (plan.validation_s if plan.validation else 0.0) + (plan.checkpoint_s if plan.checkpoint else 0.0)


Interval = tuple[float, float]


def _async_timeline(plans: Sequence[StepPlan]) -> tuple[list[Interval], list[Interval]]:
    """(step windows, productive intervals) of an async run with zero noise; time 0 is when step 1 opens.

    The actor generates batches back to back, batch k waiting for version k-1-ASYNC_STALENESS (version j exists once
    step j's refit is done). The trainer's step k waits for batch k, then runs reward, logprob, advantage, training,
    refit, validation and checkpoint staging, the same order as the job.
    """
    version_ready = {0: 0.0}
    actor_free, trainer = 0.0, 0.0
    windows: list[Interval] = []
    productive: list[Interval] = []
    for plan in plans:
        start = max(actor_free, version_ready.get(plan.step - 1 - ASYNC_STALENESS, 0.0))
        if plan.failed:
            start += plan.fail_s  # the hung attempt: wasted
        actor_free = start + plan.batch_generation_s
        productive.append((start, actor_free))

        opened = trainer
        t = max(trainer, actor_free)  # buffer starvation until the batch arrives
        productive.append((t, t + plan.reward_s))
        t += plan.reward_s + plan.logprob_s + plan.advantage_s
        productive.append((t, t + plan.train_s))
        t += plan.train_s + plan.refit_s
        version_ready[plan.step] = t
        t += _validation_and_checkpoint_s(plan)
        windows.append((opened, t))
        trainer = t
    return windows, productive


def _covered(intervals: Sequence[Interval], low: float, high: float) -> float:
    """Length of the union of `intervals` inside `[low, high]`."""
    total, cursor = 0.0, low
    for start, end in sorted(intervals):
        start, end = max(start, cursor), min(end, high)
        if end > start:
            total += end - start
            cursor = end
    return total


def expected_goodput(plans: Sequence[StepPlan], mode: str) -> dict[int, float]:
    """Goodput of each step window on a noise-free machine: productive wall clock over the window's wall clock."""
    if mode == "sync":
        return {plan.step: productive / wall for plan in plans for productive, wall in [_sync_step(plan)]}
    windows, productive = _async_timeline(plans)
    return {
        plan.step: _covered(productive, low, high) / (high - low)
        for plan, (low, high) in zip(plans, windows, strict=True)
    }


def planned_step_work_s(plans: Sequence[StepPlan], mode: str) -> dict[int, float]:
    """The trainer's own planned time in each step: a floor under the measured window, since noise only adds.

    Sync: the whole noise-free step. Async: the step less its wait for the batch, which is no floor, because a
    slow step lets the stream run further ahead and shortens the next step's wait.
    """
    if mode == "sync":
        return {plan.step: _sync_step(plan)[1] for plan in plans}
    return {
        plan.step: plan.reward_s
        + plan.logprob_s
        + plan.advantage_s
        + plan.train_s
        + plan.refit_s
        + _validation_and_checkpoint_s(plan)
        for plan in plans
    }


def planned_productive_s(plans: Sequence[StepPlan]) -> dict[int, float]:
    """The productive seconds of each sync step with zero noise: a floor under the measured figure, since a sleep
    never ends early and a late start only spreads the generation actors' spans wider."""
    return {plan.step: _sync_step(plan)[0] for plan in plans}


def failed_step(plans: Sequence[StepPlan]) -> int | None:
    return next((plan.step for plan in plans if plan.failed), None)
