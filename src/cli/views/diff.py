"""`goodput diff` as text (SPEC sections 9 and 14): a one-line verdict, the medians side by side, the phases that
moved.

The verdict leads, because a CI log or a reviewer reads one line ("median step +12.4% (1.100 s -> 1.236 s):
rl.grpo.generation (productive) +0.300 s longer (median span 1.000 s -> 1.300 s); on the critical path:
rl.grpo.policy_training (productive) +0.150 s a step"). It names two phases, which need not be one: the phase whose
spans' median length moved most (what got longer or shorter) and the one whose median time on the critical path
moved most (what the step waited on longer or less). Neither is a phase's share of the wall clock, which moves when
a phase beside it does; and a phase whose spans got longer moves the step only where the step waited on it. The
JSON is SPEC's object as it is; CSV and Markdown get the figures' rows, then the phases' shares, times on the path
and span lengths, in one table (`kind` says which).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollup.report import FIGURES

from .formats import OutputFormat, json_text, render_rows
from .narrow import Fit
from .tables import table_text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rollup import Diff
    from rollup.report import PhaseChange

# The figures compared, in the report's order (`rollup.report.diff` compares these).
_COMPARED = [figure for figure in FIGURES if figure.in_diff]

# The phases listed in the table; JSON, CSV and Markdown list them all.
TABLE_NAMES = 15
# A phase moved, for the verdict, when its median time on the path per step, or its spans' median length, changed by
# at least this share of the baseline's median step: below it is the noise of a step's few milliseconds of
# scheduling.
MOVED_SHARE = 0.01


def _signed_seconds(value: float) -> str:
    return f"{value:+.3f} s"


def verdict_line(diff: Diff) -> str:
    """`median step +12.4% (1.100 s -> 1.236 s): rl.grpo.generation (productive) +0.300 s longer (median span
    1.000 s -> 1.300 s); on the critical path: rl.grpo.policy_training (productive) +0.150 s a step`: the phase
    whose spans' median length moved most, and the one whose median time on the path moved most (`no phase ...`
    when none moved by MOVED_SHARE of the baseline's median step)."""
    before, after = diff.baseline.median["wall_s"], diff.candidate.median["wall_s"]
    if before is None or after is None:
        side = "baseline" if before is None else "candidate"
        return f"no median step: the {side} has no iteration"
    ratio = diff.ratio("wall_s")
    change = f"{100 * ratio:+.1f}%" if ratio is not None else _signed_seconds(after - before)
    head = f"median step {change} ({before:.3f} s -> {after:.3f} s): "
    least = MOVED_SHARE * before
    if not diff.durations and not diff.critical:  # sides summarised from reports: the share that moved most
        moved = _mover(diff.names, least)
        return head + (f"{_phase(moved)} {_signed_seconds(moved.delta_s)}" if moved else "no phase moved")
    longer = _mover(diff.durations, least)
    length = "no phase's spans got longer or shorter"
    if longer is not None:
        how = "longer" if longer.delta_s > 0 else "shorter"
        length = (f"{_phase(longer)} {_signed_seconds(longer.delta_s)} {how} "
                  f"(median span {longer.baseline_s:.3f} s -> {longer.candidate_s:.3f} s)")  # fmt: skip
    waited = _mover(diff.critical, least)
    path = f"{_phase(waited)} {_signed_seconds(waited.delta_s)} a step" if waited else "no phase moved"
    return f"{head}{length}; on the critical path: {path}"


def _mover(changes: Sequence[PhaseChange], least: float) -> PhaseChange | None:
    """The first of `changes` (sorted by absolute change) when it moved by `least` seconds or more (and at all)."""
    if changes and changes[0].delta_s != 0 and abs(changes[0].delta_s) >= least:
        return changes[0]
    return None


def _phase(change: PhaseChange) -> str:
    return f"{change.name} ({change.bucket})"


def _shown(value: float | None, share: bool) -> str:
    if value is None:
        return ""
    return f"{100 * value:.1f}%" if share else f"{value:.3f}"


