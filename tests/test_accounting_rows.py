"""The report's rows held as columns (`rollup.accounting.rows.IterationRows`) and the JSON written a row at a time: what
goes in comes out, row for row and byte for byte."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.views.formats import json_chunks, json_text
from conftest import PROPERTY_TESTS, invoke
from rollup import ReportOptions, build_report, open_store, report_json
from rollup.accounting.rows import Figures, IterationRow, IterationRows, NameShare
from rollup.base.schema import BUCKETS

nanoseconds = st.integers(0, 2**62)
buckets = st.fixed_dictionaries({b: nanoseconds for b in BUCKETS})
rows_strategy = st.lists(
    st.builds(
        IterationRow,
        iteration=st.integers(-(2**40), 2**40),
        start_ns=nanoseconds,
        end_ns=nanoseconds,
        figures=st.builds(
            Figures, wall_ns=nanoseconds, bucket_ns=buckets, unaccounted_ns=nanoseconds, span_ns=buckets
        ),  # fmt: skip
        process=st.one_of(st.none(), st.sampled_from(["driver", "worker-1", ""])),
        run_id=st.sampled_from(["", "job-a", "job-b"]),
        names=st.one_of(
            st.none(),
            st.lists(
                st.builds(NameShare, st.text(max_size=5), st.sampled_from(BUCKETS), nanoseconds, nanoseconds),
                max_size=3,
            ),
        ),  # fmt: skip
        outliers=st.lists(st.sampled_from(["wall_s", "idle_s"]), max_size=2, unique=True),
    ),
    max_size=12,
)


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=30)
@given(rows_strategy)
def test_rows_held_as_columns_come_back_as_they_went_in(rows):
    held = IterationRows(rows)
    assert len(held) == len(rows)
    assert list(held) == rows and held == rows
    assert [held[i] for i in range(-len(rows), 0)] == rows
    assert held[1:-1] == rows[1:-1] and held[::2] == rows[::2]
    assert pickle.loads(pickle.dumps(held)) == rows  # a Ray task's part of a report travels pickled
    if rows:
        held.set_outliers(0, ["productive_s"])
        held.set_outliers(len(rows) - 1, [])
        assert held[0].outliers == (["productive_s"] if len(rows) > 1 else [])
        assert held[-1].outliers == []
        total = held.total()
        assert total.wall_ns == sum(r.figures.wall_ns for r in rows)
        assert total.span_ns == {b: sum(r.figures.span_ns[b] for r in rows) for b in BUCKETS}


def test_a_row_made_from_the_columns_is_a_copy():
    held = IterationRows([IterationRow(1, 0, 10, Figures(10))])
    row = held[0]
    row.figures.bucket_ns["idle"] = 5
    row.outliers.append("wall_s")
    assert held[0].figures.bucket_ns["idle"] == 0 and held[0].outliers == []


@pytest.mark.slow
def test_the_json_written_a_row_at_a_time_is_the_json_of_the_whole_report():
    for run in ("grpo_sync", "grpo_restart", "grpo_buggy"):
        for by in (None, "process", "name"):
            with open_store([f"sample_traces/{run}/"], use_cache=False) as store:
                report = build_report(store, ReportOptions(by=by))
                whole = json_text(report_json(report))
                assert "".join(json_chunks(report_json(report, lazy=True))) == whole
                assert json.loads(whole)["iterations"] == list(report_json(report, lazy=True)["iterations"])
    for payload in ({}, [], [1, {"a": [2]}], {"empty": [], "rows": [{"x": 1}] * 700, "n": 3}):
        assert "".join(json_chunks(payload)) == json_text(payload)


def test_an_empty_selection_writes_an_empty_list():
    result = invoke(["report", "sample_traces/grpo_sync/", "--iterations", "900:901", "--format", "json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["iterations"] == []


def test_frame_charges_read_as_the_list_of_charges_they_hold():
    from array import array

    from rollup.accounting.attribution import Charge, FrameCharges

    precedence = ["idle", "productive", "overhead", "wasted"]
    walls = array("q", [10, 20, 30, 40])
    by_rank = [array("q", [1, 2, 3, 4]), array("q", [0, 5, 0, 6]), array("q", [2, 0, 0, 0]), array("q", [0, 0, 7, 0])]
    charges = FrameCharges(walls, by_rank, precedence)
    listed = [
        Charge(wall, {b: by_rank[r][i] for r, b in enumerate(precedence)}, wall - sum(c[i] for c in by_rank))
        for i, wall in enumerate(walls)
    ]
    assert list(charges) == listed and len(charges) == 4
    assert charges[-1] == listed[-1] and charges[1].unaccounted_ns == 13
    assert list(charges[1:3]) == listed[1:3] and list(charges[3:]) == listed[3:] and list(charges[:0]) == []
    assert list(charges[1:][1:]) == listed[2:] and charges[1:][-1] == listed[-1]
    with pytest.raises(IndexError):
        charges[4]
    with pytest.raises(IndexError):
        charges[1:][3]


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=20)
@given(rows_strategy, st.data())
def test_rows_built_column_by_column_are_the_rows_appended_one_by_one(rows, data):
    """A report builds its rows from the windows', the charges' and the span-seconds' columns at once
    (`IterationRows.of_windows`): the same rows as appending each window's row, every figure in its place."""
    from array import array

    from rollup.accounting.attribution import Charge, FrameCharges
    from rollup.accounting.intervals import Stretches
    from rollup.accounting.windows import Windows

    def charged(figures: Figures) -> Figures:  # as a charge is: the buckets and unaccounted make up the wall clock
        bucket_ns = {b: ns % 2**59 for b, ns in figures.bucket_ns.items()}
        unaccounted = figures.unaccounted_ns % 2**59
        return Figures(sum(bucket_ns.values()) + unaccounted, bucket_ns, unaccounted, figures.span_ns)

    rows = [IterationRow(r.iteration, r.start_ns, r.end_ns, charged(r.figures), run_id=r.run_id) for r in rows]
    run_ids = ("", "job-a", "job-b")
    windows = Windows(
        array("q", (r.iteration for r in rows)),
        Stretches(array("q", (r.start_ns for r in rows)), array("q", (r.end_ns for r in rows))),
        array("q", (run_ids.index(r.run_id) for r in rows)),
        run_ids,
    )
    precedence = data.draw(st.permutations(BUCKETS))
    charges = [Charge(r.figures.wall_ns, r.figures.bucket_ns, r.figures.unaccounted_ns) for r in rows]
    walls = array("q", (c.wall_ns for c in charges))
    held = FrameCharges(walls, [array("q", (c.bucket_ns[b] for c in charges)) for b in precedence], precedence)
    lead = data.draw(st.integers(0, 2))  # charges held beside others (the superseded windows after them) or alone
    for column in (walls, *held._by_rank):
        column.extend([7] * lead)
    span_ns = [array("q", (r.figures.span_ns[b] for r in rows)) for b in BUCKETS]
    built = IterationRows.of_windows(windows, held[: len(rows)].columns(), span_ns)
    assert list(built) == rows and built.total() == IterationRows(rows).total()


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=20)
@given(rows_strategy)
def test_names_held_as_columns_are_the_names_set_row_by_row(rows):
    """The report sets every row's breakdown by name at once, as columns sorted by row
    (`IterationRows.set_name_columns`): each row reads back its own shares, in order, and a row with none an
    empty list, as when each row's list is set alone."""
    from array import array

    from rollup.accounting.rows import NameColumns

    rows = [IterationRow(r.iteration, r.start_ns, r.end_ns, r.figures, r.process, r.run_id, r.names or [])
            for r in rows]  # fmt: skip
    keys = sorted({share.name for row in rows for share in row.names or ()})
    shares = [(position, share) for position, row in enumerate(rows) for share in row.names or ()]
    columns = NameColumns(
        array("q", (position for position, _ in shares)), keys,
        array("q", (keys.index(share.name) for _, share in shares)),
        array("q", (BUCKETS.index(share.bucket) for _, share in shares)),
        array("q", (share.wall_ns for _, share in shares)), array("q", (share.span_ns for _, share in shares)),
    )  # fmt: skip
    held = IterationRows(IterationRow(r.iteration, r.start_ns, r.end_ns, r.figures, r.process, r.run_id) for r in rows)
    held.set_name_columns(columns)
    assert list(held) == rows
    assert pickle.loads(pickle.dumps(held)) == rows
