"""A real crash and a restart: the toy job killed with SIGKILL mid-iteration, then relaunched into the same folder.

    python -m examples.grpo_toy.restart --out run/restart/        # 6 steps, killed in step 4, resumed from 3
    goodput report run/restart/                                   # rework (step 3's first try, step 4) and downtime

The first attempt runs in a session of its own; once it has logged step `kill_in - 1` and is `KILL_DELAY_S` into
step `kill_in`, its whole process group (the driver and the Ray cluster it started) gets SIGKILL: nothing runs at
exit, as when a node dies. The relaunch is a fresh process with `--resume-from`, so it is a second attempt with a
run id of its own, on a cluster it starts. From `crash_and_resume(on=ADDRESS)` both attempts join the cluster at
that address instead (the tests' own): the kill then takes the first driver alone, and Ray ends the actors it owned,
as when a driver's node dies and the cluster lives on. Both run with `OTEL_BSP_SCHEDULE_DELAY=100`, the
OpenTelemetry SDK's own variable: the driver's batches reach the file every 0.1 s instead of every 5 s, which a job
that wants its crashes measured sets.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# Into the killed step: past its rollout (0.2-0.3 s, each generation call writing its spans as it returns) and its
# reward (0.05 s), inside its log-prob (0.1 s) of a step of 0.6 s at least: mid-iteration, with spans of the step
# on disk whatever the machine's load (killed inside the rollout, a busy machine's Ray may end the actors first).
KILL_DELAY_S = 0.45
# Between the kill and the relaunch, as a scheduler's restart takes: the dead driver's actors finish the call they
# were in (a generation, a few tenths of a second) before Ray ends them, so the two attempts do not overlap.
RELAUNCH_AFTER_S = 1.0


def job_environment() -> dict[str, str]:
    """This environment without any GOODPUT_* choice (each attempt makes its own run id), exporting often."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GOODPUT_")}
    env.pop("RAY_ADDRESS", None)  # each attempt starts the cluster it is killed with, unless given one
    env["OTEL_BSP_SCHEDULE_DELAY"] = "100"
    env.setdefault("RAY_AUTH_MODE", "disabled")  # a local toy cluster: no token to hand around
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def crash_and_resume(
    out: Path,
    *,
    steps: int = 6,
    seed: int = 0,
    kill_in: int = 4,
    resume_from: int = 3,
    args: Sequence[str] = (),
    on: str | None = None,
) -> Crash:
    """Run the job into `out/`, SIGKILL it in step `kill_in`, relaunch it with `--resume-from resume_from`; returns
    when the relaunch has finished, with when the first attempt was launched and when it was killed. Each attempt
    starts a cluster of its own, or both join the one at the address `on` (as jobs submitted to a cluster that
    outlives them)."""
    command = [
        sys.executable, "-u", "-m", "examples.grpo_toy.job", "--steps", str(steps), "--seed", str(seed),
        "--out", f"{out}/", *args,
    ]  # fmt: skip
    env = job_environment()
    if on is not None:
        env["RAY_ADDRESS"] = on
    launched_at = time.time_ns()
    first = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert first.stdout is not None
    logged = []
    for line in first.stdout:
        logged.append(line)
        if line.startswith(f"step {kill_in - 1}:"):
            break
    else:
        first.wait()
        raise RuntimeError(f"the job ended before step {kill_in}:\n{''.join(logged)}")
    time.sleep(KILL_DELAY_S)
    killed_at = time.time_ns()
    os.killpg(first.pid, signal.SIGKILL)  # the driver and every process of its session: its Ray cluster, if any
    first.wait()
    first.stdout.close()
    time.sleep(RELAUNCH_AFTER_S)
    subprocess.run([*command, "--resume-from", str(resume_from)], cwd=REPO_ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return Crash(launched_at, killed_at)


@dataclass(frozen=True)
class Crash:
    """When the first attempt's process was launched and when it was killed, in nanoseconds since the epoch."""

    launched_at: int
    killed_at: int


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.grpo_toy.restart", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder both attempts write into")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--kill-in", type=int, default=4, help="the step the first attempt is killed in")
    parser.add_argument("--resume-from", type=int, default=3, help="the step the relaunch starts at")
    options, job_args = parser.parse_known_args(argv)
    crash_and_resume(
        options.out, steps=options.steps, kill_in=options.kill_in, resume_from=options.resume_from, args=job_args
    )
    print(f"next: goodput report {options.out}")


if __name__ == "__main__":
    main()
