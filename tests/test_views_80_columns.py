"""An 80-column terminal: every figure whole, no line wider than the terminal; 200 columns (and a pipe) as before.

CliRunner has no terminal, so `cli` takes its output for a pipe (200 columns); `at_width` hands the commands the width
a terminal would report, and `in_a_terminal` runs the real command in a pseudo-terminal of that size. Where a
table fits, goodput draws it exactly as rich would.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import random
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

import cli
from cli.views.narrow import Fit, elide, fit_table_text, fold
from cli.views.report import report_table
from cli.views.tables import cell_text, rich_table_text, table_text
from conftest import invoke
from rollup import ReportOptions, build_report, open_store
from rollup.accounting.rows import Figures, IterationRows
from rollup.accounting.rows import seconds as seconds_of
from rollup.report.build import Report

REPO = Path(__file__).resolve().parents[1]
SYNC, ASYNC, BUGGY, RESTART = (
    str(REPO / "sample_traces" / name) for name in ("grpo_sync", "grpo_async", "grpo_buggy", "grpo_restart")
)
BUCKETS = ("productive", "overhead", "idle", "wasted")


def at_width(args: list[str], width: int, monkeypatch):
    monkeypatch.setattr(cli.shell, "terminal_width", lambda: width)
    return invoke(args, width=width)


def in_a_terminal(args: list[str], columns: int = 80, rows: int = 50) -> str:
    """What `goodput ARGS` prints on a terminal `columns` wide: stdout is a pseudo-terminal of that size."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", *args], stdin=subprocess.DEVNULL, stdout=follower, stderr=subprocess.PIPE,
        cwd=REPO, env=env,
    )  # fmt: skip
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal is gone once the command has exited and everything is read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    process.communicate(timeout=120)
    return b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the first boxed table in `text`, as their stripped cells (one physical line each)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("│"):
            rows.append([cell.strip() for cell in line.strip("│").split("│")])
        elif line.startswith("└"):
            break
    return rows


