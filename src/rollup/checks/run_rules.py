"""The `check` rules about the whole run, not about one span or one window: worked out once, from every span, after
the parts of a check are merged (`checks`), whoever computed the parts.

Each says the figures cannot be read as they stand: two jobs in one folder (`overlapping-attempts`, `duplicate-step`),
a step whose span was lost with its process (`lost-step`), or nothing to measure at all (`no-spans`,
`no-iterations`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollup.store.attempts import ATTEMPT_SQL, attempt_label, overlapping_attempts

from .findings import RULES, Finding

if TYPE_CHECKING:
    from rollup.store.spanset import SpanSet


def _seconds(ns: int | None) -> str:
    return f"{(ns or 0) / 1e9:.3f}s"


def _finding(rule: str, span: dict | None, related: str | None, message: str, iteration: int | None = None) -> Finding:
    span = span or {}
    return Finding(
        rule, RULES[rule], span.get("trace_id", ""), span.get("span_id", ""), span.get("name", ""),
        span.get("iteration", iteration), related, message,
    )  # fmt: skip


def overlapping_attempts_findings(spans: SpanSet) -> list[Finding]:
    """Two attempts whose extents overlap: two jobs writing into one folder. Each window then charges the other
    job's spans too, so neither job's figures are its own. One finding per pair, on the later attempt's
    earliest-starting span, related to the earlier attempt's."""
    pairs = overlapping_attempts(spans.attempts())
    if not pairs:
        return []
    earliest = {
        run_id: first
        for run_id, first in spans.rows(
            f"""
            SELECT {ATTEMPT_SQL}, min({{'start_ns': start_ns, 'span_id': span_id, 'trace_id': trace_id, 'name': name,
                                        'iteration': eff_iteration}})
            FROM {spans.lineage} GROUP BY ALL
            """
        )
    }
    findings = []
    for later, earlier, overlap_ns in pairs:
        span, related = earliest[later.run_id], earliest[earlier.run_id]
        message = (
            f"attempt {attempt_label(later.run_id)} overlaps attempt {attempt_label(earlier.run_id)} for "
            f"{_seconds(overlap_ns)}: two jobs writing into one folder? Every window charges both jobs' spans; "
            "read one with --attempt"
        )
        findings.append(
            Finding("overlapping-attempts", RULES["overlapping-attempts"], span["trace_id"], span["span_id"],
                    span["name"], span["iteration"], related["span_id"], message)
        )  # fmt: skip
    return findings


def no_iterations_findings(spans: SpanSet) -> list[Finding]:
    """One finding when spans were read but none has an effective iteration: the job never entered
    `iteration_scope` (or a foreign emitter sets no `rl.iteration`), so every instant is outside any window."""
    ((read, with_iteration),) = spans.rows(f"SELECT count(*), count(eff_iteration) FROM {spans.lineage}")
    if not read or with_iteration:
        return []
    spans_read = f"{read} span" + ("" if read == 1 else "s")
    message = (
        f"{spans_read} read and none carries rl.iteration, on itself or an ancestor: the job never entered "
        "iteration_scope, so there is no iteration window and every second is outside"
    )
    return [Finding("no-iterations", RULES["no-iterations"], "", "", "", None, None, message)]


def orphan_span_findings(spans: SpanSet) -> list[Finding]:
    """Spans whose parent id names no loaded span: a lost span or a broken trace-context hand-off; or, where the
    span's trace has no root at all, a parent still open when its process ended (a crash leaves the job and step
    spans unwritten, and every span under them an orphan). Worked out over the whole run, since a trace's root may
    lie anywhere in time. By trace and span."""
    rows = spans.rows(
        f"""
        WITH rooted AS (SELECT DISTINCT trace_id FROM {spans.own} WHERE parent_span_id IS NULL)
        SELECT s.trace_id, s.span_id, s.name, s.eff_iteration, s.parent_span_id, r.trace_id IS NOT NULL
        FROM {spans.lineage} s LEFT JOIN rooted r USING (trace_id)
        WHERE s.parent_span_id IS NOT NULL AND NOT s.has_parent
        ORDER BY s.trace_id, s.span_id
        """
    )
    findings = []
    for trace_id, span_id, name, iteration, parent, rooted in rows:
        why = (
            "a lost span or a broken trace-context hand-off"
            if rooted
            else "its trace has no root span, so the parent was most likely still open when its process ended "
            "(a crash or a kill)"
        )
        message = f"{name} names parent {parent}, which no loaded file holds: {why}"
        findings.append(Finding("orphan-span", RULES["orphan-span"], trace_id, span_id, name, iteration, parent,
                                message))  # fmt: skip
    return findings


