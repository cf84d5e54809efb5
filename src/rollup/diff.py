"""Did it get worse, and where (SPEC section 9): two runs' typical step compared figure by figure and phase by phase.

Each side is summarised by medians over its iteration rows, not by totals: two runs rarely have the same number of
steps, and a median step shrugs off the one step that hit a slow checkpoint or a straggler. The phases (span names,
by bucket, from the `--by name` breakdown) are compared the same way, a phase absent from a step counting 0 there,
and sorted by how much they moved, so the first line says what changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import TYPE_CHECKING, Any

from .attribution import Charge, parse_precedence
from .breakdown import charged_name_walls, name_share_columns
from .lineage import ensure_lineage
from .report import Report, select_windows
from .rows import NS_PER_S
from .schema import BUCKETS
from .windows import iteration_windows

if TYPE_CHECKING:
    from .store import SpanStore


@dataclass(frozen=True)
class Side:
    """One run as the diff sees it: the paths it was read from, its rows' medians and its phases' medians.

    Seconds figures are held as nanoseconds (a median of integers: whole, or a half between two), so a delta is one
    exact subtraction divided once, with none of the float noise of subtracting two rounded seconds."""

    paths: list[str]
    iterations: int
    median_ns: dict[str, float | None]  # wall_s, each bucket's seconds and unaccounted_s, in nanoseconds
    goodput: float | None
    names_ns: dict[tuple[str, str], float]  # (name, bucket) -> median wall nanoseconds per iteration

    @property
    def median(self) -> dict[str, float | None]:
        out = {k: None if v is None else v / NS_PER_S for k, v in self.median_ns.items()}
        return {**out, "goodput": self.goodput}


def _middle(values: Sequence[float]) -> float | None:
    return float(median(values)) if values else None


def summarise(report: Report, paths: Sequence[str]) -> Side:
    """A side of the diff from a report built with `by="name"`."""
    rows = report.iterations
    charges = [Charge(r.figures.wall_ns, r.figures.bucket_ns, r.figures.unaccounted_ns) for r in rows]
    names = [{(share.name, share.bucket): share.wall_ns for share in row.names or ()} for row in rows]
    return _side(paths, charges, names)


def measure(
    store: SpanStore, paths: Sequence[str], *, iterations: tuple[int, int] | None = None, precedence: str | None = None
) -> Side:
    """A side of the diff straight from a store: `summarise(build_report(store, by="name", ...))` without the parts
    of a report the diff does not compare (span-seconds, the time outside and between attempts, outliers)."""
    order = parse_precedence(precedence)
    connection = store.connection
    ensure_lineage(store)
    windows = select_windows(iteration_windows(connection), iterations)
    charges, walls = charged_name_walls(connection, windows, order)
    shares, _ = name_share_columns(connection, windows, walls)  # names with span-seconds alone are listed at 0 wall
    names: list[dict[tuple[str, str], int]] = [{} for _ in windows]
    for position, key, bucket, wall_ns in zip(shares.positions, shares.key_ids, shares.buckets, shares.wall_ns,
                                              strict=True):  # fmt: skip
        names[position][(shares.keys[key], BUCKETS[bucket])] = wall_ns
    return _side(paths, charges, names)


def _side(paths: Sequence[str], rows: Sequence[Charge], names: Sequence[dict[tuple[str, str], int]]) -> Side:
    """Medians over the rows' charges, and over each (name, bucket)'s wall nanoseconds (0 in a row without it)."""
    figures: dict[str, float | None] = {
        "wall_s": _middle([r.wall_ns for r in rows]),
        **{f"{b}_s": _middle([r.bucket_ns[b] for r in rows]) for b in BUCKETS},
        "unaccounted_s": _middle([r.unaccounted_ns for r in rows]),
    }
    goodput = _middle([r.bucket_ns["productive"] / r.wall_ns for r in rows if r.wall_ns > 0])
    per_name: dict[tuple[str, str], list[int]] = {}
    for of_row in names:
        for key, ns in of_row.items():
            if key in per_name:
                per_name[key].append(ns)
            else:
                per_name[key] = [ns]
    return Side(list(paths), len(rows), figures, goodput,
                {key: _median_with_zeros(v, len(rows)) for key, v in per_name.items()})  # fmt: skip


def _median_with_zeros(present: list[int], rows: int) -> float:
    """The median of `present` and as many zeros as it takes to make `rows` values (the rows a name is absent
    from)."""
    return float(median([*present, *[0] * (rows - len(present))]))


def _delta(baseline: float | None, candidate: float | None, scale: float = 1.0) -> float | None:
    return None if baseline is None or candidate is None else (candidate - baseline) / scale


def _ratio(baseline: float | None, candidate: float | None) -> float | None:
    """candidate / baseline - 1; None when the baseline is 0 or either side has no value."""
    return None if baseline is None or candidate is None or baseline == 0 else candidate / baseline - 1


def compare(baseline: Side, candidate: Side) -> dict[str, Any]:
    """SPEC section 9's object: each side's medians, their delta and ratio, and the phases sorted by how much
    their median moved (largest absolute change first; then bucket order and name, so ties read the same)."""
    keys = sorted(set(baseline.names_ns) | set(candidate.names_ns), key=lambda k: (BUCKETS.index(k[1]), k[0]))
    names: list[dict[str, Any]] = []
    for name, bucket in keys:
        before, after = baseline.names_ns.get((name, bucket), 0.0), candidate.names_ns.get((name, bucket), 0.0)
        names.append({"name": name, "bucket": bucket, "baseline_s": before / NS_PER_S, "candidate_s": after / NS_PER_S,
                      "delta_s": (after - before) / NS_PER_S})  # fmt: skip
    names.sort(key=lambda n: -abs(n["delta_s"]))  # stable: ties keep bucket order, then name
    return {
        "baseline": _side_json(baseline),
        "candidate": _side_json(candidate),
        "delta": {
            **{f: _delta(baseline.median_ns[f], candidate.median_ns[f], NS_PER_S) for f in baseline.median_ns},
            "goodput": _delta(baseline.goodput, candidate.goodput),
        },
        "ratio": {
            **{f: _ratio(baseline.median_ns[f], candidate.median_ns[f]) for f in baseline.median_ns},
            "goodput": _ratio(baseline.goodput, candidate.goodput),
        },
        "names": names,
    }


def _side_json(side: Side) -> dict[str, Any]:
    return {"paths": side.paths, "iterations": side.iterations, "median": dict(side.median)}


def slower_than(diff: dict[str, Any], percent: float) -> str | None:
    """Why `diff --fail-over PCT` fails: the candidate's median step is more than PCT percent slower than the
    baseline's; None when it is not. Without a median step on both sides there is nothing to hold, and it fails."""
    before, after = diff["baseline"]["median"]["wall_s"], diff["candidate"]["median"]["wall_s"]
    if before is None or after is None:
        side = "baseline" if before is None else "candidate"
        return f"diff gate failed: the {side} has no iteration, so there is no median step to compare"
    if after > before * (1 + percent / 100):
        ratio = diff["ratio"]["wall_s"]
        change = f"{100 * ratio:+.1f}%" if ratio is not None else f"{after - before:+.3f} s"
        return (f"diff gate failed: median step {change} ({before:.3f} s -> {after:.3f} s), more than "
                f"--fail-over {percent:g}%")  # fmt: skip
    return None
