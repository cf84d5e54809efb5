"""The accounting on Ray: `report --ray` and `check --ray`, split by ranges of iteration windows.

The driver builds the lineage once for the whole trace (`lineage.ensure_lineage`: effective iterations follow parent
links anywhere in the trace, so they cannot be found range by range), kept as Parquet in the cache as every local
command keeps it. From it the driver finds the attempts and their windows (small aggregates), cuts the frames to
charge into ranges of consecutive windows in time (`GOODPUT_RAY_RANGE_WINDOWS` windows each; by default two ranges
per CPU of the cluster), and sends each range to a Ray task (`range_tasks`) that reads only its spans from the lineage
table and returns integer nanoseconds per window. The merge is exact, and everything whole-run (totals, rework,
outside, process totals, the total's names, outliers, the window rules' verdicts) is worked out after it, as
`report.build_report` and `checks.check_findings` do: the JSON is byte for byte the local run's.

Assumption, as for `ingest --ray`: the cache (where the lineage table is) is on a filesystem every Ray node sees, and
every node can import `rollup`.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .attempts import downtime_stretches, keep_attempt
from .attribution import Frame, parse_precedence, total_charge
from .breakdown import BREAKDOWN_KEYS, NameShare
from .cache import spill_root
from .checks import overlapping_attempts_findings
from .connection import ENV_MEMORY_LIMIT, connect, spill_directory
from .errors import GoodputError
from .findings import ERROR, RULES, Finding
from .lineage import ensure_lineage
from .range_tasks import Dataset, RangeChecks, RangeReport, RangeWork, check_range, cover, report_range
from .report import (
    Figures,
    IterationRow,
    Report,
    mark_outliers,
    over_every_window,
    report_frames,
)
from .rows import IterationRows, sum_figures
from .schema import BUCKETS, sql_text
from .window_rules import no_iterations_findings, step_spans, window_findings_from
from .windows import Window, iteration_windows

if TYPE_CHECKING:
    from .store import SpanStore

# Windows per range; unset, the windows are shared out as RANGES_PER_CPU ranges per CPU of the cluster.
ENV_RANGE_WINDOWS = "GOODPUT_RAY_RANGE_WINDOWS"
RANGES_PER_CPU = 2


def build_report_on_ray(
    store: SpanStore,
    *,
    address: str | None = None,
    iterations: tuple[int, int] | None = None,
    precedence: str | None = None,
    by: str | None = None,
    attempt: str | None = None,
    range_windows: int | None = None,
) -> Report:
    """`report.build_report` with the charging done by Ray tasks, one per range of windows; the same Report.

    `address`: the cluster (None: `RAY_ADDRESS`, else a local one; a process already connected keeps its
    connection). `range_windows`: windows per range (default `GOODPUT_RAY_RANGE_WINDOWS`, else two ranges per CPU).
    """
    if by not in (None, "process", *BREAKDOWN_KEYS):
        raise GoodputError(f"--by takes process, name or group, got {by!r}")
    order = parse_precedence(precedence)
    _per_range(range_windows)  # a bad setting is an error before any cluster is reached
    with _lineage(store, attempt) as (connection, dataset):
        frames = report_frames(connection, iterations)
        windows, lost, outside = frames.windows, frames.lost, frames.outside
        # Frame ids as build_report numbers them: the rows' windows, the superseded ones, then the stretches outside.
        lost_frames = [Frame(len(windows) + i, w.start_ns, w.end_ns) for i, w in enumerate(lost)]
        outside_frames = [Frame(len(windows) + len(lost) + i, s, e) for i, (s, e) in enumerate(outside)]
        parts: dict[int, RangeReport] = {}
        if windows or lost_frames or outside_frames:
            with ray_connection(address) as ray:
                per_range = windows_per_range(ray, range_windows, len(windows))
                works = plan_ranges(list(enumerate(windows)), lost_frames + outside_frames, per_range)
                for part in run_ranges(ray, report_range, [(dataset, w, order, by) for w in works]):
                    parts[part.index] = part
    rows_of = {frame_id: row for part in parts.values() for frame_id, row in part.rows.items()}
    charges = {frame_id: c for part in parts.values() for frame_id, c in part.charges.items()}
    rows = [rows_of[i] for i in range(len(windows))]
    report = Report(
        IterationRows(rows),
        sum_figures([row.figures for row in rows]),
        Figures.from_ns(total_charge([charges[f.frame_id] for f in outside_frames])),
        order,
        rework=Figures.from_ns(total_charge([charges[f.frame_id] for f in lost_frames])),
        downtime_ns=sum(end - start for start, end in downtime_stretches(frames.attempts)),
        attempts=frames.attempts,
        by=by,
    )
    if by == "process":
        split = {frame_id: rs for part in parts.values() for frame_id, rs in part.process_rows.items()}
        _use_process_rows(report, [row for i in range(len(windows)) for row in split.get(i, [])])
    elif by is not None:
        report.total_names = _summed_names(rows)
    mark_outliers(report.iterations)
    return report


def check_findings_on_ray(
    store: SpanStore,
    *,
    address: str | None = None,
    attempt: str | None = None,
    expect: Sequence[str] = (),
    range_windows: int | None = None,
) -> list[Finding]:
    """`checks.check_findings` with the span rules and the window charges run by Ray tasks; the same findings in
    the same order. Each span's findings come from the one range its start falls in."""
    _per_range(range_windows)
    with _lineage(store, attempt) as (connection, dataset):
        windows = iteration_windows(connection)
        with ray_connection(address) as ray:
            per_range = windows_per_range(ray, range_windows, len(windows))
            works = _with_ownership(connection, plan_ranges(list(enumerate(windows)), [], per_range))
            parts: list[RangeChecks] = list(run_ranges(ray, check_range, [(dataset, w, list(expect)) for w in works]))
        found = [f for part in parts for f in part.findings]
        rule_order = list(RULES)
        findings = sorted(found, key=lambda f: (rule_order.index(f.rule), f.trace_id, f.span_id))
        findings += sorted(overlapping_attempts_findings(connection), key=lambda f: (f.trace_id, f.span_id))
        findings += no_iterations_findings(connection)
        charges = {frame_id: c for part in parts for frame_id, c in part.charges.items()}
        present = {frame_id: groups for part in parts for frame_id, groups in part.present.items()}
        findings += window_findings_from(
            windows, lambda keys: step_spans(connection, keys), charges, present, expect
        )
    findings.sort(key=lambda f: (f.severity != ERROR, rule_order.index(f.rule)))  # stable, as check_findings sorts
    return findings


