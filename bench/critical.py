"""How long `goodput critical` takes on 1M cached spans, against a cached `goodput report` of the same file.

Every figure is a whole `goodput` process on the same warm cache (the ingest bench's synthetic trace, converted once
first, with its lineage table), so each includes the same start-up and reading. The report reads its charges back
from the cache (what a second `report` of a run does); so does `critical` after its first run, which walks every
window's path and keeps the segments (`derived.kept_columns`). The two run interleaved, `--repeats` times each, the
best of each compared, and the peak RSS of each (GNU time's high-water mark, `ingest.Run`) beside it. Bars: the
cached `critical` (its table) <= 2x the cached report's time (the report as JSON, its full answer), and its peak no
more than the report's plus MARGIN_MB. Also shown, held to no bar: the first `critical` (the walk itself) and
`critical --format json` (every segment of every path: a hundred megabytes and more), whose paths are checked to
partition every window.

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
from ingest import checked

GOODPUT = os.path.join(os.path.dirname(sys.executable), "goodput")
BAR = 2.0
MARGIN_MB = 256  # the report's margin: a DuckDB batch of cut spans and the paths, whatever the run's length


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
        critical_argv = [GOODPUT, "critical", path]
        checked(report_argv, env)  # the report's charges into the cache: every timed report reads them back
        first = checked(critical_argv, env)  # walks every path, and keeps the segments
        reports, criticals = [], []
        for _ in range(args.repeats):
            reports.append(checked(report_argv, env))
            criticals.append(checked(critical_argv, env))
        as_json = checked([GOODPUT, "critical", "--format", "json", path], env)
        payload = json.loads(as_json.stdout)
        for window in payload["iterations"]:
            on_path = sum(p["end_ns"] - p["start_ns"] for p in window["path"]) / 1e9
            if abs(on_path + window["waiting_s"] - window["wall_s"]) > 1e-6:
                sys.exit(f"iteration {window['iteration']}: its path and waits do not add up to its window")
        report_s, critical_s = min(r.wall_s for r in reports), min(c.wall_s for c in criticals)
        report_mb = max(r.max_rss_bytes for r in reports) / 1e6
        critical_mb = max(c.max_rss_bytes for c in criticals) / 1e6
        segments = sum(len(w["path"]) for w in payload["iterations"])
        print(f"report --format json (cached)     best {report_s:6.2f} s, peak RSS {report_mb:.0f} MB")
        print(f"critical (cached)                 best {critical_s:6.2f} s, peak RSS {critical_mb:.0f} MB")
        first_mb, json_mb = first.max_rss_bytes / 1e6, as_json.max_rss_bytes / 1e6
        print(f"critical, first run (the walk)         {first.wall_s:6.2f} s, peak RSS {first_mb:.0f} MB")
        print(f"critical --format json (cached)        {as_json.wall_s:6.2f} s, peak RSS {json_mb:.0f} MB: "
              f"{len(payload['iterations']):,} paths, {segments:,} segments, "
              f"{len(as_json.stdout) / 1e6:.0f} MB")  # fmt: skip
        ratio = critical_s / report_s
        print(f"time: {ratio:.2f}x the cached report (bar {BAR}x): {'ok' if ratio <= BAR else 'OVER THE BAR'}; "
              f"first run {first.wall_s / report_s:.2f}x, JSON {as_json.wall_s / report_s:.2f}x")  # fmt: skip
        over = critical_mb - report_mb
        print(f"memory: {over:+.0f} MB over the report's peak (bar +{MARGIN_MB} MB): "
              f"{'ok' if over <= MARGIN_MB else 'OVER THE BAR'}")  # fmt: skip
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
