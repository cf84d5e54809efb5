"""The watcher's pending spans (`walk.pending_tops`): where each span's chain of loaded parents ends, worked
out on columns, against a literal walk up each chain."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import json_report
from rollup.report.as_json import report_json
from rollup.store.lineage import MAX_DEPTH
from rollup.store.span_store import open_store
from rollup.watch import spans as watched_spans
from rollup.watch import writes
from rollup.watch.walk import Unwalked, pending_tops
from rollup.watch.walk_sql import PENDING
from rollup.watch.watcher import LiveRun
from test_watch_live import SAMPLES, records


def _tops(rows: list[tuple[int, int, int | None]]) -> list[int | None]:
    """`pending_tops` of `rows` (tkey, skey, pkey), in their order, on a DuckDB of its own."""
    import duckdb

    table = pa.table(
        {
            "tkey": pa.array([t for t, _, _ in rows], pa.uint64()),
            "skey": pa.array([s for _, s, _ in rows], pa.uint64()),
            "pkey": pa.array([p for _, _, p in rows], pa.uint64()),
            "changed": pa.array([True] * len(rows), pa.bool_()),
            "start_ns": pa.array(range(len(rows)), pa.int64()),
        }
    )
    connection = duckdb.connect()
    try:
        connection.register("walked_rows", table)
        connection.execute("CREATE TABLE walked AS SELECT * FROM walked_rows")
        with pending_tops(connection, "walked") as tops:
            return [top for (top,) in connection.execute(f"SELECT top FROM {tops} ORDER BY start_ns").fetchall()]
    finally:
        connection.close()


def _walked_up(rows: list[tuple[int, int, int | None]]) -> list[int | None]:
    """Each span's answer read literally: follow the loaded parents; the first id not loaded is where it ends, a
    root (no parent) or a cycle ends nowhere."""
    parent_of = {(t, s): p for t, s, p in rows}
    answers: list[int | None] = []
    for t, _, p in rows:
        key, seen = p, 0
        while key is not None and (t, key) in parent_of and seen <= MAX_DEPTH:
            key, seen = parent_of[(t, key)], seen + 1
        answers.append(None if key is None or seen > MAX_DEPTH else key)
    return answers


# Spans of two traces whose ids and parent ids come from a small range, so chains, missing parents, roots and
# cycles (a span its own ancestor) all occur; each id at most once a trace.
_spans = st.lists(
    st.tuples(st.integers(0, 1), st.integers(0, 12), st.one_of(st.none(), st.integers(0, 14))),
    max_size=40,
    unique_by=lambda row: (row[0], row[1]),
)


@settings(max_examples=60, deadline=None)
@given(_spans)
def test_each_span_waits_for_the_first_parent_not_loaded_up_its_chain(rows):
    assert _tops(rows) == _walked_up(rows)


def test_a_long_chain_ends_at_its_missing_root_parent():
    depth = 3_000  # twelve rounds of doubling
    rows = [(7, i, i + 1) for i in range(depth)]
    assert set(_tops(rows)) == {depth}


# The lineage columns as a watcher and the store both hold them, by span.
_LINEAGE_SQL = """
    SELECT trace_id, span_id, end_ns, inverted_ns, eff_iteration, ancestor_iteration, ancestor_iteration_span,
           bucketed_chain, has_parent, bucketed, is_step, is_umbrella
    FROM {table} ORDER BY trace_id, span_id
