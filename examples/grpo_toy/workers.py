"""The toy job's Ray actors: rollout workers that "generate" by sleeping, each tracing into its own file.

Each actor calls `instrument.configure()` bare in `__init__`: exporter, path and span groups come from the GOODPUT_*
variables the driver's `configure` left in its environment, handed over through the actor's `runtime_env` (see
`job.actor_runtime_env`), so the actor writes what the driver writes, one file per process. Every traced method is
decorated `@accepts_trace_context` and called through `dispatch_with_trace_context`, so its spans nest under the
driver's rollout span instead of starting traces of their own (`goodput check` would call them orphans otherwise).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

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

    def __init__(self, rank: int, seed: int) -> None:
        instrument.configure()  # everything comes from the GOODPUT_* environment the driver handed over
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
                    _score_inline(tokens, seconds / 4)
                time.sleep(max(0.0, seconds - (time.perf_counter() - started)))
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
class StreamingGenerationWorker:
    """The async loop's rollout worker: one streaming call yields every batch, each as soon as it is generated.

    Batch k waits until the weights are at most `staleness` steps behind (version k-1-staleness); that wait is the
    collector loop's `idle/refit_event_wait`, emitted unbucketed because it overlaps the trainer's own spans.
    """

    def __init__(self, seed: int) -> None:
        instrument.configure()
        self.rng = np.random.default_rng([seed, 99])
        self.weights = self.rng.standard_normal((HIDDEN, HIDDEN))
        self.version = 0
        self._version_changed: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        if self._version_changed is None:  # created on the actor's event loop, not in __init__'s thread
            self._version_changed = asyncio.Condition()
        return self._version_changed

    @accepts_trace_context
    async def load_model(self, seconds: float) -> int:
        with umbrella_span(RLSpanGroup.U_MODEL_INIT, "rl.grpo.load_model"):
            await asyncio.sleep(seconds)
        return os.getpid()

    @accepts_trace_context
    async def stream_rollouts(self, batches: list[dict[str, Any]]):
        """Yield `{"step", "tokens"}` per batch. No span is open across a `yield`: each opens and ends in one step."""
        condition = self._condition()
        for batch in batches:
            step = batch["step"]
            min_version = batch["min_version"]
            if self.version < min_version:
                with efficiency_span("idle/refit_event_wait"):
                    async with condition:
                        await condition.wait_for(lambda min_version=min_version: self.version >= min_version)
            with iteration_scope(step):
                if batch["fail_after_s"] is not None:
                    with efficiency_span("wasted/failed_trajectory"):
                        await asyncio.sleep(batch["fail_after_s"])
                with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                    started = time.perf_counter()
                    tokens = _decode(self.rng, self.weights, TRAJECTORIES_PER_WORKER * N_GENERATION_ACTORS)
                    if batch["plant_nested_reward"]:
                        await asyncio.sleep(batch["seconds"] / 2)
                        _score_inline(tokens, batch["seconds"] / 4)
                    await asyncio.sleep(max(0.0, batch["seconds"] - (time.perf_counter() - started)))
            yield {"step": step, "tokens": tokens}

    @accepts_trace_context
    async def update_weights(self, version: int, seconds: float) -> int:
        await asyncio.sleep(seconds)
        condition = self._condition()
        async with condition:
            self.weights = self.weights + 0.01 * self.rng.standard_normal(self.weights.shape)
            self.version = version
            condition.notify_all()
        return version

    async def close(self) -> int:
        instrument.shutdown()
        return os.getpid()
