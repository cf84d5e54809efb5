"""The commands as a user runs them: `query` in every format, the output format told by `--output`'s extension,
an empty file skipped with a note, `--ray` with or without an address.

Help is in tests/test_cli_help.py, bad input in tests/test_cli_bad_input.py, exit codes in
tests/test_cli_exit_codes.py.
"""

from __future__ import annotations

import json

import pytest

from cli import rewrite_ray_address
from conftest import invoke
from tracebuild import three_steps, two_steps


def run(args: list[str]):
    return invoke(args, width=120)


@pytest.mark.slow
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


def test_an_empty_file_is_skipped_with_a_note(tmp_path):
    path = two_steps(tmp_path)
    (tmp_path / "idle-worker.otlp").write_bytes(b"")
    result = run(["report", str(tmp_path), "-f", "json"])
    assert result.exit_code == 0, result.output
    assert "idle-worker.otlp" in result.stderr
    assert [it["iteration"] for it in json.loads(result.stdout)["iterations"]] == [1, 2]
    assert path.exists()


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


# --- --output's extension ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "expect"),
    [("r.csv", "csv"), ("r.CSV", "csv"), ("r.json", "json"), ("r.md", "markdown"), ("r.txt", "table"), ("r", "table")],
)
def test_the_output_format_follows_the_extension(tmp_path, name, expect):
    path = str(three_steps(tmp_path))
    out = tmp_path / name
    result = invoke(["report", path, "-o", str(out)], width=80)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    if expect == "csv":
        assert text.splitlines()[0].startswith("iteration,wall_s,productive_s")
    elif expect == "json":
        assert [row["iteration"] for row in json.loads(text)["iterations"]] == [1, 2, 3]
    elif expect == "markdown":
        assert text.startswith("| iteration | wall_s |")
    else:
        assert "┃" in text and "Wall clock by iteration" in text


def test_an_explicit_format_wins_over_the_extension(tmp_path):
    out = tmp_path / "r.csv"
    assert invoke(["report", str(three_steps(tmp_path)), "-f", "json", "-o", str(out)]).exit_code == 0
    assert json.loads(out.read_text())["iterations"]


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".html", ".jsonl"])
def test_the_report_writes_its_own_formats_by_extension(tmp_path, suffix):
    out = tmp_path / f"r{suffix}"
    result = invoke(["report", str(three_steps(tmp_path)), "-o", str(out)], width=80)
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>" if suffix == ".html" else '{"kind": "iteration"')
