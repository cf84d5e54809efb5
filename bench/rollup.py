"""How long `report` and `check` take on 1M cached spans, against a plain GROUP BY over the same cached table.

All three are whole `goodput` processes on the same warm cache (the ingest bench's synthetic trace, converted once
first), so each figure includes the same start-up and Parquet scan; the bar is report, check <= 3x the GROUP BY
(`goodput query FILE "SELECT iteration, bucket, sum(duration_ns) FROM spans GROUP BY ALL"`).
Usage: python bench/rollup.py [--spans N] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import tracegen
from ingest import run_process

GOODPUT = str(Path(sys.executable).with_name("goodput"))
GROUP_BY = "SELECT iteration, bucket, sum(duration_ns) FROM spans GROUP BY ALL"


def best_of(argv: list[str], env: dict[str, str], repeats: int) -> tuple[float, int]:
    """(best wall seconds, peak RSS bytes) of `repeats` runs; a failed run stops the bench with its stderr."""
    best, peak = float("inf"), 0
    for _ in range(repeats):
        run = run_process(argv, env=env)
        if run.returncode not in (0, 1):  # check exits 1 when it finds errors, which is a result, not a failure
            sys.exit(f"{' '.join(argv)} failed ({run.returncode}):\n{run.stderr}")
        best, peak = min(best, run.wall_s), max(peak, run.max_rss_bytes)
    return best, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    path = str(tracegen.trace_files(args.spans).proto_path)
    cache = tempfile.mkdtemp(prefix="goodput-bench-cache-")
    env = dict(os.environ, GOODPUT_CACHE_DIR=cache)
    try:
        first = run_process([GOODPUT, "ingest", path], env=env)
        if first.returncode != 0:
            sys.exit(first.stderr)
        print(f"{args.spans:,} spans, {os.path.getsize(path) / 1e6:.0f} MB framed protobuf; cache filled in {first.wall_s:.2f} s")
        baseline, _ = best_of([GOODPUT, "query", "-f", "csv", path, GROUP_BY], env, args.repeats)
        print(f"GROUP BY iteration, bucket (baseline)  {baseline:6.2f} s")
        for name, argv in (
            ("report", [GOODPUT, "report", "--format", "json", path]),
            ("check", [GOODPUT, "check", "--format", "json", path]),
        ):
            wall, peak = best_of(argv, env, args.repeats)
            print(f"{name:<38} {wall:6.2f} s   {wall / baseline:.2f}x baseline (bar 3x), peak RSS {peak / 2**30:.2f} GB")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