# --- ranges -------------------------------------------------------------------------------------------------------


def plan_ranges(windows: list[tuple[int, Window]], others: list[Frame], per_range: int) -> list[RangeWork]:
    """Cut the frames, in time order, into ranges of `per_range` windows; a frame that is not a row (a superseded
    window, a stretch outside) joins the range of the window before it.

    Each range reads the spans overlapping its frames and those whose effective iteration lies between its windows'
    lowest and highest iteration."""
    if not windows and not others:
        return []
    items: list[tuple[int, int, int, Any]] = [(w.start_ns, w.end_ns, 0, (fid, w)) for fid, w in windows]
    items += [(f.start_ns, f.end_ns, 1, f) for f in others]
    items.sort(key=lambda item: item[:3])
    groups: list[tuple[list[tuple[int, Window]], list[Frame]]] = []
    for _, _, kind, item in items:
        if not groups or (kind == 0 and len(groups[-1][0]) >= per_range):
            groups.append(([], []))
        if kind == 0:
            groups[-1][0].append(item)
        else:
            groups[-1][1].append(item)
    works = []
    for index, (rows, rest) in enumerate(groups):
        frames = [Frame(fid, w.start_ns, w.end_ns) for fid, w in rows] + rest
        numbers = [w.iteration for _, w in rows]
        span = (min(numbers), max(numbers)) if numbers else None
        works.append(RangeWork(index, tuple(rows), tuple(rest), cover(frames), span))
    return works


