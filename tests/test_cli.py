"""The command line as a user meets it: help, formats, bad input, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cli import rewrite_ray_address
from cli.views.tables import rich_table_text, table_text
from conftest import invoke
from tracebuild import S, write_trace


def run(args: list[str]):
    return invoke(args, width=120)


def two_steps(tmp_path):
    return write_trace(
        tmp_path / "run.otlp",
        [
            S("s1", "rl.grpo.step", 0, 4, iteration=1, group="step"),
            S("g1", "rl.grpo.generation", 0, 3, parent="s1", bucket="productive", group="generation"),
            S("s2", "rl.grpo.step", 4, 8, iteration=2, group="step"),
            S("l2", "rl.grpo.logprob", 4, 5, parent="s2", bucket="overhead", group="logprob"),
        ],
    )


def test_help_lists_every_command_without_importing_duckdb():
    code = (
        "import sys, cli; sys.argv = ['goodput', '--help']\n"
        "try:\n"
        "    cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('duckdb' in sys.modules, 'pyarrow' in sys.modules, 'ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    for command in ("report", "check", "spans", "query", "ingest"):
        assert command in out
    assert out.strip().splitlines()[-1] == "False False False"


def test_python_dash_m_cli_is_the_same_command():
    result = subprocess.run(
        [sys.executable, "-m", "cli", "report", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "--precedence" in result.stdout


@pytest.mark.parametrize("fmt", ["json", "csv", "markdown", "table"])
def test_query_in_every_format(tmp_path, fmt):
    path = two_steps(tmp_path)
    sql = "SELECT iteration, count(*) AS n FROM spans WHERE iteration IS NOT NULL GROUP BY 1 ORDER BY 1"
    result = run(["query", str(path), sql, "-f", fmt])
    assert result.exit_code == 0, result.output
    if fmt == "json":
        assert json.loads(result.stdout) == [{"iteration": 1, "n": 1}, {"iteration": 2, "n": 1}]  # the step spans
    elif fmt == "csv":
        assert result.stdout.splitlines() == ["iteration,n", "1,1", "2,1"]
    elif fmt == "markdown":
        assert result.stdout.splitlines()[:3] == ["| iteration | n |", "|---|---|", "| 1 | 1 |"]
    else:
        assert "iteration" in result.stdout and "│" in result.stdout


def test_query_exposes_attribute_maps_and_promoted_columns(tmp_path):
    path = two_steps(tmp_path)
    sql = "SELECT attributes['rl.bucket'] AS b, bucket, span_group, process FROM spans WHERE name = 'rl.grpo.logprob'"
    result = run(["query", str(path), sql, "-f", "json"])
    assert json.loads(result.stdout) == [
        {"b": "overhead", "bucket": "overhead", "span_group": "logprob", "process": "driver"}
    ]


def test_query_needs_a_path_and_sql():
    result = run(["query", "only-one-argument"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p / "missing.otlp", "no such file or directory"),
        (lambda p: (p / "notes.txt").write_text("just some text\n") and p / "notes.txt", "notes.txt"),
        (lambda p: (p / "doc.json").write_text('{"hello": 1}') and p / "doc.json", "doc.json"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "directory holds no trace files"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_traceback(tmp_path, make, expected):
    path = make(tmp_path)
    for command in (["report", str(path)], ["check", str(path)], ["query", str(path), "SELECT 1"]):
        result = run(command)
        assert result.exit_code == 2, (command, result.output)
        assert result.stderr.startswith("Error: ") and expected in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.output


def test_sql_errors_are_one_line_exit_2(tmp_path):
    result = run(["query", str(two_steps(tmp_path)), "SELECT nope FROM spans"])
    assert result.exit_code == 2 and result.stderr.startswith("Error: SQL: ")


def test_an_empty_file_is_skipped_with_a_note(tmp_path):
    path = two_steps(tmp_path)
    (tmp_path / "idle-worker.otlp").write_bytes(b"")
    result = run(["report", str(tmp_path), "-f", "json"])
    assert result.exit_code == 0, result.output
    assert "idle-worker.otlp" in result.stderr
    assert [it["iteration"] for it in json.loads(result.stdout)["iterations"]] == [1, 2]
    assert path.exists()


def test_bad_option_values_are_usage_errors(tmp_path):
    path = str(two_steps(tmp_path))
    assert run(["report", path, "--iterations", "x"]).exit_code == 2
    assert run(["report", path, "--by", "host"]).exit_code == 2
    bad = run(["report", path, "--precedence", "idle,productive"])
    assert bad.exit_code == 2 and "--precedence" in bad.stderr


def test_ray_takes_an_optional_address_without_eating_a_path(tmp_path):
    existing = str(tmp_path)
    assert rewrite_ray_address(["ingest", "run/", "--ray"]) == ["ingest", "run/", "--ray"]
    assert rewrite_ray_address(["ingest", "--ray", "auto", "run/"]) == [
        "ingest",
        "--ray",
        "--ray-address",
        "auto",
        "run/",
    ]
    assert rewrite_ray_address(["ingest", "--ray=ray://head:10001", "x"])[1:4] == [
        "--ray",
        "--ray-address",
        "ray://head:10001",
    ]
    assert rewrite_ray_address(["ingest", "--ray", "10.0.0.1:6379"])[2:] == ["--ray-address", "10.0.0.1:6379"]
    assert rewrite_ray_address(["ingest", "--ray", existing]) == ["ingest", "--ray", existing]


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
