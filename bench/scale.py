"""How goodput's time and memory grow with the trace: 1M, 4M and 16M spans, then a 50M-span run that must complete.

For each size, on `tracegen`'s synthetic job (both formats, written to bench/out/ as they are generated, never held in
memory), whole `goodput` processes, each measured as `ingest.run_process` measures (wall time; peak memory the larger
of the kernel's high-water mark of any one process of the tree and the tree's summed PSS sampled every 0.1 s):
  1. `report --no-cache --format json` on the framed protobuf file;
  2. the same on the JSON Lines file;
  3. `report --format json` on the protobuf file with an empty cache (converts it and fills the cache);
  4. the same again: the cached re-run;
  5. `check --format json` on the same cache.
Every command runs under one GOODPUT_MEMORY_LIMIT (`--memory-limit`, default 500MB: less than an uncached report of
1M spans holds without one, ~0.9 GB), so the figures show memory held by the setting, not by the trace. The
reports of 1-4 must be the same JSON. With `--repeats R` each figure is the best time of R runs (the figures taken in
turn, so a busy moment of a shared machine spoils one run, not one figure) and the highest memory.
Then, per figure, the time ratios 4M/1M and 16M/4M (bar 4.4x each: linear, with 10% to spare) and the peak-memory
ratio 16M/1M (bar 1.3x).

Then what the issue's first rule asks in its own terms, "peak RSS under the limit plus a fixed margin, whatever the
trace size": the same five commands on a trace of BASE_SPANS spans give each command's fixed margin (Python, its
imports, DuckDB's least); per figure the largest size's peak is split into that margin and the rest, which must not
exceed the limit. The 1.3x ratio above compares the largest size's peak with the smallest size's; where the smallest
needs less than the limit (a cached 1M report uses a tenth of 500MB), that ratio measures how much of the setting the
largest size puts to use, and this line whether it stays inside it.

`--huge N` (50,000,000 for the issue's figure) then generates N spans as framed protobuf alone (about 250 bytes a
span; the free disk is checked first), runs `report --no-cache --format json` on it once under the same limit, quotes
its time and memory, and deletes the file (`--keep` keeps it).

Usage: python bench/scale.py [--sizes 1000000,4000000,16000000] [--memory-limit 500MB] [--repeats R] [--huge 50000000]
       [--keep]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tracegen
from ingest import Run, run_process, warm_page_cache

GOODPUT = str(Path(sys.executable).with_name("goodput"))
TIME_RATIO_BAR = 4.4
MEMORY_RATIO_BAR = 1.3
HUGE_BYTES_PER_SPAN = 260  # framed protobuf of tracegen's job (251 MB per 1M spans), with a margin
HUGE_WORK_BYTES_PER_SPAN = 150  # beside it: the converted parts, the lineage and DuckDB's spill, generously
BASE_SPANS = 10_000  # the trace whose peaks are the commands' fixed margins (what no trace size adds to)


@dataclass(frozen=True)
class Figure:
    """One measured command: its label and its argv after `goodput` ({proto}, {jsonl}: the trace files)."""

    key: str
    label: str
    words: tuple[str, ...]
    fresh_cache: bool = False


FIGURES = (
    Figure("nocache_proto", "report --no-cache, protobuf", ("report", "--no-cache", "--format", "json", "{proto}")),
    Figure("nocache_jsonl", "report --no-cache, JSON Lines", ("report", "--no-cache", "--format", "json", "{jsonl}")),
    Figure("first", "report, first run (fills cache)", ("report", "--format", "json", "{proto}"), fresh_cache=True),
    Figure("rerun", "report, cached re-run", ("report", "--format", "json", "{proto}")),
    Figure("check", "check, cached", ("check", "--format", "json", "{proto}")),
)
SAME_JSON = ("nocache_proto", "nocache_jsonl", "first", "rerun")


def measure(figure: Figure, files: tracegen.TraceFiles, env: dict[str, str], timeout_s: float) -> Run:
    words = [
        w.replace("{proto}", str(files.proto_path)).replace("{jsonl}", str(files.jsonl_path)) for w in figure.words
    ]
    run = run_process([GOODPUT, *words], env=env, timeout_s=timeout_s)
    if run.returncode not in (0, 1):  # check exits 1 when it finds errors: a result, not a failure
        sys.exit(f"goodput {' '.join(words)} failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
    return run


def measure_size(spans: int, limit: str, timeout_s: float, repeats: int = 1) -> dict[str, Run]:
    files = tracegen.trace_files(spans)
    print(
        f"{spans:,} spans, {files.iterations:,} iterations: {files.proto_path.stat().st_size / 1e9:.2f} GB protobuf,"
        f" {files.jsonl_path.stat().st_size / 1e9:.2f} GB JSON Lines", flush=True
    )  # fmt: skip
    warm_page_cache(files.proto_path)  # the JSON Lines file may not fit beside it in the page cache: its reads count
    cache = Path(tempfile.mkdtemp(prefix="goodput-scale-cache-"))
    env = dict(os.environ, GOODPUT_CACHE_DIR=str(cache), GOODPUT_MEMORY_LIMIT=limit)
    every: dict[str, list[Run]] = {figure.key: [] for figure in FIGURES}
    try:
        for _ in range(repeats):  # the figures in turn, so a busy moment of the machine spoils one run, not a figure
            for figure in FIGURES:
                if figure.fresh_cache:
                    shutil.rmtree(cache, ignore_errors=True)
                every[figure.key].append(measure(figure, files, env, timeout_s))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    runs = {key: best_of(measured) for key, measured in every.items()}
    for figure in FIGURES:
        run = runs[figure.key]
        print(f"  {figure.label:34} {run.wall_s:8.2f} s {run.peak_bytes / 1e9:6.2f} GB", flush=True)
    reports = {runs[key].stdout for key in SAME_JSON}
    print(f"  the four reports are {'the same JSON' if len(reports) == 1 else 'NOT the same JSON'}", flush=True)
    return runs


def best_of(runs: list[Run]) -> Run:
    """The fastest run's time with the highest memory of all the runs (what `ingest.Measured` keeps too)."""
    fastest = min(runs, key=lambda run: run.wall_s)
    return dataclasses.replace(
        fastest,
        max_rss_bytes=max(run.max_rss_bytes for run in runs),
        tree_pss_bytes=max(run.tree_pss_bytes for run in runs),
    )


