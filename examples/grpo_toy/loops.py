"""The two training loops: sync (rollout, then train, every step) and async (generation one step ahead).

Both open the same step shape: `iteration_scope(step)` + `umbrella_span(U_STEP, "rl.grpo.step")` around reward,
logprob, advantage, policy training, the refit wait, validation every few steps and checkpointing. They differ in
where generation happens: inside the step under a rollout umbrella (sync), or on a rollout actor that runs ahead of
the trainer (async): the trainer hands it batch k+1+ASYNC_STALENESS as soon as step k's refit has put the weights
that batch may use on it, and step k awaits the batch it handed over earlier.

Every wait of the driver is in the trace, so `goodput critical` can follow it (SPEC section 14): a remote phase's
spans are children of a driver span that ends after them (the rollout umbrella, the trainer's fan-outs, the evaluate
umbrella), a wait with nothing traced behind it is an idle span of its own (the refit), and a batch made ahead is
generated under the step that asked for it, its own `rl.iteration` the step that uses it (made ahead for it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import ray

from instrument import (
    RLSpanGroup,
    dispatch_with_trace_context,
    efficiency_span,
    evaluate_span,
    iteration_scope,
    umbrella_span,
)

from .schedule import ASYNC_STALENESS, RETRY_S, StepPlan
from .trainer import Trainer


async def sync_rollout(workers: list[Any], plan: StepPlan) -> np.ndarray:
    """Both workers generate their half concurrently; a hung half times out (wasted) and is generated again."""
    with umbrella_span(RLSpanGroup.U_ROLLOUT, "rl.grpo.rollout"):
        refs = [
            dispatch_with_trace_context(
                worker.generate,
                plan.step,
                plan.generation_s[rank],
                fail_after_s=plan.fail_s if plan.failed and rank == 1 else None,
                plant_nested_reward=plan.buggy and rank == 0,
            )
            for rank, worker in enumerate(workers)
        ]
        halves = list(await asyncio.gather(*refs))
        for rank, half in enumerate(halves):
            if half is None:
                halves[rank] = await dispatch_with_trace_context(workers[rank].generate, plan.step, RETRY_S)
    return np.concatenate(halves)


async def refit(workers: list[Any], plan: StepPlan) -> None:
    """Push the new weights to every generation worker; the trainer only waits, so the wait is idle."""
    with efficiency_span("idle/refit_bubble"):
        await asyncio.gather(
            *(dispatch_with_trace_context(worker.update_weights, plan.step, plan.refit_s) for worker in workers)
        )


async def validate(workers: list[Any], plan: StepPlan) -> float:
    """Generate on held-out prompts and score them: the tokens are discarded, so this generation is overhead."""
    with evaluate_span("grpo"):
        refs = [dispatch_with_trace_context(worker.generate, plan.step, plan.validation_s) for worker in workers]
        tokens = np.concatenate(await asyncio.gather(*refs))
    return float((tokens % 3 == 0).mean())


async def train_on(trainer: Trainer, plan: StepPlan, tokens: np.ndarray) -> float:
    rewards = await trainer.reward(plan, tokens)
    logprobs = await trainer.logprob(plan, tokens)
    advantages = await trainer.advantage(plan, rewards)
    return await trainer.train(plan, tokens, advantages, logprobs)


async def validate_and_checkpoint(trainer: Trainer, plan: StepPlan, validators: list[Any]) -> str:
    """The step's tail after the refit: validation every few steps, checkpoint staging every few others."""
    note = ""
    if plan.validation:
        note = f" val_reward={await validate(validators, plan):.3f}"
    if plan.checkpoint:
        await trainer.checkpoint(plan)
        note += " checkpoint"
    return note


async def sync_loop(trainer: Trainer, workers: list[Any], plans: list[StepPlan], log) -> None:
    for plan in plans:
        with iteration_scope(plan.step), umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step"):
            tokens = await sync_rollout(workers, plan)
            loss = await train_on(trainer, plan, tokens)
            await refit(workers, plan)
            note = await validate_and_checkpoint(trainer, plan, workers)
        log(f"step {plan.step}: loss={loss:+.4f}{note}")


def generate_ahead(engine: Any, plan: StepPlan, after: int | None) -> Any:
    """Hand batch `plan.step` to the rollout actor, to generate once batch `after` is done; its ref, not awaited.

    Called inside an earlier step (or at the start of the first one): the batch's spans are children of that step
    span with their own `rl.iteration` a later one, so a reader knows the step did not wait for them and the step
    that uses the batch did.
    """
    return dispatch_with_trace_context(
        engine.generate_batch,
        plan.step,
        plan.batch_generation_s,
        after=after,
        fail_after_s=plan.fail_s if plan.failed else None,
        plant_nested_reward=plan.buggy,
    )


async def wait_for_batch(batch: Any) -> np.ndarray:
    """Batch `batch` (a ref): at once when it is there, else after an idle/buffer_starvation wait, which its
    generation's end wakes."""
    ready, _ = ray.wait([batch], timeout=0)
    if ready:
        return await batch
    with efficiency_span("idle/buffer_starvation"):
        return await batch


async def async_loop(trainer: Trainer, engine: Any, validator: Any, plans: list[StepPlan], log) -> None:
    """Batch k may be generated with the weights of step k-1-ASYNC_STALENESS: the first 1+ASYNC_STALENESS batches
    with the weights at hand, the next one as soon as each step's refit is done, so the next step's generation runs
    beside this step's training."""
    batches: dict[int, Any] = {}
    ahead = ASYNC_STALENESS + 1

    def hand_over(index: int) -> None:
        if index < len(plans):
            batches[plans[index].step] = generate_ahead(engine, plans[index], plans[index - 1].step if index else None)

    for index, plan in enumerate(plans):
        with iteration_scope(plan.step), umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step"):
            if index == 0:
                for first in range(ahead):
                    hand_over(first)
            tokens = await wait_for_batch(batches.pop(plan.step))
            loss = await train_on(trainer, plan, tokens)
            await refit([engine, validator], plan)
            hand_over(index + ahead)  # this step's weights are on the engine: the batch that may use them
            note = await validate_and_checkpoint(trainer, plan, [validator])
        log(f"step {plan.step}: loss={loss:+.4f}{note}")
