"""What a refresh of `goodput watch` costs while a large run grows, against one full cached `goodput report`.

The run is bench/tracegen's synthetic GRPO job, exported in batches of `--batch` spans as framed protobuf: the
batches holding the first `--spans` spans are one file, already read by the watcher (its first refresh); then
`--appends` more batches are appended to it one at a time, each followed by a refresh. Measured in this process from
its own accounting (`time.process_time`, every thread's CPU, DuckDB's included): the CPU seconds of each of those
refreshes. The baseline, in the same run: `goodput report FILE --format json` as a process of its own on the final
file, once to fill the cache and then `--repeats` times cached, its CPU seconds from the child's own accounting
(`wait4`'s rusage), the best kept. Bar: the median refresh at 0.1x of the cached report or less.

Also: the watcher's report after the last append must be the report's JSON exactly, and the peak memory of the
watcher against the cached report's. The watcher runs as a process of its own (this script again, `--watcher`), so
its high-water mark is the watch alone, first read included, not the making of the run; it appends the records
itself, one before each refresh. Bar: its peak at most the cached report's plus a fixed margin, the watcher's DuckDB
limit (`live.WATCH_LIMIT_BYTES`) and the part of the files read at a time (`live.POLL_BYTES`, decoded).

Usage: python bench/watch.py [--spans 1000000] [--batch 500] [--appends 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tracegen
from ingest import high_water_bytes, run_process

GOODPUT = str(Path(sys.executable).with_name("goodput"))
BAR = 0.1


def _records(spans: int, batch: int) -> tuple[list[bytes], list[int]]:
    """The job's exported batches as framed records, and the spans in each."""
    records: list[bytes] = []
    counts: list[int] = []

    def keep(record: bytes, count: int) -> None:
        records.append(record)
        counts.append(count)

    tracegen.framed_batches(spans, keep, batch_spans=batch)
    return records, counts


def _child_cpu(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """CPU seconds (user + system) of one process of its own, from its rusage (whose peak RSS is not its own:
    `ingest.Run`); its stdout."""
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {process.returncode}")
        out.seek(0)
        return usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, out.read().decode()


def _own_peak_bytes() -> int:
    """This process's own peak resident set size since its exec (`VmHWM`). Not `ru_maxrss`: Linux carries the
    high-water mark of the process this one was started from (this bench, holding the whole run) across the exec."""
    peak = high_water_bytes(os.getpid())
    return peak or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _watch(run_path: Path, appends: Path, out_path: Path) -> None:
    """The watcher's side, in a process of its own: read the run, then append each record (a file of folder
    `appends`, in name order) to it and refresh; write the figures and the final report's JSON to `out_path`."""
    sys.path.remove(str(Path(__file__).resolve().parent))  # bench/rollup.py is not the package
    from rollup import report_json
    from rollup.watch import LiveRun

    appended = [record.read_bytes() for record in sorted(appends.iterdir())]
    run = LiveRun([run_path])
    started = time.process_time()
    state = run.refresh()
    first = time.process_time() - started
    peak_before = _own_peak_bytes()
    costs = []
    for record in appended:
        with open(run_path, "ab") as out:
            out.write(record)
        started = time.process_time()
        state = run.refresh()
        costs.append(time.process_time() - started)
    peak = _own_peak_bytes()
    watched = json.dumps(report_json(state.report), sort_keys=True)
    run.close()
    out_path.write_text(json.dumps({"spans": state.spans, "first": first, "costs": costs, "peak_before": peak_before,
                                    "peak": peak, "json": watched}))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--appends", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--watcher", nargs=3, type=Path, metavar=("RUN", "APPENDS", "OUT"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.watcher:
        _watch(*options.watcher)
        return

    records, counts = _records(options.spans + options.batch * (options.appends + 8), options.batch)
    first = 0
    held = 0
    while held < options.spans:
        held += counts[first]
        first += 1
    folder = Path(tempfile.mkdtemp(prefix="goodput-bench-watch-"))
    path = folder / "run.otlp"
    path.write_bytes(b"".join(records[:first]))
    (folder / "appends").mkdir()
    for number, record in enumerate(records[first : first + options.appends]):
        (folder / "appends" / f"{number:06d}.otlp").write_bytes(record)
    del records
    env = {**os.environ, "GOODPUT_CACHE_DIR": str(folder / "cache")}
    print(f"run: {held:,} spans in {first:,} batches already written; then {options.appends} appends of "
          f"{options.batch} spans")  # fmt: skip

    watcher = [sys.executable, __file__, "--watcher", str(path), str(folder / "appends"), str(folder / "out.json")]
    subprocess.run(watcher, env=env, check=True)
    watch = json.loads((folder / "out.json").read_text())
    costs = watch["costs"]
    print(f"first refresh (reads all {watch['spans'] - options.batch * options.appends:,} spans): "
          f"{watch['first']:.2f} CPU s")  # fmt: skip

    argv = [GOODPUT, "report", str(path), "--format", "json"]
    _child_cpu(argv, env)  # fills the cache
    cached = [_child_cpu(argv, env) for _ in range(options.repeats)]
    report_cpu = min(cpu for cpu, _, _ in cached)
    report_peak = run_process(argv, env).max_rss_bytes  # GNU time's high-water mark of the command alone
    same = watch["json"] == json.dumps(json.loads(cached[0][2]), sort_keys=True)

    median = statistics.median(costs)
    print(f"refresh after an append of {options.batch} spans: median {median * 1000:.0f} ms CPU "
          f"(mean {statistics.mean(costs) * 1000:.0f}, min {min(costs) * 1000:.0f}, max {max(costs) * 1000:.0f}) "
          f"over {len(costs)}")  # fmt: skip
    print(f"baseline, one cached `goodput report` of the same file: {report_cpu:.2f} CPU s (best of {options.repeats})")
    print(f"ratio: {median / report_cpu:.3f}x (bar {BAR}x) -> {'ok' if median <= BAR * report_cpu else 'OVER'}")
    print(f"the watcher's report after the last append is report's JSON: {'yes' if same else 'NO'}")
    peak, grown = watch["peak"], (watch["peak"] - watch["peak_before"]) / 1e6
    print(f"peak memory: the watcher {peak / 1e6:.0f} MB (after its first read {watch['peak_before'] / 1e6:.0f} MB, "
          f"grown {grown:.0f} MB over the appends); the cached report {report_peak / 1e6:.0f} MB; the watcher's "
          f"margin over it {(peak - report_peak) / 1e6:.0f} MB")  # fmt: skip


if __name__ == "__main__":
    main()
