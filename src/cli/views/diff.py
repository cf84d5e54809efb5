"""`goodput diff` as text (SPEC section 9): a one-line verdict, the medians side by side, the phases that moved.

The verdict leads ("median step +12.4% (1.100 s -> 1.236 s): rl.grpo.generation +0.300 s, ..."), because a CI log
or a reviewer reads one line. It names the phases whose median time on the critical path moved (SPEC section 14),
not their share of the wall clock: a phase the step did not wait on can gain share when another phase shrinks. The
JSON is SPEC's object as it is; CSV and Markdown get the figures' rows, then the phases' rows, then the phases'
times on the path, in one table (`kind` says which).
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
MOVERS_IN_VERDICT = 3
# A phase moved, for the verdict, when its median time on the path per step changed by at least this share of the
# baseline's median step: below it is the noise of a step's few milliseconds of scheduling.
MOVED_SHARE = 0.01


def _signed_seconds(value: float) -> str:
    return f"{value:+.3f} s"


def verdict_line(diff: Diff) -> str:
    """`median step +12.4% (1.100 s -> 1.236 s): generation +0.300 s, refit bubble +0.090 s`."""
    before, after = diff.baseline.median["wall_s"], diff.candidate.median["wall_s"]
    if before is None or after is None:
        side = "baseline" if before is None else "candidate"
        return f"no median step: the {side} has no iteration"
    ratio = diff.ratio("wall_s")
    change = f"{100 * ratio:+.1f}%" if ratio is not None else _signed_seconds(after - before)
    changes = diff.critical or diff.names  # a side summarised from a report alone has no paths
    least = MOVED_SHARE * before if diff.critical else 0.0
    movers = [n for n in changes if n.delta_s != 0 and abs(n.delta_s) >= least][:MOVERS_IN_VERDICT]
    moved = ", ".join(f"{n.name} ({n.bucket}) {_signed_seconds(n.delta_s)}" for n in movers)
    nothing = ": no phase moved on the critical path" if diff.critical else ": no phase moved"
    return f"median step {change} ({before:.3f} s -> {after:.3f} s)" + (f": {moved}" if moved else nothing)


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
    """The verdict, the medians table and the top phases by absolute change."""
    title = f"median of {diff.baseline.iterations} baseline and {diff.candidate.iterations} candidate iterations"
    right = [False, True, True, True, True]
    out = [verdict_line(diff) + "\n\n"]
    out.append(
        table_text(["figure", "baseline", "candidate", "delta", "change"], _figure_rows(diff), title=title,
                   title_justify="left", right=right, width=width)
    )  # fmt: skip
    for changes, what in ((diff.names, "by phase"), (diff.critical, "on the critical path")):
        if changes:
            out += ["\n", _phases_table(changes, f"median seconds per step {what}, largest change first", width)]
    return "".join(out)


def _phases_table(changes: Sequence[PhaseChange], title: str, width: int) -> str:
    """The first TABLE_NAMES of `changes` (a phase's medians on each side and their difference), under `title`."""
    shown = changes[:TABLE_NAMES]
    rows = [[n.name, n.bucket, f"{n.baseline_s:.3f}", f"{n.candidate_s:.3f}",
             _signed_seconds(n.delta_s).removesuffix(" s")] for n in shown]  # fmt: skip
    fits = [Fit("elide"), Fit("text", drop=1), Fit("figure"), Fit("figure"), Fit("figure")]
    more = len(changes) - len(shown)
    return table_text(["name", "bucket", "baseline s", "candidate s", "delta s"], rows,
                      title=title + (f" ({more} more in JSON)" if more else ""), title_justify="left",
                      right=[False, False, True, True, True], width=width, fits=fits)  # fmt: skip


def diff_rows(diff: Diff) -> tuple[list[str], list[list[Any]]]:
    """CSV / Markdown: `kind` (figure, name, or critical: a phase's time on the path), what, bucket, baseline,
    candidate, delta, ratio."""
    head = ["kind", "what", "bucket", "baseline", "candidate", "delta", "ratio"]
    rows: list[list[Any]] = [
        ["figure", f.key, None, diff.baseline.median[f.key], diff.candidate.median[f.key], diff.delta(f.key),
         diff.ratio(f.key)]
        for f in _COMPARED
    ]  # fmt: skip
    if diff.gpus:
        rows.append(["figure", "gpu_goodput", None, *diff.gpu_goodput()])
    for n in diff.names:
        ratio = n.candidate_s / n.baseline_s - 1 if n.baseline_s else None
        rows.append(["name", n.name, n.bucket, n.baseline_s, n.candidate_s, n.delta_s, ratio])
    for n in diff.critical:
        ratio = n.candidate_s / n.baseline_s - 1 if n.baseline_s else None
        rows.append(["critical", n.name, n.bucket, n.baseline_s, n.candidate_s, n.delta_s, ratio])
    return head, rows


def diff_text(diff: Diff, fmt: OutputFormat, *, width: int) -> str:
    if fmt is OutputFormat.json:
        return json_text(diff.json())
    if fmt is OutputFormat.table:
        return diff_table(diff, width=width)
    return render_rows(*diff_rows(diff), fmt, width=width)
