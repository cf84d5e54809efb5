"""The toy job's Ray actors: rollout workers that "generate" and policy workers that "train", by sleeping, each
tracing into its own file.

Each actor calls `instrument.configure()` in `__init__` with nothing but its rank: exporter, path and span groups come
from the GOODPUT_* variables the driver's `configure` left in its environment, handed over through the actor's
`runtime_env` (see `job.actor_runtime_env`), so the actor writes what the driver writes, one file per process; the GPUs
Ray gave it (`fleets`) `configure` reads from Ray itself. The rank goes into the resource as `dl.rank` and
`dl.world_size`, as NeMo-RL's workers write them, so a reader can tell the ranks of a fleet apart and knows none is
missing (SPEC section 12). Every traced method is decorated `@accepts_trace_context` and called through
`dispatch_with_trace_context`, so its spans nest under the driver's step instead of starting traces of their own
(`goodput check` would call them orphans otherwise).
"""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
import ray

import instrument
from instrument import (
    RLSpanGroup,
    accepts_trace_context,
    efficiency_span,
    iteration_scope,
    managed_span,
    umbrella_span,
)

from .schedule import N_GENERATION_ACTORS

VOCAB, HIDDEN = 64, 16
TRAJECTORIES_PER_WORKER = 2  # one GRPO group of two answers to one prompt


def configure_rank(rank: int, world_size: int) -> None:
    """`instrument.configure()` from the driver's GOODPUT_* environment, with this actor's place in its fleet."""
    instrument.configure(resource_attributes={"dl.rank": rank, "dl.world_size": world_size})


def _sleep_rest(seconds: float, started: float) -> None:
    """Sleep out what is left of `seconds` after the numpy work that began at `started`."""
    time.sleep(max(0.0, seconds - (time.perf_counter() - started)))


