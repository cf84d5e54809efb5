"""What DuckDB's second thread buys a load of at most `ONE_THREAD_SPANS` spans: a cached `report --format json` run
with one DuckDB thread (what goodput does for such a load) against the same run with DuckDB's default (a thread per
core), on the shipped async sample and on bench/tracegen's synthetic job.

The command runs `--repeats` times in one process (the CLI imported once, as `watch`'s refreshes and the test suite run
it), after one run that fills the cache; the median of its wall and CPU seconds (`time.process_time`, every thread of
the process) is kept. The baseline is the same command with goodput's threshold set to 0 in that process
(`rollup.store.span_store.ONE_THREAD_SPANS`), so every load goes to DuckDB's own choice, in the same bench run; the JSON
of both must be the same. Importing Python and the CLI (about a second here) is left out of both.

Usage: python bench/threads.py [--spans 150000] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tracegen

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "grpo_async"
RUN = """
import hashlib, json, statistics, sys, time
import rollup.store.span_store
from typer.testing import CliRunner
from cli import app
threads, repeats, *command = sys.argv[1:]
if threads == "default":
    rollup.store.span_store.ONE_THREAD_SPANS = 0
runner = CliRunner()
assert runner.invoke(app, command).exit_code == 0  # fills the cache
walls, cpus, outputs = [], [], set()
for _ in range(int(repeats)):
    wall, cpu = time.perf_counter(), time.process_time()
    result = runner.invoke(app, command)
    walls.append(time.perf_counter() - wall)
    cpus.append(time.process_time() - cpu)
    assert result.exit_code == 0, result.output
    outputs.add(hashlib.sha256(result.stdout.encode()).hexdigest())
print(json.dumps([statistics.median(walls), statistics.median(cpus), sorted(outputs)]))
"""


def measure(trace: Path, repeats: int, env: dict[str, str]) -> dict[str, tuple[float, float]]:
    command = ["report", str(trace), "--format", "json"]
    figures, outputs = {}, set()
    for threads in ("one", "default"):
        done = subprocess.run([sys.executable, "-c", RUN, threads, str(repeats), *command], env=env,
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            sys.exit(f"{' '.join(command)} ({threads}) failed:\n{done.stderr}")
        wall, cpu, digests = json.loads(done.stdout)
        figures[threads] = (wall, cpu)
        outputs.update(digests)
    if len(outputs) != 1:
        sys.exit(f"{trace}: the JSON differs between one thread and the default")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=150_000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    generated = tracegen.trace_files(args.spans).proto_path
    cache = Path(tempfile.mkdtemp(prefix="goodput-bench-cache-"))
    env = {**os.environ, "GOODPUT_CACHE_DIR": str(cache)}
    try:
        print(f"cached `report --format json` in one process, median of {args.repeats}, {os.cpu_count()} cores")
        for label, trace in (("sample grpo_async", SAMPLE), (f"tracegen {args.spans:,} spans", generated)):
            figures = measure(trace, args.repeats, env)
            (one_wall, one_cpu), (base_wall, base_cpu) = figures["one"], figures["default"]
            print(f"{label}:")
            print(f"  DuckDB default threads (baseline)  wall {base_wall:.3f} s  CPU {base_cpu:.3f} s")
            print(
                f"  one DuckDB thread                  wall {one_wall:.3f} s  CPU {one_cpu:.3f} s"
                f"  = {one_wall / base_wall:.2f}x wall, {one_cpu / base_cpu:.2f}x CPU"
            )
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
