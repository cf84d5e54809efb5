"""The timeline of SPEC section 11: the spans as a Chrome / Perfetto trace, to look at a run rather than add it up.

One `pid` per process (the `process` column's name, in a `process_name` metadata event), ordered by its first
span; each span one complete event (`"ph": "X"`) on a lane (`tid`) of its process, laid out by `lanes` so every lane
nests; an `iterations` process (pid 1) with each window the report charges and each superseded one; flow events
from a parent to each child in another process; after the processes, a `critical path` process whose one lane holds
each shown window's critical path (SPEC section 14) and its waits (`timeline.events`). Opens in ui.perfetto.dev and
chrome://tracing.

Times: `ts` and `dur` are microseconds from the run's first span start (`otherData.origin_unix_ns`), written with
exactly three decimals, i.e. exact to the nanosecond (Perfetto rounds them back to whole nanoseconds). A span whose
end precedes its start is drawn zero-length (SPEC section 3). `cat` is the span's bucket as written, `umbrella`
without one; `cname` colours it with one of the trace viewer's reserved colour names (`BUCKET_COLOURS`).

Flow events: `"ph": "s"` on the parent and `"ph": "f", "bp": "e"` on the child, each at its slice's start, sharing
`id`, `cat` and `name` (Perfetto matches the two halves on all three). Both viewers bind a flow event to the
innermost slice open at its instant on its lane (Perfetto: the last one begun there; its sorter puts flow events
after every complete event of the same instant), so the lanes never nest a span under a flow's slice at the same
start (`lanes.assign_lanes`'s anchors), and complete events come first in the file.

Built column-wise: DuckDB picks the spans, the processes and the flows, and writes each event's JSON text; only
the lane assignment, a sequential pass, runs in Python over plain integers.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from rollup.accounting.gpus import GpuOptions, gpu_labels, gpu_model
from rollup.accounting.windows import Window, attempt_windows, latest_windows, missing_in, select_windows
from rollup.base.errors import GoodputError
from rollup.base.tables import SPANS
from rollup.critical.build import window_segments
from rollup.critical.paths import WindowPaths
from rollup.store.attempts import find_attempts

from .events import (
    CRITICAL_PROCESS,
    FLOWS,
    ITERATIONS_PID,
    ITERATIONS_PROCESS,
    PROCESSES,
    SELECTED,
    SPANS_SHOWN,
    WINDOWS_SHOWN,
    store_critical,
    write_events,
)
from .lanes import assign_lanes

if TYPE_CHECKING:
    from rollup.store.span_store import SpanStore
    from rollup.store.spanset import SpanSet


@dataclass(frozen=True)
class Lane:
    """One `tid`: lane `number` (from 1) of the process shown as `pid`."""

    pid: int
    tid: int
    number: int
    name: str | None = None  # default `lane N`


@dataclass
class Timeline:
    """A built timeline, its events waiting in the store's DuckDB (its own tables, `events.SELECTED` and the rest)
    until `write`.

    `processes` maps each process's name to its pid (the iterations process excluded); `windows` are the iteration
    windows shown, each with whether it was superseded and its tid. `missing`: why the iterations asked for hold
    none of the traces' (None when they hold some, or none was asked for).
    """

    source: SpanSet  # the spans drawn, on whose connection the events wait
    origin_ns: int
    processes: dict[str, int]
    lanes: list[Lane]
    windows: list[tuple[Window, bool, int]]
    spans: int
    flows: int
    has_attributes: bool
    iterations: tuple[int, int] | None = None
    missing: str | None = None
    labels: dict[str, str] = field(default_factory=dict)  # process name -> what it holds (SPEC section 12)
    critical_pid: int | None = None  # the critical path's process (SPEC section 14), when a window is shown

    def write(self, out: BinaryIO) -> None:
        """Write the trace as one JSON object, `{"otherData": ..., "traceEvents": [...]}`: metadata events first,
        then the iteration windows, the spans in start order and the flow events."""
        other: dict[str, Any] = {"generator": "goodput timeline", "origin_unix_ns": self.origin_ns, "unit": "us"}
        if self.iterations is not None:
            other["iterations"] = list(self.iterations)
        out.write(b'{"otherData": ' + json.dumps(other).encode() + b',\n"traceEvents": [\n')
        out.write(b",\n".join(json.dumps(event).encode() for event in self._metadata_events()))
        write_events(out, self.source, self.origin_ns, self.has_attributes)
        out.write(b"\n]}\n")

    def summary(self) -> str:
        """`120 spans of 3 processes, 6 iteration windows, 40 flows`: what `write` writes."""
        windows = len(self.windows)
        return (
            f"{self.spans} span{'s' * (self.spans != 1)} of {len(self.processes)} "
            f"process{'es' * (len(self.processes) != 1)}, {windows} iteration window{'s' * (windows != 1)}, "
            f"{self.flows} flow{'s' * (self.flows != 1)}"
        )

    def trace_object(self) -> dict[str, Any]:
        """The trace as a Python object (parsed back from `write`'s text, so both say the same)."""
        buffer = io.BytesIO()
        self.write(buffer)
        return json.loads(buffer.getvalue())

    def _metadata_events(self) -> list[dict[str, Any]]:
        """Process and lane names, and the order chrome://tracing shows them in (Perfetto reads the names only)."""
        names = {ITERATIONS_PID: ITERATIONS_PROCESS} | {pid: name for name, pid in self.processes.items()}
        if self.critical_pid is not None:
            names[self.critical_pid] = CRITICAL_PROCESS
        events: list[dict[str, Any]] = []
        for pid, name in sorted(names.items()):
            events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name or "(unnamed)"}})
            events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}})
            if name in self.labels:
                events.append({"name": "process_labels", "ph": "M", "pid": pid, "args": {"labels": self.labels[name]}})
        for lane in self.lanes:
            where = {"pid": lane.pid, "tid": lane.tid}
            name = lane.name or f"lane {lane.number}"
            events.append({"name": "thread_name", "ph": "M", **where, "args": {"name": name}})
            events.append({"name": "thread_sort_index", "ph": "M", **where, "args": {"sort_index": lane.number}})
        return events


