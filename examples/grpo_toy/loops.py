"""The two training loops: sync (rollout, then train, every step) and async (a streaming rollout one step ahead).

Both open the same step shape: `iteration_scope(step)` + `umbrella_span(U_STEP, "rl.grpo.step")` around reward,
logprob, advantage, policy training, the refit wait, validation every few steps and checkpointing. They differ in
where generation happens: inside the step under a rollout umbrella (sync), or in a streaming actor method that runs
ahead of the trainer, consumed under a `streaming_umbrella_span` (async), with the trainer polling its buffer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from instrument import (
    RL_IDLE_POLLS_ATTR,
    RLSpanGroup,
    dispatch_with_trace_context,
    efficiency_span,
    evaluate_span,
    iteration_scope,
    safe_set_span_attributes,
    start_efficiency_span,
    streaming_umbrella_span,
    umbrella_span,
)

from .schedule import ASYNC_STALENESS, POLL_S, RETRY_S, StepPlan
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


async def finish_step(trainer: Trainer, plan: StepPlan, refit_to: list[Any], validators: list[Any]) -> str:
    await refit(refit_to, plan)
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
            note = await finish_step(trainer, plan, workers, workers)
        log(f"step {plan.step}: loss={loss:+.4f}{note}")


async def consume_rollouts(streamer: Any, plans: list[StepPlan], buffer: dict[int, np.ndarray]) -> None:
    """Run one streaming call for the whole run and move each batch into `buffer` as it arrives.

    The rollout umbrella is current only around the dispatch and each `__anext__`, never across the loop's other
    awaits: the trainer's spans, in another task, must not nest under it.
    """
    batches = [
        {
            "step": plan.step,
            "seconds": plan.batch_generation_s,
            "min_version": max(0, plan.step - 1 - ASYNC_STALENESS),
            "fail_after_s": plan.fail_s if plan.failed else None,
            "plant_nested_reward": plan.buggy,
        }
        for plan in plans
    ]
    with streaming_umbrella_span(RLSpanGroup.U_ROLLOUT, "rl.grpo.rollout") as activate:
        with activate():
            stream = dispatch_with_trace_context(streamer.stream_rollouts.options(num_returns="streaming"), batches)
        while True:
            with activate():
                try:
                    ref = await stream.__anext__()
                except StopAsyncIteration:
                    break
            batch = await ref
            buffer[batch["step"]] = batch["tokens"]


async def wait_for_batch(step: int, buffer: dict[int, np.ndarray], consumer: asyncio.Task) -> np.ndarray:
    """Poll the buffer until batch `step` is in it; a wait that needed any poll is one buffer_starvation span."""
    starving, polls = None, 0
    while step not in buffer:
        if consumer.done():
            consumer.result()  # the stream failed: raise its error here rather than poll forever
            raise RuntimeError(f"the rollout stream ended without batch {step}")
        if starving is None:
            starving = start_efficiency_span("idle/buffer_starvation", **{RL_IDLE_POLLS_ATTR: 0})
        polls += 1
        safe_set_span_attributes(starving, {RL_IDLE_POLLS_ATTR: polls})
        await asyncio.sleep(POLL_S)
    if starving is not None:
        starving.end()
    return buffer.pop(step)


async def async_loop(trainer: Trainer, streamer: Any, validator: Any, plans: list[StepPlan], log) -> None:
    buffer: dict[int, np.ndarray] = {}
    consumer = asyncio.create_task(consume_rollouts(streamer, plans, buffer))  # created outside any step
    try:
        for plan in plans:
            with iteration_scope(plan.step), umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step"):
                tokens = await wait_for_batch(plan.step, buffer, consumer)
                loss = await train_on(trainer, plan, tokens)
                note = await finish_step(trainer, plan, [streamer, validator], [validator])
            log(f"step {plan.step}: loss={loss:+.4f}{note}")
        await consumer
    finally:
        if not consumer.done():
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)
