"""The accounting bugs `goodput check` flags in the spans (SPEC section 5), each found by one query over their lineage.

Every rule exists because it makes a goodput figure wrong or unexplainable: a bucketed span inside a bucketed span
counts the same wall clock twice in any naive sum; concurrent instances of one bucketed span multiply it; an orphan
is a lost span or a broken trace-context hand-off, which silently moves work out of its iteration. The rules that
look at iteration windows rather than spans are in `window_rules`, the rules' table and `Finding` in `findings`, and
`checks` runs them all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rollup.accounting.intervals import start_cuts
from rollup.base.memory import sweep_batch_spans
from rollup.base.schema import BUCKET_LIST_SQL
from rollup.store.attempts import ATTEMPT_SQL

from .findings import RULES, Finding

if TYPE_CHECKING:
    from rollup.store.spanset import SpanSet


def _seconds(ns: int | None) -> str:
    return f"{(ns or 0) / 1e9:.3f}s"


def _findings(
    spans: SpanSet, rule: str, sql: str, describe: Callable[..., str], *, counted_twice: bool = False
) -> list[Finding]:
    """Findings of `rule`, one per row of `sql`.

    Rows start (trace_id, span_id, name, iteration, related_span_id); with `counted_twice`, the next column is the
    nanoseconds counted twice (reported as `overlap_s`). `describe(name, *rest)` turns the rest of the row into the
    message.
    """
    findings = []
    for t, s, n, i, related, *rest in spans.rows(sql):
        overlap_s = rest[0] / 1e9 if counted_twice else None
        findings.append(Finding(rule, RULES[rule], t, s, n, i, related, describe(n, *rest), overlap_s))
    return findings


def nested_bucket_findings(spans: SpanSet) -> list[Finding]:
    return _findings(
        spans,
        "nested-bucket",
        f"""
        SELECT c.trace_id, c.span_id, c.name, c.eff_iteration, a.span_id,
               greatest(0, least(c.end_ns, a.end_ns) - greatest(c.start_ns, a.start_ns)), c.bucket, a.name, a.bucket
        FROM {spans.lineage} c JOIN {spans.lineage} a ON a.trace_id = c.trace_id AND a.span_id = c.bucketed_chain[-1]
        WHERE c.bucketed AND len(c.bucketed_chain) > 0
        """,
        lambda n, ns, b, an, ab: f"{n} ({b}) runs inside {an} ({ab}): {_seconds(ns)} counted twice",
        counted_twice=True,
    )


def _instances(spans: SpanSet) -> str:
    """The bucketed spans that take part in self-overlap: zero-length ones overlap nothing (SPEC section 4)."""
    return f"SELECT * FROM {spans.lineage} WHERE bucketed AND end_ns > start_ns"


# Two instances that are relatives (one an ancestor of the other) are `nested-bucket`'s, never `self-overlap`'s.
_RELATIVES = (
    "(p.trace_id = f.trace_id AND (list_contains(f.bucketed_chain, p.span_id) "
    "OR list_contains(p.bucketed_chain, f.span_id)))"
)
_EARLIER = "(p.start_ns < f.start_ns OR (p.start_ns = f.start_ns AND p.skey < f.skey))"
_RELATED_COLUMNS = "f.tkey, f.skey, p.span_id AS related, p.start_ns AS r_start, p.skey AS r_skey, p.end_ns AS r_end"


def self_overlap_findings(spans: SpanSet, *, batch_spans: int | None = None) -> list[Finding]:
    """Same-name bucketed spans of one process overlapping, whatever their nesting depth, neither an ancestor of the
    other. Each later instance is a finding, related to the earlier one reaching furthest into it. `batch_spans`:
    the most instances one sweep takes (default: what the memory limit has room for, `memory.sweep_batch_spans`).

    A sweep per (process, name) in start order leaves the candidates: spans starting before the latest end seen so
    far. For most, the instance reaching furthest is no relative, and one equality join settles them. The rest (a
    same-name span nested in another, also a `nested-bucket` finding) look among every earlier instance still
    running at their start, in a range join of their own.
    """
    with spans.scratch("self_overlap_candidates") as candidates, spans.scratch("self_overlap_related") as related:
        _sweep_candidates(spans, batch_spans or sweep_batch_spans(spans.limit_bytes), candidates)
        ((found,),) = spans.rows(f"SELECT count(*) FROM {candidates}")
        if not found:
            return []
        spans.run(
            f"""
            CREATE OR REPLACE TEMP TABLE {related} AS
            SELECT {_RELATED_COLUMNS} FROM {candidates} f JOIN ({_instances(spans)}) p
              ON p.process = f.process AND p.name = f.name AND p.end_ns = f.prior_end AND {_EARLIER}
            WHERE NOT {_RELATIVES}
            """
        )
        _relate_the_rest(spans, candidates, related)
        return _findings(
            spans,
            "self-overlap",
            f"""
            SELECT f.trace_id, f.span_id, f.name, f.eff_iteration, r.related, least(f.end_ns, r.r_end) - f.start_ns,
                   f.process
            FROM {candidates} f JOIN (
                SELECT * FROM {related}
                QUALIFY row_number() OVER (PARTITION BY tkey, skey ORDER BY r_end DESC, r_start DESC, r_skey DESC) = 1
            ) r USING (tkey, skey)
            """,
            lambda n, ns, proc: (
                f"{n} overlaps another {n} in process {proc}: concurrent instances should be an "
                f"umbrella with leaf spans inside; {_seconds(ns)} counted twice"
            ),
            counted_twice=True,
        )


def _sweep_candidates(spans: SpanSet, batch_spans: int, candidates: str) -> None:
    """Create table `candidates`: each instance starting before the latest end of the earlier instances of
    its (process, name), with that end (`prior_end`) and the columns the findings need.

    The sweep sorts narrow rows (keys and 64-bit times) partitioned by (process, name), numbered: the window carries
    no span's text, only the few candidates fetch their columns after (one sort of every group packed above the
    times in 128-bit keys took twice as long: docs/performance.md). A long trace is swept in runs of at most about
    `batch_spans` instances by start (`intervals.start_cuts`), each run starting from the latest end per group of
    the runs before it (`reach`), so that the result is one sweep's."""
    instances = _instances(spans)
    with (
        spans.scratch("self_overlap_groups") as groups,
        spans.scratch("self_overlap_reach") as reach,
        spans.scratch("self_overlap_run") as this_run,
    ):
        spans.run(
            f"""
            CREATE OR REPLACE TEMP TABLE {groups} AS
            SELECT process, name, row_number() OVER ()::INTEGER AS g
            FROM (SELECT DISTINCT process, name FROM ({instances}))
            """
        )
        spans.run(f"CREATE OR REPLACE TEMP TABLE {reach} (g INTEGER, reach BIGINT)")
        cuts = start_cuts(spans, instances, batch_spans)
        for run, (low, high) in enumerate(zip([None, *cuts], [*cuts, None], strict=True)):
            starts = [f"start_ns >= {low}"] * (low is not None) + [f"start_ns < {high}"] * (high is not None)
            spans.run(
                f"""
                CREATE OR REPLACE TEMP VIEW {this_run} AS
                SELECT i.*, g.g FROM ({instances}) i JOIN {groups} g
                  ON g.process IS NOT DISTINCT FROM i.process AND g.name IS NOT DISTINCT FROM i.name
                WHERE {" AND ".join(starts) or "true"}
                """
            )
            spans.run(
                f"""
                {"INSERT INTO" if run else "CREATE OR REPLACE TEMP TABLE"} {candidates} {"" if run else "AS"}
                WITH swept AS (
                    SELECT i.tkey, i.skey, i.start_ns,
                           greatest(r.reach, max(i.end_ns) OVER (PARTITION BY i.g ORDER BY i.start_ns, i.skey
                                                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING))
                               AS prior
                    FROM {this_run} i LEFT JOIN {reach} r USING (g)
                ),
                found AS (SELECT tkey, skey, prior AS prior_end FROM swept WHERE prior > start_ns)
                SELECT i.tkey, i.skey, i.trace_id, i.span_id, i.name, i.process, i.eff_iteration, i.start_ns,
                       i.end_ns, i.bucketed_chain, f.prior_end
                FROM {this_run} i JOIN found f USING (tkey, skey)
                """
            )
            if high is not None:
                spans.run(
                    f"""
                    CREATE OR REPLACE TEMP TABLE {reach} AS
                    SELECT g, max(reach) AS reach FROM (
                        SELECT g, reach FROM {reach}
                        UNION ALL SELECT g, max(end_ns) FROM {this_run} GROUP BY g
                    ) GROUP BY g
                    """
                )


