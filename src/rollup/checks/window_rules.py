"""Is the job's time covered by its spans? The `check` warnings that look at iteration windows (SPEC section 10).

A goodput figure is only as good as the spans behind it. A job that never entered `iteration_scope` has no
iteration to report (`no-iterations`); a window mostly charged to no bucket is uninstrumented work or lost spans,
so its goodput says little (`mostly-unaccounted`); and a phase the user knows runs every step but that left no
span in a window is a disabled span group or a lost worker file (`missing-group`, with `--expect`).

The windows are the report's: per iteration the latest attempt's, charged as the report charges them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from instrument.groups import nearest_group
from rollup.accounting.attribution import Charge, charge_stretches
from rollup.accounting.intervals import clip_to_stretches, in_time_batches
from rollup.accounting.windows import Window, iteration_windows, stretches_of
from rollup.base.memory import sweep_batch_spans
from rollup.base.schema import BUCKETS, sql_text
from rollup.store.attempts import ATTEMPT_SQL

from .findings import RULES, Finding

if TYPE_CHECKING:
    from rollup.store.spanset import SpanSet


def parse_groups(values: Iterable[str]) -> list[str]:
    """`--expect` values (each `GROUP` or `GROUP,GROUP,...`) as distinct lowercase group names in the order given;
    ValueError when they name none. Any name is taken: traces from other emitters may use groups of their own."""
    groups: list[str] = []
    for value in values:
        for name in value.split(","):
            name = name.strip().lower()
            if name and name not in groups:
                groups.append(name)
    if not groups:
        raise ValueError("give at least one span group name, e.g. --expect generation,policy_update")
    return groups


def window_findings(spans: SpanSet, expect: Sequence[str] = ()) -> list[Finding]:
    """`mostly-unaccounted` for each window whose unaccounted seconds exceed half its wall clock, then
    `missing-group` for each window and each group of `expect` (lowercase names) with no span active in it.
    Each in iteration order; a finding points at the window's step span when there is one, else at no span."""
    windows = iteration_windows(spans)
    if not windows:
        return []
    charges = charge_stretches(spans, stretches_of(windows), list(BUCKETS))
    present = groups_present(spans, windows, expect) if expect else {}
    return window_findings_from(windows, lambda keys: window_step_spans(spans, keys), charges, present, expect)


def window_findings_from(
    windows: Sequence[Window],
    steps_of: Callable[[Sequence[tuple[str, int]]], dict[tuple[str, int], tuple[str, str, str]]],
    charges: Sequence[Charge] | Mapping[int, Charge],
    present: dict[int, set[str]],
    expect: Sequence[str] = (),
) -> list[Finding]:
    """`window_findings` from what its queries found: the report's `windows`, each window's charge in declared
    bucket order and the groups present in it (both by the window's position), and `steps_of`, which gives the
    step spans (`window_step_spans`) of the (attempt, iteration) windows it is asked for: only the flagged windows'
    are asked for. Pure but for `steps_of`, so partial results merged from elsewhere (`report --ray`) give the same
    findings."""
    flagged: list[tuple[str, int, str, str]] = []  # (rule, window position, message, topic)
    for index in range(len(windows)):
        wall_ns, unaccounted_ns = charges[index].wall_ns, charges[index].unaccounted_ns
        if 2 * unaccounted_ns > wall_ns:  # more than half, in exact integers: half is not flagged
            message = (
                f"{unaccounted_ns / 1e9:.3f}s of its {wall_ns / 1e9:.3f}s window ({unaccounted_ns / wall_ns:.1%}) "
                "is charged to no bucket: uninstrumented work or lost spans"
            )
            flagged.append(("mostly-unaccounted", index, message, ""))
    for index in range(len(windows)):
        for group in expect:
            if group not in present.get(index, ()):
                message = (
                    f"no span of group {group} is active in its window: a disabled span group, a phase that "
                    "did not run, or a lost worker file" + _typo_hint(group)
                )
                flagged.append(("missing-group", index, message, group))
    if not flagged:
        return []
    steps = steps_of(sorted({(windows[index].run_id, windows[index].iteration) for _, index, _, _ in flagged}))
    findings = []
    for rule, index, message, topic in flagged:
        window = windows[index]
        trace_id, span_id, name = steps.get((window.run_id, window.iteration), ("", "", ""))
        text = f"iteration {window.iteration}: {message}"
        findings.append(Finding(rule, RULES[rule], trace_id, span_id, name, window.iteration, None, text, topic=topic))
    return findings


def _typo_hint(group: str) -> str:
    """` (did you mean 'generation'?)` for a group name that is a typo of one goodput knows, else nothing."""
    close = nearest_group(group)
    return f" (did you mean {close!r}? --expect takes rl.span_group names)" if close else ""


def window_step_spans(spans: SpanSet, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], tuple[str, str, str]]:
    """Per (attempt, iteration) of `keys`: the (trace_id, span_id, name) of the earliest step span carrying that
    iteration itself, the span a window is made of (SPEC section 4)."""
    import pyarrow as pa

    if not keys:
        return {}
    wanted = pa.table(
        {"attempt": pa.array([run_id for run_id, _ in keys], pa.string()),
         "iteration": pa.array([iteration for _, iteration in keys], pa.int64())}
    )  # fmt: skip
    steps = spans.step_spans()
    with steps.registered("step_spans_wanted", wanted) as wanted_table:
        rows = steps.rows(
            f"""
            SELECT attempt, iteration, trace_id, span_id, name FROM (
                SELECT {ATTEMPT_SQL} AS attempt, iteration, trace_id, span_id, name, start_ns FROM {steps.own}
                WHERE iteration IS NOT NULL
            ) SEMI JOIN {wanted_table} USING (attempt, iteration)
            QUALIFY row_number() OVER (PARTITION BY attempt, iteration ORDER BY start_ns, span_id) = 1
            """
        )
    return {(run_id, int(i)): (t, s, n) for run_id, i, t, s, n in rows}


def groups_present(
    spans: SpanSet,
    windows: Sequence[Window],
    groups: Sequence[str],
    *,
    batch_spans: int | None = None,
) -> dict[int, set[str]]:
    """Per window (by position), which of `groups` have a span overlapping it with positive length, bucketed or
    not, whatever its process, iteration or attempt (as the wall clock is charged). The windows are taken in
    batches consecutive in time as the charge takes them (`intervals.in_time_batches`; `batch_spans`: the most spans a
    batch reads, default what the memory limit has room for)."""
    if not windows or not groups:
        return {}
    in_list = ", ".join(sql_text(group) for group in groups)
    spans_sql = (
        f"SELECT start_ns, end_ns, lower(span_group) AS grp FROM {spans.own} "
        f"WHERE end_ns > start_ns AND lower(span_group) IN ({in_list})"
    )
    most = batch_spans or sweep_batch_spans(spans.limit_bytes)
    present: dict[int, set[str]] = {}
    for positions, batch, batch_sql in in_time_batches(spans, stretches_of(windows), spans_sql, most):
        with spans.scratch("groups_clipped") as clipped:
            clip_to_stretches(spans, batch, batch_sql, ["grp"], clipped)
            rows = spans.rows(f"SELECT DISTINCT stretch, grp FROM {clipped}")
        for frame_id, group in rows:
            present.setdefault(positions[frame_id], set()).add(group)
    return present