def print_ratios(sizes: list[int], results: dict[int, dict[str, Run]]) -> None:
    print()
    heads = "".join(f"{f'{size / 1e6:g}M s':>10}{'GB':>7}" for size in sizes)
    pairs = list(zip(sizes, sizes[1:], strict=False))
    ratio_heads = "".join(f"{f'{b / 1e6:g}M/{a / 1e6:g}M':>11}" for a, b in pairs)
    print(f"{'figure':34}{heads}{ratio_heads}")
    verdicts = []
    for figure in FIGURES:
        cells = "".join(
            f"{results[size][figure.key].wall_s:10.2f}{results[size][figure.key].peak_bytes / 1e9:7.2f}"
            for size in sizes
        )
        ratios = ""
        for a, b in pairs:
            ratio = results[b][figure.key].wall_s / results[a][figure.key].wall_s
            bar = TIME_RATIO_BAR * (b / a) / 4  # 4.4x for 4x the spans
            verdicts.append(ratio <= bar)
            ratios += f"{ratio:9.2f}x{'' if ratio <= bar else '!'}"
        print(f"{figure.label:34}{cells}{ratios}")
    first, last = sizes[0], sizes[-1]
    print()
    print(
        f"time ratios: bar {TIME_RATIO_BAR}x for 4x the spans ('!' marks a miss): {'PASS' if all(verdicts) else 'FAIL'}"
    )
    worst = 0.0
    for figure in FIGURES:
        ratio = results[last][figure.key].peak_bytes / results[first][figure.key].peak_bytes
        worst = max(worst, ratio)
        print(f"peak memory {last / 1e6:g}M / {first / 1e6:g}M, {figure.label:34} {ratio:5.2f}x")
    verdict = "PASS" if worst <= MEMORY_RATIO_BAR else "FAIL"
    print(f"peak memory ratio: worst {worst:.2f}x, bar {MEMORY_RATIO_BAR}x: {verdict}")