def no_spans_findings(spans: SpanSet) -> list[Finding]:
    """One finding when nothing was read: every file empty or skipped. A CI gate (`check --strict`) must not pass
    on a run it could not see."""
    ((read,),) = spans.rows(f"SELECT count(*) FROM {spans.lineage}")
    if read:
        return []
    message = "no span was read (every file was empty or skipped): there is nothing to check, and no goodput"
    return [Finding("no-spans", RULES["no-spans"], "", "", "", None, None, message)]


def lost_step_findings(spans: SpanSet) -> list[Finding]:
    """Each iteration strictly between an attempt's lowest and highest step-span iteration whose spans were read
    but whose step span was not: its process ended before writing it (a crash), so the iteration has no window and
    its time is counted outside. On the earliest-starting span of that iteration."""
    steps = spans.step_spans()
    ((gaps,),) = steps.rows(  # no iteration missing between the lowest and highest step: nothing to look for
        f"""
        SELECT count(*) FROM (
            SELECT {ATTEMPT_SQL} AS attempt FROM {steps.own} WHERE iteration IS NOT NULL
            GROUP BY attempt HAVING count(DISTINCT iteration) < max(iteration) - min(iteration) + 1
        )
        """
    )
    if not gaps:
        return []
    rows = spans.rows(
        f"""
        WITH steps AS (
            SELECT {ATTEMPT_SQL} AS attempt, iteration FROM {steps.own}
            WHERE iteration IS NOT NULL GROUP BY ALL
        ),
        bounds AS (SELECT attempt, min(iteration) AS low, max(iteration) AS high FROM steps GROUP BY attempt),
        found AS (
            SELECT {ATTEMPT_SQL} AS attempt, eff_iteration AS iteration, count(*) AS read
            FROM {spans.lineage} WHERE eff_iteration IS NOT NULL GROUP BY ALL
        ),
        lost AS (
            SELECT f.attempt, f.iteration, f.read
            FROM found f JOIN bounds b USING (attempt) ANTI JOIN steps s USING (attempt, iteration)
            WHERE f.iteration > b.low AND f.iteration < b.high
        )
        SELECT l.attempt, l.iteration,
               min({{'start_ns': x.start_ns, 'span_id': x.span_id, 'trace_id': x.trace_id, 'name': x.name}}), l.read
        FROM (
            SELECT {ATTEMPT_SQL} AS attempt, eff_iteration AS iteration, start_ns, span_id, trace_id, name
            FROM {spans.lineage}
        ) x
        JOIN lost l USING (attempt, iteration)
        GROUP BY l.attempt, l.iteration, l.read
        ORDER BY l.attempt, l.iteration
        """
    )
    findings = []
    for run_id, iteration, first, read in rows:
        message = (
            f"iteration {iteration}: {read} of its spans were read but not its step span (its process ended "
            f"before writing it: a crash?), so it has no window and its time is counted outside"
            + (f" (attempt {attempt_label(run_id)})" if run_id else "")
        )
        findings.append(_finding("lost-step", first, None, message, int(iteration)))
    return findings


def duplicate_step_findings(spans: SpanSet) -> list[Finding]:
    """Two step spans of one iteration in one attempt that do not overlap: two runs without run ids read together
    (one window now covers both and everything between). Each step span that starts after every earlier one of its
    iteration has ended, on the later one, related to the earlier one that ended last."""
    steps = spans.step_spans()
    rows = steps.rows(
        f"""
        WITH steps AS (
            SELECT {ATTEMPT_SQL} AS attempt, iteration, trace_id, span_id, name, start_ns, end_ns
            FROM {steps.own} WHERE iteration IS NOT NULL
        ),
        ordered AS (
            SELECT *,
                   max(end_ns) OVER w AS before_end,
                   arg_max(span_id, end_ns) OVER w AS before_span
            FROM steps
            WINDOW w AS (PARTITION BY attempt, iteration ORDER BY start_ns, span_id
                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
        )
        SELECT trace_id, span_id, name, iteration, before_span, start_ns - before_end, attempt
        FROM ordered WHERE before_end IS NOT NULL AND start_ns >= before_end
        ORDER BY trace_id, span_id
        """
    )
    findings = []
    for trace_id, span_id, name, iteration, related, gap_ns, run_id in rows:
        message = (
            f"step {iteration} ran twice in attempt {attempt_label(run_id)}, {_seconds(gap_ns)} apart: two runs "
            "without run ids read together? One window now covers both and everything between; give each run its "
            "own run id (configure(run_id=...), GOODPUT_RUN_ID) or its own folder"
        )
        findings.append(
            Finding("duplicate-step", RULES["duplicate-step"], trace_id, span_id, name, int(iteration), related,
                    message)
        )  # fmt: skip
    return findings
