"""How fast goodput reads a big trace, against what plain Python and DuckDB alone do with the same file, in one run.

Every figure is a whole process, started from here: wall time, and peak memory as the kernel's own high-water mark of
that process and its children (`wait4`), beside the process tree's summed PSS sampled every 0.1 s (goodput may convert
on several worker processes; the larger of the two is held to the memory bar). Runs, on a synthetic trace of N spans
from `tracegen` (default 1,000,000):
  1. baseline A  `bench/baseline_proto.py`: plain Python parses the framed protobuf into lists, sums per
                 (iteration, bucket);
  2. goodput on the protobuf file, `--no-cache`;
  3. baseline B  `bench/baseline_json.py`: DuckDB alone reads the JSON Lines file, same sums, in the issue's
                 formulation (`read_ndjson_objects` + `json_transform` + `unnest`), the one the bar is for; and
     baseline B' the same sums through `read_json(records = true)`, faster still, shown without a bar;
  4. goodput on the JSON Lines file, `--no-cache`;
  5. goodput on the protobuf file with a fresh cache, then again from the cache.
Then each ratio against its bar. Each command runs `--repeats` times (best wall time kept); the page cache is warmed
first, so no run pays for the disk. The sums printed by the baselines (and by the `query` stand-in) are checked against
the ones the generator recorded, so a fast wrong answer shows.

Figures, 1M spans (251 MB protobuf, 603 MB JSON Lines, 10,823 iterations; generated in 20 s), 2 shared cores:
baseline A 9.7-12.1 s and 1.39 GB; baseline B 1.8-1.9 s and 0.59 GB; baseline B' 1.5 s and 0.41 GB.

Usage: python bench/ingest.py [--spans N] [--repeats R] [--command query|report] [--goodput EXE] [--harness-check]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import tracegen

# The goodput command measured, with {path} for the trace file; --no-cache is added after the command name.
# `report` is what the bars are for; until it runs on a big trace, `query` computing the same sums stands in.
GOODPUT_COMMANDS = {
    "query": ("query", "-f", "csv", "{path}", "SELECT iteration, bucket, sum(duration_ns) FROM spans GROUP BY ALL"),
    "report": ("report", "--format", "json", "{path}"),
}
MEASURED_COMMAND = "report"

BENCH_DIR = Path(__file__).resolve().parent
PROTO_RATIO_BAR, PROTO_RATIO_AIM = 1.5, 1.0
JSON_RATIO_BAR, JSON_RATIO_AIM = 2.0, 1.5  # issue 14 tightened the bar from 2.5x
# DuckDB reads the JSON faster still through `read_json(records = true)` than through the formulation of
# baseline B; it is measured beside it (B'), so the figure against the faster read is in the same output.
FASTEST_JSON_FORMULATION = "read-json-records"
CACHED_RATIO_BAR = 0.35
PEAK_MEMORY_BAR_BYTES = 1.5e9
SAMPLE_INTERVAL_S = 0.1
GNU_TIME = "/usr/bin/time"  # a command's peak RSS, measured from a parent of its own (see `Run`)
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Run:
    """One measured process: wall time, the peak RSS of the largest process of its tree (each one's own high-water
    mark, `VmHWM`), the sampled peak of its tree's summed PSS, what it printed.

    The high-water mark is GNU time's (`/usr/bin/time -f %M`, the command forked from it), with the sampled
    `VmHWM` of each process of the tree as a floor (all there is without GNU time). Not the bench's own `wait4`:
    a child started by vfork and exec (as `subprocess` starts it) has its parent's high-water mark folded into its
    own at exec, so once the bench itself had held a large output, every later command reported at least that
    (seen: /bin/true at 817 MB after an 800 MB peak of the bench's)."""

    wall_s: float
    max_rss_bytes: int
    tree_pss_bytes: int
    returncode: int
    stdout: str
    stderr: str

    @property
    def peak_bytes(self) -> int:
        return max(self.max_rss_bytes, self.tree_pss_bytes)


@dataclass
class Measured:
    """The runs of one command over the repeats: best wall time, highest memory."""

    label: str
    argv: list[str]
    runs: list[Run] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.runs) and all(run.returncode == 0 for run in self.runs)

    @property
    def wall_s(self) -> float:
        return min(run.wall_s for run in self.runs)

    @property
    def max_rss_bytes(self) -> int:
        return max(run.max_rss_bytes for run in self.runs)

    @property
    def tree_pss_bytes(self) -> int:
        return max(run.tree_pss_bytes for run in self.runs)

    @property
    def peak_bytes(self) -> int:
        return max(run.peak_bytes for run in self.runs)


