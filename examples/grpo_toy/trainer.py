"""The driver's side of a GRPO step: reward, logprob, advantage, policy training, checkpointing.

Each phase is one `managed_span` leaf around seeded numpy work and a sleep for the planned duration, so its bucket
comes from its span group (reward and policy_update productive; logprob, advantage and checkpoint overhead). The
phases are coroutines so the async loop's rollout consumer keeps running while the trainer "computes".
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from instrument import (
    RLSpanGroup,
    checkpoint_finalize_span,
    current_trace_carrier,
    managed_span,
    remote_trace_context,
)

from .schedule import FINALIZE_S, StepPlan

BUGGY_REWARD_TASKS = 3


async def _work(seconds: float, started: float) -> None:
    """Sleep out what is left of `seconds` after the numpy work that began at `started`."""
    await asyncio.sleep(max(0.0, seconds - (time.perf_counter() - started)))


class Trainer:
    """The policy (a small numpy matrix) and the phases that read and update it."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng([seed, 7])
        self.policy = self.rng.standard_normal((16, 16)) * 0.1
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
        with managed_span(RLSpanGroup.LOGPROB, "rl.grpo.logprob"):
            started = time.perf_counter()
            features = np.eye(16)[tokens % 16].mean(axis=1)
            logits = features @ self.policy
            logprobs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
            await _work(plan.logprob_s, started)
        return logprobs.max(axis=-1)

    async def advantage(self, plan: StepPlan, rewards: np.ndarray) -> np.ndarray:
        """GRPO's group-relative advantage: each reward against its group's mean and spread."""
        with managed_span(RLSpanGroup.ADVANTAGE, "rl.grpo.advantage"):
            started = time.perf_counter()
            groups = rewards.reshape(-1, 2)
            advantages = (groups - groups.mean(axis=1, keepdims=True)) / (groups.std(axis=1, keepdims=True) + 1e-6)
            await _work(plan.advantage_s, started)
        return advantages.ravel()

    async def train(self, plan: StepPlan, tokens: np.ndarray, advantages: np.ndarray, logprobs: np.ndarray) -> float:
        with managed_span(RLSpanGroup.POLICY_UPDATE, "rl.grpo.policy_training"):
            started = time.perf_counter()
            features = np.eye(16)[tokens % 16].mean(axis=1)
            gradient = features.T @ (advantages[:, None] * np.ones((1, 16))) / len(advantages)
            self.policy += 0.01 * gradient
            loss = float(-(advantages * logprobs).mean())
            await _work(plan.train_s, started)
        return loss

    async def checkpoint(self, plan: StepPlan) -> None:
        """Stage the weights in the step (overhead), then make them durable on a thread that outlives the step."""
        with managed_span(RLSpanGroup.CHECKPOINT, "rl.grpo.checkpointing"):
            started = time.perf_counter()
            staged = self.policy.copy()
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