def table_rows_of_every_part(text: str) -> list[list[str]]:
    """The body rows of every boxed table in `text` (a table split into parts has several)."""
    return [[cell.strip() for cell in line.strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]


def assert_fits(text: str, width: int = 80) -> None:
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert not too_wide, too_wide


def seconds(value):
    return "" if value is None else f"{value:.3f}"


def percent(value):
    return "" if value is None else f"{100 * value:.1f}%"


def report_cells(item: dict, label: str, process: str | None = None) -> list[str]:
    """A report row's cells as the 80-column table shows them: no span-seconds."""
    cells = [label] + ([] if process is None else [process]) + [seconds(item["wall_s"])]
    cells += [seconds(item.get(f"{b}_s")) for b in BUCKETS] + [seconds(item.get("unaccounted_s"))]
    whole_run = label in ("outside", "rework", "downtime")  # the table leaves their goodput to the JSON
    return cells + [percent(None if whole_run else item.get("goodput"))]


# --- report ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("path", [SYNC, RESTART])
def test_the_report_at_80_columns_shows_every_wall_clock_figure_whole(path, monkeypatch):
    payload = json.loads(at_width(["report", path, "-f", "json"], 80, monkeypatch).stdout)
    result = at_width(["report", path], 80, monkeypatch)
    assert result.exit_code == 0
    assert_fits(result.stdout)
    expected = [report_cells(item, str(item["iteration"])) for item in payload["iterations"]]
    expected += [report_cells(payload[label], label) for label in ("total", "outside")]
    assert table_rows(result.stdout)[: len(expected)] == expected
    assert "left out at 80 columns: span s, span/wall; --format csv has them" in result.stdout
    assert "0.95 " not in result.stdout and "goodp " not in result.stdout  # what rich used to cut 0.956 and goodput to


@pytest.mark.slow
def test_the_report_by_process_at_80_columns_shortens_names_not_figures(monkeypatch):
    payload = json.loads(at_width(["report", SYNC, "--by", "process", "-f", "json"], 80, monkeypatch).stdout)
    result = at_width(["report", SYNC, "--by", "process"], 80, monkeypatch)
    assert result.exit_code == 0
    assert_fits(result.stdout)
    rows = table_rows(result.stdout)
    items = payload["iterations"]
    assert len(rows) == len(items) + len({item["process"] for item in items}) + 2  # each process's total, then two
    legend = {}
    for row, item in zip(rows, items, strict=False):
        shown = row[1]
        head, _, tail = shown.partition("…")
        assert shown == item["process"] or (item["process"].startswith(head) and item["process"].endswith(tail))
        assert head and item["process"].startswith("grpo-")  # the service comes first, not the pid
        legend[shown] = item["process"]
        assert row == report_cells(item, str(item["iteration"]), shown)
    processes = {item["process"] for item in items}
    assert len(set(legend.values())) == len(legend) == len(processes)  # the shortened names tell them apart
    for shown, full in legend.items():
        if shown != full:
            assert f"process {shown} is {full}" in result.stdout.splitlines()


@pytest.mark.slow
def test_the_report_at_200_columns_and_in_a_pipe_is_the_whole_table_as_rich_draws_it(monkeypatch):
    for args in (["report", SYNC], ["report", SYNC, "--by", "process"], ["report", RESTART]):
        piped = invoke(args, width=80).stdout  # not a terminal: 200 columns whatever CliRunner is told
        assert at_width(args, 200, monkeypatch).stdout == piped
        assert "span/wall" in piped and "left out" not in piped and "…" not in piped
        with open_store([args[1]]) as store:
            report = build_report(store, ReportOptions(by="process" if "--by" in args else None))
        assert piped == report_table(report, width=200)


@pytest.mark.slow
def test_a_long_job_at_80_columns_gives_up_whole_columns_or_splits_but_cuts_no_figure():
    """Totals of a ten-hour job are 9 characters wide: the unaccounted seconds go too, then the table splits."""
    rng = random.Random(7)

    def item(scale: int) -> Figures:
        bucket_ns = {b: rng.randrange(0, 3 * 10**9) * scale for b in BUCKETS}
        unaccounted = 5 * 10**7 * scale
        spans = dict.fromkeys(BUCKETS, 10**9 * scale)
        return Figures(sum(bucket_ns.values()) + unaccounted, bucket_ns, unaccounted, spans)

    def shown(figures: Figures) -> dict:
        return {"wall_s": figures.wall_s, **{f"{b}_s": seconds_of(figures.bucket_ns[b]) for b in BUCKETS},
                "goodput": figures.goodput}  # fmt: skip

    for by_process in (False, True):
        rows = IterationRows()
        iterations = []
        for i in range(3000):
            figures = item(1)
            process = f"grpo-generation@gpu-node-{i % 4}:{4000 + i % 8}" if by_process else None
            rows.append(i, 0, figures.wall_ns, figures, figures.span_ns, process=process)
            iterations.append(shown(figures))
        total = item(3000)
        report = Report(rows, total, item(20), list(BUCKETS), by="process" if by_process else None)
        text = report_table(report, width=80)
        assert_fits(text)
        left_out = next(line for line in text.splitlines() if line.startswith("left out"))
        assert left_out == "left out at 80 columns: unacct s, span s, span/wall; --format csv has them"
        cells = [cell for row in table_rows_of_every_part(text) for cell in row]
        for entry in [*iterations, shown(total)]:
            for key in ("wall_s", *(f"{b}_s" for b in BUCKETS)):
                assert f"{entry[key]:.3f}" in cells
            assert percent(entry["goodput"]) in cells


# --- check ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("path", [BUGGY, RESTART])
def test_check_at_80_columns_puts_each_message_below_the_table_as_a_numbered_note(path, monkeypatch):
    """With --all, a line a finding (the grouped table at 80 columns: tests/test_checks_gates.py)."""
    findings = json.loads(at_width(["check", path, "-f", "json"], 80, monkeypatch).stdout)["findings"]
    result = at_width(["check", path, "--all"], 80, monkeypatch)
    assert_fits(result.stdout)
    rows = table_rows(result.stdout)
    assert rows == [
        [str(n), f["severity"], f["rule"], cell_text(f["iteration"]), f["name"]] for n, f in enumerate(findings, 1)
    ]
    notes = result.stdout.split("└", 1)[1].split("\n", 1)[1]
    for number, finding in enumerate(findings, 1):
        start = notes.index(f"{number}. span_id: {finding['span_id']}  related_span_id: {finding['related_span_id']}")
        end = notes.find(f"\n{number + 1}. ", start)
        note = " ".join(line.strip() for line in notes[start : end if end > 0 else None].splitlines())
        assert f"message: {finding['message']}" in note
    # One line a finding in the table, a few below it: not 24 lines a message, as a folded column took.
    assert len(result.stdout.splitlines()) <= 5 + len(findings) * 5


@pytest.mark.slow
def test_check_at_200_columns_keeps_the_message_in_the_table_as_rich_folds_it(monkeypatch):
    result = at_width(["check", BUGGY, "--all"], 200, monkeypatch)
    assert result.stdout == invoke(["check", BUGGY, "--all"]).stdout  # a pipe is 200 columns too
    findings = json.loads(invoke(["check", BUGGY, "-f", "json"]).stdout)["findings"]
    columns = ["severity", "rule", "iteration", "name", "span_id", "related_span_id", "message"]
    rows = [[cell_text(f[c]) for c in columns] for f in findings]
    assert result.stdout == rich_table_text(columns, rows, None, "center", [False] * 7, None, 200) + (
        f"{len(findings)} errors, 0 warnings\n"
    )
    assert "1. span_id" not in result.stdout


# --- spans ----------------------------------------------------------------------------------------------------


def test_spans_at_80_columns_leave_the_ids_out_first_and_keep_offsets_and_durations_whole(monkeypatch):
    listed = json.loads(at_width(["spans", ASYNC, "-i", "2", "-f", "json"], 80, monkeypatch).stdout)
    result = at_width(["spans", ASYNC, "-i", "2"], 80, monkeypatch)
    assert result.exit_code == 0
    assert_fits(result.stdout)
    assert "left out at 80 columns: span_group, span_id; --format csv has them" in result.stdout
    starts = [row for row in table_rows(result.stdout) if row[0]]  # a folded name continues on a line of its own
    assert [row[:2] for row in starts] == [[cell_text(s["start_offset_s"]), cell_text(s["duration_s"])] for s in listed]
    assert [row[-1] for row in starts] == [cell_text(s["iteration"]) for s in listed]
    assert "span_id" not in result.stdout.split("left out")[0]


def test_spans_at_200_columns_are_as_before(monkeypatch):
    result = at_width(["spans", ASYNC, "-i", "2"], 200, monkeypatch)
    assert result.stdout == invoke(["spans", ASYNC, "-i", "2"]).stdout
    assert "span_group" in result.stdout.splitlines()[2] and "left out" not in result.stdout


# --- a real terminal ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_in_an_80_column_terminal_every_command_fits_and_shows_its_figures(monkeypatch):
    report = in_a_terminal(["report", SYNC])
    assert report == at_width(["report", SYNC], 80, monkeypatch).stdout
    assert_fits(report)
    row = json.loads(invoke(["report", SYNC, "--format", "json"]).stdout)["iterations"][1]  # iteration 2, as figures
    keys = ("wall_s", "productive_s", "overhead_s", "idle_s", "wasted_s", "unaccounted_s")
    cells = ["2", *(f"{row[key]:.3f}" for key in keys), f"{row['goodput']:.1%}"]
    assert any([cell.strip() for cell in line.split("│")[1:9]] == cells for line in report.splitlines())
    check = in_a_terminal(["check", BUGGY])
    assert check == at_width(["check", BUGGY], 80, monkeypatch).stdout
    assert_fits(check)
    assert "   (productive): 0.051s counted twice" in check.splitlines()


@pytest.mark.slow
def test_in_an_80_column_terminal_critical_folds_its_lead_and_keeps_its_figures(monkeypatch):
    shown = in_a_terminal(["critical", SYNC, "--iteration", "2"])
    assert shown == at_width(["critical", SYNC, "--iteration", "2"], 80, monkeypatch).stdout
    assert_fits(shown)
    payload = json.loads(invoke(["critical", SYNC, "--iteration", "2", "--format", "json"]).stdout)
    first = payload["names"][0]
    assert " ".join(shown.split()).startswith("critical path of 1 iteration:")
    assert f"speed up first: {first['name']} ({first['bucket']})" in " ".join(shown.split())
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in shown.split("its path")[1].splitlines()
            if line.startswith("│")]  # fmt: skip
    assert [row[1] for row in rows] == [f"{(p['end_ns'] - p['start_ns']) / 1e9:.3f}"
                                        for p in payload["iterations"][0]["path"]]  # fmt: skip


