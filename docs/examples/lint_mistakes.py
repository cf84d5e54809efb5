# ruff: noqa: SIM117, F841 - the mistakes are the point of this file
"""One of each mistake `goodput lint` finds (docs/lint.md shows what it says of this file). Never run."""

import ray

from instrument import (
    RLSpanGroup,
    accepts_trace_context,
    dispatch_with_trace_context,
    managed_span,
    start_efficiency_span,
    umbrella_span,
)


@ray.remote
class Worker:
    @accepts_trace_context
    def generate(self, batch: list[int]) -> list[int]:
        return batch

    def refit(self, weights: list[float]) -> None:
        pass


def step(worker: Worker, queue: list[int]) -> None:
    with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
        with managed_span(RLSpanGroup.REWARD, "rl.grpo.reward"):
            pass
    with umbrella_span(RLSpanGroup.REWARD, "rl.grpo.rewards"):
        pass
    with managed_span(RLSpanGroup.U_ROLLOUT, "rl.grpo.rollout"):
        pass
    ray.get(worker.generate.remote(queue))
    ray.get(dispatch_with_trace_context(worker.refit, [0.1]))
    wait = start_efficiency_span("idle/buffer_starvation")
    queue.pop()
    with managed_span("genration", "rl.grpo.generation"):
        pass