def _figure_rows(diff: Diff) -> list[list[str]]:
    rows = []
    for figure in _COMPARED:
        key, share = figure.key, figure.unit == "share"
        before, after = diff.baseline.median[key], diff.candidate.median[key]
        delta, ratio = diff.delta(key), diff.ratio(key)
        shown_delta = "" if delta is None else (f"{100 * delta:+.1f} pt" if share else f"{delta:+.3f}")
        rows.append([key, _shown(before, share), _shown(after, share), shown_delta,
                     "" if ratio is None else f"{100 * ratio:+.1f}%"])  # fmt: skip
    if diff.gpus:
        before, after, delta, ratio = diff.gpu_goodput()
        shown_delta = "" if delta is None else f"{100 * delta:+.1f} pt"
        shown_ratio = "" if ratio is None else f"{100 * ratio:+.1f}%"
        rows.append(["gpu_goodput", _shown(before, True), _shown(after, True), shown_delta, shown_ratio])
    return rows


def diff_table(diff: Diff, *, width: int) -> str:
    """The verdict, the medians table and the top phases by absolute change: their shares of the step, their spans'
    lengths, their times on the path."""
    title = f"median of {diff.baseline.iterations} baseline and {diff.candidate.iterations} candidate iterations"
    right = [False, True, True, True, True]
    out = [verdict_line(diff) + "\n\n"]
    out.append(
        table_text(["figure", "baseline", "candidate", "delta", "change"], _figure_rows(diff), title=title,
                   title_justify="left", right=right, width=width)
    )  # fmt: skip
    tables = (
        (diff.names, "median seconds per step by phase", False),
        (diff.durations, "median span length by phase", True),
        (diff.critical, "median seconds per step on the critical path", False),
    )
    for changes, what, with_ratio in tables:
        if changes:
            out += ["\n", _phases_table(changes, f"{what}, largest change first", width, with_ratio)]
    return "".join(out)


def _phases_table(changes: Sequence[PhaseChange], title: str, width: int, with_ratio: bool = False) -> str:
    """The first TABLE_NAMES of `changes` (a phase's medians on each side and their difference, and with
    `with_ratio` their change), under `title`."""
    shown = changes[:TABLE_NAMES]
    head = ["name", "bucket", "baseline s", "candidate s", "delta s"]
    rows = [[n.name, n.bucket, f"{n.baseline_s:.3f}", f"{n.candidate_s:.3f}",
             _signed_seconds(n.delta_s).removesuffix(" s")] for n in shown]  # fmt: skip
    fits = [Fit("elide"), Fit("text", drop=1), Fit("figure"), Fit("figure"), Fit("figure")]
    if with_ratio:
        head.append("change")
        for row, n in zip(rows, shown, strict=True):
            row.append("" if n.ratio is None else f"{100 * n.ratio:+.1f}%")
        fits.append(Fit("figure"))
    more = len(changes) - len(shown)
    return table_text(head, rows, title=title + (f" ({more} more in JSON)" if more else ""), title_justify="left",
                      right=[False, False, *[True] * (len(head) - 2)], width=width, fits=fits)  # fmt: skip


def diff_rows(diff: Diff) -> tuple[list[str], list[list[Any]]]:
    """CSV / Markdown: `kind` (figure; name: a phase's share of the step; critical: its time on the path; duration:
    its spans' length), what, bucket, baseline, candidate, delta, ratio."""
    head = ["kind", "what", "bucket", "baseline", "candidate", "delta", "ratio"]
    rows: list[list[Any]] = [
        ["figure", f.key, None, diff.baseline.median[f.key], diff.candidate.median[f.key], diff.delta(f.key),
         diff.ratio(f.key)]
        for f in _COMPARED
    ]  # fmt: skip
    if diff.gpus:
        rows.append(["figure", "gpu_goodput", None, *diff.gpu_goodput()])
    for kind, changes in (("name", diff.names), ("critical", diff.critical), ("duration", diff.durations)):
        rows += [[kind, n.name, n.bucket, n.baseline_s, n.candidate_s, n.delta_s, n.ratio] for n in changes]
    return head, rows


def diff_text(diff: Diff, fmt: OutputFormat, *, width: int) -> str:
    if fmt is OutputFormat.json:
        return json_text(diff.json())
    if fmt is OutputFormat.table:
        return diff_table(diff, width=width)
    return render_rows(*diff_rows(diff), fmt, width=width)
