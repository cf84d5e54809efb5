"""The screen `goodput watch` redraws and the line it prints with `--format jsonl` (SPEC section 13).

Each refresh is a real watcher's (`rollup.watch.LiveRun`) of real trace files, drawn on a recording rich console of
a fixed size; what it shows is held to what `goodput report`'s own table and the check's summary say.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from cli.views.watch import WatchStatus, watch_json_line, watch_screen
from conftest import invoke
from rollup.accounting.rows import sum_figures
from rollup.report import Recent
from rollup.watch import RECENT, LiveRow, LiveRun, LiveState, watch_json
from tracebuild import S, steps_lasting, write_trace

REPO = Path(__file__).resolve().parents[1]
SYNC = REPO / "sample_traces" / "grpo_sync"
SIZES = [(80, 24), (200, 50), (40, 10), (80, 3)]
LONG_STEPS = 60


# --- refreshes of real trace files ----------------------------------------------------------------------------------


def stretch(rows: Sequence[LiveRow]) -> Recent:
    """A `recent` stretch covering `rows`: their figures summed in integer nanoseconds, as the report sums them."""
    return Recent(rows[0].row.start_ns, rows[-1].row.end_ns, sum_figures([row.figures for row in rows]))


def refresh(path: Path, recent: dict[str, Recent | None] | None = None) -> LiveState:
    """A watcher's first refresh of the traces at `path`, carrying every row of the report (a watcher carries the
    newest WATCH_ROWS: a screen of more lines than that shows them all); `recent` as given (the last two rows,
    then all of them, by default)."""
    run = LiveRun([path])
    try:
        state = run.refresh()
    finally:
        run.close()
    report = state.report
    every_row = LiveState.of(
        report, state.recent, state.spans, state.files, state.newest_end_ns, state.notes, len(report.iterations)
    )
    rows = every_row.rows
    return replace(
        every_row, recent={"1m": stretch(rows[-2:]), "5m": stretch(rows), "15m": None} if recent is None else recent
    )


def fresh(state: LiveState, ago_s: float = 3, interval_s: float = 5, **extra) -> WatchStatus:
    """The watcher's clock `ago_s` after the newest span ended, the check's counts not known unless given."""
    assert state.newest_end_ns is not None
    fields = {"errors": None, "warnings": None} | extra
    return WatchStatus(state.newest_end_ns + round(ago_s * 1e9), interval_s, **fields)


@pytest.fixture(scope="module")
def sync_refresh() -> LiveState:
    return refresh(SYNC)


@pytest.fixture(scope="module")
def long_run(tmp_path_factory) -> Path:
    """LONG_STEPS steps of about five hours each, no GPUs: more rows than a terminal holds, and figures wide enough
    that an 80-column table cannot hold every column."""
    walls = [18000.0 + 7.25 * index for index in range(LONG_STEPS)]
    return write_trace(tmp_path_factory.mktemp("long") / "run.otlp", steps_lasting(walls))


@pytest.fixture(scope="module")
def long_refresh(long_run) -> LiveState:
    return refresh(long_run)


# --- reading a screen -----------------------------------------------------------------------------------------------


def screen(state: LiveState, status: WatchStatus, width: int, height: int) -> list[str]:
    """The screen's lines as a terminal of `width` x `height` shows them; never more lines, nor a wider one."""
    console = Console(width=width, height=height, record=True, file=io.StringIO(), force_terminal=True)
    console.print(watch_screen(state, status, width, height))
    lines = console.export_text().splitlines()
    assert len(lines) <= height, "\n".join(lines)
    assert all(cell_len(line) <= width for line in lines), "\n".join(lines)
    return lines


def table(lines: list[str]) -> dict[str, dict[str, str]]:
    """A boxed table's rows by their first cell, each as {header: cell}."""
    cells = [[cell.strip() for cell in re.split("[┃│]", line)[1:-1]] for line in lines if line[:1] in "┃│"]
    headers, *rows = cells
    return {row[0]: dict(zip(headers, row, strict=True)) for row in rows}