def _decode(rng: np.random.Generator, weights: np.ndarray, n_trajectories: int, n_tokens: int = 32) -> np.ndarray:
    """Greedy steps of a random linear 'language model': small seeded numpy work standing in for vLLM."""
    state = rng.standard_normal((n_trajectories, HIDDEN))
    tokens = np.empty((n_trajectories, n_tokens), dtype=np.int64)
    for index in range(n_tokens):
        logits = state @ weights
        tokens[:, index] = np.argmax(logits, axis=-1) + rng.integers(0, VOCAB // HIDDEN, n_trajectories) * HIDDEN
        state = np.tanh(state + 0.1 * logits)
    return tokens


def _score_inline(tokens: np.ndarray, seconds: float) -> None:
    """The planted `nested-bucket` bug: a reward span opened inside the generation span (same wall clock, twice)."""
    with managed_span(RLSpanGroup.REWARD, "rl.grpo.reward"):
        float(np.mean(tokens % 2))
        time.sleep(seconds)


@ray.remote
class GenerationWorker:
    """One rollout worker of the sync loop (and the validation worker of the async loop)."""

    def __init__(self, rank: int, world_size: int, seed: int) -> None:
        configure_rank(rank, world_size)
        self.rank = rank
        self.rng = np.random.default_rng([seed, rank])
        self.weights = np.zeros((HIDDEN, HIDDEN))
        self.version = 0

    @accepts_trace_context
    def load_model(self, seconds: float) -> int:
        with umbrella_span(RLSpanGroup.U_MODEL_INIT, "rl.grpo.load_model"):
            self.weights = self.rng.standard_normal((HIDDEN, HIDDEN))
            time.sleep(seconds)
        return os.getpid()

    @accepts_trace_context
    def generate(
        self,
        step: int,
        seconds: float,
        *,
        fail_after_s: float | None = None,
        plant_nested_reward: bool = False,
    ) -> np.ndarray | None:
        """This worker's half of step `step`'s batch, or None when the trajectory hangs until `fail_after_s`.

        Called inside the driver's `evaluate_span`, its generation is overhead here too: the carrier brings the
        bucket scope along (as W3C baggage) with the parent span.
        """
        with iteration_scope(step):
            if fail_after_s is not None:
                with efficiency_span("wasted/failed_trajectory"):  # a wait: the engine hung, the rollout times out
                    time.sleep(fail_after_s)
                return None
            with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                started = time.perf_counter()
                tokens = _decode(self.rng, self.weights, TRAJECTORIES_PER_WORKER)
                if plant_nested_reward:
                    time.sleep(seconds / 2)
                    _score_inline(tokens, seconds / 4)  # goodput: ignore[nested-bucket] (--buggy plants it)
                _sleep_rest(seconds, started)
        return tokens

    @accepts_trace_context
    def update_weights(self, version: int, seconds: float) -> int:
        """Refit: no span of its own, the driver's idle/refit_bubble span measures the wait."""
        self.weights = self.weights + 0.01 * self.rng.standard_normal(self.weights.shape)
        time.sleep(seconds)
        self.version = version
        return version

    def close(self) -> int:
        """Flush this process's spans before the driver kills the actor (ray.kill skips atexit)."""
        instrument.shutdown()
        return os.getpid()


@ray.remote
class RolloutEngine:
    """The async loop's rollout actor: one engine that generates the whole batch of each step, one batch at a time,
    ahead of the trainer.

    The trainer hands it batch k as soon as the weights batch k may use are on it (`loops.async_loop`), so the batch
    starts when both those weights and the engine are ready: the trace shows both (the caller's refit before the
    call, this process's previous generation). An async actor, so a refit is taken while a batch is generating.
    """

    def __init__(self, seed: int) -> None:
        configure_rank(0, 1)  # the whole batch, one engine
        self.rng = np.random.default_rng([seed, 99])
        self.weights = self.rng.standard_normal((HIDDEN, HIDDEN))
        self.version = 0
        self.generated: set[int] = set()
        self._batch_done: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        if self._batch_done is None:  # created on the actor's event loop, not in __init__'s thread
            self._batch_done = asyncio.Condition()
        return self._batch_done

    @accepts_trace_context
    async def load_model(self, seconds: float) -> int:
        with umbrella_span(RLSpanGroup.U_MODEL_INIT, "rl.grpo.load_model"):
            await asyncio.sleep(seconds)
        return os.getpid()

    @accepts_trace_context
    async def generate_batch(
        self,
        step: int,
        seconds: float,
        *,
        after: int | None = None,
        fail_after_s: float | None = None,
        plant_nested_reward: bool = False,
    ) -> np.ndarray:
        """Batch `step`, generated once batch `after` is (the engine is busy until then; an async actor may start
        calls out of order). A hung trajectory first wastes `fail_after_s`, then the batch is generated again."""
        condition = self._condition()
        async with condition:
            await condition.wait_for(lambda: after is None or after in self.generated)
        with iteration_scope(step):
            if fail_after_s is not None:
                with efficiency_span("wasted/failed_trajectory"):
                    await asyncio.sleep(fail_after_s)
            with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                started = time.perf_counter()
                tokens = _decode(self.rng, self.weights, TRAJECTORIES_PER_WORKER * N_GENERATION_ACTORS)
                if plant_nested_reward:
                    await asyncio.sleep(seconds / 2)
                    _score_inline(tokens, seconds / 4)  # goodput: ignore[nested-bucket] (--buggy)
                await asyncio.sleep(max(0.0, seconds - (time.perf_counter() - started)))
        async with condition:
            self.generated.add(step)
            condition.notify_all()
        return tokens

    @accepts_trace_context
    async def update_weights(self, version: int, seconds: float) -> int:
        """Refit: no span of its own, the driver's idle/refit_bubble span measures the wait."""
        await asyncio.sleep(seconds)
        self.weights = self.weights + 0.01 * self.rng.standard_normal(self.weights.shape)
        self.version = version
        return version

    async def close(self) -> int:
        instrument.shutdown()
        return os.getpid()


@ray.remote
class PolicyWorker:
    """One rank of the training fleet: a replica of the policy, and the logprob and update of its shard of the batch.

    Data parallel, as NeMo-RL's policy workers are: each rank scores and trains on its shard and the ranks end every
    update with the same weights. The toy has no collective to all-reduce gradients with, so each rank computes the
    mean gradient of the whole batch, which is what the all-reduce would leave on every rank. These are the phases a
    real job runs on its training GPUs; reward, advantage and checkpoint staging stay on the driver (`Trainer`).
    """

    def __init__(self, rank: int, world_size: int, seed: int) -> None:
        configure_rank(rank, world_size)
        self.rank, self.world_size = rank, world_size
        self.policy = np.random.default_rng([seed, 7]).standard_normal((HIDDEN, HIDDEN)) * 0.1  # every rank alike

    def _shard(self, batch: np.ndarray) -> np.ndarray:
        return np.array_split(batch, self.world_size)[self.rank]

    @accepts_trace_context
    def load_model(self, seconds: float) -> int:
        with umbrella_span(RLSpanGroup.U_MODEL_INIT, "rl.grpo.load_model"):
            time.sleep(seconds)
        return os.getpid()

    @accepts_trace_context
    def logprob(self, step: int, tokens: np.ndarray, seconds: float) -> np.ndarray:
        """The current policy's log-probabilities of this rank's shard of the batch, one number per trajectory."""
        with iteration_scope(step), managed_span(RLSpanGroup.LOGPROB, "rl.grpo.logprob"):
            started = time.perf_counter()
            features = np.eye(HIDDEN)[self._shard(tokens) % HIDDEN].mean(axis=1)
            logits = features @ self.policy
            logprobs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
            _sleep_rest(seconds, started)
        return logprobs.max(axis=-1)

    @accepts_trace_context
    def train(
        self, step: int, tokens: np.ndarray, advantages: np.ndarray, logprobs: np.ndarray, seconds: float
    ) -> float:
        """One policy-gradient update; returns this rank's shard's loss."""
        with iteration_scope(step), managed_span(RLSpanGroup.POLICY_UPDATE, "rl.grpo.policy_training"):
            started = time.perf_counter()
            features = np.eye(HIDDEN)[tokens % HIDDEN].mean(axis=1)
            gradient = features.T @ (advantages[:, None] * np.ones((1, HIDDEN))) / len(advantages)
            self.policy += 0.01 * gradient
            loss = float(-(self._shard(advantages) * self._shard(logprobs)).mean())
            _sleep_rest(seconds, started)
        return loss

    @accepts_trace_context
    def state_dict(self) -> np.ndarray:
        """A copy of the weights, for the driver to stage in a checkpoint (no span: the driver's covers it)."""
        return self.policy.copy()

    def close(self) -> int:
        instrument.shutdown()
        return os.getpid()
