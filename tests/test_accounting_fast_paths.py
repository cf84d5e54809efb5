"""The accounting's faster paths give the answers of the plain ones.

The cached lineage is read in place (a view of its Parquet file) rather than copied into memory: the report it gives
is the fresh walk's, `--attempt` leaves the file whole, and a damaged file is rebuilt. The walk itself (over a table of
nodes, laid beside the spans by position) is held to walking up from each span alone; spans cut to stretches of
time by bins are the pairs of the range join; and the charge swept in batches of stretches consecutive in time is
the charge of one sweep, for the report, `--by process`, the breakdown by name and `check --expect`. The Python twins
a watcher calls are held to their SQL originals: the charge of a few spans (`sweep_few`), span-seconds
(`span_seconds`).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import PROPERTY_TESTS, run_json
from rollup.base.nodes import NODE_COLUMNS_SQL, NODE_TABLE_COLUMNS
from rollup.base.schema import ACCOUNTING_SCHEMA
from rollup.base.tables import OWN_SPANS
from rollup.store.lineage import build_lineage
from rollup.store.span_store import open_store
from rollup.store.spanset import SpanSet
from tracebuild import S, run_resource, span_id_of, step, write_trace


def _job(tmp_path):
    """Two attempts: A runs steps 1-2 and dies; B restarts at step 2 and runs 3. A worker's span carries no
    iteration (it inherits its step's across processes); one bucketed span nests in another."""
    spans = [
        step("a1", 1, 0, 10, process="a"),
        S("a-gen", "rl.grpo.generation", 1, 6, parent="a1", bucket="productive", process="a"),
        S("a-work", "rl.grpo.generation", 2, 5, parent="a-gen", bucket="productive", process="a-worker"),
        step("a2", 2, 10, 14, process="a"),
        S("a-upd", "rl.grpo.policy_update", 11, 13, parent="a2", bucket="productive", process="a"),
        step("b2", 2, 20, 30, process="b"),
        S("b-gen", "rl.grpo.generation", 21, 28, parent="b2", bucket="productive", process="b"),
        step("b3", 3, 30, 40, process="b"),
        S("b-idle", "rl.idle.refit_bubble", 31, 33, parent="b3", bucket="idle", process="b"),
    ]
    resources = {p: run_resource(p, "job-a" if p.startswith("a") else "job-b") for p in ("a", "a-worker", "b")}
    return write_trace(tmp_path / "job.otlp", spans, resources=resources)


def _lineage_files(cache):
    return list(cache.glob("v*/sets/*.lineage-v*.parquet"))


@pytest.mark.slow
def test_a_cached_lineage_is_read_in_place_and_agrees_with_a_fresh_walk(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_CACHE_DIR", str(tmp_path / "cache"))
    path = str(_job(tmp_path))
    fresh = run_json(["report", path, "--no-cache"])
    assert run_json(["report", path]) == fresh  # walks, writes the file
    assert run_json(["report", path]) == fresh  # reads it
    assert run_json(["check", path]) == run_json(["check", path, "--no-cache"])
    with open_store([path], cache_dir=tmp_path / "cache") as store:
        assert store.spans().files  # a view of the cached file
        assert store.sql("SELECT count(*) AS n FROM spans_ex")["n"][0].as_py() == 9


@pytest.mark.slow
def test_an_attempt_read_from_the_cached_lineage_leaves_the_file_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_CACHE_DIR", str(tmp_path / "cache"))
    path = str(_job(tmp_path))
    everything = run_json(["report", path])
    (lineage,) = _lineage_files(tmp_path / "cache")
    only_b = run_json(["report", path, "--attempt", "job-b"])
    assert [row["iteration"] for row in only_b["iterations"]] == [2, 3]
    assert [a["run_id"] for a in only_b["attempts"]] == ["job-b"]
    assert pq.read_metadata(lineage).num_rows == 9
    assert run_json(["report", path]) == everything


@pytest.mark.slow
def test_a_damaged_lineage_file_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_CACHE_DIR", str(tmp_path / "cache"))
    path = str(_job(tmp_path))
    expected = run_json(["report", path])
    (lineage,) = _lineage_files(tmp_path / "cache")
    lineage.write_bytes(b"PAR1 not a parquet file")
    assert run_json(["report", path]) == expected
    assert pq.read_metadata(lineage).num_rows == 9


# --- the lineage laid beside the spans --------------------------------------------------------------------------------


@pytest.mark.slow
def test_spans_in_a_parent_cycle_keep_their_own_iteration_and_the_rest_line_up(tmp_path):
    """What the walk found is laid beside the spans by position: spans no walk reaches (a parent cycle, and what
    hangs under it) must still get a row each, or every span after them would take its neighbour's lineage."""
    spans = [
        S("c1", "rl.grpo.cycle", 1, 2, parent="c2", iteration=7),
        S("c2", "rl.grpo.cycle", 1, 2, parent="c1"),
        S("under", "rl.grpo.generation", 1, 2, parent="c2", bucket="productive"),
        step("step1", 1, 0, 10),
        S("gen", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive", process="worker"),
        S("lost", "rl.grpo.reward", 6, 7, parent="nowhere", bucket="productive"),
        step("step2", 2, 10, 20),
        S("upd", "rl.grpo.policy_update", 11, 15, parent="step2", bucket="productive"),
    ]
    expected = {"c1": 7, "c2": None, "under": None, "step1": 1, "gen": 1, "lost": None, "step2": 2, "upd": 2}
    for shape in ("framed", "jsonl"):  # a view of Parquet parts, and DuckDB's own JSON table
        path = str(write_trace(tmp_path / f"run-{shape}.trace", spans, shape))
        for cache in (["--no-cache"], []):
            rows = run_json(["spans", path, *cache])
            assert {row["span_id"]: row["iteration"] for row in rows} == {
                span_id_of(label): iteration for label, iteration in expected.items()
            }
            findings = run_json(["check", path, *cache])["findings"]
            assert {f["span_id"] for f in findings if f["rule"] == "orphan-span"} == {span_id_of("lost")}
    with open_store([path], use_cache=False) as store:  # the walk over a table of nodes handed to it
        store.connection.execute(
            f"CREATE TABLE handed AS SELECT {', '.join(ACCOUNTING_SCHEMA.names)}, {NODE_COLUMNS_SQL} FROM spans"
        )
        build_lineage(store.connection, "handed")
        found = dict(store.connection.execute("SELECT span_id, eff_iteration FROM spans_ex").fetchall())
    assert found == {span_id_of(label): iteration for label, iteration in expected.items()}


def test_a_parent_key_two_spans_share_hands_down_the_nearest_ones_lineage(tmp_path):
    """Span ids are unique once loaded (SPEC section 3), and the walk then takes its short road: no guard against a
    second visit, no choice among visits. Two distinct ids may still share a key the walk joins on (a hash, or
    `ab` and `00ab` as numbers): then a child of that key takes the lineage of the span nearest a root. Here "a2",
    a root with iteration 9, shares the key of "a" (under step r: iteration 5, bucketed r), so c, whose parent is
    "a", takes a2's; without the shared key it takes a's."""
    spans = [
        S("r", "rl.grpo.step", 0, 10, iteration=5, bucket="productive"),
        S("a", "rl.grpo.work", 1, 2, parent="r", bucket="overhead"),
        S("a2", "rl.grpo.other", 3, 4, iteration=9),
        S("c", "rl.grpo.leaf", 5, 6, parent="a"),
        S("d", "rl.grpo.leaf", 6, 7, parent="r"),
    ]
    a, a2, r = span_id_of("a"), span_id_of("a2"), span_id_of("r")
    path = write_trace(tmp_path / "run.otlp", spans)
    for shared in (False, True):
        with open_store([path], use_cache=False) as store:
            connection = store.connection
            connection.execute(
                f"CREATE TABLE handed AS SELECT {', '.join(ACCOUNTING_SCHEMA.names)}, {NODE_COLUMNS_SQL} FROM spans"
            )
            if shared:
                connection.execute(f"UPDATE handed SET skey = (SELECT skey FROM handed WHERE span_id = '{a}') "
                                   f"WHERE span_id = '{a2}'")  # fmt: skip
            build_lineage(connection, "handed")
            rows = connection.execute(
                "SELECT span_id, eff_iteration, ancestor_iteration_span, bucketed_chain FROM spans_ex"
            ).fetchall()
        found = {span_id: rest for span_id, *rest in rows}
        assert len(found) == len(rows) == len(spans)  # each span once, with one lineage
        assert found[span_id_of("c")] == ([9, a2, []] if shared else [5, r, [r, a]])
        assert found[span_id_of("d")] == [5, r, [r]] and found[a] == [5, r, [r]] and found[a2] == [9, None, []]


# --- spans cut to stretches of time, by bins or by the range join -----------------------------------------------------

instants = st.integers(0, 60)


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=20)
@given(
    stretches=st.lists(st.tuples(instants, st.integers(0, 20)), min_size=1, max_size=12),
    spans=st.lists(st.tuples(instants, st.integers(1, 30)), max_size=20),
    crowded=st.booleans(),
)
@example(stretches=[(0, 10), (10, 0)], spans=[(5, 10)], crowded=False)  # a moment at the very end, run across
def test_spans_cut_to_stretches_by_bins_are_the_pairs_of_the_range_join(stretches, spans, crowded):
    """Every (span, stretch) pair that overlaps (span start < stretch end, span end > stretch start), once, cut to
    the stretch; by bins, and by the range join when no bins will do."""
    import duckdb

    from rollup.accounting import intervals as overlaps

    bounds = [(start, start + length) for start, length in stretches]
    if crowded:  # many stretches in a moment of a long run: no width keeps the bins sparse
        bounds += [(5, 5 + k % 2) for k in range(overlaps.MOST_STRETCHES_PER_BIN + 1)] + [(0, 10**9)]
    connection = duckdb.connect()
    connection.execute("CREATE TABLE cut_spans (id INTEGER, start_ns BIGINT, end_ns BIGINT)")
    for number, (start, length) in enumerate(spans):
        connection.execute("INSERT INTO cut_spans VALUES (?, ?, ?)", [number, start, start + length])
    overlaps.clip_to_stretches(SpanSet(connection), bounds, "SELECT * FROM cut_spans", ["id"], "cut")
    found = sorted(connection.execute("SELECT stretch, id, s, e FROM cut").fetchall())
    expected = sorted(
        (k, number, max(start, a), min(start + length, b))
        for k, (a, b) in enumerate(bounds)
        for number, (start, length) in enumerate(spans)
        if start < b and start + length > a
    )
    assert found == expected
    connection.register("held_bounds", overlaps._stretch_table(bounds))
    crowded_out = overlaps.choose_bins(SpanSet(connection), "held_bounds") is None
    assert crowded_out == crowded  # each way is held to the pairs


# --- the charge, swept in batches of stretches consecutive in time ----------------------------------------------------


def _charge_spans(spans, buckets):
    """A set of spans (on a DuckDB connection of its own) whose lineage table holds `spans` ((start, length) pairs)
    with `buckets` (None: unbucketed) in two processes, with the columns the charge reads."""
    import duckdb

    connection = duckdb.connect()
    connection.execute(
        "CREATE TABLE spans_ex "
        "(start_ns BIGINT, end_ns BIGINT, bucket VARCHAR, bucketed BOOLEAN, process VARCHAR, name VARCHAR,"
        " span_group VARCHAR)"
    )
    for number, ((start, length), bucket) in enumerate(zip(spans, buckets, strict=True)):
        connection.execute(
            "INSERT INTO spans_ex VALUES (?, ?, ?, ?, ?, ?, ?)",
            [start, start + length, bucket, bucket is not None, "pq"[number % 2], "abc"[number % 3],
             [None, "generation", "Reward"][number % 3]],
        )  # fmt: skip
    return SpanSet(connection)


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=10)
@given(
    stretches=st.lists(st.tuples(instants, st.integers(0, 20)), min_size=1, max_size=12),
    spans=st.lists(st.tuples(instants, st.integers(0, 30)), max_size=24),
    most=st.integers(1, 6),
    data=st.data(),
)
def test_stretches_charged_in_batches_are_charged_as_in_one_sweep(stretches, spans, most, data):
    """However few spans a sweep may take, the batches hold every stretch once, in time order, and charge each
    stretch exactly as one sweep over every span does; so do the per-process charge (`--by process`), the
    breakdown by name and the span groups present in each window."""
    from rollup.accounting import attribution, breakdown
    from rollup.accounting import intervals as overlaps
    from rollup.accounting.windows import Window
    from rollup.base.schema import BUCKETS
    from rollup.checks import window_rules as coverage

    buckets = [data.draw(st.sampled_from([None, *BUCKETS])) for _ in spans]
    bounds = [(start, start + length) for start, length in stretches]
    charged_spans = _charge_spans(spans, buckets)
    batches = overlaps.time_batches(charged_spans, bounds, attribution.swept_spans_sql(charged_spans), most)
    assert sorted(p for batch in batches for p in batch) == list(range(len(bounds)))
    for earlier, later in zip(batches, batches[1:], strict=False):
        assert max(bounds[p][0] for p in earlier) <= min(bounds[p][0] for p in later)
    counted = sum(1 for (start, length), b in zip(spans, buckets, strict=True) if b and length > 0)
    if counted <= most:
        assert len(batches) == 1
    order = list(BUCKETS)
    whole = attribution.charge_stretches(charged_spans, bounds, order, batch_spans=10**9)
    assert list(attribution.charge_stretches(charged_spans, bounds, order, batch_spans=most)) == list(whole)
    # A report holds its windows' charges one by one and sums the stretches outside them: the same figures.
    held = data.draw(st.integers(0, len(bounds)))
    summed = attribution.charge_stretches(charged_spans, bounds, order, summed_from=held, batch_spans=most)
    assert list(summed) == list(whole)[:held]
    tail = list(whole)[held:]
    assert summed.rest == attribution.Charge(
        sum(c.wall_ns for c in tail), {b: sum(c.bucket_ns[b] for c in tail) for b in order},
        sum(c.unaccounted_ns for c in tail),
    )  # fmt: skip
    columns = whole[:held].columns()  # and as columns, what the rows are built of
    assert list(columns.walls) == [c.wall_ns for c in whole[:held]]
    assert list(columns.unaccounted) == [c.unaccounted_ns for c in whole[:held]]
    assert {b: list(columns.by_bucket[b]) for b in order} == {b: [c.bucket_ns[b] for c in whole[:held]] for b in order}
    by_process = attribution._charged_table(charged_spans, bounds, order, by_process=True, batch_spans=10**9)
    batched = attribution._charged_table(charged_spans, bounds, order, by_process=True, batch_spans=most)
    assert sorted(batched.to_pylist(), key=str) == sorted(by_process.to_pylist(), key=str)
    windows = [Window(1, start, end) for start, end in bounds]  # the breakdown by name sweeps in batches too,
    # each batch's shares rounded as it comes: the charges and the shares of one pass

    def by_window(columns: breakdown.NameWalls) -> list[dict[tuple[str, str], int]]:
        found: list[dict[tuple[str, str], int]] = [{} for _ in windows]
        for position, key, bucket, ns in zip(columns.positions, columns.key_ids, columns.buckets, columns.wall_ns,
                                             strict=True):  # fmt: skip
            found[position][(columns.keys[key], BUCKETS[bucket])] = ns
        return found

    charges, walls = breakdown.charged_name_walls(charged_spans, windows, order, batch_spans=10**9)
    assert list(charges) == list(whole)
    held, columns = breakdown.charged_name_walls(charged_spans, windows, order, batch_spans=most)
    assert list(held) == list(whole) and by_window(columns) == by_window(walls)
    for position, shares in enumerate(by_window(walls)):  # shared out, each bucket adds up to its charge exactly
        for bucket in order:
            assert sum(ns for (_, b), ns in shares.items() if b == bucket) == whole[position].bucket_ns[bucket]
    expect = ["generation", "reward"]  # and so does `check --expect`, which looks for groups in each window
    present = coverage.groups_present(charged_spans, windows, expect, batch_spans=10**9)
    assert coverage.groups_present(charged_spans, windows, expect, batch_spans=most) == present


# --- the charge of a few spans, swept on Arrow columns in this process (a watcher's slices) --------------------------


@dataclass(frozen=True)
class _HeldSpans(SpanSet):
    """A set that holds its spans as Arrow too, as a watcher's slice of its newest spans does (`in_memory`)."""

    held: pa.Table | None = None

    def in_memory(self) -> pa.Table | None:
        return self.held


@settings(PROPERTY_TESTS, max_examples=25)
@given(
    stretches=st.lists(st.tuples(instants, st.integers(0, 20)), min_size=1, max_size=12),
    spans=st.lists(st.tuples(instants, st.integers(0, 30)), max_size=24),
    data=st.data(),
)
def test_a_few_spans_charged_in_python_are_charged_as_the_sql_sweep_charges_them(stretches, spans, data):
    """`charge_few` (a watcher's slices of the newest frames) against `charge_stretches`, in every precedence:
    the same charge of every stretch, overlapping stretches and spans that only touch a stretch included, whether
    it reads the spans with a query or where the set holds them (`SpanSet.in_memory`); and past FEW_SPANS it
    declines."""
    from rollup.accounting import attribution, sweep_few
    from rollup.base.schema import BUCKETS

    buckets = [data.draw(st.sampled_from([None, *BUCKETS])) for _ in spans]
    order = data.draw(st.permutations(BUCKETS))
    bounds = [(start, start + length) for start, length in stretches]
    charged_spans = _charge_spans(spans, buckets)
    expected = list(attribution.charge_stretches(charged_spans, bounds, order))
    held = _HeldSpans(charged_spans.connection, held=charged_spans.arrow(f"SELECT * FROM {charged_spans.lineage}"))
    for swept in (charged_spans, held):
        few = sweep_few.charge_few(swept, bounds, order)
        assert few is not None
        assert list(few) == expected


def test_more_spans_than_a_few_are_left_to_the_sql_sweep(monkeypatch):
    from rollup.accounting import attribution, sweep_few

    charged_spans = _charge_spans([(i, 2) for i in range(6)], ["productive"] * 6)
    monkeypatch.setattr(sweep_few, "FEW_SPANS", 5)
    assert sweep_few.charge_few(charged_spans, [(0, 10)], list(attribution.BUCKETS)) is None
    monkeypatch.setattr(sweep_few, "FEW_SPANS", 6)
    assert list(sweep_few.charge_few(charged_spans, [(0, 10)], list(attribution.BUCKETS))) == list(
        attribution.charge_stretches(charged_spans, [(0, 10)], list(attribution.BUCKETS))
    )


# --- span-seconds summed on Arrow columns in this process (a watcher's new spans) ------------------------------------


@settings(PROPERTY_TESTS, max_examples=25)
@given(
    spans=st.lists(
        st.tuples(
            st.sampled_from([None, "", "run-a", "run-b"]),  # the attempt: None and "" are both the unnamed one
            st.one_of(st.none(), st.integers(1, 3)),  # the effective iteration
            st.sampled_from([None, "productive", "overhead", "idle", "wasted", "not-a-bucket"]),
            instants,
            st.integers(0, 30),
        ),
        max_size=30,
    )
)
def test_span_seconds_summed_in_python_are_the_sql_sums(spans):
    """`span_seconds_of_rows` against its SQL original (`span_seconds_sql`, read as `span_seconds_ns` and by window
    as `window_span_ns`): the same sums per attempt and iteration, of bucketed spans of an iteration alone."""
    import duckdb

    from rollup.accounting.intervals import Stretches
    from rollup.accounting.span_seconds import span_seconds_ns, span_seconds_of_rows, window_span_ns
    from rollup.accounting.windows import Windows
    from rollup.base.schema import BUCKETS

    connection = duckdb.connect()
    connection.execute(
        "CREATE TABLE counted (run_id VARCHAR, eff_iteration BIGINT, bucket VARCHAR, bucketed BOOLEAN,"
        " start_ns BIGINT, end_ns BIGINT)"
    )
    for run_id, iteration, bucket, start, length in spans:
        connection.execute("INSERT INTO counted VALUES (?, ?, ?, ?, ?, ?)",
                           [run_id, iteration, bucket, bucket in BUCKETS, start, start + length])  # fmt: skip
    counted = SpanSet(connection, "counted", "counted")
    expected = span_seconds_ns(counted)
    assert span_seconds_of_rows(counted.arrow("SELECT * FROM counted")) == expected
    keys = [*sorted(expected), ("run-c", 1)]  # and a window with no span of its own
    run_ids = sorted({attempt for attempt, _ in keys})
    stretches = Stretches(array("q", [0] * len(keys)), array("q", [1] * len(keys)))
    windows = Windows(
        array("q", (i for _, i in keys)), stretches, array("q", (run_ids.index(a) for a, _ in keys)), run_ids
    )
    none = dict.fromkeys(BUCKETS, 0)
    by_window = window_span_ns(counted, windows)
    assert [dict(zip(BUCKETS, column, strict=True)) for column in zip(*by_window, strict=True)] == [
        expected.get(key, none) for key in keys
    ]


# --- the lineage against a plain walk up each span's parents ----------------------------------------------------------


def _climb(spans: list[S]) -> dict[str, tuple]:
    """Per span id, what `spans_ex` must say, found by walking up from each span alone: (eff_iteration,
    ancestor_iteration, ancestor_iteration_span, bucketed_chain, has_parent). A span whose ancestors run into a
    cycle is reached by no walk: its own iteration, no ancestors."""
    by_id = {s.span_id: s for s in spans}
    out = {}
    for span in spans:
        ancestors: list[S] = []
        seen = {span.span_id}
        cursor, cyclic = span, False
        while cursor.parent_id is not None and cursor.parent_id in by_id:
            cursor = by_id[cursor.parent_id]
            if cursor.span_id in seen:
                cyclic = True
                break
            seen.add(cursor.span_id)
            ancestors.append(cursor)
        has_parent = span.parent_id in by_id
        if cyclic:
            out[span.span_id] = (span.iteration, None, None, [], has_parent)
            continue
        holder = next((a for a in ancestors if a.iteration is not None), None)
        chain = [a.span_id for a in reversed(ancestors) if a.bucket is not None]
        eff = span.iteration if span.iteration is not None else (holder.iteration if holder else None)
        out[span.span_id] = (
            eff, holder.iteration if holder else None, holder.span_id if holder else None, chain, has_parent
        )  # fmt: skip
    return out


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=12)
@given(
    shape=st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(0, 11), st.just(-1)),  # parent: none, a span (maybe later), missing
            st.one_of(st.none(), st.integers(1, 4)),  # iteration
            st.booleans(),  # bucketed
        ),
        min_size=1,
        max_size=12,
    ),
    cached=st.booleans(),
    nodes_file=st.booleans(),
)
@example(shape=[(1, None, True), (0, 3, False), (0, None, True), (2, None, True)], cached=False, nodes_file=True)
@example(shape=[(None, 1, True), (0, None, True), (1, None, False), (2, 2, True), (3, None, True)], cached=True,
         nodes_file=False)  # fmt: skip
