"""Cost of goodput's span helpers against the raw OpenTelemetry SDK, measured in one run on one provider.

Prints, per span: the raw `tracer.start_as_current_span`, `managed_span`, `managed_span` inside `iteration_scope` +
`bucket_scope`, and a disabled group; then the ratios the issue sets bars for (1.3x, 1.5x, 2 us).
Usage: python bench/instrument.py [--spans N] [--repeats R]
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
    args = parser.parse_args()

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


if __name__ == "__main__":
    main()