def _tree_pids(root: int) -> list[int]:
    pids, queue = [], [root]
    while queue:
        pid = queue.pop()
        pids.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    queue.extend(int(child) for child in children.read().split())
        except OSError:
            continue  # the process ended between two reads
    return pids


def high_water_bytes(pid: int) -> int:
    """A process's own peak resident set size since its exec (`VmHWM`), 0 once it is gone."""
    return _proc_kilobytes(f"/proc/{pid}/status", "VmHWM:")


def _pss_bytes(pid: int) -> int:
    """Proportional set size: shared pages split between their sharers, so the sum over a tree counts each once."""
    return _proc_kilobytes(f"/proc/{pid}/smaps_rollup", "Pss:")


def _proc_kilobytes(path: str, field: str) -> int:
    """The bytes of the `field` line (in kilobytes) of a /proc file, 0 when the process is gone."""
    try:
        with open(path) as lines:
            for line in lines:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def run_process(argv: list[str], env: dict[str, str] | None = None, timeout_s: float = 3600) -> Run:
    """Run `argv` to completion; only this child (and its children) is in the figures, wait4 reports it alone."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as peak:
        timed = [GNU_TIME, "-f", "%M", "-o", peak.name, *argv] if os.path.exists(GNU_TIME) else argv
        started = time.perf_counter()
        process = subprocess.Popen(timed, stdout=out, stderr=err, env=env, start_new_session=True)
        done = threading.Event()
        tree_peak = [0]
        largest = [0]

        def sample() -> None:
            while not done.wait(SAMPLE_INTERVAL_S):
                pids = _tree_pids(process.pid)
                tree_peak[0] = max(tree_peak[0], sum(_pss_bytes(pid) for pid in pids))
                largest[0] = max([largest[0], *(high_water_bytes(pid) for pid in pids)])

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        timer = threading.Timer(timeout_s, lambda: os.killpg(process.pid, 9))
        timer.start()
        try:
            _, status, _ = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
            done.set()
        wall_s = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so Popen must not wait again
        sampler.join()
        measured = peak.read().strip().splitlines()
        if measured and measured[-1].isdigit():  # kilobytes; GNU time writes a note first for a killed command
            largest[0] = max(largest[0], int(measured[-1]) * 1024)
        out.seek(0)
        err.seek(0)
        return Run(
            wall_s=wall_s,
            max_rss_bytes=largest[0],
            tree_pss_bytes=tree_peak[0],
            returncode=process.returncode,
            stdout=out.read().decode("utf-8", "replace"),
            stderr=err.read().decode("utf-8", "replace"),
        )


def checked(argv: list[str], env: dict[str, str]) -> Run:
    """One run of `argv` (`run_process`); a failed one stops the bench with its stderr."""
    run = run_process(argv, env=env)
    if run.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({run.returncode}):\n{run.stderr}")
    return run


def parse_sums(text: str) -> dict[tuple[int | None, str | None], int] | None:
    """`iteration,bucket,sum_ns` rows (a header line allowed; empty or NULL for a missing value), or None."""
    sums = {}
    try:
        for row in csv.reader(io.StringIO(text)):
            if not row:
                continue
            if len(row) != 3:
                return None
            iteration, bucket, total = (None if cell in ("", "NULL", "None") else cell for cell in row)
            if total is not None and not total.lstrip("-").isdigit():
                if sums:
                    return None
                continue  # the header
            sums[(None if iteration is None else int(iteration), bucket)] = int(total or 0)
    except ValueError:
        return None
    return sums or None


def sums_verdict(measured: Measured, expected: dict) -> str:
    if not measured.ok:
        return "-"
    sums = parse_sums(measured.runs[-1].stdout)
    if sums is None:
        return "not compared"
    return "match" if sums == expected else "DIFFER"


def warm_page_cache(*paths: Path) -> None:
    for path in paths:
        with open(path, "rb") as file:
            while file.read(16 << 20):
                pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, help="runs of each command, best kept (default 1 at 1M spans, else 3)")
    parser.add_argument("--seed", type=int, default=tracegen.DEFAULT_SEED)
    parser.add_argument("--command", choices=sorted(GOODPUT_COMMANDS), default=MEASURED_COMMAND)
    parser.add_argument(
        "--baseline-json-formulation", default=None, help="a bench/baseline_json.py --formulation (default its own)"
    )
    parser.add_argument(
        "--harness-check",
        action="store_true",
        help="measure the baselines in place of goodput, to test this script while goodput cannot run",
    )
    parser.add_argument("--goodput", help="the goodput executable to measure (default: the one beside this Python)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds before a measured process is killed")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.spans >= 1_000_000 else 3)

    files = tracegen.trace_files(args.spans, seed=args.seed)
    how = "reused, generated earlier" if files.reused else "generated now"
    print(f"trace: {files.spans:,} spans, {files.iterations:,} iterations, {files.processes} processes")
    print(f"  generation: {files.generation_s:.1f} s ({how})")
    for path in (files.proto_path, files.jsonl_path):
        print(f"  {path.relative_to(BENCH_DIR.parent)}  {path.stat().st_size / 1e6:,.1f} MB")
    warm_page_cache(files.proto_path, files.jsonl_path)

    python = sys.executable
    goodput = [args.goodput or str(Path(python).with_name("goodput"))]
    if not Path(goodput[0]).exists():
        goodput = [python, "-m", "cli"]
    template = GOODPUT_COMMANDS[args.command]

    def goodput_argv(path: Path, *, no_cache: bool) -> list[str]:
        if args.harness_check:
            script = "baseline_proto.py" if path.suffix == ".otlp" else "baseline_json.py"
            return [python, str(BENCH_DIR / script), str(path)]
        words = [word.replace("{path}", str(path)) for word in template]
        return goodput + words[:1] + (["--no-cache"] if no_cache else []) + words[1:]

    baseline_b = [python, str(BENCH_DIR / "baseline_json.py"), str(files.jsonl_path)]
    if args.baseline_json_formulation:
        baseline_b += ["--formulation", args.baseline_json_formulation]
    baseline_b_records = [python, str(BENCH_DIR / "baseline_json.py"), str(files.jsonl_path)]
    baseline_b_records += ["--formulation", FASTEST_JSON_FORMULATION]
    baseline_a = [python, str(BENCH_DIR / "baseline_proto.py"), str(files.proto_path)]
    measured = {
        "baseline_a": Measured("baseline A: python protobuf", baseline_a),
        "proto": Measured("goodput --no-cache, protobuf", goodput_argv(files.proto_path, no_cache=True)),
        "baseline_b": Measured("baseline B: duckdb JSON Lines", baseline_b),
        "baseline_b_records": Measured("baseline B': read_json records", baseline_b_records),
        "json": Measured("goodput --no-cache, JSON Lines", goodput_argv(files.jsonl_path, no_cache=True)),
        "first": Measured("goodput cache, first run", goodput_argv(files.proto_path, no_cache=False)),
        "rerun": Measured("goodput cache, re-run", goodput_argv(files.proto_path, no_cache=False)),
    }  # fmt: skip
    shown = shlex.join(measured["proto"].argv[len(goodput) :])
    if args.harness_check:
        print("measured in goodput's place: the baselines themselves (--harness-check)")
    else:
        stand_in = " (stand-in for `goodput report`)" if args.command == "query" else ""
        print(f"goodput command: {shlex.join(goodput)} {shown}{stand_in}")
    print(f"repeats: {repeats} (best wall time kept, highest memory kept)")

    cache_root = Path(tempfile.mkdtemp(prefix="goodput-bench-cache-"))
    try:
        for repeat in range(repeats):
            # Every goodput run gets a cache directory of its own, so --no-cache runs cannot touch a real cache.
            for key in ("baseline_a", "proto", "baseline_b", "baseline_b_records", "json"):
                env = dict(os.environ, GOODPUT_CACHE_DIR=str(cache_root / f"{key}-{repeat}"))
                measured[key].runs.append(run_process(measured[key].argv, env, args.timeout))
            env = dict(os.environ, GOODPUT_CACHE_DIR=str(cache_root / f"cached-{repeat}"))
            for key in ("first", "rerun"):
                measured[key].runs.append(run_process(measured[key].argv, env, args.timeout))
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)

    print()
    print(f"{'run':34} {'wall s':>9} {'peak RSS MB':>12} {'tree PSS MB':>12}  sums")
    for item in measured.values():
        if not item.ok:
            failed = next(run for run in item.runs if run.returncode != 0)
            print(f"{item.label:34} {'failed':>9}  exit {failed.returncode}")
            for line in failed.stderr.strip().splitlines()[-5:]:
                print(f"    {line}")
            continue
        verdict = sums_verdict(item, files.duration_sums_ns)
        print(
            f"{item.label:34} {item.wall_s:9.2f} {item.max_rss_bytes / 1e6:12.0f} {item.tree_pss_bytes / 1e6:12.0f}"
            f"  {verdict}"
        )

    print()
    print(f"{'figure':34} {'value':>9} {'baseline':>9} {'ratio':>7} {'bar':>7} {'aim':>6}")

    def ratio_line(label: str, figure: Measured, baseline: Measured, bar: float | None, aim: float | None) -> None:
        if not (figure.ok and baseline.ok):
            print(f"{label:34} {'n/a (a run failed)':>9}")
            return
        ratio = figure.wall_s / baseline.wall_s
        verdict = "(no bar)" if bar is None else "PASS" if ratio <= bar else "FAIL"
        aim_text = f"{aim:.1f}x" if aim is not None else "-"
        bar_text = f"{bar:6.2f}x" if bar is not None else f"{'-':>7}"
        figures = f"{figure.wall_s:8.2f}s {baseline.wall_s:8.2f}s {ratio:6.2f}x"
        print(f"{label:34} {figures} {bar_text} {aim_text:>6}  {verdict}")

    ratio_line("protobuf run / baseline A", measured["proto"], measured["baseline_a"], PROTO_RATIO_BAR, PROTO_RATIO_AIM)
    ratio_line("JSON Lines run / baseline B", measured["json"], measured["baseline_b"], JSON_RATIO_BAR, JSON_RATIO_AIM)
    ratio_line("JSON Lines run / baseline B'", measured["json"], measured["baseline_b_records"], None, None)
    ratio_line("cached re-run / first run", measured["rerun"], measured["first"], CACHED_RATIO_BAR, None)
    memory_pairs = (("proto", "baseline_a"), ("json", "baseline_b"), ("first", "baseline_a"), ("rerun", "baseline_a"))
    for key, baseline_key in memory_pairs:
        item, baseline = measured[key], measured[baseline_key]
        label = f"peak memory: {item.label.removeprefix('goodput ')}"
        if not (item.ok and baseline.ok):
            print(f"{label:34} {'n/a':>9}")
            continue
        verdict = "PASS" if item.peak_bytes <= PEAK_MEMORY_BAR_BYTES else "FAIL"
        print(
            f"{label:34} {item.peak_bytes / 1e9:7.2f}GB {baseline.peak_bytes / 1e9:7.2f}GB"
            f" {item.peak_bytes / baseline.peak_bytes:6.2f}x {PEAK_MEMORY_BAR_BYTES / 1e9:5.1f}GB {'-':>6}  {verdict}"
        )


if __name__ == "__main__":
    main()
