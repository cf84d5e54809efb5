"""How long `report` and `check` take on 1M cached spans, against a plain GROUP BY over the same cached table.

All three are whole `goodput` processes on the same warm cache (the ingest bench's synthetic trace, converted once
first), so each figure includes the same start-up and Parquet scan. `ingest` also builds the lineage table (parent
links across files) for that set of files, as it does for users; without it the first report would walk the traces
itself (about 1.5 s more at 1M spans). The first run of each command is printed apart from the best. The bar is
report, check <= 3x the GROUP BY
(`goodput query FILE "SELECT iteration, bucket, sum(duration_ns) FROM spans GROUP BY ALL"`); and, against the plain
`report --format json` of the same run: `report --by name` <= 2x, `diff` of this trace and a second one (another
seed, as many spans, its cache filled too) <= 2.5x.
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
CANDIDATE_DIR = tracegen.OUT_DIR / "second-seed"
GROUP_BY = "SELECT iteration, bucket, sum(duration_ns) FROM spans GROUP BY ALL"


def timed_runs(argv: list[str], env: dict[str, str], repeats: int) -> tuple[list[float], int]:
    """(wall seconds of each of `repeats` runs, peak RSS bytes); a failed run stops the bench with its stderr."""
    walls, peak = [], 0
    for _ in range(repeats):
        run = run_process(argv, env=env)
        if run.returncode not in (0, 1):  # check exits 1 when it finds errors, which is a result, not a failure
            sys.exit(f"{' '.join(argv)} failed ({run.returncode}):\n{run.stderr}")
        walls.append(run.wall_s)
        peak = max(peak, run.max_rss_bytes)
    return walls, peak


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
        print(
            f"{args.spans:,} spans, {os.path.getsize(path) / 1e6:.0f} MB framed protobuf; "
            f"cache filled in {first.wall_s:.2f} s"
        )
        other = str(tracegen.trace_files(args.spans, seed=tracegen.DEFAULT_SEED + 1, out_dir=CANDIDATE_DIR).proto_path)
        if run_process([GOODPUT, "ingest", other], env=env).returncode != 0:
            sys.exit(f"ingest {other} failed")
        walls, _ = timed_runs([GOODPUT, "query", "-f", "csv", path, GROUP_BY], env, args.repeats)
        baseline = min(walls)
        print(f"GROUP BY iteration, bucket (baseline)          {baseline:6.2f} s")
        best_of = {}
        for name, argv in (
            ("report", [GOODPUT, "report", "--format", "json", path]),
            ("check", [GOODPUT, "check", "--format", "json", path]),
        ):
            walls, peak = timed_runs(argv, env, args.repeats)
            first, best = walls[0], min(walls)
            best_of[name] = best
            print(
                f"{name:<6} first {first:6.2f} s ({first / baseline:.2f}x), best {best:6.2f} s ({best / baseline:.2f}x)"
                f" of the baseline (bar 3x), peak RSS {peak / 2**30:.2f} GB"
            )
        report_s = best_of["report"]
        for name, argv, bar in (
            ("report --by name", [GOODPUT, "report", "--by", "name", "--format", "json", path], 2.0),
            ("diff", [GOODPUT, "diff", "--format", "json", path, other], 2.5),
        ):
            walls, peak = timed_runs(argv, env, args.repeats)
            best = min(walls)
            verdict = "PASS" if best / report_s <= bar else "MISS"
            print(
                f"{name:<19} best {best:6.2f} s = {best / report_s:.2f}x the plain report ({report_s:.2f} s, same run; "
                f"bar {bar}x) {verdict}, peak RSS {peak / 2**30:.2f} GB"
            )
        # Not held to a bar; shown because they once were slow: a row per (iteration, process), and the default table.
        for name, argv in (
            ("report --by process", [GOODPUT, "report", "--by", "process", "--format", "json", path]),
            ("report as a table", [GOODPUT, "report", path]),
        ):
            walls, peak = timed_runs(argv, env, args.repeats)
            print(f"{name:<19} best {min(walls):6.2f} s ({min(walls) / baseline:.2f}x), peak RSS {peak / 2**30:.2f} GB")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