@pytest.mark.slow
def test_in_a_wide_terminal_the_report_is_the_one_a_pipe_gets():
    assert in_a_terminal(["report", SYNC], columns=200) == invoke(["report", SYNC]).stdout


# --- the fitting itself ---------------------------------------------------------------------------------------


def test_folding_breaks_prose_at_spaces_and_names_after_dots_never_inside_a_number():
    message = "rl.grpo.reward overlaps another in process grpo-driver@vm:12806: 0.051s counted twice"
    for width in range(12, len(message)):
        lines = fold(message, width)
        assert "".join(lines).replace(" ", "") == message.replace(" ", "")
        assert all(len(line) <= width for line in lines)
        assert any("0.051s" in line for line in lines) and any("12806" in line for line in lines)
        if width >= len("grpo-driver@vm:12806:"):
            assert " ".join(lines) == message  # every word fits a line: broken at spaces only
    assert fold("rl.idle.buffer_starvation", 12) == ["rl.idle.", "buffer_", "starvation"]
    assert fold("x" * 10, 4) == ["xxxx", "xxxx", "xx"]


def test_process_names_keep_their_service_first_and_their_pid_only_where_it_tells_them_apart():
    """What tells processes apart first is the service (or instance) name; the pid only between two processes of
    one service; a span name (no service in it) keeps its last part."""
    assert elide("grpo-generation@vm:11766", 8) == "grpo-ge…"
    assert elide("grpo-generation@vm:11766", 8, with_pid=True) == "g…:11766"
    assert elide("grpo-generation@vm:11766", 20) == "grpo-generation…1766"
    assert elide("2f9c-rank0 [node1:123]", 12) == "2f9c-rank0…]"
    assert elide("rl.grpo.policy_training", 10) == "…_training"
    assert elide("short", 8) == "short"
    headers, rows = ["n", "process"], [["1", "a-very-long-service@host:100"], ["2", "a-very-long-service@host:101"]]
    text = fit_table_text(headers, rows, [Fit("figure"), Fit("elide")], width=24, right=[True, False])
    assert table_rows(text) == [["1", "a-very-long…:100"], ["2", "a-very-long…:101"]]
    assert_fits(text, 24)
    legend = "".join(text.split("└")[1].splitlines()[1:]).replace(" ", "")
    assert legend == (
        "processa-very-long…:100isa-very-long-service@host:100processa-very-long…:101isa-very-long-service@host:101"
    )
    services = [["1", "grpo-driver@vm:12253"], ["2", "grpo-rollout-stream@vm:12571"], ["3", "grpo-validation@vm:1"]]
    text = fit_table_text(headers, services, [Fit("figure"), Fit("elide")], width=16, right=[True, False])
    assert [shown for _, shown in table_rows(text)] == ["grpo-dr…", "grpo-ro…", "grpo-va…"]


