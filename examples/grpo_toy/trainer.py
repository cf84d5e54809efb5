"""The driver's side of a GRPO step: reward, advantage and checkpointing here, logprob and policy training on the
training fleet.

Reward (a rule-based environment on CPU), the group-relative advantage (a few numbers per group) and checkpoint staging
are the driver's, as in NeMo-RL; logprob and training are handed to the `PolicyWorker` ranks, each of which opens the
phase's span around its shard. The driver waits on all of them inside a `<phase>.fan_out` span of its own, in no group
and without a bucket (`span_cm`): the ranks' spans are its children and the driver's next phase starts after it, so
the trace shows what the step waited on (SPEC section 14: without it, a faster training would seem to save nothing),
and the ranks' spans alone are the phase, counted once. Each phase is one `managed_span` leaf around seeded numpy
work and a sleep for the planned duration, so its bucket comes from its span group (reward and policy_update
productive; logprob, advantage and checkpoint overhead). The phases are coroutines so the event loop keeps running
while the trainer "computes".
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np

from instrument import (
    RLSpanGroup,
    checkpoint_finalize_span,
    current_trace_carrier,
    dispatch_with_trace_context,
    managed_span,
    remote_trace_context,
    span_cm,
)

from .schedule import FINALIZE_S, StepPlan

BUGGY_REWARD_TASKS = 3


async def _work(seconds: float, started: float) -> None:
    """Sleep out what is left of `seconds` after the numpy work that began at `started`."""
    await asyncio.sleep(max(0.0, seconds - (time.perf_counter() - started)))


class Trainer:
    """The phases of a step that read and update the policy, which lives on `policy_workers` (one per rank)."""

    def __init__(self, policy_workers: list[Any]) -> None:
        self.policy_workers = policy_workers
        self._finalizers: list[threading.Thread] = []

    async def reward(self, plan: StepPlan, tokens: np.ndarray) -> np.ndarray:
        """Score every trajectory. With `plan.buggy` this plants `self-overlap`: three concurrent reward spans."""
        if not plan.buggy:
            with managed_span(RLSpanGroup.REWARD, "rl.grpo.reward"):
                started = time.perf_counter()
                rewards = (tokens % 3 == 0).mean(axis=-1)
                await _work(plan.reward_s, started)
            return rewards

        async def score(chunk: np.ndarray) -> np.ndarray:
            with managed_span(RLSpanGroup.REWARD, "rl.grpo.reward"):  # BUG: one bucketed span per task
                started = time.perf_counter()
                rewards = (chunk % 3 == 0).mean(axis=-1)
                await _work(plan.reward_s, started)
            return rewards

        chunks = np.array_split(tokens, BUGGY_REWARD_TASKS)
        return np.concatenate(await asyncio.gather(*(score(chunk) for chunk in chunks)))

    async def logprob(self, plan: StepPlan, tokens: np.ndarray) -> np.ndarray:
        """Every rank scores its shard; the shards come back in rank order, so the batch's order is kept."""
        with span_cm("rl.grpo.logprob.fan_out"):
            shards = await asyncio.gather(
                *(
                    dispatch_with_trace_context(w.logprob, plan.step, tokens, plan.logprob_s)
                    for w in self.policy_workers
                )
            )
        return np.concatenate(shards)

    async def advantage(self, plan: StepPlan, rewards: np.ndarray) -> np.ndarray:
        """GRPO's group-relative advantage: each reward against its group's mean and spread."""
        with managed_span(RLSpanGroup.ADVANTAGE, "rl.grpo.advantage"):
            started = time.perf_counter()
            groups = rewards.reshape(-1, 2)
            advantages = (groups - groups.mean(axis=1, keepdims=True)) / (groups.std(axis=1, keepdims=True) + 1e-6)
            await _work(plan.advantage_s, started)
        return advantages.ravel()

    async def train(self, plan: StepPlan, tokens: np.ndarray, advantages: np.ndarray, logprobs: np.ndarray) -> float:
        """One update on every rank; the batch's loss is the mean of the ranks' (their shards are equal)."""
        with span_cm("rl.grpo.policy_training.fan_out"):
            losses = await asyncio.gather(
                *(
                    dispatch_with_trace_context(w.train, plan.step, tokens, advantages, logprobs, plan.train_s)
                    for w in self.policy_workers
                )
            )
        return float(np.mean(losses))

    async def checkpoint(self, plan: StepPlan) -> None:
        """Stage the weights in the step (overhead), then make them durable on a thread that outlives the step."""
        with managed_span(RLSpanGroup.CHECKPOINT, "rl.grpo.checkpointing"):
            started = time.perf_counter()
            staged = await dispatch_with_trace_context(self.policy_workers[0].state_dict)  # rank 0's, to host memory
            await _work(plan.checkpoint_s, started)
            carrier = current_trace_carrier()  # a raw thread starts with an empty context: hand it the span
        thread = threading.Thread(
            target=self._finalize, args=(plan.step, staged, carrier), name=f"checkpoint-{plan.step}", daemon=True
        )
        thread.start()
        self._finalizers.append(thread)

    @staticmethod
    def _finalize(step: int, staged: np.ndarray, carrier: dict[str, str]) -> None:
        with remote_trace_context(carrier), checkpoint_finalize_span(step):
            float(np.abs(staged).sum())  # "checksum" the bytes before the rename
            time.sleep(FINALIZE_S)

    def wait_for_checkpoints(self) -> None:
        """Join every finalize thread, so its span ends (and is exported) before the job does."""
        for thread in self._finalizers:
            thread.join()
        self._finalizers.clear()