def build_timeline(
    store: SpanStore,
    *,
    iterations: tuple[int, int] | None = None,
    attempt: str | None = None,
    exact: bool = False,
    gpus: GpuOptions | None = None,
) -> Timeline:
    """The timeline of the store's spans, ready to `write`.

    `iterations` (an inclusive range) keeps the windows of those iterations (the report's rows and the superseded
    windows alike) and the spans that overlap one of them, whatever their own iteration or process; without it,
    every span and every window. `attempt` (a run id or `latest`) reads that attempt alone. Times count from the
    first span of what is read (after `attempt`), with or without `iterations`, so two timelines of one run line up.
    `exact`: `iterations` is one iteration asked for by number, a GoodputError when the traces lack it. With GPUs
    (some process holds one, or `gpus` names some: SPEC section 12), each process is labelled with its fleet, its
    pool and the GPUs it holds (a `process_labels` metadata event, which Perfetto shows beside its name).
    """
    spans = store.spans(attempt)
    model = gpu_model(spans, gpus or GpuOptions())
    attempts = find_attempts(spans)
    latest, superseded = latest_windows(attempt_windows(spans, [a.run_id for a in attempts]))
    missing = missing_in(latest.iterations, iterations)
    if missing is not None and exact:
        raise GoodputError(missing)
    shown = [(w, False) for w in select_windows(latest, iterations)]
    shown += [(w, True) for w in select_windows(superseded, iterations)]
    shown.sort(key=lambda item: (item[0].start_ns, -item[0].end_ns, item[0].iteration, item[1]))
    ((origin,),) = spans.rows(f"SELECT min(start_ns) FROM {spans.lineage}")
    origin_ns = int(origin) if origin is not None else 0

    _select_spans(spans, [w for w, _ in shown] if iterations is not None else None)
    flows = _find_flows(spans)
    processes = _number_processes(spans)
    # After the processes, the critical path's (SPEC section 14), when a window of the report's is shown; tids follow
    # the pids, so that no tid is a pid (Perfetto takes a thread whose tid is its pid for the main one).
    rows = select_windows(latest, iterations)
    critical_pid = ITERATIONS_PID + len(processes) + 1 if len(rows) else None
    next_tid = ITERATIONS_PID + len(processes) + 1 + (critical_pid is not None)
    window_lanes = assign_lanes([w.start_ns for w, _ in shown], [w.end_ns for w, _ in shown])
    lanes = [Lane(ITERATIONS_PID, next_tid + n, n + 1) for n in range(max(window_lanes, default=0) + 1)]
    windows = [(w, superseded, lanes[n].tid) for (w, superseded), n in zip(shown, window_lanes, strict=True)]
    _store_windows(spans, windows)
    lanes += _lay_spans(spans, next_tid + len(lanes))
    paths = WindowPaths(rows, window_segments(spans, rows)) if critical_pid is not None else []
    if critical_pid is not None:
        lanes.append(Lane(critical_pid, next_tid + len(lanes), 1, CRITICAL_PROCESS))
    store_critical(spans, paths, critical_pid or 0, lanes[-1].tid if paths else 0)
    ((count,),) = spans.rows(f"SELECT count(*) FROM {SPANS_SHOWN}")
    has_attributes = "attributes" in spans.arrow(f"SELECT * FROM {SPANS} LIMIT 0").column_names
    labels = gpu_labels(model) if model is not None else {}
    return Timeline(spans, origin_ns, processes, lanes, windows, int(count), flows, has_attributes, iterations, missing,
                    labels, critical_pid)  # fmt: skip


