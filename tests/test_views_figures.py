"""The report's figures are declared once (`rollup.FIGURES`) and every view shows each where its declaration says:
the JSON rows, the CSV and Markdown columns, the table's headers, the HTML page's bars, the diff's medians and the
outlier marks. A figure added to the list and forgotten by a view fails here."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from cli.views.diff import diff_text
from cli.views.formats import OutputFormat
from cli.views.html import BUCKET_COLOURS, report_html
from cli.views.report import report_rows, report_table
from rollup import build_report, compare, measure, open_store, report_json
from rollup.accounting.rows import Figures, IterationRows
from rollup.report import FIGURES
from rollup.report.build import mark_outliers

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
SYNC, ASYNC = str(SAMPLES / "grpo_sync"), str(SAMPLES / "grpo_async")


@pytest.fixture(scope="module")
def sync_report():
    with open_store([SYNC], use_cache=False) as store:
        return build_report(store)


@pytest.fixture(scope="module")
def sync_diff():
    with open_store([SYNC], use_cache=False) as base, open_store([ASYNC], use_cache=False) as cand:
        return compare(measure(base, [SYNC]), measure(cand, [ASYNC]))


def _id(figure) -> str:
    return figure.key


def _at(item: dict, path: tuple[str, ...]):
    for key in path:
        item = item[key]
    return item


@pytest.mark.parametrize("figure", [f for f in FIGURES if f.json], ids=_id)
def test_every_json_figure_is_in_each_row_and_the_total(sync_report, figure):
    payload = report_json(sync_report)
    for item, row in zip(payload["iterations"], sync_report.iterations, strict=True):
        assert _at(item, figure.json) == figure.value(row.figures)
    assert _at(payload["total"], figure.json) == figure.value(sync_report.total)


@pytest.mark.parametrize("figure", [f for f in FIGURES if f.csv], ids=_id)
def test_every_csv_figure_is_a_column_of_the_rows(sync_report, figure):
    head, rows = report_rows(sync_report)
    assert figure.key in head
    assert rows[0][head.index(figure.key)] == figure.value(sync_report.iterations[0].figures)


@pytest.mark.parametrize("figure", [f for f in FIGURES if f.header], ids=_id)
def test_every_table_figure_is_a_column_of_the_table(sync_report, figure):
    header = report_table(sync_report, width=300).splitlines()[2]
    assert f" {figure.header} " in header


@pytest.mark.parametrize("figure", [f for f in FIGURES if f.stacked], ids=_id)
def test_every_stacked_figure_is_a_bar_of_the_page_in_a_colour_of_its_own(sync_report, figure):
    part = figure.key.removesuffix("_s")
    assert part in BUCKET_COLOURS
    page = report_html(sync_report, None)
    assert f'"name":"{part}"' in page.replace(" ", "")


@pytest.mark.slow
@pytest.mark.parametrize("figure", [f for f in FIGURES if f.in_diff], ids=_id)
def test_every_compared_figure_is_in_the_diffs_json_and_table(sync_diff, figure):
    payload = sync_diff.json()
    for part in ("delta", "ratio"):
        assert figure.key in payload[part]
    assert figure.key in payload["baseline"]["median"] and figure.key in payload["candidate"]["median"]
    table = diff_text(sync_diff, OutputFormat.table, width=200)
    assert f"│ {figure.key} " in table
    head_and_rows = diff_text(sync_diff, OutputFormat.csv, width=200).splitlines()
    assert any(line.startswith(f"figure,{figure.key},") for line in head_and_rows)


@pytest.mark.parametrize("figure", [f for f in FIGURES if f.outlier], ids=_id)
def test_every_outlier_figure_marks_a_row_that_stands_out_in_it(figure):
    rows = IterationRows()
    for i in range(10):  # steady rows, a few ms apart (a MAD of 0 flags nothing, SPEC 10)
        figures = Figures(10**9 + i * 10**6)
        figures.bucket_ns = dict.fromkeys(figures.bucket_ns, 10**8 + i * 10**6)
        figures.unaccounted_ns = figures.wall_ns - sum(figures.bucket_ns.values())
        rows.append(i, i * 10**9, (i + 1) * 10**9, figures)
    loud = Figures(10**9)
    loud.bucket_ns = dict.fromkeys(loud.bucket_ns, 10**8)
    loud.unaccounted_ns = 10**9 - 4 * 10**8
    if figure.key == "wall_s":
        loud.wall_ns = 5 * 10**9
    elif figure.key == "unaccounted_s":
        loud.unaccounted_ns = 9 * 10**8
    else:
        loud.bucket_ns[figure.key.removesuffix("_s")] = 9 * 10**8
    rows.append(10, 10 * 10**9, 11 * 10**9, loud)
    mark_outliers(rows)
    assert figure.key in rows[10].outliers
    assert not any(rows[i].outliers for i in range(10))


def test_the_rows_hold_a_nanosecond_column_for_every_seconds_figure():
    rows = IterationRows()
    rows.append(1, 0, 10, Figures(10))
    for figure in FIGURES:
        if figure.ns is not None:
            assert isinstance(rows.column(figure.ns), array), figure.key