"""


@pytest.mark.parametrize(
    ("sample", "walked"),
    [
        (sample, walked)
        for sample in ("grpo_sync", "grpo_async", "grpo_restart", "grpo_buggy")
        for walked in ("python", "sql")
    ]
    + [("grpo_restart", "python-written-often"), ("grpo_buggy", "python-written-often")],  # two attempts; nested spans
)
def test_spans_walked_a_few_at_a_time_have_the_lineage_of_one_walk_over_every_span(
    tmp_path, monkeypatch, sample, walked
):
    """The walk in Python (`watch.walk`, a refresh's spans and the pending spans below them) against the SQL walk of
    the store over every span: each file's records arrive two at a time, the files in turn, so parents arrive after
    their children and in other processes' files. With `sql`, every batch (a round of every file) is left to the
    watcher's walk in SQL (as a parent cycle or a large batch would leave it), and its report is the store's too.
    With `written-often`, the rows walked are written to the tables after a few (`writes`), so spans walked again
    leave the tables as often as the rows waiting."""
    if walked == "sql":
        _decline_the_walk_in_python(monkeypatch)
    if walked == "python-written-often":  # every row written after a few refreshes: these samples last seconds
        monkeypatch.setattr(writes, "WRITE_ROWS", 7)
        monkeypatch.setattr(writes, "WAITING_ROWS", 20)
    written = {f.name: records(f) for f in sorted((SAMPLES / sample).iterdir()) if f.is_file()}
    folder = tmp_path / "run"
    folder.mkdir()
    run = LiveRun([folder])
    walked_few = 0
    original = run.live._walk_few

    def counted(*args):
        nonlocal walked_few
        walked_few += 1
        return original(*args)

    run.live._walk_few = counted
    try:
        for k in range(0, max(len(r) for r in written.values()), 2):
            for name, held in written.items():
                if k >= len(held):
                    continue  # this file is whole: a refresh would find nothing new
                with open(folder / name, "ab") as out:
                    out.write(b"".join(held[k : k + 2]))
                if walked != "sql":
                    run.refresh()
            if walked == "sql":  # the SQL walk takes a round of every file at once, as a large batch comes to it
                run.refresh()
        _assert_asked_alike(run)
        watched, pending, waiting = _rows_and_pending(run)
        report = report_json(run.refresh().report)
    finally:
        run.close()
    with open_store([folder], use_cache=False) as store:
        spans = store.spans()
        expected = spans.rows(_LINEAGE_SQL.format(table=spans.lineage))
    assert walked_few > 10
    assert watched == expected
    assert pending == waiting  # the pending spans, each once: those whose chain of parents ends at one not read
    _assert_reported(report, folder)


def _assert_asked_alike(run: LiveRun) -> None:
    """The questions of the whole run, answered from what the watcher keeps (its summary), are answered alike of
    its tables (`LiveSpans.every_span`: every span, in SQL)."""
    kept, every = run.live.spans(), run.live.every_span()
    assert kept.attempts() == every.attempts()
    assert kept.holdings() == every.holdings()
    assert kept.newest_end_ns() == every.newest_end_ns()
    steps = "SELECT trace_id, span_id, iteration, start_ns, end_ns FROM {} ORDER BY ALL"
    kept_steps, every_steps = kept.step_spans(), every.step_spans()
    assert kept_steps.rows(steps.format(kept_steps.own)) == every_steps.rows(steps.format(every_steps.own))


def _rows_and_pending(run: LiveRun) -> tuple[list, list, list]:
    """The watcher's rows (`_LINEAGE_SQL`), its pending spans, and the spans that ought to be pending: those whose
    chain of parents ends at a parent not read (`pending_tops` over every span). The rows still waiting to be written
    are written first (`writes`)."""
    every = run.live.every_span()
    watched = every.rows(_LINEAGE_SQL.format(table=every.lineage))
    pending = every.rows(f"SELECT tkey, skey, top FROM {PENDING} ORDER BY ALL")
    nodes = f"SELECT tkey, skey, pkey, true AS changed, start_ns FROM {every.lineage}"
    every.run(f"CREATE OR REPLACE TEMP TABLE every_node AS {nodes}")
    with pending_tops(run.connection, "every_node") as tops:
        waiting = every.rows(f"SELECT tkey, skey, top FROM {tops} WHERE top IS NOT NULL ORDER BY ALL")
    return watched, pending, waiting


def _decline_the_walk_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every batch left to the watcher's walk in SQL, as a parent cycle leaves it (`walk.Unwalked`)."""

    def declined(*args: object) -> None:
        raise Unwalked("every batch to the walk in SQL")

    monkeypatch.setattr(watched_spans, "walk", declined)


def _generated_batches(spans: int, batch: int) -> list[bytes]:
    """bench/tracegen's synthetic GRPO job as framed protobuf records of `batch` spans, in the order it writes
    them (a quiet process's batch lands up to an hour of trace time late)."""
    import sys

    bench = str(Path(__file__).resolve().parents[1] / "bench")
    sys.path.insert(0, bench)
    try:
        import tracegen
    finally:
        sys.path.remove(bench)
    out: list[bytes] = []
    tracegen.framed_batches(spans, lambda record, _: out.append(record), batch_spans=batch)
    return out


def _appended(tmp_path: Path, batches: list[bytes], late: int) -> Iterator[tuple[LiveRun, Path, dict]]:
    """A watcher of a file holding all but the `late` last of `batches`, read; then, after each of those is
    appended, the watcher, the file and the refresh's report as JSON. The watcher is closed at the end."""
    path = tmp_path / "job.otlp"
    path.write_bytes(b"".join(batches[:-late]))
    run = LiveRun([path])
    try:
        run.refresh()
        for record in batches[-late:]:
            with open(path, "ab") as out:
                out.write(record)
            yield run, path, report_json(run.refresh().report)
    finally:
        run.close()


def _assert_reported(report: dict, path: Path) -> None:
    expected = json_report(path, "--no-cache")
    same = json.dumps(report, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert same, _first_difference(report, expected)


@pytest.mark.slow
def test_a_generated_job_appended_a_batch_at_a_time_reads_as_its_report(tmp_path, monkeypatch):
    """Hundreds of windows, so the kinds and the outliers count (`report.mark_outliers`), and batches that land
    late over many of them, the job span last: the watcher's report after a first read of most of the job and
    after each of the appends that follow (its walk in Python, its newest spans held, its sums of span-seconds) is
    `report`'s. The rows walked wait in memory, and here every 1,500 those older than the newest spans held are
    written (`writes`), the newer left waiting; spans walked again whose rows were written are deleted from the
    tables. At the end the watcher's rows are the lineage of one walk over every span, and its pending spans those
    whose chain of parents ends at one not read."""
    monkeypatch.setattr(writes, "WRITE_ROWS", 1_500)
    batches = _generated_batches(30_000, 500)
    job = max(i for i, batch in enumerate(batches) if b"rl.grpo.job" in batch)
    batches.append(batches.pop(job))  # the job span last: every span waits for it, and is walked again then
    seen = {"written in part": 0, "deleted from the tables": 0}
    for number, (run, path, report) in enumerate(_appended(tmp_path, batches, 12)):
        if number == 0:
            _count_writes(run.live.unwritten, seen)
        if number % 4 == 3:
            _assert_reported(report, path)
        if number == 11:
            watched, pending, waiting = _rows_and_pending(run)
    assert any(row["outliers"] for row in report["iterations"])
    assert all(seen.values()), seen
    with open_store([path], use_cache=False) as store:
        spans = store.spans()
        assert watched == spans.rows(_LINEAGE_SQL.format(table=spans.lineage))
    assert pending == waiting


def _count_writes(unwritten: writes.Unwritten, seen: dict[str, int]) -> None:
    """Count in `seen` the writes that left newer rows waiting, and the rows walked again deleted from the tables."""
    write, drop = unwritten.write, unwritten.drop

    def counted_write(older_than_ns: int | None = None) -> None:
        before = unwritten.rows
        write(older_than_ns)
        seen["written in part"] += older_than_ns is not None and 0 < unwritten.rows < before

    def counted_drop(keys: list) -> tuple[list, list]:
        spans, pending = drop(keys)
        seen["deleted from the tables"] += len(spans)
        return spans, pending

    unwritten.write, unwritten.drop = counted_write, counted_drop  # type: ignore[method-assign]


def _first_difference(got: dict, expected: dict) -> str:
    """Where two reports first differ, in a line (pytest's own diff of two large reports takes minutes)."""
    for key in sorted(set(got) | set(expected)):
        if key == "iterations":
            for mine, theirs in zip(got[key], expected[key], strict=False):
                if mine != theirs:
                    return f"iteration {theirs.get('iteration')}: {mine} != {theirs}"
            if len(got[key]) != len(expected[key]):
                return f"{len(got[key])} iterations != {len(expected[key])}"
        elif got.get(key) != expected.get(key):
            return f"{key}: {got.get(key)} != {expected.get(key)}"
    return "the same objects, differently written"


def test_the_kinds_kept_as_batches_land_are_the_kinds_of_every_span(tmp_path):
    """`KeptSweeps.landed` adds a landing name's hash to each kind it lands in: after a first read and a dozen
    late batches, every window's kind is the one `windows.window_kinds` gives over every span."""
    from rollup.accounting.windows import window_kinds

    for number, (run, _, report) in enumerate(_appended(tmp_path, _generated_batches(20_000, 500), 12)):
        if number == 11:  # the last, while the watcher is open
            starts = [row["start_ns"] for row in report["iterations"]]
            ends = [row["end_ns"] for row in report["iterations"]]
            held = run.sweeps.kinds  # the kinds the report's outliers were grouped by, by stretch
            assert (list(held.starts), list(held.ends)) == (starts, ends)
            kept = list(held.columns[0])
            expected = list(window_kinds(run.live.every_span(), starts, ends))
    assert len(set(expected)) > 2
    assert kept == expected


@pytest.mark.parametrize("walked", ["python", "sql"])
def test_a_watcher_holding_few_of_the_newest_spans_asks_the_database_for_the_rest(tmp_path, monkeypatch, walked):
    """With room for a dozen rows (`newest.HOT_ROWS`), most slices are cut from the database's table, and the
    report after each late batch is still the report's; with `sql`, each batch walked in SQL, as a parent cycle
    would have it."""
    from rollup.watch import newest

    monkeypatch.setattr(newest, "HOT_ROWS", 12)
    if walked == "sql":
        _decline_the_walk_in_python(monkeypatch)
    for number, (run, path, report) in enumerate(_appended(tmp_path, _generated_batches(6_000, 200), 4)):
        assert run.live.hot.rows.num_rows <= 12
        if number == 3:
            _assert_reported(report, path)


@pytest.mark.parametrize("shape", ["framed", "jsonl"])
def test_a_nemo_lens_trace_watched_as_it_is_written_reads_as_its_report(tmp_path, shape):
    """Another writer's trace: nemo-lens, whose driver and rank-0 worker share one `service.instance.id` (SPEC
    section 1 names them apart by host:pid, so the watcher renames the first one's spans when the second appears)
    and whose spans carry no `rl.span_group`. Written a record at a time, refreshed after each."""
    from test_reading_process_identity import RESOURCES, nemo_lens_trace
    from tracebuild import write_trace

    spans = nemo_lens_trace()
    whole = write_trace(tmp_path / f"whole.{shape}", spans, shape, batches=len(spans), resources=RESOURCES)
    assert len(records(whole)) == len(spans)
    path = tmp_path / "run" / whole.name
    path.parent.mkdir()
    path.write_bytes(b"")
    run = LiveRun([path.parent])
    try:
        for record in records(whole):
            with open(path, "ab") as out:
                out.write(record)
            report = report_json(run.refresh().report)
    finally:
        run.close()
    assert report["iterations"]
    _assert_reported(report, path.parent)