def print_bound(largest: int, results: dict[str, Run], base: dict[str, Run], limit: str) -> None:
    """Per figure, the largest size's peak as the command's fixed margin (its peak on BASE_SPANS spans) plus the
    rest, and whether the rest stays within the memory limit."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from rollup.base.connection import parse_memory_limit

    limit_bytes = parse_memory_limit(limit)
    print()
    heading = f"peak at {largest / 1e6:g}M = margin (the command's peak on {BASE_SPANS:,} spans) + the rest"
    print(f"{heading}, at most {limit}")
    inside = True
    for figure in FIGURES:
        peak, margin = results[figure.key].peak_bytes, base[figure.key].peak_bytes
        rest = peak - margin
        inside &= rest <= limit_bytes
        print(
            f"  {figure.label:34} {peak / 1e9:5.2f} GB = {margin / 1e9:4.2f} + {rest / 1e9:4.2f} GB"
            f"{'' if rest <= limit_bytes else ' (over the limit)'}"
        )
    print(f"peak within the limit plus a fixed margin ({limit}): {'PASS' if inside else 'FAIL'}")


def write_huge_trace(spans: int, path: Path) -> float:
    """`spans` spans of tracegen's job as framed protobuf, written batch by batch as they are generated."""
    started = time.perf_counter()
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as file:
        tracegen.framed_batches(spans, lambda record, _: file.write(record))
    os.replace(partial, path)
    return time.perf_counter() - started


def run_huge(spans: int, limit: str, keep: bool, timeout_s: float) -> None:
    print()
    path = tracegen.OUT_DIR / f"rl-trace-{spans}-proto-only.otlp"
    needed = spans * (HUGE_BYTES_PER_SPAN + HUGE_WORK_BYTES_PER_SPAN)
    tracegen.OUT_DIR.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(tracegen.OUT_DIR).free
    print(f"{spans:,} spans: needs about {needed / 1e9:.0f} GB of disk, {free / 1e9:.0f} GB free")
    if not path.exists():
        if free < needed:
            sys.exit("not enough free disk for the huge run")
        print(f"  generated in {write_huge_trace(spans, path):.0f} s: {path.stat().st_size / 1e9:.1f} GB", flush=True)
    cache = Path(tempfile.mkdtemp(prefix="goodput-scale-cache-"))
    env = dict(os.environ, GOODPUT_CACHE_DIR=str(cache), GOODPUT_MEMORY_LIMIT=limit)
    try:
        run = run_process(
            [GOODPUT, "report", "--no-cache", "--format", "json", str(path)], env=env, timeout_s=timeout_s
        )
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if not keep:
            path.unlink(missing_ok=True)
    if run.returncode != 0:
        sys.exit(f"report on {spans:,} spans failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
    print(
        f"  report --no-cache: {run.wall_s:.0f} s, peak memory {run.peak_bytes / 1e9:.2f} GB "
        f"(largest process {run.max_rss_bytes / 1e9:.2f} GB, tree PSS {run.tree_pss_bytes / 1e9:.2f} GB)"
    )
    print(f"  {len(run.stdout) / 1e6:.1f} MB of JSON; the file was {'kept' if keep else 'deleted'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,4000000,16000000", help="span counts, comma-separated")
    parser.add_argument("--memory-limit", default="500MB", help="GOODPUT_MEMORY_LIMIT for every command")
    parser.add_argument("--huge", type=int, default=0, help="then N spans of framed protobuf, report once (0: skip)")
    parser.add_argument("--keep", action="store_true", help="keep the huge trace file")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each command, best time kept (default 1)")
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds before a command is killed")
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(",") if size)
    runs = f"best of {args.repeats} runs" if args.repeats > 1 else "one run"
    print(f"GOODPUT_MEMORY_LIMIT={args.memory_limit}, {os.cpu_count()} cores; {runs} of each command")
    print(f"the fixed margins: each command on {BASE_SPANS:,} spans")
    base = measure_size(BASE_SPANS, args.memory_limit, args.timeout, args.repeats)
    results = {size: measure_size(size, args.memory_limit, args.timeout, args.repeats) for size in sizes}
    if len(sizes) > 1:
        print_ratios(sizes, results)
    print_bound(sizes[-1], results[sizes[-1]], base, args.memory_limit)
    if args.huge:
        run_huge(args.huge, args.memory_limit, args.keep, args.timeout)


if __name__ == "__main__":
    main()
