"""The smallest instrumented training loop: three steps of generation, reward and a policy update, traced to files.

Run: python examples/minimal_job.py [TRACE_DIR]   (default ./goodput_traces; one file per process)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import instrument
from instrument import RLSpanGroup, efficiency_span, iteration_scope, managed_span, umbrella_span, umbrella_trace_fn


@umbrella_trace_fn(RLSpanGroup.U_JOB, "rl.grpo.job")
def train(steps: int) -> None:
    for step in range(1, steps + 1):
        with iteration_scope(step), umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step"):
            with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                time.sleep(0.03)
            with managed_span(RLSpanGroup.REWARD, "rl.grpo.reward"):
                time.sleep(0.01)
            with efficiency_span("idle/refit_bubble"):
                time.sleep(0.005)
            with managed_span(RLSpanGroup.POLICY_UPDATE, "rl.grpo.policy_training"):
                time.sleep(0.02)


def main() -> None:
    trace_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "goodput_traces")
    instrument.configure(service_name="minimal-job", span_groups="per_step", exporter="otlp-file", path=trace_dir)
    train(steps=3)
    instrument.shutdown()
    for path in sorted(trace_dir.glob("*.otlp")):
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