def report_table(path: Path) -> dict[str, dict[str, str]]:
    """`goodput report PATH`'s table at 200 columns, as `table` reads it."""
    result = invoke(["report", str(path)], width=200)
    assert result.exit_code == 0, result.output
    return table(result.stdout.splitlines())


# --- the table ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 50)])
def test_every_row_and_the_total_are_the_reports_figures_as_its_table_writes_them(sync_refresh, width, height):
    shown = table(screen(sync_refresh, fresh(sync_refresh), width, height))
    reported = report_table(SYNC)
    assert list(shown) == [str(row.iteration) for row in sync_refresh.rows] + ["total"]
    headers = ["iter", "wall s", "prod s", "ovhd s", "idle s", "waste s", "unacct s", "goodput"]
    for label, cells in shown.items():
        assert list(cells) == headers
        assert cells == {header: reported[label][header] for header in headers}


@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 50)])
def test_a_terminal_too_short_for_every_row_shows_the_newest_rows_on_every_line_left(long_refresh, width, height):
    lines = screen(long_refresh, fresh(long_refresh), width, height)
    labels = list(table(lines))
    newest = long_refresh.newest_iteration
    assert newest is not None
    assert labels[-1] == "total"
    assert labels[:-1] == [str(n) for n in range(newest - len(labels) + 2, newest + 1)]
    assert len(labels) - 1 < LONG_STEPS
    assert len(lines) == height  # one row more would not fit


def test_at_80_columns_the_unaccounted_column_goes_before_any_figure_is_cut(long_run, long_refresh):
    shown = table(screen(long_refresh, fresh(long_refresh), 80, 24))
    reported = report_table(long_run)
    headers = ["iter", "wall s", "prod s", "ovhd s", "idle s", "waste s", "goodput"]
    for label, cells in shown.items():
        assert list(cells) == headers
        assert cells == {header: reported[label][header] for header in headers}


def test_a_narrower_terminal_keeps_the_iteration_wall_clock_and_goodput_whole(long_run, long_refresh):
    shown = table(screen(long_refresh, fresh(long_refresh), 40, 30))
    reported = report_table(long_run)
    assert shown, "no table at 40 columns"
    for label, cells in shown.items():
        assert list(cells)[:2] == ["iter", "wall s"]
        assert list(cells)[-1] == "goodput"
        assert "unacct s" not in cells
        assert cells == {header: reported[label][header] for header in cells}


# --- the lines above and below it -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_the_screen_fits_the_terminal_and_starts_with_what_was_read(sync_refresh, long_refresh, width, height):
    notes = tuple(f"note: skipped run/extra-{n}.log: not a trace file (" + "no record " * 20 + ")" for n in range(5))
    for state in (sync_refresh, long_refresh):
        lines = screen(state, fresh(state, errors=0, warnings=2, notes=notes), width, height)
        assert lines[0].startswith(f"{state.spans} spans in {state.files} file")


def test_the_header_names_the_spans_files_newest_iteration_and_how_fresh_the_newest_span_is(sync_refresh):
    header = screen(sync_refresh, fresh(sync_refresh, ago_s=3.9), 200, 50)[0]
    newest = sync_refresh.rows[-1].iteration
    assert header == f"{sync_refresh.spans} spans in 5 files; newest iteration {newest}; newest span 3 s ago"


@pytest.mark.parametrize(
    ("ago_s", "interval_s", "said"),
    [
        (60, 5, "newest span 60 s ago"),  # a minute: not yet more than max(60 s, 3 x 5 s)
        (61, 5, "no new span for 61 s: has the job stopped?"),
        (90, 40, "newest span 90 s ago"),  # three 40 s intervals have not passed
        (121, 40, "no new span for 2 min: has the job stopped?"),
        (5 * 60 + 20, 5, "no new span for 5 min: has the job stopped?"),
        (3 * 3600, 5, "no new span for 3 h: has the job stopped?"),
    ],
)
def test_a_run_that_wrote_nothing_for_a_while_looks_stopped(sync_refresh, ago_s, interval_s, said):
    text = "\n".join(screen(sync_refresh, fresh(sync_refresh, ago_s, interval_s), 200, 50))
    assert said in text
    assert ("has the job stopped?" in text) == said.endswith("stopped?")


