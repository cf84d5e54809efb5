"""How big the HTML report of the 1M-span bench trace is (bar: 15 MB) and how long writing it takes, against a plain
`report --format json` of the same cached spans, in the same run.

Whole `goodput` processes on one warm cache (the ingest bench's synthetic trace: 1,000,000 spans, 10,823 iterations),
each run `--repeats` times, interleaved, best kept. `report --format html` does more than draw: the page shows the
total's breakdown by span name and the `check` summary, so it computes both; those two are timed alone beside it
(`report --by name --format json`, `check --format json`), and the page itself is drawn from the by-name report
alone (`report_html`, in a process of its own on the same cache), so the drawing's own share shows. The page's size
is split into plotly's inlined JavaScript and the rest (the report's data and tables).
Usage: python bench/html.py [--spans N] [--repeats R]
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
SIZE_BAR_BYTES = 15e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    files = tracegen.trace_files(args.spans)
    path = str(files.proto_path)
    work = Path(tempfile.mkdtemp(prefix="goodput-bench-html-"))
    env = dict(os.environ, GOODPUT_CACHE_DIR=str(work / "cache"))
    page, plain, by_name = work / "report.html", work / "report.json", work / "by-name.json"
    commands = {
        "report --format json": ["report", "--format", "json", "-o", str(plain), path],
        "report --format html": ["report", "--format", "html", "-o", str(page), path],
        "  report --by name --format json": ["report", "--by", "name", "--format", "json", "-o", str(by_name), path],
        "  check --format json": ["check", "--format", "json", "-o", str(work / "check.json"), path],
    }
    try:
        first = run_process([GOODPUT, "ingest", path], env=env)
        if first.returncode != 0:
            sys.exit(first.stderr)
        print(f"{files.spans:,} spans, {files.iterations:,} iterations; cache filled in {first.wall_s:.2f} s")
        walls: dict[str, list[float]] = {label: [] for label in commands}
        for _ in range(args.repeats):  # interleaved, so a busy moment of the machine hits every command alike
            for label, argv in commands.items():
                run = run_process([GOODPUT, *argv], env=env)
                if run.returncode not in (0, 1):  # check exits 1 when it finds errors: a result, not a failure
                    sys.exit(f"goodput {' '.join(argv)} failed ({run.returncode}):\n{run.stderr}")
                walls[label].append(run.wall_s)
        baseline = min(walls["report --format json"])
        for label, times in walls.items():
            best = min(times)
            print(f"{label:<34} best {best:6.2f} s ({best / baseline:.2f}x the JSON), first {times[0]:6.2f} s")
        drawn_s, plotly_js = draw_in_process(path, env)
        print(f"  the page drawn from the by-name report (report_html alone): {drawn_s:.2f} s")
        size = page.stat().st_size
        verdict = "within" if size < SIZE_BAR_BYTES else "OVER"
        print(
            f"HTML page {size / 1e6:.2f} MB ({verdict} the {SIZE_BAR_BYTES / 1e6:.0f} MB bar): plotly.js "
            f"{plotly_js / 1e6:.2f} MB, the report {(size - plotly_js) / 1e6:.2f} MB; "
            f"the JSON report {plain.stat().st_size / 1e6:.2f} MB"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


# In a child process without this folder on its path: here `rollup.py` (the rollup bench) would shadow the package,
# and this file the standard library's `html`.
_DRAW = """
import sys, time
from cli.views.html import report_html
from rollup import ReportOptions, build_report, open_store
with open_store([sys.argv[1]]) as store:
    report = build_report(store, ReportOptions(by="name"))
best = float("inf")
for _ in range(3):
    started = time.perf_counter()
    report_html(report, None)
    best = min(best, time.perf_counter() - started)
from plotly.offline import get_plotlyjs
print(best, len(get_plotlyjs().encode()))
"""


def draw_in_process(trace: str, env: dict[str, str]) -> tuple[float, int]:
    """Seconds `report_html` takes on the by-name report of `trace` (best of three; the report built first, from
    the cache `env` names), in a fresh process, and the bytes of plotly's JavaScript that every page inlines."""
    run = run_process([sys.executable, "-c", _DRAW, trace], env=dict(env, PYTHONSAFEPATH="1"))
    if run.returncode != 0:
        sys.exit(f"drawing the page failed:\n{run.stderr}")
    seconds, plotly_js = run.stdout.split()
    return float(seconds), int(plotly_js)


if __name__ == "__main__":
    main()
