"""What each span inherits from its ancestors: effective iteration, bucketed ancestors, and whether it is a step.

One recursive query walks every trace from its roots down, following parent ids across processes and files, so a
Ray worker's span with no `rl.iteration` of its own is filed under the step that dispatched it. The same walk
records the chain of bucketed ancestors, which is what the nesting checks need.
"""

from __future__ import annotations

from instrument.groups import UMBRELLA_GROUPS, Bucket

BUCKETS: tuple[str, ...] = tuple(b.value for b in Bucket)
BUCKET_LIST_SQL = ", ".join(f"'{b}'" for b in BUCKETS)
UMBRELLA_LIST_SQL = ", ".join(f"'{g}'" for g in sorted(UMBRELLA_GROUPS))

# Traces from emitters that set no `rl.span_group` still name their umbrellas the NeMo-RL way.
UMBRELLA_NAME_REGEX = r"rl\.[^.]+\.(job|step|evaluate)|rl\.startup|rl\.setup\..+"
STEP_NAME_REGEX = r"rl\.[^.]+\.step"
JOB_NAME_REGEX = r"rl\.[^.]+\.job"

IS_STEP_SQL = f"(span_group = 'step' OR (span_group IS NULL AND regexp_full_match(name, '{STEP_NAME_REGEX}')))"
IS_JOB_SQL = f"(span_group = 'job' OR (span_group IS NULL AND regexp_full_match(name, '{JOB_NAME_REGEX}')))"
IS_UMBRELLA_SQL = (
    f"(span_group IN ({UMBRELLA_LIST_SQL}) OR (span_group IS NULL AND regexp_full_match(name, '{UMBRELLA_NAME_REGEX}')))"
)

# Deeper than any real trace; it only stops a walk that a corrupt file could otherwise make endless.
MAX_DEPTH = 10_000


def build_lineage(connection) -> None:
    """Create table `lineage` (one row per span) and view `spans_ex` (spans plus lineage columns).

    Columns: `eff_iteration` (own `rl.iteration`, else the nearest ancestor's), `ancestor_iteration` (the nearest
    ancestor's that carries one), `bucketed_chain` (ids of the ancestors with a valid bucket, root first),
    `has_parent` (false when the parent id names no loaded span: an orphan). A span caught in a parent cycle is
    reached by no walk; it keeps its own iteration and no ancestors.
    """
    connection.execute(
        f"""
        CREATE OR REPLACE TABLE lineage AS
        WITH RECURSIVE
        nodes AS (
            SELECT trace_id, span_id, parent_span_id, iteration, bucket IN ({BUCKET_LIST_SQL}) AS bucketed
            FROM spans
        ),
        roots AS (
            SELECT n.* FROM nodes n
            WHERE n.parent_span_id IS NULL
               OR NOT EXISTS (SELECT 1 FROM nodes p WHERE p.trace_id = n.trace_id AND p.span_id = n.parent_span_id)
        ),
        walk(trace_id, span_id, bucketed, eff_iteration, ancestor_iteration, bucketed_chain, has_parent, depth) AS (
            SELECT trace_id, span_id, coalesce(bucketed, false), iteration, NULL::BIGINT, []::VARCHAR[], false, 0
            FROM roots
            UNION ALL
            SELECT c.trace_id, c.span_id, coalesce(c.bucketed, false),
                   coalesce(c.iteration, w.eff_iteration), w.eff_iteration,
                   CASE WHEN w.bucketed THEN list_append(w.bucketed_chain, w.span_id) ELSE w.bucketed_chain END,
                   true, w.depth + 1
            FROM walk w JOIN nodes c ON c.trace_id = w.trace_id AND c.parent_span_id = w.span_id
            WHERE w.depth < {MAX_DEPTH}
        )
        SELECT trace_id, span_id, eff_iteration, ancestor_iteration, bucketed_chain, has_parent FROM walk
        """
    )
    connection.execute(
        f"""
        CREATE OR REPLACE VIEW spans_ex AS
        SELECT s.*,
               coalesce(l.eff_iteration, s.iteration) AS eff_iteration,
               l.ancestor_iteration,
               coalesce(l.bucketed_chain, []::VARCHAR[]) AS bucketed_chain,
               coalesce(l.has_parent, s.parent_span_id IS NOT NULL) AS has_parent,
               s.bucket IN ({BUCKET_LIST_SQL}) AS bucketed,
               {IS_STEP_SQL} AS is_step,
               {IS_UMBRELLA_SQL} AS is_umbrella
        FROM spans s LEFT JOIN lineage l USING (trace_id, span_id)
        """
    )


def ensure_lineage(connection) -> None:
    """Build the lineage once per connection; every report, check and spans listing needs it."""
    (exists,) = connection.execute(
        "SELECT count(*) > 0 FROM duckdb_tables() WHERE table_name = 'lineage' AND NOT temporary"
    ).fetchall()[0]
    if not exists:
        build_lineage(connection)
