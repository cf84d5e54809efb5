"""Cost of goodput's span helpers against the raw OpenTelemetry SDK, measured in one run on one provider.

Prints, per span: the raw `tracer.start_as_current_span`, `managed_span`, `managed_span` inside `iteration_scope` +
`bucket_scope`, and a disabled group; then the ratios the issue sets bars for (1.3x, 1.5x, 2 us). Then, on a local
Ray cluster, what the end-of-call guarantee costs (spans ended in a dispatched call are in the worker's file when
the caller has the result): a dispatched call that ends 10 spans, with and without it, against the same-run round
trip of an empty actor call (bar: at most 10% of that round trip). And what the end-of-step guarantee costs the step
loop (a step span and every span ended before it are in the process's file when the step span ends): a step of 10,
30 and 100 leaf spans written to a framed protobuf file, the step's end timed with the guarantee against the same
step with the SDK's batching alone, in one run (bar: a few hundred microseconds a step). And what the first step's
end costs against the next ones' in a fresh process, with configure() preparing the exporter and without (bar: the
one-time costs, tens of milliseconds, move into configure(); the first end stays dearer by creating the file).
Usage: python bench/instrument.py [--spans N] [--repeats R] [--calls N] [--steps N] [--processes N] [--no-ray]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# This script is named after the package it measures; drop its own folder from the path so `import instrument`
# finds the package, not this file.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import instrument
from instrument import Bucket, RLSpanGroup, bucket_scope, iteration_scope, managed_span


class DiscardExporter(SpanExporter):
    """Receives every batch and keeps nothing: the cost measured is the span's, not the disk's."""

    def export(self, spans):
        return SpanExportResult.SUCCESS


def per_span_us(body, spans: int, repeats: int) -> float:
    """Best of `repeats` runs of `spans` spans, in microseconds per span (best-of filters a shared machine's noise)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        body(spans)
        best = min(best, time.perf_counter() - start)
    return best / spans * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300, help="actor calls per measurement of the Ray figures")
    parser.add_argument("--steps", type=int, default=300, help="steps per measurement of the end-of-step figures")
    parser.add_argument("--processes", type=int, default=7, help="fresh processes per first-export figure")
    parser.add_argument("--no-ray", action="store_true", help="skip the end-of-call figures")
    parser.add_argument("--first-export-child", nargs=2, metavar=("KIND", "PREPARED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_export_child:
        first_export_child(*args.first_export_child)
        return

    provider = instrument.configure(exporter=DiscardExporter(), span_groups="per_step", service_name="bench")
    tracer = provider.get_tracer("bench")

    def raw(n):
        for _ in range(n):
            with tracer.start_as_current_span("rl.grpo.generation"):
                pass

    same_attributes = {"rl.span_group": "generation", "rl.bucket": "productive"}

    def raw_tagged(n):
        for _ in range(n):
            with tracer.start_as_current_span("rl.grpo.generation", attributes=same_attributes):
                pass

    def managed(n):
        for _ in range(n):
            with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                pass

    def scoped(n):
        with iteration_scope(412), bucket_scope(Bucket.OVERHEAD):
            for _ in range(n):
                with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                    pass

    def disabled(n):
        for _ in range(n):
            with managed_span(RLSpanGroup.PER_PROMPT, "rl.grpo.per_prompt"):
                pass

    def empty(n):
        for _ in range(n):
            pass

    # Interleave the variants so drift on a shared machine hits all of them alike.
    variants = (
        ("raw", raw),
        ("raw_tagged", raw_tagged),
        ("managed", managed),
        ("scoped", scoped),
        ("disabled", disabled),
        ("loop", empty),
    )
    results = {name: float("inf") for name, _ in variants}
    for _ in range(args.repeats):
        for name, body in variants:
            results[name] = min(results[name], per_span_us(body, args.spans, 1))
            instrument.force_flush()
    instrument.shutdown()

    raw_us = results["raw"]
    print(f"spans per measurement: {args.spans}, best of {args.repeats}")
    print(f"raw SDK start_as_current_span          {raw_us:7.2f} us/span   (baseline)")
    print(
        f"raw, with the same two attributes      {results['raw_tagged']:7.2f} us/span   "
        f"{results['raw_tagged'] / raw_us:.2f}x raw (what tagging alone costs in the SDK)"
    )
    print(
        f"managed_span                           {results['managed']:7.2f} us/span   "
        f"{results['managed'] / raw_us:.2f}x raw (bar 1.3x)"
    )
    print(
        f"managed_span in iteration+bucket scope {results['scoped']:7.2f} us/span   "
        f"{results['scoped'] / raw_us:.2f}x raw (bar 1.5x)"
    )
    print(
        f"disabled group                         {results['disabled']:7.3f} us/span   "
        f"(bar 2 us; empty loop {results['loop']:.3f} us)"
    )

    end_of_step(args.steps, args.repeats)
    first_export(args.processes)
    if not args.no_ray:
        end_of_call(args.calls, args.repeats)


def end_of_step(steps: int, repeats: int) -> None:
    """The end-of-step guarantee's cost on the step loop: how long ending a step span takes (the span's own end, and
    with the guarantee the encode and write of every span ended since the last step), with it and without it, for
    steps of several sizes; medians over interleaved blocks, on one framed protobuf file."""
    import statistics
    import tempfile

    from instrument import iteration_scope, umbrella_span
    from instrument.provider import STATE

    trace_dir = tempfile.mkdtemp(prefix="goodput-bench-step-")
    instrument.configure(exporter="otlp-file", path=trace_dir, span_groups="per_step", service_name="bench-steps")
    processor = STATE.processor
    assert processor is not None and processor.flush_on_step

    def step_end_us(leaves: int, work_s: float) -> float:
        ends = []
        for step in range(steps):
            with iteration_scope(step):
                span = umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step")
                span.__enter__()
                for _ in range(leaves):
                    with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                        if work_s:
                            time.sleep(work_s)
                start = time.perf_counter_ns()
                span.__exit__(None, None, None)
                ends.append(time.perf_counter_ns() - start)
        return statistics.median(ends) / 1e3

    print(
        f"\nend of a step: {repeats} interleaved blocks of {steps} steps, median of each step's end (framed protobuf)"
    )
    for work_s in (0.0, WORK_S):
        what = "empty leaf spans" if not work_s else f"leaf spans of {work_s * 1e3:g} ms GIL-free work"
        for leaves in (10, 30, 100):
            samples: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(repeats):
                for on in (True, False):
                    processor.flush_on_step = on
                    samples[on].append(step_end_us(leaves, work_s))
                    instrument.force_flush()
            with_it, without = statistics.median(samples[True]), statistics.median(samples[False])
            print(
                f"  a step of {leaves:3d} {what}: its end takes {with_it:7.1f} us with the guarantee, "
                f"{without:6.1f} us without ({with_it - without:+.1f} us a step; bar a few hundred)"
            )
    instrument.shutdown()


FIRST_EXPORT_STEPS = 20  # steps of 10 leaf spans each, in every fresh process of `first_export`


def first_export(processes: int) -> None:
    """The first step's end against the next ones' (median), in fresh processes: the one-time costs of a first
    export (importing and first using the encoder, the trace folder) are paid once per process, so each sample is a
    process of its own. With configure() preparing the exporter, and without (its preparation made a no-op in that
    process), interleaved; medians over `processes` processes of each kind; and what configure() itself took."""
    import json
    import statistics
    import subprocess

    print(f"\nfirst export: {processes} fresh processes each, steps of 10 leaf spans, median (a file in a new folder)")
    for kind in ("otlp-file", "json-file"):
        samples: dict[str, list[dict[str, float]]] = {"prepared": [], "unprepared": []}
        for _ in range(processes):
            for prepared in samples:
                child = subprocess.run(
                    [sys.executable, __file__, "--first-export-child", kind, prepared],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                samples[prepared].append(json.loads(child.stdout))
        for prepared, runs in samples.items():
            first, following, configure_ms = (
                statistics.median(run[key] for run in runs) for key in ("first_us", "next_us", "configure_ms")
            )
            print(
                f"  {kind:9s} {prepared:10s}: the first step's end {first:9.1f} us, the next ones' {following:6.1f} us "
                f"(first {first - following:+9.1f} us); configure() {configure_ms:6.1f} ms"
            )


def first_export_child(kind: str, prepared: str) -> None:
    """One fresh process of `first_export`: configure(), then FIRST_EXPORT_STEPS steps, each step's end timed."""
    import json
    import statistics
    import tempfile

    from instrument import exporters, iteration_scope, umbrella_span
    from instrument.provider import configure

    if prepared == "unprepared":
        exporters._LazyFileExporter.prepare = lambda self, *args, **kwargs: None  # type: ignore[method-assign]
    trace_dir = os.path.join(tempfile.mkdtemp(prefix="goodput-bench-first-"), "run")  # a folder not there yet
    start = time.perf_counter()
    configure(exporter=kind, path=trace_dir, span_groups="per_step", service_name="bench-first")
    configure_ms = (time.perf_counter() - start) * 1e3
    ends = []
    for step in range(FIRST_EXPORT_STEPS):
        with iteration_scope(step):
            span = umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step")
            span.__enter__()
            for _ in range(10):
                with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                    pass
            start_ns = time.perf_counter_ns()
            span.__exit__(None, None, None)
            ends.append(time.perf_counter_ns() - start_ns)
    instrument.shutdown()
    print(
        json.dumps(
            {"configure_ms": configure_ms, "first_us": ends[0] / 1e3, "next_us": statistics.median(ends[1:]) / 1e3}
        )
    )


WORK_S = 0.0005  # what each span wraps in the second case: GIL-free work, as a GPU kernel or an RPC is


def end_of_call(calls: int, repeats: int) -> None:
    """The end-of-call guarantee against an empty actor call's round trip, measured in one run on one actor.

    For a call ending 10 empty spans (the worst case: nothing to overlap the writing with) and 10 spans that each
    wrap `WORK_S` of work that releases the GIL (the writer thread writes each span while the next one works):
    the time the flush takes on the call path, timed inside the worker around every flush (what the caller waits
    for), and the end-to-end difference of the same call with and without the guarantee, medians over short
    interleaved blocks (noisier: without it the spans pile up and the SDK's thread writes them later, on the same
    two cores).
    """
    import statistics
    import tempfile

    import ray

    from instrument import accepts_trace_context, dispatch_with_trace_context, umbrella_span

    trace_dir = tempfile.mkdtemp(prefix="goodput-bench-")
    instrument.configure(exporter="otlp-file", path=trace_dir, span_groups="per_step", service_name="bench-driver")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")

    @ray.remote
    class Worker:  # never calls configure(): set up from the first carrier, writing framed protobuf files
        def __init__(self):
            self.flush_ns: list[int] = []

        def empty(self):
            return None

        @accepts_trace_context
        def ten_spans(self, work_s: float):
            for _ in range(10):
                with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                    if work_s:
                        time.sleep(work_s)

        def guarantee(self, on: bool) -> None:
            """Switch the guarantee off (for the comparison only: no writer thread, no flush) or on, timing every
            flush while on."""
            from contextvars import ContextVar

            from instrument import processor, ray_dispatch

            def timed_flush(pending) -> None:
                start = time.perf_counter_ns()
                processor.flush_ended_spans(pending)
                self.flush_ns.append(time.perf_counter_ns() - start)

            ray_dispatch.flush_ended_spans = timed_flush if on else (lambda pending: None)
            ray_dispatch.IN_DISPATCHED_CALL = processor.IN_DISPATCHED_CALL if on else ContextVar("off", default=False)

        def flush_us(self) -> float:
            median = statistics.median(self.flush_ns) / 1e3 if self.flush_ns else 0.0
            self.flush_ns = []
            return median

    worker = Worker.remote()
    block = max(10, calls // 10)
    results = {}
    with umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step"):
        ray.get(dispatch_with_trace_context(worker.ten_spans, 0.0))  # configures the worker

        def per_call_us(call) -> float:
            start = time.perf_counter()
            for _ in range(block):
                ray.get(call())
            return (time.perf_counter() - start) / block * 1e6

        for work_s in (0.0, WORK_S):
            samples: dict[str, list[float]] = {"empty": [], "with": [], "without": []}
            for _ in range(repeats * 10):  # short blocks, interleaved: drift on a shared machine hits all alike
                samples["empty"].append(per_call_us(worker.empty.remote))
                ray.get(worker.guarantee.remote(True))
                samples["with"].append(per_call_us(lambda w=work_s: dispatch_with_trace_context(worker.ten_spans, w)))
                ray.get(worker.guarantee.remote(False))
                samples["without"].append(
                    per_call_us(lambda w=work_s: dispatch_with_trace_context(worker.ten_spans, w))
                )
            ray.get(worker.guarantee.remote(True))
            flush_us = ray.get(worker.flush_us.remote())
            results[work_s] = ({key: statistics.median(values) for key, values in samples.items()}, flush_us)
    ray.shutdown()
    instrument.shutdown()

    print(f"\nend of a dispatched call: {repeats * 10} interleaved blocks of {block} calls, medians (framed protobuf)")
    for work_s, (medians, flush_us) in results.items():
        what = "10 empty spans" if not work_s else f"10 spans of {work_s * 1e3:g} ms GIL-free work"
        empty = medians["empty"]
        print(f"  call ending {what}")
        print(f"    empty actor call round trip          {empty:8.1f} us/call  (baseline)")
        print(f"    the call, without the guarantee      {medians['without']:8.1f} us/call")
        print(
            f"    the call, with the guarantee         {medians['with']:8.1f} us/call  "
            f"(end to end: {medians['with'] - medians['without']:+.1f} us)"
        )
        print(
            f"    the flush on the call path           {flush_us:8.1f} us/call  "
            f"{flush_us / empty:.1%} of the empty round trip (bar 10%)"
        )


if __name__ == "__main__":
    main()