@pytest.fixture(scope="module")
def nothing_yet(tmp_path_factory) -> LiveState:
    """A refresh before any iteration: the report of a trace whose one span carries none, its total empty."""
    path = write_trace(tmp_path_factory.mktemp("early") / "run.otlp", [S("x", "rl.startup", 0, 2, group="setup")])
    return refresh(path, recent=dict.fromkeys(RECENT))


WAITS = ("waiting for run/ to appear", "waiting for files in more/")


def test_nothing_read_yet_says_what_the_watcher_waits_for(nothing_yet):
    unread = replace(nothing_yet, newest_end_ns=None, waits=WAITS)
    assert screen(unread, WatchStatus(10**18, 5.0, None, None), 80, 24)[0] == "; ".join(WAITS)
    empty = replace(unread, spans=0, files=2, waits=())
    assert screen(empty, WatchStatus(10**18, 5.0, None, None), 80, 24)[0] == "waiting for the first span in 2 files"


def test_what_the_watcher_waits_for_is_said_at_the_top_while_it_waits_and_never_in_the_notes(sync_refresh):
    header = f"{sync_refresh.spans} spans in 5 files; newest iteration 6; newest span 3 s ago"
    waiting = screen(replace(sync_refresh, waits=WAITS), fresh(sync_refresh), 200, 50)
    assert waiting[0] == f"{header}; {'; '.join(WAITS)}"
    assert screen(sync_refresh, fresh(sync_refresh), 200, 50)[0] == header


def test_a_real_watcher_says_what_it_waits_for_until_the_folder_and_a_file_appear(tmp_path):
    """The waits are the watcher's own (`rollup.watch.waits`), said at every refresh while they hold; the tailer's
    note of them, said once, is not among the notes (it stayed under the table after the folder appeared)."""
    folder = tmp_path / "runs" / "live"
    run = LiveRun([folder])
    try:
        first, second = run.refresh(), run.refresh()
        assert first.waits == second.waits == (f"waiting for {folder} to appear",)
        assert first.notes == second.notes == []
        folder.mkdir(parents=True)
        assert run.refresh().waits == (f"waiting for files in {folder}",)
        for source in sorted(SYNC.iterdir()):
            (folder / source.name).write_bytes(source.read_bytes())
        ready = run.refresh()
        assert ready.waits == () and ready.spans and not [note for note in ready.notes if "waiting" in note]
    finally:
        run.close()


def test_a_run_without_iterations_shows_no_table_and_each_missing_goodput_as_a_dash(nothing_yet):
    assert nothing_yet.newest_end_ns is not None and nothing_yet.newest_iteration is None
    status = WatchStatus(nothing_yet.newest_end_ns, 5.0, None, None)
    lines = screen(nothing_yet, status, 80, 24)
    assert lines[0] == f"{nothing_yet.spans} span in 1 file; no complete iteration yet; newest span 0 s ago"
    assert lines[1] == "goodput -; last 1m -, 5m -, 15m -"
    assert len(lines) == 2  # no table, no GPU, no check line


def test_goodput_now_is_the_reports_total_the_recent_stretches_and_the_gpus(sync_refresh):
    lines = screen(sync_refresh, fresh(sync_refresh), 200, 50)
    result = invoke(["report", str(SYNC)], width=200)
    gpu_goodput = re.search(r"GPU goodput (\S+) over the iterations", result.stdout)
    assert gpu_goodput is not None, result.stdout
    recent = {label: stretch.figures for label, stretch in sync_refresh.recent.items() if stretch is not None}
    one, five = (100 * recent[key].productive_s / recent[key].wall_s for key in ("1m", "5m"))
    assert sync_refresh.gpus is not None
    assert lines[1] == (
        f"goodput {report_table(SYNC)['total']['goodput']}; last 1m {one:.1f}%, 5m {five:.1f}%, 15m -; "
        f"GPU goodput {gpu_goodput.group(1)} ({sync_refresh.gpus.count} GPUs)"
    )