def _relate_the_rest(spans: SpanSet, candidates: str, related: str) -> None:
    """Add to table `related` the earlier non-relatives running at the start of each candidate that the
    equality join left unrelated (its furthest-reaching instance was a relative).

    The instances of those candidates' (process, name) groups get a group number that keys their times apart, so
    the join is on two inequalities alone, which DuckDB runs as an IE join, in a statement of its own (inside a
    bigger query it picks a hash join on (process, name) and compares each candidate with every instance).
    """
    with spans.scratch("self_overlap_keyed") as keyed:
        spans.run(
            f"""
            CREATE OR REPLACE TEMP TABLE {keyed} AS
            WITH unsettled AS (
                SELECT tkey, skey, process, name FROM {candidates}
                ANTI JOIN {related} USING (tkey, skey)
            ),
            groups AS (
                SELECT process, name, row_number() OVER () AS g FROM (SELECT DISTINCT process, name FROM unsettled)
            )
            SELECT i.tkey, i.skey, i.trace_id, i.span_id, i.start_ns, i.end_ns, i.bucketed_chain,
                   (g.g::HUGEINT << 64) + i.start_ns AS key_start, (g.g::HUGEINT << 64) + i.end_ns AS key_end,
                   u.tkey IS NOT NULL AS unsettled
            FROM {spans.lineage} i JOIN groups g USING (process, name)
            LEFT JOIN unsettled u ON u.tkey = i.tkey AND u.skey = i.skey
            WHERE i.bucketed AND i.end_ns > i.start_ns
            """
        )
        spans.run(
            f"""
            INSERT INTO {related}
            SELECT {_RELATED_COLUMNS} FROM (SELECT * FROM {keyed} WHERE unsettled) f JOIN {keyed} p
              ON p.key_start <= f.key_start AND p.key_end > f.key_start
            WHERE {_EARLIER} AND NOT {_RELATIVES}
            """
        )


