"""Rewrite sample_traces/ from the toy GRPO job (examples/grpo_toy): four runs, one directory each.

    python examples/regenerate_sample_traces.py              # all of them
    python examples/regenerate_sample_traces.py grpo_restart # only the ones named

- sample_traces/grpo_sync/   the sync run, framed OTLP protobuf (`.otlp`), one file per process; its generation and
  training fleets on four GPUs, one per actor
- sample_traces/grpo_async/  the async run (streaming rollouts one step ahead), OTLP JSON Lines (`.jsonl`), four GPUs
- sample_traces/grpo_buggy/  the sync run with `--buggy`: `goodput check` finds exactly its three planted errors; run
  `--colocated`, generation and training taking turns on two GPUs
- sample_traces/grpo_restart/ the sync run killed with SIGKILL in step 4 and relaunched from step 3 into the same
  folder (`examples.grpo_toy.restart`): two attempts, step 3's first try and the torn step 4 are rework, the gap is
  downtime, each attempt's start-up (from `process.creation.time`) outside; four GPUs

The colocated sample is the buggy one: its findings are what it is read for, and colocation changes none of them,
while grpo_sync and grpo_async stay the like-for-like pair the docs compare (both with fleets apart) and grpo_restart
keeps two pools on its HTML page. grpo_buggy runs grpo_sync's seeded schedule, so `goodput report --by pool` of the
two shows the same work on four GPUs in two pools and on two GPUs in one.

Each run is a process of its own that starts and stops its own Ray cluster, one after the other, as a user would
run the job; a directory is emptied before its run, so stale files of an earlier run (other pids) never mix in.
File names and resources carry the host name and pids of the machine that ran them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # run as a script from anywhere: the examples package must import

from examples.grpo_toy.restart import crash_and_resume  # noqa: E402 - needs the path above

SAMPLES = REPO_ROOT / "sample_traces"
STEPS, SEED = 6, 0
RUNS = {
    "grpo_sync": ["--mode", "sync", "--exporter", "otlp-file"],
    "grpo_async": ["--mode", "async", "--exporter", "json-file"],
    "grpo_buggy": ["--mode", "sync", "--exporter", "otlp-file", "--buggy", "--colocated"],
    "grpo_restart": ["--mode", "sync", "--exporter", "otlp-file"],  # killed and resumed: see crash_and_resume
}
MAX_TOTAL_BYTES = 2_000_000


def main() -> None:
    names = sys.argv[1:] or list(RUNS)
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        sys.exit(f"no sample run named {', '.join(unknown)}; the runs are {', '.join(RUNS)}")
    for name in names:
        args = RUNS[name]
        out = SAMPLES / name
        shutil.rmtree(out, ignore_errors=True)
        if name == "grpo_restart":
            crash_and_resume(out, steps=STEPS, seed=SEED, kill_in=4, resume_from=3, args=args)
            continue
        command = [sys.executable, "-m", "examples.grpo_toy.job", *args, "--steps", str(STEPS), "--seed", str(SEED)]
        subprocess.run([*command, "--out", f"{out}/"], cwd=REPO_ROOT, check=True)
    files = sorted(path for path in SAMPLES.rglob("*") if path.is_file())
    total = sum(path.stat().st_size for path in files)
    for path in files:
        print(f"{path.relative_to(REPO_ROOT)}  {path.stat().st_size} bytes")
    print(f"total {total} bytes")
    if total > MAX_TOTAL_BYTES:
        sys.exit(f"sample_traces/ is {total} bytes, over the {MAX_TOTAL_BYTES} the repository keeps")


if __name__ == "__main__":
    main()
