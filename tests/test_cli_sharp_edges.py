"""The sharp edges a new user met (issue 24): each process's totals with `--by process --total`, one block for one
iteration `--by name`, a reversed range said as such, `--process` in any case, `timeline` without `--output`,
counts that say "1 warning", a file holding a span twice read as one span and a duplicate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import invoke
from tracebuild import S, step, write_trace

REPO = Path(__file__).resolve().parents[1]
SYNC = str(REPO / "sample_traces" / "grpo_sync")


def run(args: list[str], width: int = 160):
    return invoke(args, width=width)


def two_processes(tmp_path) -> Path:
    spans = [
        step("s1", 1, 0, 10),
        step("s2", 2, 10, 20),
        S("g1", "rl.grpo.generation", 1, 5, parent="s1", bucket="productive", process="worker"),
        S("t1", "rl.grpo.policy_training", 5, 9, parent="s1", bucket="productive"),
        S("t2", "rl.grpo.policy_training", 11, 19, parent="s2", bucket="productive"),
    ]
    return write_trace(tmp_path / "run.otlp", spans)


def test_by_process_total_gives_each_processs_totals(tmp_path):
    path = two_processes(tmp_path)
    for fmt, parse in (("csv", lambda text: text.splitlines()), ("table", lambda text: text)):
        result = run(["report", str(path), "--by", "process", "--total", "--format", fmt])
        assert result.exit_code == 0, result.output
        if fmt == "csv":
            lines = parse(result.stdout)
            assert lines[0].startswith("iteration,process,wall_s,productive_s")
            assert [line.split(",")[:4] for line in lines[1:]] == [
                ["total", "driver", "20", str(4.0 + 8.0).rstrip("0").rstrip(".")],
                ["total", "worker", "20", "4"],
                ["total", "", "20", "16"],
                ["outside", "", "0", "0"],
            ]
        else:
            assert "driver" in result.stdout and "worker" in result.stdout and "│       1 │" not in result.stdout


def test_by_name_for_one_iteration_prints_one_block(tmp_path):
    path = two_processes(tmp_path)
    result = run(["report", str(path), "--by", "name", "--iteration", "1"])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("rl.grpo.generation") == 1  # not the iteration's block and then the total's


def test_a_reversed_range_is_said_to_be_reversed(tmp_path):
    path = two_processes(tmp_path)
    result = run(["report", str(path), "--iterations", "5:2"])
    assert result.exit_code == 2
    assert "'5:2' is reversed: it starts after it ends (did you mean 2:5?)" in result.output
    assert "Traceback" not in result.output


def test_process_is_matched_in_any_case_as_groups_are(tmp_path):
    path = two_processes(tmp_path)
    exact = json.loads(run(["spans", str(path), "--process", "worker", "--format", "json"]).stdout)
    assert [row["name"] for row in exact] == ["rl.grpo.generation"]
    assert json.loads(run(["spans", str(path), "--process", "WORKER", "--format", "json"]).stdout) == exact


def test_timeline_without_output_writes_timeline_json_and_says_so(tmp_path, monkeypatch):
    path = two_processes(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = run(["timeline", str(path)])
    assert result.exit_code == 0, result.output
    assert "timeline.json" in result.stderr
    assert json.loads((tmp_path / "timeline.json").read_text())["traceEvents"]


@pytest.mark.parametrize("errors, warnings, line", [(0, 1, "0 errors, 1 warning"), (1, 0, "1 error, 0 warnings")])
def test_counts_are_said_in_the_singular_for_one(tmp_path, errors, warnings, line):
    spans = [step("s1", 1, 0, 10), step("s2", 2, 20, 30)]
    spans += [
        S("t1", "rl.grpo.policy_training", 0, 10, parent="s1", bucket="productive"),
        S("t2", "rl.grpo.policy_training", 20, 30, parent="s2", bucket="productive"),
    ]
    if warnings:
        spans.append(S("orphan", "rl.grpo.reward", 1, 2, parent="gone"))
    if errors:
        spans.append(S("inner", "rl.grpo.logprob", 22, 23, parent="t2", bucket="overhead"))
    path = write_trace(tmp_path / "run.otlp", spans)
    result = run(["check", str(path)])
    assert result.stdout.splitlines()[-1] == line


def test_a_file_holding_a_span_twice_is_read_as_one_span_and_a_duplicate(tmp_path):
    once = S("x", "rl.startup", 0, 1)
    path = write_trace(tmp_path / "run.otlp", [once, once])
    for extra in (["--no-cache"], [], []):  # the second cached run reads the cached summary
        result = run(["report", str(path), *extra])
        assert result.exit_code == 0, result.output
        assert "note: no iterations: read 1 span (and 1 duplicate) from 1 file" in result.stderr
