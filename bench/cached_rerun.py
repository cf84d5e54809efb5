"""How much a cached re-run of `report` saves: on a job whose every span is bucketed, the second `report --format json`
(the cache filled by the first) against the same run's `report --no-cache --format json`.

The job (written to bench/out/ once, seeded): a driver and `--workers` processes; steps one after another, each a
step span and, in every process, back-to-back leaf spans of four buckets, every one bucketed, so that the charge's
sweep has every span to place. Whole `goodput` processes, measured as `ingest.run_process` measures (wall time, peak
memory), each command `--repeats` times, best kept, taken in turn so a busy moment spoils one run, not one figure.
Bar: the cached re-run at 0.35x of the uncached run or better. Then where a cached run's time goes: Python and the
imports (`goodput --version` is the floor of any command) against the rest.

Usage: python bench/cached_rerun.py [--spans 400000] [--workers 4] [--repeats 5]
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
from ingest import run_process, warm_page_cache
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

GOODPUT = str(Path(sys.executable).with_name("goodput"))
BAR = 0.35
BUCKETS = ("productive", "overhead", "idle", "wasted")
LEAVES_PER_STEP = 40  # per process
BATCH = 4096


def _kv(key: str, value: object) -> KeyValue:
    """An OTLP attribute: an int, a list of strings (an array), else a string."""
    if isinstance(value, list):
        return KeyValue(key=key, value=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value=v)
                                                                               for v in value])))  # fmt: skip
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def framed_batch(resource: Resource, spans: list[Span]) -> bytes:
    """One export request of `spans` from `resource`, framed as the Collector's file exporter frames it."""
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
    )
    body = request.SerializeToString()
    return struct.pack(">I", len(body)) + body


def write_job(path: Path, spans: int, workers: int) -> None:
    """The all-bucketed job of `spans` spans, framed protobuf, each process's spans in batches of BATCH."""
    processes = ["driver", *(f"worker-{i}" for i in range(workers))]
    per_step = 1 + LEAVES_PER_STEP * len(processes)
    steps = max(1, spans // per_step)
    trace_id = bytes.fromhex("5f" * 16)
    out = bytearray()
    for number, process in enumerate(processes):
        resource = Resource(attributes=[_kv("service.name", "grpo"), _kv("service.instance.id", process),
                                        _kv("host.name", "bench"), _kv("process.pid", 1000 + number),
                                        _kv("goodput.run.id", "bench-run")])  # fmt: skip
        pending: list[Span] = []

        def flush(resource: Resource = resource, pending: list[Span] = pending) -> None:
            out.extend(framed_batch(resource, pending))
            pending.clear()

        for step in range(steps):
            start = tracegen.EPOCH_NS + step * tracegen.SECOND_NS
            step_id = struct.pack(">Q", (step + 1) << 16)
            if number == 0:
                pending.append(Span(trace_id=trace_id, span_id=step_id, name="rl.grpo.step",
                                    start_time_unix_nano=start, end_time_unix_nano=start + tracegen.SECOND_NS - 1000,
                                    attributes=[_kv("rl.iteration", step + 1),
                                                _kv("rl.span_group", "step")]))  # fmt: skip
            width = (tracegen.SECOND_NS - 1000) // LEAVES_PER_STEP
            for leaf in range(LEAVES_PER_STEP):
                leaf_id = struct.pack(">Q", ((step + 1) << 16) + (number << 8) + leaf + 1)
                leaf_start = start + leaf * width + number * 1000
                pending.append(Span(trace_id=trace_id, span_id=leaf_id, parent_span_id=step_id,
                                    name=f"rl.grpo.phase{leaf % 8}", start_time_unix_nano=leaf_start,
                                    end_time_unix_nano=leaf_start + width - 2000,
                                    attributes=[_kv("rl.bucket", BUCKETS[leaf % 4])]))  # fmt: skip
                if len(pending) >= BATCH:
                    flush()
        if pending:
            flush()
    path.write_bytes(bytes(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=400_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    tracegen.OUT_DIR.mkdir(parents=True, exist_ok=True)
    trace = tracegen.OUT_DIR / f"all-bucketed-{args.spans}-{args.workers}.otlp"
    if not trace.exists():
        write_job(trace, args.spans, args.workers)
    warm_page_cache(trace)
    cache = Path(tempfile.mkdtemp(prefix="goodput-bench-cache-"))
    env = {**os.environ, "GOODPUT_CACHE_DIR": str(cache)}
    try:
        first = run_process([GOODPUT, "report", str(trace), "--format", "json"], env=env)
        if first.returncode != 0:
            sys.exit(f"report failed:\n{first.stderr}")
        iterations = len(json.loads(first.stdout)["iterations"])
        uncached, cached, floor = [], [], []
        for _ in range(args.repeats):
            uncached.append(run_process([GOODPUT, "report", str(trace), "--no-cache", "--format", "json"], env=env))
            cached.append(run_process([GOODPUT, "report", str(trace), "--format", "json"], env=env))
            floor.append(run_process([GOODPUT, "--version"], env=env))
        if any(run.stdout != first.stdout for run in [*uncached, *cached]):
            sys.exit("a run's JSON differs from the first one's")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    best = {name: min(r.wall_s for r in runs) for name, runs in (("uncached", uncached), ("cached", cached),
                                                                  ("floor", floor))}  # fmt: skip
    ratio = best["cached"] / best["uncached"]
    size_mb = trace.stat().st_size / 1e6
    print(f"{args.spans:,} spans, every one bucketed ({iterations:,} iterations, {args.workers + 1} processes), "
          f"{size_mb:.0f} MB framed protobuf; best of {args.repeats}")  # fmt: skip
    print(f"report --no-cache (baseline)  {best['uncached']:.2f} s")
    print(
        f"report, cached re-run         {best['cached']:.2f} s = {ratio:.2f}x the baseline (bar {BAR}x) "
        f"{'PASS' if ratio <= BAR else 'FAIL'}"
    )
    print(f"  of which start-up           {best['floor']:.2f} s (goodput --version: Python and the CLI's imports)")


if __name__ == "__main__":
    main()