def test_a_run_holding_no_gpu_has_no_gpu_goodput(long_refresh):
    assert long_refresh.gpus is None
    assert not any("GPU" in line for line in screen(long_refresh, fresh(long_refresh), 200, 50))


@pytest.mark.parametrize(
    ("ago_s", "orphans", "said"),
    [
        (3, 14, "check: 1 error, 3 warnings; 14 spans wait for a parent"),  # the run writes: parents still open
        (3, 1, "check: 1 error, 16 warnings; 1 span waits for a parent"),
        (3, 0, "check: 1 error, 17 warnings"),
        (61, 14, "check: 1 error, 17 warnings"),  # a minute without a span: what is missing now is lost
    ],
)
def test_orphan_spans_count_as_warnings_only_once_the_run_has_stopped_writing(sync_refresh, ago_s, orphans, said):
    """SPEC section 13: while the run writes, a span whose parent was not read most likely has a parent still open
    (the job span, its step): the screen says how many wait, and counts them among the warnings once the run
    looks stopped (as its header says: no new span for a minute)."""
    lines = screen(sync_refresh, fresh(sync_refresh, ago_s, errors=1, warnings=17, orphans=orphans), 200, 50)
    assert lines[2] == said
    assert ("has the job stopped?" in lines[0]) == (ago_s > 60)


def test_the_check_counts_are_the_checks_summary_where_known(sync_refresh):
    result = invoke(["check", str(SYNC)], width=200)
    summary = json.loads(invoke(["check", str(SYNC), "--format", "json"], width=200).stdout)["summary"]
    counted = fresh(sync_refresh, errors=summary["errors"], warnings=summary["warnings"])
    assert screen(sync_refresh, counted, 200, 50)[2] == f"check: {result.stdout.splitlines()[-1]}"
    assert "check: 1 error, 3 warnings" in screen(sync_refresh, fresh(sync_refresh, errors=1, warnings=3), 80, 24)
    assert not any(line.startswith("check:") for line in screen(sync_refresh, fresh(sync_refresh), 80, 24))


@pytest.mark.parametrize("width", [80, 200])
def test_the_newest_notes_end_the_screen_oldest_first_each_cut_to_the_width(sync_refresh, width):
    long_note = "note: run/grpo-rollout-vm-7.otlp: skipped, " + "not a trace file " * 20
    notes = ("note: first", "note: second", "note: waiting for run/late/", long_note)
    lines = screen(sync_refresh, fresh(sync_refresh, notes=notes), width, 50)
    assert lines[-3:-1] == ["note: second", "note: waiting for run/late/"]
    assert lines[-1].endswith("…")
    assert cell_len(lines[-1]) == width
    assert long_note.startswith(lines[-1].removesuffix("…"))
    assert "note: first" not in lines


# --- the JSON line --------------------------------------------------------------------------------------------------


def test_the_json_line_is_one_line_that_reads_back_as_the_refresh_keys_in_spec_order(sync_refresh):
    line = watch_json_line(sync_refresh)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed == watch_json(sync_refresh)
    assert list(parsed) == ["kind", "spans", "files", "iterations", "total", "recent", "gpus"]
    assert list(parsed["recent"]) == list(RECENT) == ["1m", "5m", "15m"]
    assert [row["iteration"] for row in parsed["iterations"]] == [row.iteration for row in sync_refresh.rows]
    assert parsed["recent"]["15m"] is None and parsed["recent"]["1m"] == sync_refresh.recent["1m"].json()
