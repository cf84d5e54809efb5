"""report --format jsonl: one JSON object a line, iterations first, for a dashboard that logs step by step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.views.formats import OutputFormat, format_for_output, tabular_format
from cli.views.jsonl import report_jsonl
from conftest import invoke
from tracebuild import S, step, write_trace

REPO = Path(__file__).resolve().parent.parent
RESTART = REPO / "sample_traces" / "grpo_restart"
WHOLE_RUN = ["total", "outside", "rework", "downtime", "job"]


def lines_of(text: str) -> list[dict]:
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]  # every line parses on its own


def report_json(*args: str) -> dict:
    result = invoke(["report", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow
def test_restart_sample_lines_follow_the_json_report(tmp_path):
    out = tmp_path / "report.jsonl"
    result = invoke(["report", str(RESTART), "-o", str(out)])  # the extension picks the format
    assert result.exit_code == 0, result.output
    lines = lines_of(out.read_text(encoding="utf-8"))
    payload = report_json(str(RESTART))
    rows = payload["iterations"]
    attempts = payload["attempts"]
    gpus = ["gpus"] if "gpus" in payload else []  # the sample's processes hold GPUs (SPEC section 12)
    kinds = ["iteration"] * len(rows) + WHOLE_RUN + ["attempt"] * len(attempts) + gpus
    assert [line["kind"] for line in lines] == kinds
    assert [{k: v for k, v in line.items() if k != "kind"} for line in lines[: len(rows)]] == rows
    whole = {line["kind"]: {k: v for k, v in line.items() if k != "kind"} for line in lines[len(rows) :]}
    for kind in WHOLE_RUN + gpus:
        assert whole[kind] == payload[kind]
    assert [{k: v for k, v in line.items() if k != "kind"} for line in lines if line["kind"] == "attempt"] == attempts
    attempt_lines = [line for line in lines if line["kind"] == "attempt"]
    assert len(attempts) == 2 and attempt_lines[-1]["superseded"] == []
    assert attempt_lines[-2]["superseded"] == [3, 4]  # step 3 redone; step 4 torn by the kill (SPEC 7)


@pytest.mark.slow
def test_stdout_and_file_agree(tmp_path):
    out = tmp_path / "report.jsonl"
    assert invoke(["report", str(RESTART), "-o", str(out)]).exit_code == 0
    result = invoke(["report", str(RESTART), "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    assert result.stdout == out.read_text(encoding="utf-8")


@pytest.mark.slow
def test_hand_made_iterations_carry_their_figures(tmp_path):
    spans = [
        step("step1", 1, 0, 10),
        S("gen1", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive"),
        step("step2", 2, 10, 14),
        S("lp2", "rl.grpo.logprob", 11, 14, parent="step2", bucket="overhead"),
    ]
    trace = write_trace(tmp_path / "run.trace", spans)
    lines = lines_of(invoke(["report", str(trace), "-f", "jsonl"]).stdout)
    first, second = lines[0], lines[1]
    assert (first["kind"], first["iteration"], first["wall_s"]) == ("iteration", 1, 10.0 - 0.0)
    assert first["productive_s"] == 5.0 - 1.0 and first["goodput"] == (5.0 - 1.0) / 10.0
    assert (second["iteration"], second["overhead_s"], second["unaccounted_s"]) == (2, 14.0 - 11.0, (14.0 - 10.0) - 3.0)
    assert lines[2] == {"kind": "total", **report_json(str(trace))["total"]}


@pytest.mark.slow
def test_by_process_adds_a_line_per_process(tmp_path):
    spans = [
        step("step1", 1, 0, 10),
        S("a", "rl.grpo.generation", 1, 4, parent="step1", bucket="productive", process="worker-a"),
        S("b", "rl.grpo.generation", 2, 6, parent="step1", bucket="productive", process="worker-b"),
    ]
    trace = write_trace(tmp_path / "run.trace", spans)
    lines = lines_of(invoke(["report", str(trace), "--by", "process", "-f", "jsonl"]).stdout)
    kinds = [line["kind"] for line in lines]
    assert kinds == ["iteration", "iteration", *WHOLE_RUN, "attempt", "process", "process"]
    assert [line["process"] for line in lines if line["kind"] == "process"] == ["worker-a", "worker-b"]


def test_other_whole_run_keys_follow_in_the_same_shape():
    payload = {
        "iterations": [],
        "total": {"wall_s": 0.0},
        "attempts": [{"run_id": "a"}],
        "processes": [{"process": "p"}],
        "names": [{"name": "n"}],
        "precedence": ["productive"],
    }
    lines = lines_of(report_jsonl(payload))
    assert lines == [
        {"kind": "total", "wall_s": 0.0},
        {"kind": "attempt", "run_id": "a"},
        {"kind": "process", "process": "p"},
        {"kind": "name", "name": "n"},
        {"kind": "precedence", "value": "productive"},
    ]


def test_no_iterations_gives_whole_run_lines_only(tmp_path):
    trace = write_trace(tmp_path / "run.trace", [S("x", "rl.startup", 0, 1)])
    result = invoke(["report", str(trace), "-f", "jsonl"])
    assert result.exit_code == 0, result.output
    assert [line["kind"] for line in lines_of(result.stdout)] == [*WHOLE_RUN, "attempt"]


def test_extensions_name_the_report_formats_and_other_commands_refuse_them():
    assert format_for_output(Path("x.jsonl")) is OutputFormat.jsonl
    assert format_for_output(Path("x.HTML")) is OutputFormat.html
    assert tabular_format(OutputFormat.csv) is OutputFormat.csv
    for fmt in (OutputFormat.html, OutputFormat.jsonl):
        with pytest.raises(ValueError, match=f"{fmt.value} is a format of `goodput report` only"):
            tabular_format(fmt)


@pytest.mark.parametrize(
    "args",
    [
        ["check", str(RESTART), "--format", "html"],
        ["spans", str(RESTART), "--format", "jsonl"],
        ["query", str(RESTART), "SELECT 1 AS one", "-f", "html"],
        ["check", str(RESTART), "-o", "{tmp}/findings.jsonl"],
    ],
)
def test_other_commands_refuse_the_report_formats(tmp_path, args):
    """Their --format does not offer html or jsonl (so their --help does not list them); an --output naming one is
    refused as a format of the report's alone."""
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = invoke(args)
    assert result.exit_code == 2, result.output
    if "-o" in args:
        assert "is a format of `goodput report` only" in result.output
    else:
        assert "is not one of 'table', 'json', 'csv', 'markdown'" in result.output
    assert not (tmp_path / "findings.jsonl").exists()


@pytest.mark.parametrize("command", ["check", "spans", "query", "diff", "ingest"])
def test_only_the_reports_help_lists_the_html_page_and_json_lines(command):
    shown = invoke([command, "--help"], width=200).stdout
    assert "table|json|csv|markdown" in shown and "html" not in shown.split("--format")[1].split("\n")[0]
    assert "html|jsonl" in invoke(["report", "--help"], width=200).stdout
