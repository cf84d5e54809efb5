"""How long `goodput critical` takes on 1M cached spans, against a cached `goodput report` of the same file.

Every figure is a whole `goodput` process on the same warm cache (the ingest bench's synthetic trace, converted once
first, with its lineage table), so each includes the same start-up and reading. The report reads its charges back
from the cache (what a second `report` of a run does); `critical` walks every window's path each time (it keeps
nothing). The two run interleaved, `--repeats` times each, the best of each compared; the peak RSS of each (GNU
time's high-water mark, `ingest.Run`) beside it. Bars: `critical` <= 2x the cached report's time, and its peak no
more than the report's plus MARGIN_MB. The path's JSON is checked to partition every window.

Usage: python bench/critical.py [--spans N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import tracegen
from ingest import run_process

GOODPUT = os.path.join(os.path.dirname(sys.executable), "goodput")
BAR = 2.0
MARGIN_MB = 256  # the report's margin: a DuckDB batch of cut spans and the paths, whatever the run's length


def checked(argv: list[str], env: dict[str, str]):
    """One run of `argv`; a failed one stops the bench with its stderr."""
    run = run_process(argv, env=env)
    if run.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({run.returncode}):\n{run.stderr}")
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    files = tracegen.trace_files(args.spans)
    path = str(files.proto_path)
    cache = tempfile.mkdtemp(prefix="goodput-bench-cache-")
    env = dict(os.environ, GOODPUT_CACHE_DIR=cache)
    try:
        filled = checked([GOODPUT, "ingest", path], env)
        print(f"{args.spans:,} spans, {files.iterations:,} iterations; cache filled in {filled.wall_s:.2f} s")
        report_argv = [GOODPUT, "report", "--format", "json", path]
        critical_argv = [GOODPUT, "critical", "--format", "json", path]
        checked(report_argv, env)  # the report's charges into the cache: every timed report reads them back
        reports, criticals = [], []
        for _ in range(args.repeats):
            reports.append(checked(report_argv, env))
            criticals.append(checked(critical_argv, env))
        payload = json.loads(criticals[-1].stdout)
        for window in payload["iterations"]:
            on_path = sum(p["end_ns"] - p["start_ns"] for p in window["path"]) / 1e9
            if abs(on_path + window["waiting_s"] - window["wall_s"]) > 1e-6:
                sys.exit(f"iteration {window['iteration']}: its path and waits do not add up to its window")
        report_s, critical_s = min(r.wall_s for r in reports), min(c.wall_s for c in criticals)
        report_mb = max(r.max_rss_bytes for r in reports) / 1e6
        critical_mb = max(c.max_rss_bytes for c in criticals) / 1e6
        segments = sum(len(w["path"]) for w in payload["iterations"])
        print(f"report --format json (cached)   best {report_s:6.2f} s (first {reports[0].wall_s:.2f} s), "
              f"peak RSS {report_mb:.0f} MB")  # fmt: skip
        print(f"critical --format json          best {critical_s:6.2f} s (first {criticals[0].wall_s:.2f} s), "
              f"peak RSS {critical_mb:.0f} MB: {len(payload['iterations']):,} paths, {segments:,} segments")  # fmt: skip
        ratio = critical_s / report_s
        print(f"time: {ratio:.2f}x the cached report (bar {BAR}x): {'ok' if ratio <= BAR else 'OVER THE BAR'}")
        over = critical_mb - report_mb
        print(f"memory: {over:+.0f} MB over the report's peak (bar +{MARGIN_MB} MB): "
              f"{'ok' if over <= MARGIN_MB else 'OVER THE BAR'}")  # fmt: skip
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
