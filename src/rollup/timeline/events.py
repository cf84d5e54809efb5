"""The timeline's events as JSON text (`timeline.Timeline.write`): each written by DuckDB from the tables the build left
(WINDOWS_SHOWN, SPANS_SHOWN, FLOWS, CRITICAL_SLICES), and the names and colours they carry. `ts` and `dur` are exact
decimals of microseconds (`_MICROS_SQL`).

The critical path (SPEC section 14) is a process of its own, `critical path`, one lane: per window shown (the
report's rows, not the superseded ones) each segment of the path, named and coloured as its span, and each wait
between them as a `waiting` slice, so the track reads as the chain the step end waited on, laid over the spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, BinaryIO

from rollup.base.schema import BUCKETS
from rollup.base.tables import SPANS

if TYPE_CHECKING:
    import pyarrow as pa

    from rollup.critical.paths import WindowPath
    from rollup.store.spanset import SpanSet

# Chrome's reserved colour names (trace viewer's `color_scheme`); Perfetto colours by name and ignores `cname`.
BUCKET_COLOURS = {"productive": "good", "overhead": "bad", "idle": "grey", "wasted": "terrible"}
UMBRELLA = "umbrella"  # the `cat` of a span without a bucket
UMBRELLA_COLOUR = "generic_work"
INVALID_BUCKET_COLOUR = "yellow"  # a bucket outside the four (`check` flags it as unknown-bucket)
WINDOW_COLOUR = "thread_state_running"
SUPERSEDED_COLOUR = "thread_state_iowait"
ITERATIONS_PID = 1
ITERATIONS_PROCESS = "iterations"
FLOW_CATEGORY = "flow"
_BATCH_ROWS = 65_536

# The tables a timeline's build leaves on the store's connection (temporary, replaced by the next build) for its
# events to be written from.
SELECTED = "timeline_selected"  # the spans shown, numbered in start order
PROCESSES = "timeline_processes"  # each shown process's pid
FLOWS = "timeline_flows"  # each shown span whose parent is shown in another process
WINDOWS_SHOWN = "timeline_windows"  # the windows shown, with their tid
SPANS_SHOWN = "timeline_spans"  # SELECTED with each span's pid and tid
CRITICAL_SLICES = "timeline_critical"  # the critical-path track's slices


def _colour_sql(bucket: str) -> str:
    """SQL: the colour of the bucket in column `bucket`."""
    cases = " ".join(f"WHEN {bucket} = '{name}' THEN '{colour}'" for name, colour in BUCKET_COLOURS.items())
    return f"CASE {cases} WHEN {bucket} IS NULL THEN '{UMBRELLA_COLOUR}' ELSE '{INVALID_BUCKET_COLOUR}' END"


assert set(BUCKET_COLOURS) == set(BUCKETS), "every bucket has its colour"


def _write_strings(out: BinaryIO, strings: pa.Array) -> None:
    """Write an Arrow column of texts back to back: its data buffer as it is when it can be (no copy per row)."""
    import pyarrow as pa

    if not len(strings):
        return
    if strings.null_count == 0 and (pa.types.is_string(strings.type) or pa.types.is_large_string(strings.type)):
        offsets = memoryview(strings.buffers()[1]).cast("q" if pa.types.is_large_string(strings.type) else "i")
        first, last = offsets[strings.offset], offsets[strings.offset + len(strings)]
        out.write(memoryview(strings.buffers()[2])[first:last])
        return
    out.write("".join(text for text in strings.to_pylist() if text is not None).encode())


# Each event's text starts with the comma that separates it from the one before (the metadata events come first,
# and there is always at least the iterations process's name), so none ends the array with a trailing comma.
_MICROS_SQL = "({ns}) * 0.001::DECIMAL(4, 3)"  # exact: DECIMAL(22, 3), written as 1234.567

_WINDOW_EVENTS_SQL = f"""
SELECT ',' || chr(10) || to_json({{
    'name': 'iteration ' || w.iteration || CASE WHEN w.superseded THEN ' (superseded)' ELSE '' END,
    'cat': CASE WHEN w.superseded THEN 'superseded' ELSE 'iteration' END, 'ph': 'X',
    'ts': {_MICROS_SQL.format(ns="w.start_ns - $origin")}, 'dur': {_MICROS_SQL.format(ns="w.end_ns - w.start_ns")},
    'pid': {ITERATIONS_PID}, 'tid': w.tid,
    'cname': CASE WHEN w.superseded THEN '{SUPERSEDED_COLOUR}' ELSE '{WINDOW_COLOUR}' END,
    'args': {{'iteration': w.iteration, 'run_id': w.run_id, 'superseded': w.superseded,
              'start_ns': w.start_ns, 'end_ns': w.end_ns}}
}}) AS line
FROM {WINDOWS_SHOWN} w ORDER BY w.seq
"""


def _span_events_sql(attributes: str, join: str = "") -> str:
    """SQL: each shown span's event, in start order, its `args.attributes` the expression `attributes` (over the
    span `s` and what `join` joins to it)."""
    return f"""