@pytest.mark.slow
def test_a_report_by_process_in_an_80_column_terminal_names_each_process_by_its_service():
    shown = in_a_terminal(["report", ASYNC, "--by", "process", "--no-cache"])
    assert_fits(shown)
    names = {row[1] for row in table_rows(shown) if row[1]}
    processes = json.loads(invoke(["report", ASYNC, "--by", "process", "--format", "json"]).stdout)["processes"]
    services = {p["process"].split("@")[0] for p in processes}
    assert len(names) == len(processes) and all(any(s.startswith(n.split("…")[0]) for s in services) for n in names)
    legend = [line for line in shown.splitlines() if line.startswith("process ")]
    assert len(legend) == len(processes) and all(" is grpo-" in line for line in legend)


@pytest.mark.slow
def test_any_table_at_any_width_keeps_every_figure_whole():
    rng = random.Random(11)
    for _ in range(300):
        count = rng.randint(1, 9)
        fits = [
            Fit(rng.choice(["figure", "figure", "id", "text", "elide"]), drop=rng.choice([0, 0, 1, 2]))
            for _ in range(count)
        ]
        headers = [rng.choice(["iteration", "wall s", "span_id", "a_long_column_name", "x"]) for _ in range(count)]
        rows = []
        for _ in range(rng.randint(0, 6)):
            row = []
            for fit in fits:
                if fit.kind == "figure":
                    row.append(f"{rng.uniform(-1e4, 1e5):.{rng.randint(1, 6)}f}")
                elif fit.kind == "id":
                    row.append(f"{rng.getrandbits(64):016x}")
                else:
                    row.append(
                        " ".join(
                            rng.choice(["rl.grpo.step", "a", "overlaps", "grpo-driver@vm:1"])
                            for _ in range(rng.randint(0, 12))
                        )
                    )
            rows.append(row)
        width = rng.randint(30, 160)
        right = [fit.kind == "figure" for fit in fits]
        text = table_text(headers, rows, width=width, right=right, title=rng.choice([None, "A title"]), fits=fits)
        widest_figure = max(
            (len(c) for row in rows for c, f in zip(row, fits, strict=True) if f.kind != "text"), default=0
        )
        if width >= widest_figure + 20:
            assert_fits(text, width)
        tokens = {token for line in text.splitlines() for token in line.replace("│", " ").split()}
        for row in rows:
            for cell, fit in zip(row, fits, strict=True):
                if fit.kind in ("figure", "id") and not (fit.drop and "left out" in text):
                    assert cell in tokens, (cell, width, text)


