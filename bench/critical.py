"""How long `goodput critical` takes on 1M cached spans, against a cached `goodput report` of the same file.

Every figure is a whole `goodput` process on the same warm cache (the ingest bench's synthetic trace, converted once
first, with its lineage table), so each includes the same start-up and reading. The report reads its charges back
from the cache (what a second `report` of a run does); so does `critical` after its first run, which works out every
attempt's dependencies, explains every window, re-times the attempt once per phase that binds a step, and keeps the
answer and each attempt's event graph (`derived.kept_columns`). A `--speedup` asked after that re-times the kept
graph once (a new question: its answer is not kept). They run interleaved, `--repeats` times each, the best of each
compared, with the peak RSS of each (GNU time's high-water mark, `ingest.Run`) beside it.

Bars (SPEC section 14's issue): the cached `critical` (its table) within 2x the cached report's time (the report as
JSON, its full answer); a new `--speedup` within 3x. Also shown, held to no bar: the first `critical` (all the work),
the same under `GOODPUT_MEMORY_LIMIT=300MB` (DuckDB's part held to it; the event graph the re-timing walks is held in
this process, about 1 KB a span at its peak), and `critical --format json`, whose paths are checked to partition
every window.

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
from ingest import Run, checked

GOODPUT = os.path.join(os.path.dirname(sys.executable), "goodput")
BAR = 2.0
SPEEDUP_BAR = 3.0
LIMIT = "300MB"  # the report fits in it at 1M spans (bench/scale.py)


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
        limited = checked(critical_argv + ["--wakeup", "21ms"], dict(env, GOODPUT_MEMORY_LIMIT=LIMIT))
        first = checked(critical_argv, env)  # all the work, kept for the runs below
        phase = json.loads(checked([GOODPUT, "critical", "--format", "json", path], env).stdout)["names"][0]["name"]
        reports, criticals, speedups = [], [], []
        for repeat in range(args.repeats):
            reports.append(checked(report_argv, env))
            criticals.append(checked(critical_argv, env))
            # a new question each time (another percent), so nothing of it is read back
            speedups.append(checked(critical_argv + ["--speedup", f"{phase}={10 + repeat}%"], env))
        as_json = checked([GOODPUT, "critical", "--format", "json", path], env)
        payload = json.loads(as_json.stdout)
        for window in payload["iterations"]:
            on_path = sum(p["end_ns"] - p["start_ns"] for p in window["path"]) / 1e9
            if abs(on_path + window["waiting_s"] - window["wall_s"]) > 1e-6:
                sys.exit(f"iteration {window['iteration']}: its path and waits do not add up to its window")

        def best(runs: list[Run]) -> tuple[float, float]:
            return min(r.wall_s for r in runs), max(r.max_rss_bytes for r in runs) / 1e6

        (report_s, report_mb), (critical_s, critical_mb) = best(reports), best(criticals)
        speedup_s, speedup_mb = best(speedups)
        segments = sum(len(w["path"]) for w in payload["iterations"])
        print(f"report --format json (cached)        best {report_s:6.2f} s, peak RSS {report_mb:.0f} MB")
        print(f"critical (cached)                    best {critical_s:6.2f} s, peak RSS {critical_mb:.0f} MB")
        print(f"critical --speedup {phase}=N% best {speedup_s:6.2f} s, peak RSS {speedup_mb:.0f} MB")
        print(f"critical, first run                       {first.wall_s:6.2f} s, peak RSS "
              f"{first.max_rss_bytes / 1e6:.0f} MB")  # fmt: skip
        print(f"critical, first run, GOODPUT_MEMORY_LIMIT={LIMIT} {limited.wall_s:6.2f} s, peak RSS "
              f"{limited.max_rss_bytes / 1e6:.0f} MB")  # fmt: skip
        print(f"critical --format json (cached)           {as_json.wall_s:6.2f} s, peak RSS "
              f"{as_json.max_rss_bytes / 1e6:.0f} MB: {len(payload['iterations']):,} paths, {segments:,} segments, "
              f"{len(as_json.stdout) / 1e6:.0f} MB")  # fmt: skip
        ratio, sped = critical_s / report_s, speedup_s / report_s
        print(f"critical: {ratio:.2f}x the cached report (bar {BAR}x): {'ok' if ratio <= BAR else 'OVER THE BAR'}; "
              f"--speedup {sped:.2f}x (bar {SPEEDUP_BAR}x): {'ok' if sped <= SPEEDUP_BAR else 'OVER THE BAR'}; "
              f"first run {first.wall_s / report_s:.2f}x")  # fmt: skip
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
