"""Rewrite sample_traces/ from the toy GRPO job (examples/grpo_toy): three runs, one directory each.

    python examples/regenerate_sample_traces.py

- sample_traces/grpo_sync/   the sync run, framed OTLP protobuf (`.otlp`), one file per process
- sample_traces/grpo_async/  the async run (streaming rollouts one step ahead), OTLP JSON Lines (`.jsonl`)
- sample_traces/grpo_buggy/  the sync run with `--buggy`: `goodput check` finds exactly its three planted errors

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
SAMPLES = REPO_ROOT / "sample_traces"
STEPS, SEED = 6, 0
RUNS = {
    "grpo_sync": ["--mode", "sync", "--exporter", "otlp-file"],
    "grpo_async": ["--mode", "async", "--exporter", "json-file"],
    "grpo_buggy": ["--mode", "sync", "--exporter", "otlp-file", "--buggy"],
}
MAX_TOTAL_BYTES = 2_000_000


def main() -> None:
    for name, args in RUNS.items():
        out = SAMPLES / name
        shutil.rmtree(out, ignore_errors=True)
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