def _per_range(explicit: int | None) -> int | None:
    """Windows per range asked for: the argument, else GOODPUT_RAY_RANGE_WINDOWS, else None."""
    if explicit is not None:
        if explicit < 1:
            raise GoodputError(f"windows per range must be at least 1, got {explicit}")
        return explicit
    text = os.environ.get(ENV_RANGE_WINDOWS, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise GoodputError(f"{ENV_RANGE_WINDOWS} must be a whole number of windows, at least 1; got {text!r}")
    return value


def _with_ownership(connection: Any, works: list[RangeWork]) -> list[RangeWork]:
    """For `check`: each range answers for the spans starting from its first frame to the next range's first frame
    (the first from the beginning of time, the last to its end), and gets the nearest bucketed ancestors of the
    bucketed spans starting there (nested-bucket compares a span with that ancestor, wherever it ran)."""
    if not works:
        works = [RangeWork(0, ())]
    starts = [min((f.start_ns for f in w.frames), default=0) for w in works]
    bounds: list[tuple[int | None, int | None]] = [
        (None if i == 0 else starts[i], None if i == len(works) - 1 else starts[i + 1]) for i in range(len(works))
    ]
    needed: list[set[tuple[str, str]]] = [set() for _ in works]
    for trace_id, ancestor, start in connection.execute(
        "SELECT trace_id, bucketed_chain[-1], start_ns FROM spans_ex WHERE bucketed AND len(bucketed_chain) > 0"
    ).fetchall():
        needed[max(0, bisect.bisect_right(starts, start) - 1)].add((trace_id, ancestor))
    return [  # no span-seconds in `check`: no spans by effective iteration
        RangeWork(w.index, w.windows, w.others, w.cover, None, bounds[i], tuple(sorted(needed[i])))
        for i, w in enumerate(works)
    ]


# --- the merge ----------------------------------------------------------------------------------------------------


def _use_process_rows(report: Report, rows: list[IterationRow]) -> None:
    """The rows per (window, process) in place of the plain rows, and each process's totals over every window, as
    `report.build_report` makes them with `--by process`."""
    report.iterations = IterationRows(rows)
    by_process: dict[str, list[Figures]] = {}
    for row in rows:
        by_process.setdefault(row.process or "", []).append(row.figures)
    report.process_totals = {
        process: over_every_window(sum_figures(figures), report.total.wall_ns)
        for process, figures in sorted(by_process.items())
    }


def _summed_names(rows: list[IterationRow]) -> list[NameShare]:
    """The total's names: each (name, bucket)'s shares summed over the rows, sorted as a row's are."""
    summed: dict[tuple[str, str], list[int]] = {}
    for row in rows:
        for share in row.names or []:
            entry = summed.setdefault((share.name, share.bucket), [0, 0])
            entry[0] += share.wall_ns
            entry[1] += share.span_ns
    total = [NameShare(name, bucket, wall_ns, span_ns) for (name, bucket), (wall_ns, span_ns) in summed.items()]
    total.sort(key=lambda n: (BUCKETS.index(n.bucket), -n.wall_ns, n.name))
    return total


# --- Ray ----------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _lineage(store: SpanStore, attempt: str | None) -> Iterator[tuple[Any, Dataset]]:
    """(a connection whose `spans_ex` the driver queries, the Parquet files the tasks read): the lineage table.

    When the cache holds it (as `ingest` leaves it) and this command has not loaded it, the driver reads it through a
    view of its own: it only needs a few aggregates (attempts, windows), never every span in memory. Otherwise it is
    built or loaded in the store as a local command does, and written out for the tasks when the cache has no copy
    (`--no-cache`, an unwritable cache), removed after. `attempt` (`--attempt`) keeps that attempt's spans alone.
    """
    import duckdb

    run_id = keep_attempt(store, attempt) if attempt is not None else None
    limit = os.environ.get(ENV_MEMORY_LIMIT, "").strip() or None
    cached = store.lineage_cache
    if cached is not None and cached.exists() and not _lineage_loaded(store):
        spill = spill_directory(spill_root(None))
        connection = connect(spill)
        kept = "" if run_id is None else f" WHERE coalesce(run_id, '') = {sql_text(run_id)}"
        try:
            connection.execute(f"CREATE VIEW spans_ex AS SELECT * FROM read_parquet({sql_text(str(cached))}){kept}")
        except duckdb.Error:  # an unreadable entry: the store builds the table afresh below
            connection.close()
            spill.remove()
        else:
            try:
                yield connection, Dataset((str(cached),), run_id, limit)
            finally:
                connection.close()
                spill.remove()
            return
    ensure_lineage(store)
    if cached is not None and cached.exists():
        yield store.connection, Dataset((str(cached),), run_id, limit)
        return
    scratch = Path(tempfile.mkdtemp(prefix="goodput-ray-"))
    try:
        path = scratch / "spans_ex.parquet"
        store.connection.execute(f"COPY spans_ex TO {sql_text(str(path))} (FORMAT parquet, COMPRESSION zstd)")
        yield store.connection, Dataset((str(path),), run_id, limit)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _lineage_loaded(store: SpanStore) -> bool:
    """Whether the store's connection already holds `spans_ex` (then it may differ from the cache's: `--attempt`)."""
    (exists,) = store.connection.execute(
        "SELECT count(*) > 0 FROM duckdb_tables() WHERE table_name = 'spans_ex'"
    ).fetchall()[0]
    return bool(exists)


@contextlib.contextmanager
def ray_connection(address: str | None) -> Iterator[Any]:
    """Ray, connected as `ingest --ray` connects (`read.ray_tasks`): a process already connected keeps its
    connection; otherwise `address`, else `RAY_ADDRESS`, else a local cluster, shut down again on leaving."""
    from .read.ray_tasks import _connect, _import_ray

    ray = _import_ray()
    started = _connect(ray, address)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def windows_per_range(ray: Any, explicit: int | None, windows: int) -> int:
    """Windows per range: `explicit`, else GOODPUT_RAY_RANGE_WINDOWS, else RANGES_PER_CPU ranges per CPU of the
    cluster (so a slow range does not leave a CPU idle for long)."""
    chosen = _per_range(explicit)
    if chosen is not None:
        return chosen
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    return max(1, math.ceil(windows / (RANGES_PER_CPU * cpus)))


def run_ranges(ray: Any, task: Callable[..., Any], arguments: list[tuple[Any, ...]]) -> Iterator[Any]:
    """Run `task(*args)` as a Ray task (one CPU each) for each `args`, yielding results as tasks finish. A
    GoodputError raised in a task is raised here as itself; a lost worker becomes a GoodputError."""
    remote = ray.remote(num_cpus=1)(task)
    pending = [remote.remote(*args) for args in arguments]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield _result(ray, ref)
    except BaseException:  # a failed range, or the caller gave up: the rest are not needed
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        raise


def _result(ray: Any, ref: Any) -> Any:
    """A task's result; its GoodputError as itself, not wrapped in Ray's RayTaskError."""
    from ray.exceptions import RayError, RayTaskError

    try:
        return ray.get(ref)
    except RayTaskError as error:
        if isinstance(error.cause, GoodputError):
            raise error.cause from None
        raise
    except RayError as error:  # the worker died (out of memory, node lost)
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise GoodputError(f"a Ray task accounting a range of iteration windows failed: {detail}") from None