TABLES = {
    "plain": (["a", "bb"], [["1", "2"], ["333", "x"]], {}),
    "empty": (["a", "bb"], [], {"title": "T"}),
    "centered-title": (["a", "bb"], [["1", "2"]], {"title": "A title much longer than"}),
    "title-wider-than-table": (["a", "b"], [["1", "2"]], {"title": "A title much longer than the table"}),
    "wide-characters": (
        ["num", "name"],
        [["1", "héllo"], ["22", "日本語"], ["3", ""]],
        {"right": [True], "section_at": 2},
    ),
    "report-like": (
        ["iter", "x"],
        [["1", "2"], ["total", "3"]],
        {"right": [True, True], "section_at": 1, "title": "Left", "title_justify": "left"},
    ),
    "markup-in-cells": (["a"], [["[bold]x[/]"]], {}),
    "must-fold": (["a", "b"], [["x" * 50, "y" * 60]], {"width": 80}),
}


@pytest.mark.parametrize("name", TABLES)
def test_tables_are_drawn_exactly_as_rich_draws_them(name):
    headers, rows, options = TABLES[name]
    options = dict(options)
    width = options.pop("width", 200)
    right = list(options.get("right", ())) + [False] * len(headers)
    expected = rich_table_text(
        headers, rows, options.get("title"), options.get("title_justify", "center"), right[: len(headers)],
        options.get("section_at"), width,
    )  # fmt: skip
    assert table_text(headers, rows, width=width, **options) == expected
