"""The gates' option values and verdicts (SPEC sections 9 and 10): `--fail-under 0.6|60%`, `--fail-over PCT`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rollup import Diff


def goodput_share(text: str) -> float:
    """`0.6` or `60%` as the share 0.6; a bare number above 1 is refused, since `60` could mean either."""
    value = text.strip()
    percent = value.endswith("%")
    try:
        number = float(value.rstrip("%").strip())
    except ValueError:
        raise ValueError(f"expected a share like 0.6 or a percentage like 60%, got {text!r}") from None
    share = number / 100 if percent else number
    if not 0 <= share <= 1 or number != number:
        hint = f"; for {number:g} percent write {number:g}%" if not percent and 1 < number <= 100 else ""
        raise ValueError(f"a goodput is between 0 and 1 (0% and 100%), got {text!r}{hint}")
    return share


def goodput_gate_verdict(goodput: float | None, gate: float) -> str | None:
    """Why `report --fail-under` fails, or None when the total goodput meets the gate. A run with no wall clock in
    any window has no goodput at all, which fails: the gate cannot vouch for a run it could not measure."""
    if goodput is None:
        return f"goodput gate failed: no iteration was measured, so there is no goodput to hold to {gate:.1%}"
    if goodput < gate:
        return f"goodput gate failed: total goodput {goodput:.2%} is below --fail-under {gate:.2%}"
    return None


def percent_over(text: str) -> float:
    """`--fail-over`'s value: `10` or `10%` as 10.0 (percent); negative values are refused."""
    value = text.strip().rstrip("%").strip()
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a percentage like 10 or 10%, got {text!r}") from None
    if number < 0 or number != number:
        raise ValueError(f"expected a percentage of 0 or more, got {text!r}")
    return number


def slower_verdict(diff: Diff, percent: float) -> str | None:
    """Why `diff --fail-over PCT` fails: the candidate's median step is more than PCT percent slower than the
    baseline's; None when it is not. Without a median step on both sides there is nothing to hold, and it fails."""
    before, after = diff.baseline.median["wall_s"], diff.candidate.median["wall_s"]
    if before is None or after is None:
        side = "baseline" if before is None else "candidate"
        return f"diff gate failed: the {side} has no iteration, so there is no median step to compare"
    if after > before * (1 + percent / 100):
        ratio = diff.ratio("wall_s")
        change = f"{100 * ratio:+.1f}%" if ratio is not None else f"{after - before:+.3f} s"
        return (f"diff gate failed: median step {change} ({before:.3f} s -> {after:.3f} s), more than "
                f"--fail-over {percent:g}%")  # fmt: skip
    return None