def _select_spans(spans: SpanSet, windows: list[Window] | None) -> None:
    """Table SELECTED: the spans shown (all, or those overlapping one of `windows`), numbered `seq` in
    the order they are laid out and written: by start, the longer first, then by ids.

    As `goodput spans` has it, a span is shown when it overlaps a window, or is zero-length inside one: some window
    starts before the span's end (at or before its instant, when zero-length) and ends after its start. So with the
    windows sorted by start and the furthest end reached so far beside each, one ASOF lookup per span settles it,
    however many windows are asked for (testing each span against each window grows with both).
    """
    import pyarrow as pa

    where, join = "true", ""
    with contextlib.ExitStack() as held:
        if windows is not None:
            starts: list[int] = []
            reach: list[int] = []
            for window in sorted(windows, key=lambda w: w.start_ns):
                furthest = max(window.end_ns, reach[-1]) if reach else window.end_ns
                if starts and starts[-1] == window.start_ns:
                    reach[-1] = furthest
                else:
                    starts.append(window.start_ns)
                    reach.append(furthest)
            table = pa.table(
                {"start_ns": starts, "reach_ns": reach},
                schema=pa.schema([("start_ns", pa.int64()), ("reach_ns", pa.int64())]),
            )
            reach_table = held.enter_context(spans.registered("timeline_window_reach", table))
            # The last instant a window may start at: before the span's end, or at a zero-length span's instant.
            join = f"""ASOF LEFT JOIN {reach_table} w
                      ON w.start_ns <= CASE WHEN s.end_ns > s.start_ns THEN s.end_ns - 1 ELSE s.start_ns END"""
            # Spans wholly before the first window or after the last are dropped before the lookup (most of them,
            # when a few consecutive iterations are asked for).
            first, last = min(starts, default=0), max(reach, default=0)
            where = f"w.reach_ns > s.start_ns AND s.start_ns < {last} AND s.end_ns >= {first}"
        spans.run(
            f"""
            CREATE OR REPLACE TEMP TABLE {SELECTED} AS
            SELECT row_number() OVER (ORDER BY s.start_ns, s.end_ns DESC, s.tkey, s.skey) AS seq,
                   s.tkey, s.skey, s.pkey, s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns,
                   coalesce(s.process, '') AS process, s.bucket, s.span_group, s.eff_iteration
            FROM {spans.lineage} s {join} WHERE {where}
            """
        )


def _find_flows(spans: SpanSet) -> int:
    """Table FLOWS: each shown span whose parent is shown in another process, numbered from 1."""
    spans.run(
        f"""
        CREATE OR REPLACE TEMP TABLE {FLOWS} AS
        SELECT row_number() OVER (ORDER BY c.seq) AS flow_id, p.seq AS parent_seq, c.seq AS child_seq
        FROM {SELECTED} c JOIN {SELECTED} p ON p.tkey = c.tkey AND p.skey = c.pkey
        WHERE p.process <> c.process
        """
    )
    ((flows,),) = spans.rows(f"SELECT count(*) FROM {FLOWS}")
    return int(flows)


