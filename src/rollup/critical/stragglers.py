"""Stragglers (SPEC section 14): in a fan-out, the worker its fleet waited on.

A fan-out is the spans of one name in one window (by effective iteration) that share a parent (without a parent:
that share the window), in two or more processes of one fleet (SPEC section 12's fleet). Its straggler is the span
that ends last (ties: the later start, then the smaller span id); it ran alone for its end minus the second-latest
end, and its peers waited, in GPU-seconds, the sum over the others of the straggler's end minus theirs, times the
GPUs their process holds.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from rollup.accounting.rows import seconds

from .graph import AttemptSpans


@dataclass
class Straggler:
    """One process of a fleet that ended a fan-out of `name` last at least once: `fan_outs` it was in, `slowest`
    how many it ended last, and over those, how long it ran alone (`alone_ns`) and what its peers' GPUs waited
    (`waited_gpu_ns`, GPU-nanoseconds)."""

    fleet: str
    name: str
    process: str | None
    fan_outs: int = 0
    slowest: int = 0
    alone_ns: int = 0
    waited_gpu_ns: Fraction = Fraction(0)

    def kept(self) -> list[Any]:
        """As kept beside a cached run (`of_kept` reads it back)."""
        return [self.fleet, self.name, self.process, self.fan_outs, self.slowest, self.alone_ns,
                self.waited_gpu_ns.numerator, self.waited_gpu_ns.denominator]  # fmt: skip

    @classmethod
    def of_kept(cls, row: list[Any]) -> Straggler:
        fleet, name, process, fan_outs, slowest, alone_ns, numerator, denominator = row
        return cls(fleet, name, process, fan_outs, slowest, alone_ns, Fraction(numerator, denominator))

    def json(self) -> dict[str, Any]:
        return {"fleet": self.fleet, "name": self.name, "process": self.process, "fan_outs": self.fan_outs,
                "slowest": self.slowest, "alone_s": seconds(self.alone_ns),
                "waited_gpu_s": round(float(self.waited_gpu_ns) / 1e9, 9)}  # fmt: skip


def fan_out_stragglers(
    spans: AttemptSpans,
    iterations: Collection[int],
    fleet_of: Mapping[str | None, str],
    gpus_of: Mapping[str | None, Fraction],
    found: dict[tuple[str, str, str | None], Straggler],
) -> None:
    """Add to `found` (by fleet, name and process) the fan-outs of `spans` in the windows of `iterations`."""
    groups: dict[tuple[int, int, int, str], list[int]] = {}
    for row in range(len(spans)):
        iteration = spans.eff_iteration[row]
        if iteration not in iterations:
            continue
        process = spans.processes[spans.process[row]]
        fleet = fleet_of.get(process)
        if fleet is None:
            continue
        # without a parent (NONE), the spans of the window share it
        groups.setdefault((iteration, spans.name[row], spans.parent[row], fleet), []).append(row)
    start, end = spans.start, spans.end
    for (_, name_code, _, fleet), rows in groups.items():
        codes = {spans.process[r] for r in rows}
        if len(codes) < 2:
            continue
        name = spans.names[name_code]
        for code in codes:
            key = (fleet, name, spans.processes[code])
            found.setdefault(key, Straggler(fleet, name, spans.processes[code])).fan_outs += 1
        latest = max(end[r] for r in rows)
        last = min((r for r in rows if end[r] == latest), key=lambda r: (-start[r], spans.span_id(r)))
        second = max(end[r] for r in rows if r != last)
        straggler = found[(fleet, name, spans.processes[spans.process[last]])]
        straggler.slowest += 1
        straggler.alone_ns += end[last] - second
        for r in rows:
            if r != last:
                straggler.waited_gpu_ns += (end[last] - end[r]) * gpus_of.get(spans.processes[spans.process[r]], 0)


def ranked(found: Mapping[tuple[str, str, str | None], Straggler]) -> list[Straggler]:
    """The stragglers that ended a fan-out last at least once, most time alone first (then fleet, name, process)."""
    rows = [s for s in found.values() if s.slowest]
    rows.sort(key=lambda s: (-s.alone_ns, s.fleet, s.name, s.process or ""))
    return rows


def waited_on_most(stragglers: Sequence[Straggler]) -> list[Straggler]:
    """Per fleet, the worker it waited on most (the first of `ranked`'s order in that fleet)."""
    seen: set[str] = set()
    out = []
    for straggler in stragglers:
        if straggler.fleet not in seen:
            seen.add(straggler.fleet)
            out.append(straggler)
    return out