SELECT ',' || chr(10) || to_json({{
    'name': coalesce(s.name, ''), 'cat': coalesce(s.bucket, '{UMBRELLA}'), 'ph': 'X',
    'ts': {_MICROS_SQL.format(ns="s.start_ns - $origin")}, 'dur': {_MICROS_SQL.format(ns="s.end_ns - s.start_ns")},
    'pid': s.pid, 'tid': s.tid, 'cname': {_colour_sql("s.bucket")},
    'args': {{'span_id': s.span_id, 'parent_span_id': s.parent_span_id, 'trace_id': s.trace_id,
              'iteration': s.eff_iteration, 'group': s.span_group, 'attributes': {attributes}}}
}}) AS line
FROM {SPANS_SHOWN} s {join}
ORDER BY s.seq
"""


_SPAN_EVENTS_SQL = _span_events_sql(
    "coalesce(a.attributes, MAP {})", f"LEFT JOIN {SPANS} a ON a.trace_id = s.trace_id AND a.span_id = s.span_id"
)
_SPAN_EVENTS_BARE_SQL = _span_events_sql("MAP {}::MAP(VARCHAR, VARCHAR)")

# The two halves of each flow: "s" at the parent's start on its lane, "f" (bound to the enclosing slice) at the
# child's start on its lane; `name` is the child's, the same on both halves.
_FLOW_EVENTS_SQL = f"""
SELECT line FROM (
    SELECT f.flow_id, 0 AS half, ',' || chr(10) || to_json({{
        'name': coalesce(c.name, ''), 'cat': '{FLOW_CATEGORY}', 'ph': 's', 'id': f.flow_id,
        'ts': {_MICROS_SQL.format(ns="p.start_ns - $origin")}, 'pid': p.pid, 'tid': p.tid
    }}) AS line
    FROM {FLOWS} f JOIN {SPANS_SHOWN} p ON p.seq = f.parent_seq JOIN {SPANS_SHOWN} c ON c.seq = f.child_seq
    UNION ALL
    SELECT f.flow_id, 1, ',' || chr(10) || to_json({{
        'name': coalesce(c.name, ''), 'cat': '{FLOW_CATEGORY}', 'ph': 'f', 'bp': 'e', 'id': f.flow_id,
        'ts': {_MICROS_SQL.format(ns="c.start_ns - $origin")}, 'pid': c.pid, 'tid': c.tid
    }})
    FROM {FLOWS} f JOIN {SPANS_SHOWN} c ON c.seq = f.child_seq
)
ORDER BY flow_id, half
"""


CRITICAL_PROCESS = "critical path"
CRITICAL_CATEGORY = "critical"
WAITING = "waiting"  # the name of a wait on the path, a slice of its own
WAITING_COLOUR = "white"

_CRITICAL_EVENTS_SQL = f"""
SELECT ',' || chr(10) || to_json({{
    'name': c.name, 'cat': '{CRITICAL_CATEGORY}', 'ph': 'X',
    'ts': {_MICROS_SQL.format(ns="c.start_ns - $origin")}, 'dur': {_MICROS_SQL.format(ns="c.end_ns - c.start_ns")},
    'pid': c.pid, 'tid': c.tid,
    'cname': CASE WHEN c.bucket IS NULL THEN '{WAITING_COLOUR}' ELSE {_colour_sql("c.bucket")} END,
    'args': {{'iteration': c.iteration, 'span_id': c.span_id, 'process': c.process, 'bucket': c.bucket}}
}}) AS line
FROM {CRITICAL_SLICES} c ORDER BY c.seq
"""


def store_critical(spans: SpanSet, paths: Sequence[WindowPath], pid: int, tid: int) -> int:
    """Table CRITICAL_SLICES: the slices of the critical-path track (each path's segments, and `waiting`
    between them), in time order; how many."""
    import pyarrow as pa

    rows: list[tuple[int, str, str | None, str | None, str | None, int, int]] = []
    for path in sorted(paths, key=lambda p: p.start_ns):
        t = path.start_ns
        for s in path.path:
            if s.start_ns > t:
                rows.append((path.iteration, WAITING, None, None, None, t, s.start_ns))
            rows.append((path.iteration, s.name, s.span_id, s.process, s.bucket, s.start_ns, s.end_ns))
            t = s.end_ns
        if path.end_ns > t:
            rows.append((path.iteration, WAITING, None, None, None, t, path.end_ns))
    names = ["iteration", "name", "span_id", "process", "bucket", "start_ns", "end_ns"]
    kinds = [pa.int64(), pa.string(), pa.string(), pa.string(), pa.string(), pa.int64(), pa.int64()]
    table = pa.table(
        {
            name: pa.array([row[i] for row in rows], kind)
            for i, (name, kind) in enumerate(zip(names, kinds, strict=True))
        }
    )
    with spans.registered("timeline_critical_arrow", table) as arrow:
        spans.run(
            f"""CREATE OR REPLACE TEMP TABLE {CRITICAL_SLICES} AS
                SELECT row_number() OVER (ORDER BY start_ns, end_ns) AS seq, *, {pid}::BIGINT AS pid,
                       {tid}::BIGINT AS tid FROM {arrow}"""
        )
    return len(rows)


def write_events(out: BinaryIO, source: SpanSet, origin_ns: int, has_attributes: bool) -> None:
    """Every event after the metadata: the windows, the spans in start order, the flows, the critical path."""
    queries = (_WINDOW_EVENTS_SQL, _SPAN_EVENTS_SQL if has_attributes else _SPAN_EVENTS_BARE_SQL, _FLOW_EVENTS_SQL,
               _CRITICAL_EVENTS_SQL)  # fmt: skip
    for query in queries:
        for batch in source.batches(query, {"origin": origin_ns}, rows=_BATCH_ROWS):
            _write_strings(out, batch.column(0))