def bucketed_umbrella_findings(spans: SpanSet) -> list[Finding]:
    return _findings(
        spans,
        "bucketed-umbrella",
        f"SELECT trace_id, span_id, name, eff_iteration, NULL, bucket, span_group FROM {spans.lineage} "
        "WHERE is_umbrella AND bucket IS NOT NULL",
        lambda n, b, g: (
            f"{n} is an umbrella span ({g or 'by name'}) but carries rl.bucket={b}: umbrellas enclose "
            "the leaves that are counted, so a bucket on one counts their time again"
        ),
    )


def unknown_bucket_findings(spans: SpanSet) -> list[Finding]:
    return _findings(
        spans,
        "unknown-bucket",
        f"SELECT trace_id, span_id, name, eff_iteration, NULL, bucket FROM {spans.lineage} "
        f"WHERE bucket IS NOT NULL AND bucket NOT IN ({BUCKET_LIST_SQL})",
        lambda n, b: (
            f"{n} has rl.bucket={b!r}, not one of productive, overhead, idle, wasted: its time is counted nowhere"
        ),
    )


def overlapping_steps_findings(spans: SpanSet) -> list[Finding]:
    """Step spans of different iterations overlapping within one attempt (two attempts overlapping in time are
    `overlapping-attempts`, one finding for the pair rather than one per step). Only step spans with their own
    `rl.iteration` count: one that inherits its iteration makes no window (SPEC 4), so it charges nothing twice.
    Each later step is a finding, related to the earliest-starting step of another iteration still running at its
    start.

    Steps in start order within their attempt: only a step that starts before the latest end seen so far can
    overlap an earlier one (a running maximum, one sort). Those few candidates look for their partners in a range
    join of their own, keyed by attempt number so that it is two inequalities alone (an IE join), not a hash join
    on the attempt comparing every step of an attempt with every other.
    """
    with spans.scratch("overlapping_steps") as steps_table:
        spans.run(
            f"""
            CREATE OR REPLACE TEMP TABLE {steps_table} AS
            WITH steps AS (
                SELECT trace_id, span_id, name, iteration, start_ns, end_ns, {ATTEMPT_SQL} AS attempt
                FROM {spans.lineage} WHERE is_step AND iteration IS NOT NULL AND end_ns > start_ns
            ),
            numbered AS (SELECT attempt, row_number() OVER () AS g FROM (SELECT DISTINCT attempt FROM steps))
            SELECT s.*, (n.g::HUGEINT << 64) + s.start_ns AS key_start, (n.g::HUGEINT << 64) + s.end_ns AS key_end,
                   coalesce(max(s.end_ns) OVER (PARTITION BY s.attempt ORDER BY s.start_ns, s.span_id
                                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) > s.start_ns,
                            false) AS candidate
            FROM steps s JOIN numbered n USING (attempt)
            """
        )
        return _findings(
            spans,
            "overlapping-steps",
            f"""
            SELECT DISTINCT ON (b.trace_id, b.span_id) b.trace_id, b.span_id, b.name, b.iteration, a.span_id,
                   b.iteration, a.iteration, least(a.end_ns, b.end_ns) - b.start_ns
            FROM (SELECT * FROM {steps_table} WHERE candidate) b JOIN {steps_table} a
              ON a.key_start <= b.key_start AND a.key_end > b.key_start
            WHERE a.iteration <> b.iteration AND (a.start_ns < b.start_ns OR a.span_id < b.span_id)
            ORDER BY b.trace_id, b.span_id, a.start_ns, a.span_id, a.trace_id
            """,
            lambda n, i, ai, ns: (
                f"step {i} overlaps step {ai} for {_seconds(ns)}: both windows charge that "
                "stretch, so totals exceed the run's wall clock"
            ),
        )


