"""The screen `goodput watch` redraws and the line it prints with `--format jsonl` (SPEC section 13).

Each refresh is built from real reports (`goodput report --format json` through the CLI) and drawn on a recording
rich console of a fixed size; what it shows is held to what the report's own table and the check's summary say.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from cli.views.watch import RECENT_KEYS, WATCH_KEYS, WatchStatus, watch_json_line, watch_screen
from conftest import invoke, json_report
from tracebuild import S, steps_lasting, write_trace

REPO = Path(__file__).resolve().parents[1]
SYNC = REPO / "sample_traces" / "grpo_sync"
SIZES = [(80, 24), (200, 50), (40, 10), (80, 3)]
SECONDS_KEYS = ("wall_s", "productive_s", "overhead_s", "idle_s", "wasted_s", "unaccounted_s")
LONG_STEPS = 60


# --- refreshes built from real reports ------------------------------------------------------------------------------


def stretch(rows: list[dict]) -> dict:
    """A `recent` entry covering `rows`: their seconds summed in integer nanoseconds, as the report sums them, and
    goodput as productive over wall."""
    total_ns = {key: sum(round(row[key] * 1e9) for row in rows) for key in SECONDS_KEYS}
    entry = {"start_ns": rows[0]["start_ns"], "end_ns": rows[-1]["end_ns"]}
    entry |= {key: value / 1e9 for key, value in total_ns.items()}
    entry["goodput"] = total_ns["productive_s"] / total_ns["wall_s"]
    return entry


def refresh(path: Path, recent: dict | None = None) -> dict:
    """SPEC 13's object for the traces at `path`: the report's rows, total and GPUs, the spans the store holds and
    the files read; `recent` as given (the last two rows, then all of them, by default)."""
    report = json_report(path)
    query = invoke(["query", str(path), "SELECT count(*) AS spans FROM spans", "--format", "json"])
    assert query.exit_code == 0, query.output
    rows = report["iterations"]
    files = len(list(path.iterdir())) if path.is_dir() else 1
    if recent is None:
        recent = {"1m": stretch(rows[-2:]), "5m": stretch(rows), "15m": None}
    return {
        "kind": "watch",
        "spans": json.loads(query.stdout)[0]["spans"],
        "files": files,
        "iterations": rows,
        "total": report["total"],
        "recent": recent,
        "gpus": report.get("gpus"),
    }


def fresh(payload: dict, ago_s: float = 3, interval_s: float = 5, **extra) -> WatchStatus:
    """The watcher's state `ago_s` after the newest row ended, the check's counts not known unless given."""
    newest = payload["iterations"][-1]["end_ns"]
    fields = {"errors": None, "warnings": None} | extra
    return WatchStatus(newest, newest + round(ago_s * 1e9), interval_s, **fields)


@pytest.fixture(scope="module")
def sync_refresh() -> dict:
    return refresh(SYNC)


@pytest.fixture(scope="module")
def long_run(tmp_path_factory) -> Path:
    """LONG_STEPS steps of about five hours each, no GPUs: more rows than a terminal holds, and figures wide enough
    that an 80-column table cannot hold every column."""
    walls = [18000.0 + 7.25 * index for index in range(LONG_STEPS)]
    return write_trace(tmp_path_factory.mktemp("long") / "run.otlp", steps_lasting(walls))


@pytest.fixture(scope="module")
def long_refresh(long_run) -> dict:
    return refresh(long_run)


# --- reading a screen -----------------------------------------------------------------------------------------------


def screen(payload: dict, status: WatchStatus, width: int, height: int) -> list[str]:
    """The screen's lines as a terminal of `width` x `height` shows them; never more lines, nor a wider one."""
    console = Console(width=width, height=height, record=True, file=io.StringIO(), force_terminal=True)
    console.print(watch_screen(payload, status, width, height))
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
    assert list(shown) == [str(row["iteration"]) for row in sync_refresh["iterations"]] + ["total"]
    headers = ["iter", "wall s", "prod s", "ovhd s", "idle s", "waste s", "unacct s", "goodput"]
    for label, cells in shown.items():
        assert list(cells) == headers
        assert cells == {header: reported[label][header] for header in headers}


