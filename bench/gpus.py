"""What GPU-seconds cost (SPEC section 12): `report` of a job whose processes hold GPUs, against the same report of
the same spans written without GPU attributes, both cached (and both `--no-cache`, for the first run's cost).

The job (written to bench/out/ once, seeded by its shape alone): a driver holding nothing and 64 worker processes in
8 fleets of 8, each worker on a host of its own holding GPUs 0-7 (512 GPUs, 8 pools, 64 classes of GPUs charged
alike); steps one after another, each a step span on the driver and, in every worker, `LEAVES` bucketed leaves
placed by its fleet (the even fleets generate in the first half of the step, the odd ones train in the second), so
every pool has busy and waiting time. Whole `goodput` processes, measured as `ingest.run_process` measures (wall
time, peak memory), the two commands taken in turn `--repeats` times, best kept. Bar: with GPUs at 1.5x the plain
report or better, cached; peak memory within the plain report's margin (1.25x).

Usage: python bench/gpus.py [--spans 1000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
from pathlib import Path

import tracegen
from cached_rerun import _kv, framed_batch
from ingest import run_process, warm_page_cache
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

GOODPUT = str(Path(sys.executable).with_name("goodput"))
BAR, MEMORY_BAR = 1.5, 1.25
FLEETS, PER_FLEET, GPUS_EACH, LEAVES = 8, 8, 8, 4
BUCKETS = ("productive", "overhead", "idle", "wasted")
BATCH = 4096


def write_job(path: Path, spans: int, *, gpus: bool) -> None:
    """The job of `spans` spans as framed protobuf, each process's spans in batches of BATCH; its workers' resources
    name their GPUs when `gpus`."""
    workers = FLEETS * PER_FLEET
    steps = max(1, spans // (1 + LEAVES * workers))
    trace_id = bytes.fromhex("6a" * 16)
    out = bytearray()
    for number in range(workers + 1):
        fleet = "driver" if number == 0 else f"fleet-{(number - 1) // PER_FLEET}"
        attributes = [_kv("service.name", fleet), _kv("service.instance.id", f"p{number}"),
                      _kv("host.name", f"node-{number}"), _kv("process.pid", 1000 + number),
                      _kv("goodput.run.id", "bench-gpus")]  # fmt: skip
        if gpus and number:
            attributes.append(_kv("goodput.gpu.ids", [str(i) for i in range(GPUS_EACH)]))
        resource = Resource(attributes=attributes)
        pending: list[Span] = []

        def flush(resource: Resource = resource, pending: list[Span] = pending) -> None:
            out.extend(framed_batch(resource, pending))
            pending.clear()

        half = (tracegen.SECOND_NS - 1000) // 2
        for step in range(steps):
            start = tracegen.EPOCH_NS + step * tracegen.SECOND_NS
            step_id = struct.pack(">Q", (step + 1) << 16)
            if number == 0:
                pending.append(Span(trace_id=trace_id, span_id=step_id, name="rl.grpo.step",
                                    start_time_unix_nano=start, end_time_unix_nano=start + tracegen.SECOND_NS - 1000,
                                    attributes=[_kv("rl.iteration", step + 1),
                                                _kv("rl.span_group", "step")]))  # fmt: skip
            else:
                offset = start + (half if ((number - 1) // PER_FLEET) % 2 else 0)
                width = half // LEAVES
                for leaf in range(LEAVES):
                    leaf_id = struct.pack(">Q", ((step + 1) << 16) + (number << 3) + leaf + 1)
                    leaf_start = offset + leaf * width + (number % 7) * 1000
                    pending.append(Span(trace_id=trace_id, span_id=leaf_id, parent_span_id=step_id,
                                        name=f"rl.grpo.phase{leaf}", start_time_unix_nano=leaf_start,
                                        end_time_unix_nano=leaf_start + width - 5000,
                                        attributes=[_kv("rl.bucket", BUCKETS[leaf % 4])]))  # fmt: skip
            if len(pending) >= BATCH:
                flush()
        if pending:
            flush()
    path.write_bytes(bytes(out))


def without_gpus(report: dict) -> dict:
    """The report with SPEC section 12's keys taken out: what the same spans without GPU attributes give."""
    out = {key: value for key, value in report.items() if key != "gpus"}
    out["iterations"] = [{k: v for k, v in row.items() if k != "gpu"} for row in report["iterations"]]
    for key in ("total", "rework"):
        out[key] = {k: v for k, v in report[key].items() if k != "gpu"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    tracegen.OUT_DIR.mkdir(parents=True, exist_ok=True)
    traces = {}
    for name, gpus in (("gpus", True), ("plain", False)):
        traces[name] = tracegen.OUT_DIR / f"gpu-job-{args.spans}-{name}.otlp"
        if not traces[name].exists():
            write_job(traces[name], args.spans, gpus=gpus)
        warm_page_cache(traces[name])
    cache = Path(tempfile.mkdtemp(prefix="goodput-bench-cache-"))
    env = {**os.environ, "GOODPUT_CACHE_DIR": str(cache)}
    runs: dict[str, list] = {"gpus": [], "plain": [], "gpus-first": [], "plain-first": []}
    try:
        for name, trace in traces.items():
            first = run_process([GOODPUT, "report", str(trace), "--format", "json"], env=env)
            if first.returncode != 0:
                sys.exit(f"report of {trace} failed:\n{first.stderr}")
            runs[f"{name}-first"].append(first)
        report = json.loads(runs["gpus-first"][0].stdout)
        if without_gpus(report) != json.loads(runs["plain-first"][0].stdout):
            sys.exit("the reports with and without GPUs differ beyond the GPU keys")
        for _ in range(args.repeats):
            for name, trace in traces.items():
                runs[name].append(run_process([GOODPUT, "report", str(trace), "--format", "json"], env=env))
                uncached = [GOODPUT, "report", str(trace), "--format", "json", "--no-cache"]
                if len(runs[f"{name}-first"]) < 3:
                    runs[f"{name}-first"].append(run_process(uncached, env=env))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    best = {name: min(r.wall_s for r in of) for name, of in runs.items()}
    peak = {name: max(r.peak_bytes for r in of) / 1e9 for name, of in runs.items()}
    gpus = report["gpus"]
    print(f"{args.spans:,} spans, {len(report['iterations']):,} iterations, {FLEETS * PER_FLEET + 1} processes, "
          f"{gpus['count']} GPUs in {len(gpus['pools'])} pools; GPU goodput {report['total']['gpu']['goodput']:.1%}, "
          f"wall-clock goodput {report['total']['goodput']:.1%}")  # fmt: skip
    ratio, memory = best["gpus"] / best["plain"], peak["gpus"] / peak["plain"]
    print(f"report, cached, without GPUs (baseline) {best['plain']:.2f} s, peak RSS {peak['plain']:.2f} GB")
    print(f"report, cached, with 512 GPUs           {best['gpus']:.2f} s = {ratio:.2f}x the baseline (bar {BAR}x) "
          f"{'PASS' if ratio <= BAR else 'FAIL'}, peak RSS {peak['gpus']:.2f} GB = {memory:.2f}x "
          f"(bar {MEMORY_BAR}x) {'PASS' if memory <= MEMORY_BAR else 'FAIL'}")  # fmt: skip
    first = best["gpus-first"] / best["plain-first"]
    print(
        f"report --no-cache: without GPUs {best['plain-first']:.2f} s, with {best['gpus-first']:.2f} s "
        f"= {first:.2f}x (no bar: the first run reads the files and sweeps 64 classes)"
    )


if __name__ == "__main__":
    main()