def _number_processes(spans: SpanSet) -> dict[str, int]:
    """Table PROCESSES: each process shown, its pid (from 2, in the order of its first span) and how many
    spans it has; returned as name -> pid."""
    spans.run(
        f"""
        CREATE OR REPLACE TEMP TABLE {PROCESSES} AS
        SELECT process, ({ITERATIONS_PID} + row_number() OVER (ORDER BY min(start_ns), process))::BIGINT AS pid,
               count(*) AS spans
        FROM {SELECTED} GROUP BY process
        """
    )
    return dict(spans.rows(f"SELECT process, pid FROM {PROCESSES} ORDER BY pid"))


def _store_windows(spans: SpanSet, windows: list[tuple[Window, bool, int]]) -> None:
    """Table WINDOWS_SHOWN: the windows shown, with whether each was superseded and its tid."""
    import pyarrow as pa

    table = pa.table(
        {
            "seq": list(range(len(windows))),
            "iteration": [w.iteration for w, _, _ in windows],
            "run_id": [w.run_id for w, _, _ in windows],
            "superseded": [superseded for _, superseded, _ in windows],
            "start_ns": [w.start_ns for w, _, _ in windows],
            "end_ns": [w.end_ns for w, _, _ in windows],
            "tid": [tid for _, _, tid in windows],
        },
        schema=pa.schema(
            [("seq", pa.int64()), ("iteration", pa.int64()), ("run_id", pa.string()), ("superseded", pa.bool_()),
             ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("tid", pa.int64())]
        ),
    )  # fmt: skip
    with spans.registered("timeline_windows_arrow", table) as arrow:
        spans.run(f"CREATE OR REPLACE TEMP TABLE {WINDOWS_SHOWN} AS SELECT * FROM {arrow}")


def _lay_spans(spans: SpanSet, first_tid: int) -> list[Lane]:
    """Lay each process's spans on lanes (`lanes.assign_lanes`), tids counted from `first_tid` in pid order, and
    create table SPANS_SHOWN: SELECTED with each span's pid and tid."""
    import pyarrow as pa

    rows = spans.arrow(
        f"""
        SELECT s.seq, s.start_ns, s.end_ns,
               s.seq IN (SELECT parent_seq FROM {FLOWS} UNION ALL SELECT child_seq FROM {FLOWS}) AS anchor
        FROM {SELECTED} s JOIN {PROCESSES} p USING (process)
        ORDER BY p.pid, s.seq
        """
    )
    starts, ends = rows["start_ns"].to_pylist(), rows["end_ns"].to_pylist()
    anchors = rows["anchor"].to_pylist()
    tids: list[int] = []
    lanes: list[Lane] = []
    begin = 0
    for pid, count in spans.rows(f"SELECT pid, spans FROM {PROCESSES} ORDER BY pid"):
        end = begin + int(count)
        numbers = assign_lanes(starts[begin:end], ends[begin:end], anchors[begin:end])
        base = first_tid + len(lanes)
        tids += [base + number for number in numbers]
        lanes += [Lane(int(pid), base + n, n + 1) for n in range(max(numbers, default=-1) + 1)]
        begin = end
    placed = pa.table({"seq": rows["seq"], "tid": pa.array(tids, pa.int64())})
    with spans.registered("timeline_tids", placed) as tids_table:
        spans.run(
            f"""
            CREATE OR REPLACE TEMP TABLE {SPANS_SHOWN} AS
            SELECT s.*, p.pid, t.tid FROM {SELECTED} s
            JOIN {PROCESSES} p USING (process) JOIN {tids_table} t USING (seq)
            """
        )
    return lanes


def timeline_trace(
    store: SpanStore, *, iterations: tuple[int, int] | None = None, attempt: str | None = None
) -> dict[str, Any]:
    """The Chrome / Perfetto trace object, `{"otherData": {...}, "traceEvents": [...]}` (see `build_timeline`)."""
    return build_timeline(store, iterations=iterations, attempt=attempt).trace_object()
