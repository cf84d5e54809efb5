"""How long `goodput timeline` takes on 1M cached spans: ten iterations against a plain `report`, and the whole run.

Every figure is a whole `goodput` process on the same warm cache (the ingest bench's synthetic trace, converted once
first, with its lineage table), so each includes the same start-up and Parquet scan. `report` and the ten-iteration
timeline run interleaved, `--repeats` times each; the best of each is compared. The bar: the timeline of ten
iterations <= 1.5x the report. The whole run's timeline (every span, window and flow) is timed too, with its
file size and peak RSS, held to no bar.
Usage: python bench/timeline.py [--spans N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import tracegen
from ingest import checked

GOODPUT = str(Path(sys.executable).with_name("goodput"))
BAR = 1.5
WROTE = re.compile(r"wrote (\d+) spans? of (\d+) process(?:es)?, (\d+) iteration windows?, (\d+) flows?")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    files = tracegen.trace_files(args.spans)
    path = str(files.proto_path)
    first = files.iterations // 2
    ten = f"{first}:{first + 9}"
    cache = tempfile.mkdtemp(prefix="goodput-bench-cache-")
    out_dir = Path(tempfile.mkdtemp(prefix="goodput-bench-timeline-"))
    env = dict(os.environ, GOODPUT_CACHE_DIR=cache)
    try:
        filled = checked([GOODPUT, "ingest", path], env)
        print(f"{args.spans:,} spans, {files.iterations:,} iterations; cache filled in {filled.wall_s:.2f} s")
        report_argv = [GOODPUT, "report", "--format", "json", path]
        ten_out = out_dir / "ten.json"
        ten_argv = [GOODPUT, "timeline", path, "--iterations", ten, "--output", str(ten_out)]
        reports, timelines, stderr = [], [], ""
        for _ in range(args.repeats):
            reports.append(checked(report_argv, env).wall_s)
            run = checked(ten_argv, env)
            timelines.append(run.wall_s)
            stderr = run.stderr
        wrote = WROTE.search(stderr)
        trace = json.loads(ten_out.read_text())
        slices = sum(1 for event in trace["traceEvents"] if event["ph"] == "X")
        if wrote is None or int(wrote.group(3)) != 10:
            sys.exit(f"the timeline of iterations {ten} did not write ten windows:\n{stderr}")
        report_s, timeline_s = min(reports), min(timelines)
        print(f"report --format json                  best {report_s:6.2f} s (first {reports[0]:.2f} s)")
        print(
            f"timeline --iterations {ten:<15} best {timeline_s:6.2f} s (first {timelines[0]:.2f} s): "
            f"{wrote.group(1)} spans, {slices} complete events, {ten_out.stat().st_size / 1e6:.2f} MB"
        )
        ratio = timeline_s / report_s
        print(f"ratio {ratio:.2f}x the report (bar {BAR}x): {'ok' if ratio <= BAR else 'OVER THE BAR'}")

        whole_out = out_dir / "whole.json"
        whole = checked([GOODPUT, "timeline", path, "--output", str(whole_out)], env)
        wrote = WROTE.search(whole.stderr)
        print(
            f"timeline of the whole run: {whole.wall_s:.2f} s, {whole_out.stat().st_size / 1e6:.0f} MB, "
            f"peak RSS {whole.max_rss_bytes / 2**30:.2f} GB"
            + (f" ({wrote.group(1)} spans, {wrote.group(3)} windows, {wrote.group(4)} flows)" if wrote else "")
        )
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
