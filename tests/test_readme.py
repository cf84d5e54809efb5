"""The README's quick start and examples show what the commands really print on the shipped sample traces."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

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


def test_the_two_quick_start_commands_are_there():
    assert '.venv/bin/pip install -e ".[test]" && .venv/bin/goodput report sample_traces/grpo_sync/' in README
    assert ".venv/bin/python -m pytest -q" in README


def test_the_report_shown_is_the_report_printed(monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("report", "sample_traces/grpo_sync/")
    assert result.exit_code == 0
    assert result.stdout.rstrip("\n") == block_after("The first prints:\n")


def test_the_check_shown_is_the_check_printed(monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("check", "sample_traces/grpo_buggy/", "--format", "markdown")
    assert result.exit_code == 1
    assert result.stdout.rstrip("\n") == block_after("(the example job's `--buggy` run, exit 1):\n")


def test_the_spans_shown_are_the_spans_printed(monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("spans", "sample_traces/grpo_async/", "--iteration", "2", "--format", "markdown")
    shown = block_after("(first rows):\n")
    assert result.stdout.splitlines()[: len(shown.splitlines())] == shown.splitlines()


def test_the_layout_section_names_modules_that_exist():
    section = block_after("### How the code is laid out\n")
    named = re.findall(r"^(src/\S+)", section, re.M)
    assert len(named) >= 10
    for path in named:
        assert (REPO / path).exists(), path
    for module in re.findall(r"`((?:read|views)/\w+\.py)`", README):
        assert (REPO / "src" / "rollup" / module).exists(), module


def test_the_restart_report_shown_is_the_report_printed(monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("report", "sample_traces/grpo_restart/")
    assert result.exit_code == 0
    assert result.stdout.rstrip("\n") == block_after("`goodput report sample_traces/grpo_restart/` prints:\n")


def test_the_name_breakdown_shown_is_the_one_printed(monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("report", "sample_traces/grpo_sync/", "--by", "name", "--total")
    assert result.exit_code == 0
    shown = block_after("`goodput report sample_traces/grpo_sync/ --by name --total` prints:\n")
    assert result.stdout.rstrip("\n") == shown


def test_the_diff_shown_is_the_diff_printed(monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("diff", "sample_traces/grpo_sync/", "sample_traces/grpo_async/")
    assert result.exit_code == 0
    assert result.stdout.rstrip("\n") == block_after("step ahead):\n")