def iteration_mismatch_findings(spans: SpanSet) -> list[Finding]:
    return _findings(
        spans,
        "iteration-mismatch",
        "SELECT trace_id, span_id, name, iteration, ancestor_iteration_span, iteration, ancestor_iteration "
        f"FROM {spans.lineage} "
        "WHERE iteration IS NOT NULL AND ancestor_iteration IS NOT NULL AND iteration < ancestor_iteration",
        lambda n, i, a: (
            f"{n} says rl.iteration={i} but its nearest ancestor with one says {a}: work filed under a "
            "step that had already ended (an iteration_scope left open?)"
        ),
    )


def inverted_span_findings(spans: SpanSet) -> list[Finding]:
    """Spans whose end precedes their start: a clock step or a broken exporter. Counted as zero-length."""
    return _findings(
        spans,
        "inverted-span",
        f"SELECT trace_id, span_id, name, eff_iteration, NULL, inverted_ns FROM {spans.lineage} WHERE inverted_ns > 0",
        lambda n, ns: (
            f"{n} ends {_seconds(ns)} before it starts: counted as zero-length, so its time is counted nowhere"
        ),
    )


# The rules that look at spans one by one (or pairwise), each a query over the lineage, in SPEC section 5's order.
SPAN_RULES: tuple[Callable[[SpanSet], list[Finding]], ...] = (
    nested_bucket_findings,
    self_overlap_findings,
    bucketed_umbrella_findings,
    unknown_bucket_findings,
    overlapping_steps_findings,
    iteration_mismatch_findings,
    inverted_span_findings,
)