@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 50)])
def test_a_terminal_too_short_for_every_row_shows_the_newest_rows_on_every_line_left(long_refresh, width, height):
    lines = screen(long_refresh, fresh(long_refresh), width, height)
    labels = list(table(lines))
    newest = long_refresh["iterations"][-1]["iteration"]
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
    for payload in (sync_refresh, long_refresh):
        lines = screen(payload, fresh(payload, errors=0, warnings=2, notes=notes), width, height)
        assert lines[0].startswith(f"{payload['spans']} spans in {payload['files']} file")


def test_the_header_names_the_spans_files_newest_iteration_and_how_fresh_the_newest_span_is(sync_refresh):
    header = screen(sync_refresh, fresh(sync_refresh, ago_s=3.9), 200, 50)[0]
    newest = sync_refresh["iterations"][-1]["iteration"]
    assert header == f"{sync_refresh['spans']} spans in 5 files; newest iteration {newest}; newest span 3 s ago"


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
def nothing_yet(tmp_path_factory) -> dict:
    """A refresh before any iteration: the report of a trace whose one span carries none, its total empty."""
    path = write_trace(tmp_path_factory.mktemp("early") / "run.otlp", [S("x", "rl.startup", 0, 2, group="setup")])
    return refresh(path, recent=dict.fromkeys(RECENT_KEYS))


def test_nothing_read_yet_says_what_the_watcher_waits_for(nothing_yet):
    waiting = WatchStatus(None, 10**18, 5.0, None, None, waiting_for=("run/", "more/"))
    assert screen(nothing_yet, waiting, 80, 24)[0] == "waiting for run/, more/ to appear"
    empty = {**nothing_yet, "spans": 0, "files": 2}
    assert (
        screen(empty, WatchStatus(None, 10**18, 5.0, None, None), 80, 24)[0] == "waiting for the first span in 2 files"
    )


def test_a_run_without_iterations_shows_no_table_and_each_missing_goodput_as_a_dash(nothing_yet):
    status = WatchStatus(10**18, 10**18, 5.0, None, None)
    lines = screen(nothing_yet, status, 80, 24)
    assert lines[0] == f"{nothing_yet['spans']} span in 1 file; no complete iteration yet; newest span 0 s ago"
    assert lines[1] == "goodput -; last 1m -, 5m -, 15m -"
    assert len(lines) == 2  # no table, no GPU, no check line


def test_goodput_now_is_the_reports_total_the_recent_stretches_and_the_gpus(sync_refresh):
    lines = screen(sync_refresh, fresh(sync_refresh), 200, 50)
    result = invoke(["report", str(SYNC)], width=200)
    gpu_goodput = re.search(r"GPU goodput (\S+) over the iterations", result.stdout)
    assert gpu_goodput is not None, result.stdout
    recent = sync_refresh["recent"]
    one, five = (100 * recent[key]["productive_s"] / recent[key]["wall_s"] for key in ("1m", "5m"))
    assert lines[1] == (
        f"goodput {report_table(SYNC)['total']['goodput']}; last 1m {one:.1f}%, 5m {five:.1f}%, 15m -; "
        f"GPU goodput {gpu_goodput.group(1)} ({sync_refresh['gpus']['count']} GPUs)"
    )


def test_a_run_holding_no_gpu_has_no_gpu_goodput(long_refresh):
    assert long_refresh["gpus"] is None
    assert not any("GPU" in line for line in screen(long_refresh, fresh(long_refresh), 200, 50))


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
    shuffled = {key: sync_refresh[key] for key in reversed(list(sync_refresh))}
    shuffled["recent"] = {key: sync_refresh["recent"][key] for key in reversed(RECENT_KEYS)}
    shuffled["later"] = {"a key SPEC does not list yet": 1}
    line = watch_json_line(shuffled)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed == shuffled
    assert list(parsed) == [*WATCH_KEYS, "later"]
    assert WATCH_KEYS == ("kind", "spans", "files", "iterations", "total", "recent", "gpus")
    assert list(parsed["recent"]) == ["1m", "5m", "15m"]