def test_the_lineage_is_what_walking_up_from_each_span_finds(tmp_path_factory, shape, cached, nodes_file):
    """Only parents hand anything down, so the walk goes over the parents and each span takes its parent's in a
    join; held here to walking up from every span by itself, through chains, cycles and missing parents. The spans'
    node columns are a DuckDB table, or (`nodes_file`, as for more spans than the memory limit holds) a Parquet
    file the walk reads through a view."""
    spans = [
        S(f"s{i}", "rl.grpo.work", i, i + 1, parent=None if p is None else "gone" if p == -1 else f"s{p % len(shape)}",
          bucket="productive" if bucketed else None, iteration=iteration)
        for i, (p, iteration, bucketed) in enumerate(shape)
    ]  # fmt: skip
    folder = tmp_path_factory.mktemp("lineage")
    path = write_trace(folder / "run.otlp", spans)
    with open_store([path], use_cache=cached, cache_dir=folder / "cache") as store:
        if nodes_file:
            scratch = folder / "scratch"
            scratch.mkdir()
            build_lineage(store.connection, store.nodes_table, parquet=store.lineage_cache, scratch=scratch)
            assert not list(scratch.iterdir()) if cached else [p.suffix for p in scratch.iterdir()] == [".parquet"]
        else:
            store.spans()
        rows = store.connection.execute(
            "SELECT span_id, eff_iteration, ancestor_iteration, ancestor_iteration_span, bucketed_chain, has_parent "
            "FROM spans_ex"
        ).fetchall()
        own = ", ".join(NODE_TABLE_COLUMNS)  # a span's own columns read alone: as spans_ex has them, row for row
        mine = OWN_SPANS if nodes_file and not cached else store.spans().own
        assert (mine == OWN_SPANS) == (not cached)  # without the cache spans_ex is a join
        for first, second in (("spans_ex", mine), (mine, "spans_ex")):
            ((extra,),) = store.connection.execute(
                f"SELECT count(*) FROM (SELECT {own} FROM {first} EXCEPT ALL SELECT {own} FROM {second})"
            ).fetchall()
            assert extra == 0
    assert {row[0]: row[1:] for row in rows} == _climb(spans)
