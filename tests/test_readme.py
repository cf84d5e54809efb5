"""The README's quick start and examples show what the commands really print on the shipped sample traces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import typer
from typer.testing import CliRunner

import instrument
from cli import app

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args), terminal_width=200)


def block_after(marker: str) -> str:
    """The fenced block (or markdown table) that follows `marker` in the README."""
    rest = README[README.index(marker) + len(marker) :].lstrip("\n")
    if rest.startswith("```"):
        return rest.split("\n", 1)[1].split("\n```", 1)[0]
    return "\n".join(re.match(r"((?:\|.*\n?)+)", rest).group(1).rstrip("\n").splitlines())


# What a newcomer pastes on a fresh machine with Python 3.11, each a fenced block of its own.
QUICK_START = (
    'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/goodput report sample_traces/grpo_sync/',
    ".venv/bin/python -m pytest -q -n 2 --dist loadgroup",
)


def test_the_two_quick_start_commands_are_there():
    assert f"```bash\n{QUICK_START[0]}\n```" in README
    assert f"```bash\n{QUICK_START[1]}\n```" in README


def test_ci_runs_the_readmes_test_command_and_no_other():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert [line for line in ci.splitlines() if " pytest" in line and not line.startswith("#")] == [QUICK_START[1]]


def test_the_report_shown_is_the_report_printed(monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("report", "sample_traces/grpo_sync/")
    assert result.exit_code == 0
    assert result.stdout.rstrip("\n") == block_after("The first prints:\n")


def test_the_name_breakdown_shown_is_the_one_printed(monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("report", "sample_traces/grpo_sync/", "--by", "name", "--total")
    assert result.exit_code == 0
    assert result.stdout.rstrip("\n") == block_after("`goodput report sample_traces/grpo_sync/ --by name --total`:\n")


def test_the_critical_path_shown_is_the_one_printed(monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("critical", "sample_traces/grpo_async/")
    assert result.exit_code == 0
    assert result.stdout.rstrip("\n") == block_after("(generation one step ahead of training):\n")
    by_name = json.loads(run("report", "sample_traces/grpo_async/", "--by", "name", "--format", "json").stdout)
    total = by_name["total"]
    largest = max(total["names"], key=lambda n: n["wall_s"])
    assert largest["name"] == "rl.grpo.generation"
    assert (
        f"generation the largest share of this run's wall clock ({largest['wall_s'] / total['wall_s']:.1%})" in README
    )


def test_the_check_shown_is_the_check_printed(monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("check", "sample_traces/grpo_buggy/", "--format", "markdown")
    assert result.exit_code == 1
    assert result.stdout.rstrip("\n") == block_after("`--buggy` run, exit 1):\n")


def test_the_commands_table_has_a_line_for_every_command():
    group = typer.main.get_command(app)
    commands = group.list_commands(click.Context(group, info_name="goodput"))
    table = README[README.index("## Commands") :].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `goodput (\w+)", table, re.M)
    assert listed == commands


def test_the_instrumentation_snippet_writes_a_trace_the_report_reads(tmp_path, monkeypatch):
    """The README's snippet, run as shown with stand-ins for the job's own work, gives one row per step."""
    snippet = block_after("the leaf's group gives its bucket.\n")
    monkeypatch.chdir(tmp_path)
    try:
        exec(snippet, {"num_steps": 3, "generate": lambda: None, "logprobs": lambda: None})
    finally:
        instrument.shutdown()
    result = run("report", "run/", "--format", "json", "--no-cache")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["iterations"]
    assert [row["iteration"] for row in rows] == [0, 1, 2]  # iteration_scope(step) for step in range(3)
    assert all(row["productive_s"] > 0 and row["overhead_s"] > 0 for row in rows)


def test_the_live_screen_shown_is_what_watch_draws_at_80_columns(monkeypatch):
    """The README's screen was captured from `goodput watch` in a tmux pane of 80 x 24; `--once` draws the same
    frame, but for how long ago the newest span ended, which depends on when it runs."""
    monkeypatch.chdir(REPO)
    result = runner.invoke(app, ["watch", "sample_traces/grpo_sync/", "--once"], env={"COLUMNS": "80", "LINES": "24"})
    assert result.exit_code == 0, result.output
    drawn = [line.rstrip() for line in result.stdout.rstrip("\n").splitlines()]
    while drawn and not drawn[-1]:
        drawn.pop()
    shown = block_after("each is the job's 23.9%):\n").splitlines()
    assert len(drawn) == len(shown)
    for got, want in zip(drawn, shown, strict=True):
        if want.startswith("no new span for "):
            assert re.fullmatch(r"no new span for \d+ (s|min|h|d): has the job stopped\?", got), got
        else:
            assert got == want
    assert max(len(line) for line in shown) <= 80
