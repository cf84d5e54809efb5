"""A crash loses at most the step in progress: a step span, and every span ended before it, is in the process's file
when the step span ends, with the SDK's default batching (`OTEL_BSP_*` unset) and a real SIGKILL mid-step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import invoke

JOB = textwrap.dedent(
    """
    import sys, time
    import instrument
    from instrument import RLSpanGroup, iteration_scope, managed_span, umbrella_span

    instrument.configure(service_name="crashing-driver", span_groups="per_step", exporter=sys.argv[2],
                         path=sys.argv[1])
    with instrument.umbrella_span(RLSpanGroup.U_JOB, "rl.grpo.job"):
        for step in range(1, 10):
            with iteration_scope(step), umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step"):
                with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                    time.sleep(0.02)
                with managed_span(RLSpanGroup.POLICY_UPDATE, "rl.grpo.policy_training"):
                    time.sleep(0.02)
                if step == 5:
                    print("in step 5", flush=True)
                    time.sleep(60)  # killed here
    """
)


@pytest.mark.parametrize("exporter", ["otlp-file", "json-file"])
def test_a_sigkill_in_step_5_keeps_steps_1_to_4(tmp_path, exporter):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_BSP_", "GOODPUT_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"), env.get("PYTHONPATH", "")])
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, str(tmp_path / "run"), exporter], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert job.stdout is not None
        assert job.stdout.readline().strip() == "in step 5"
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=30)
    finally:
        job.kill()
        if job.stdout is not None:
            job.stdout.close()
    result = invoke(["report", str(tmp_path / "run"), "--format", "json", "--no-cache"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [row["iteration"] for row in report["iterations"]] == [1, 2, 3, 4]
    for row in report["iterations"]:  # every leaf of a finished step is there too
        assert row["productive_s"] >= 0.04 - 0.005
