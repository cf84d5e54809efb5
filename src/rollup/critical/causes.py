"""One attempt's dependencies and its events' causes, worked out in DuckDB (SPEC section 14).

What `graph.py` and `retime.py` describe, as joins over the attempt's spans: a million spans take seconds this way,
where a loop over them in Python took a minute. The spans are numbered in row order (start, then the longer first,
then the id) in a table of the command's own; each dependency is a join (an ASOF join for "the latest-ending span
that ended by this one's start": rows and times packed into one HUGEINT key, so a span of no length is never its own
anchor); each event's causes are one long table, grouped by event, whose latest recorded causes bind. Python reads the
columns back, and picks each wait's wakeup among the few spans that end within `wakeup_ns` of it (neither its
ancestor nor its descendant, which needs the parent chains).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from rollup.base.arrays import int64_array, int64_column

from .graph import IDLE, NONE, AttemptSpans, Dependencies, ancestors
from .retime import EventGraph, causal_order

if TYPE_CHECKING:
    from rollup.store.spanset import SpanSet

# Rows are numbered below this: a time and a row are packed into one HUGEINT key (`_key`).
_ROW_SPACE = 2**32


def _key(time: str, row: str) -> str:
    """SQL: a time and a row as one key ordered by time, then row."""
    return f"({time})::HUGEINT * {_ROW_SPACE} + ({row})"


def attempt_graph(spans: SpanSet, attempt_sql: str, wakeup_ns: int) -> tuple[AttemptSpans, Dependencies, EventGraph]:
    """The spans of one attempt (`attempt_sql`: a condition on the lineage's rows), their dependencies and their
    events' causes."""
    with (
        spans.scratch("critical_read") as read_table,
        spans.scratch("critical_spans") as table,
        spans.scratch("critical_causes") as causes,
    ):
        spans.run(
            f"""
            CREATE TEMP TABLE {read_table} AS
            WITH s AS (
                SELECT tkey, skey, pkey, span_id, name, process, bucket, iteration, eff_iteration, is_step,
                       start_ns, end_ns
                FROM {spans.lineage} WHERE {attempt_sql}
            ),
            ordered AS (
                SELECT *, (row_number() OVER (ORDER BY start_ns, end_ns DESC, span_id, tkey) - 1)::BIGINT AS row
                FROM s
            )
            SELECT c.* EXCLUDE (tkey, skey, pkey), p.row AS parent_row
            FROM ordered c LEFT JOIN ordered p ON p.tkey = c.tkey AND p.skey = c.pkey
            """
        )
        read = AttemptSpans.of_table(spans.arrow(f"SELECT * FROM {read_table} ORDER BY row"))
        steps, adopted = _steps(spans, read_table)
        _with_dependencies(spans, read_table, table)
        joined_at, joined = _joined(spans, table, len(read))
        anchors = int64_column(spans.arrow(f"SELECT coalesce(anchor, {NONE}) AS anchor FROM {table} ORDER BY row"),
                               "anchor")  # fmt: skip
        wakeup = _wakeups(spans, table, read, wakeup_ns)
        deps = Dependencies(joined_at, joined, anchors, wakeup, steps, adopted)
        graph = _event_graph(spans, table, causes, read, wakeup)
    return read, deps, graph


def _steps(spans: SpanSet, table: str) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """The step spans of each iteration (latest end first, then the earlier start, then the id), and the spans
    without a parent whose own iteration it is."""
    steps: dict[int, list[int]] = {}
    for iteration, row in spans.rows(
        f"SELECT iteration, row FROM {table} WHERE is_step AND iteration IS NOT NULL "
        "ORDER BY iteration, end_ns DESC, start_ns, span_id"
    ):
        steps.setdefault(iteration, []).append(row)
    adopted: dict[int, list[int]] = {}
    for iteration, row in spans.rows(
        f"SELECT iteration, row FROM {table} WHERE parent_row IS NULL AND NOT is_step AND iteration IS NOT NULL "
        "ORDER BY row"
    ):
        adopted.setdefault(iteration, []).append(row)
    return steps, adopted


def _with_dependencies(spans: SpanSet, read_table: str, table: str) -> None:
    """Table `table`: the spans of `read_table` with `eparent` (the parent, or for a parentless span whose own
    iteration is N, window N's first step span), `eparent_process`, and `anchor` (the sequence anchor: of its
    process and parent, both parentless alike, the latest-ending span that ended by its start; of no length at that
    instant, only one before it in row order; among several ending at one instant, the last in row order), and
    `ask_key`: what such an ASOF join asks with (its start, and the rows that may end there)."""
    spans.run(
        f"""
        CREATE TEMP TABLE {table} AS
        WITH steps AS (
            SELECT iteration, first(row ORDER BY end_ns DESC, start_ns, span_id) AS step_row
            FROM {read_table} WHERE is_step AND iteration IS NOT NULL GROUP BY iteration
        ),
        adopted AS (
            SELECT t.*, CASE WHEN t.parent_row IS NOT NULL THEN t.parent_row
                             WHEN NOT t.is_step AND s.step_row <> t.row THEN s.step_row END AS eparent
            FROM {read_table} t LEFT JOIN steps s ON s.iteration = t.iteration
        ),
        keyed AS (
            SELECT row, process, coalesce(parent_row, -1) AS grp, {_key("end_ns", "row")} AS done_key,
                   {_key("start_ns", f"CASE WHEN end_ns = start_ns THEN row - 1 ELSE {_ROW_SPACE - 1} END")} AS ask_key
            FROM {read_table}
        ),
        anchored AS (
            SELECT b.row, a.row AS anchor FROM keyed b ASOF JOIN keyed a
              ON a.process IS NOT DISTINCT FROM b.process AND a.grp = b.grp AND a.done_key <= b.ask_key
            WHERE a.row <> b.row
        )
        SELECT t.*, p.process AS eparent_process, a.anchor, k.ask_key
        FROM adopted t LEFT JOIN {read_table} p ON p.row = t.eparent LEFT JOIN anchored a ON a.row = t.row
             JOIN keyed k ON k.row = t.row
        """
    )


_JOINED_SQL = """
    SELECT c.eparent AS parent, c.row AS child, c.end_ns, c.start_ns, c.span_id
    FROM {table} c JOIN {table} p ON p.row = c.eparent
    WHERE c.end_ns <= p.end_ns AND NOT coalesce(c.iteration > p.eff_iteration, false)
"""


def _joined(spans: SpanSet, table: str, count: int) -> tuple[array, array]:
    """Each span's joined children: ending no later than it, not made for a later step (latest end first, then the
    later start, then the smaller id), as `Dependencies.joined_at` and `joined`."""
    found = spans.arrow(
        f"SELECT parent, child FROM ({_JOINED_SQL.format(table=table)}) "
        "ORDER BY parent, end_ns DESC, start_ns DESC, span_id"
    )
    counts = spans.arrow(
        f"""SELECT count(j.child) AS n FROM range(0, {count}) r
            LEFT JOIN ({_JOINED_SQL.format(table=table)}) j ON j.parent = r.range GROUP BY r.range ORDER BY r.range"""
    )
    joined_at = array("q", [0])
    joined_at.extend(int64_column(pa.table({"c": pc.cumulative_sum(counts.column("n").cast(pa.int64()))}), "c"))
    return joined_at, int64_column(found, "child")


def _wakeups(spans: SpanSet, table: str, read: AttemptSpans, wakeup_ns: int) -> array:
    """Each wait's wakeup: the latest-ending span not idle, neither its ancestor nor its descendant, ending inside
    it and at most `wakeup_ns` before its end (ties: the later start, then the smaller id)."""
    woke = array("q", [NONE]) * len(read)
    found = spans.arrow(
        f"""
        SELECT w.row AS wait, x.row AS candidate
        FROM {table} w JOIN {table} x
          ON x.end_ns > w.start_ns AND x.end_ns >= w.end_ns - {int(wakeup_ns)} AND x.end_ns <= w.end_ns
        WHERE w.bucket = '{IDLE}' AND x.bucket IS DISTINCT FROM '{IDLE}' AND x.row <> w.row
        ORDER BY w.row, x.end_ns DESC, x.start_ns DESC, x.span_id
        """
    )
    parent = read.parent
    done = NONE
    for wait, candidate in zip(int64_column(found, "wait"), int64_column(found, "candidate"), strict=True):
        if wait == done or candidate in ancestors(parent, wait) or wait in ancestors(parent, candidate):
            continue
        woke[wait] = candidate
        done = wait
    return woke


def _event_graph(spans: SpanSet, table: str, causes: str, read: AttemptSpans, wakeup: array) -> EventGraph:
    """Every event's causes (`retime`'s rules), as columns by event: the first of its latest recorded causes binds
    (further ones at the same instant are ties), the rest bound it from below."""
    count = len(read)
    woken = pc.not_equal(int64_array(wakeup), pa.scalar(NONE, pa.int64()))
    wakes = pa.table({"row": pa.array(range(count), pa.int64()), "woke": int64_array(wakeup)}).filter(woken)
    with spans.registered("critical_wakeups", wakes) as wakeups, spans.scratch("critical_edges") as edges:
        # One statement per kind of cause, each a join DuckDB holds to the memory limit (one statement of them all
        # ran out of memory where the report fits: bench/critical.py).
        spans.run(f"CREATE TEMP TABLE {edges} (event BIGINT, cause BIGINT, at_ns BIGINT, owner BIGINT, lower BOOLEAN)")
        for select in _edges_sql(table, wakeups):
            spans.run(f"INSERT INTO {edges} {select}")
        spans.run(
            f"""
            CREATE TEMP TABLE {causes} AS
            WITH latest AS (SELECT event, max(at_ns) FILTER (WHERE NOT lower) AS latest FROM {edges} GROUP BY event),
            -- One cause reached two ways (a worker's sequence anchor that is also the span it was busy with) binds
            -- once: by the larger of the two gaps, the one no speed-up shrinks (a start's owners are its parent or
            -- nobody).
            marked AS (
                SELECT e.event, e.cause, e.owner, NOT e.lower AND e.at_ns IS NOT DISTINCT FROM l.latest AS binding,
                       l.latest
                FROM {edges} e JOIN latest l USING (event)
            )
            SELECT event, cause, CASE WHEN bool_or(owner IS NULL) THEN {NONE} ELSE min(owner) END AS owner,
                   bool_or(binding) AS binding, any_value(latest) AS latest
            FROM marked GROUP BY event, cause
            """
        )
    by_event = spans.arrow(
        f"""
        SELECT coalesce(g.bind, {NONE}) AS bind, coalesce(g.owner, {NONE}) AS owner, coalesce(g.latest, 0) AS latest,
               coalesce(g.binds, 0) AS binds, coalesce(g.others, 0) AS others
        FROM range(0, {2 * count}) r LEFT JOIN (
            SELECT event, any_value(latest) AS latest, min(cause) FILTER (WHERE binding) AS bind,
                   arg_min(owner, cause) FILTER (WHERE binding) AS owner,
                   count(*) FILTER (WHERE binding) AS binds, count(*) FILTER (WHERE NOT binding) AS others
            FROM {causes} GROUP BY event
        ) g ON g.event = r.range
        ORDER BY r.range
        """
    )
    others = spans.arrow(f"SELECT cause FROM {causes} WHERE NOT binding ORDER BY event, cause")
    ties: dict[int, list[tuple[int, int]]] = {}
    for event, cause, owner in spans.rows(
        f"""SELECT event, cause, owner FROM {causes} WHERE binding AND event IN (
                SELECT event FROM {causes} WHERE binding GROUP BY event HAVING count(*) > 1)
            ORDER BY event, cause"""
    ):
        ties.setdefault(event, []).append((cause, owner))
    for event, tied in ties.items():
        ties[event] = tied[1:]  # the first binds (`bind`)
    return _columns(read, by_event, others, ties)


def _edges_sql(table: str, wakeups: str) -> list[str]:
    """SQL, one SELECT per kind of cause: `(event, cause, at_ns, owner, lower)`, the cause event recorded at `at_ns`,
    the gap after it the own time of span `owner` (NULL: nobody's), `lower` when it only bounds the event from below.
    A start's causes, then an end's."""
    remote = f"""(SELECT row, start_ns, process, eparent, eparent_process, ask_key FROM {table}
                  WHERE eparent IS NOT NULL AND eparent_process IS DISTINCT FROM process)"""  # a call received
    by_end = f"(SELECT row, process, eparent, {_key('end_ns', 'row')} AS done_key FROM {table})"
    found_row, found_at = f"(2 * (a.done_key % {_ROW_SPACE}) + 1)::BIGINT", f"(a.done_key // {_ROW_SPACE})::BIGINT"
    children = f"({_JOINED_SQL.format(table=table)})"
    ends = f"(SELECT parent AS row FROM {children} UNION SELECT row FROM {wakeups})"
    return [
        # its parent's start (unless a remote child's clock runs ahead of its caller's)
        f"""SELECT 2 * t.row, 2 * t.eparent, p.start_ns, t.eparent, false
            FROM {table} t JOIN {table} p ON p.row = t.eparent WHERE p.start_ns <= t.start_ns""",
        # its sequence anchor's end
        f"""SELECT 2 * t.row, 2 * a.row + 1, a.end_ns, t.eparent, false
            FROM {table} t JOIN {table} a ON a.row = t.anchor""",
        # a call received: the process's previous span (it was busy), nobody's own time
        f"""SELECT 2 * r.row, {found_row}, {found_at}, NULL, false
            FROM {remote} r ASOF JOIN {by_end} a
              ON a.process IS NOT DISTINCT FROM r.process AND a.done_key <= r.ask_key""",
        # a call received: the caller's previous span (the call was sent after it)
        f"""SELECT 2 * r.row, {found_row}, {found_at}, r.eparent, false
            FROM {remote} r ASOF JOIN {by_end} a
              ON a.process IS NOT DISTINCT FROM r.eparent_process AND a.eparent = r.eparent
                 AND a.done_key <= r.ask_key""",
        # a child of window N's step span: what was made ahead for window N (own iteration N, parent in an earlier
        # window), ended by its start
        f"""WITH made AS (
                SELECT t.row, t.iteration, t.end_ns FROM {table} t JOIN {table} p ON p.row = t.parent_row
                WHERE NOT t.is_step AND t.iteration IS NOT NULL AND p.eff_iteration < t.iteration
            )
            SELECT 2 * t.row, 2 * m.row + 1, m.end_ns, t.eparent, false
            FROM {table} t JOIN {table} p ON p.row = t.eparent AND p.is_step
                 JOIN made m ON m.iteration = p.iteration AND m.end_ns <= t.start_ns AND m.row <> t.row""",
        # an end: its joined children's ends (its own tail after them)
        f"SELECT 2 * parent + 1, 2 * child + 1, end_ns, parent, false FROM {children}",
        # a wait's end: its wakeup's end
        f"""SELECT 2 * w.row + 1, 2 * w.woke + 1, x.end_ns, w.row, false
            FROM {wakeups} w JOIN {table} x ON x.row = w.woke""",
        # an end: its start, with its own length when nothing else ends it, else only from below
        f"""SELECT 2 * t.row + 1, 2 * t.row, t.start_ns, t.row, e.row IS NOT NULL
            FROM {table} t LEFT JOIN {ends} e ON e.row = t.row""",
    ]


def _columns(
    read: AttemptSpans, by_event: pa.Table, others: pa.Table, ties: dict[int, list[tuple[int, int]]]
) -> EventGraph:
    """The event graph from the causes counted by event (a row an event, in order) and the other causes (flat, by
    event)."""
    count = 2 * len(read)
    times = array("q", bytes(8 * count))
    times[0::2], times[1::2] = read.start, read.end
    bound = pc.greater(by_event.column("binds"), 0)
    owners = by_event.column("owner")
    named = pc.if_else(pc.equal(owners, NONE), NONE, pc.take(int64_array(read.name), pc.max_element_wise(owners, 0)))
    gap = pc.if_else(bound, pc.subtract(int64_array(times), by_event.column("latest")), pa.scalar(0, pa.int64()))
    other_at = array("q", [0])
    other_at.extend(int64_column(pa.table({"c": pc.cumulative_sum(by_event.column("others").cast(pa.int64()))}), "c"))
    graph = EventGraph(
        times,
        int64_column(by_event, "bind"),
        int64_column(by_event, "owner"),
        int64_column(pa.table({"o": named}), "o"),
        int64_column(pa.table({"g": gap}), "g"),
        other_at,
        int64_column(others, "cause"),
        array("q"),
        ties,
        read.name,
        len(read.names),
    )
    graph.order = causal_order(times, graph.bind, ties, other_at, graph.other)
    return graph
