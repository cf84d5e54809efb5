"""Bad input, as a user gives it: files that are no trace, SQL that fails, option values that mean nothing,
formats a command does not write, buckets, processes and iterations that are not there. Each is one line on stderr
(`Error: ...`, naming what was wrong and what would do) and exit 2, with no traceback; a range that holds no
iteration is an empty result with a note.
"""

from __future__ import annotations

import json

import pytest

from conftest import WIDTHS, invoke, one_error_line
from tracebuild import S, service_processes, step, three_steps, to_json_record, two_steps, write_trace


def test_query_needs_a_path_and_sql():
    result = invoke(["query", "only-one-argument"], width=120)
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
        result = invoke(command, width=120)
        assert result.exit_code == 2, (command, result.output)
        assert result.stderr.startswith("Error: ") and expected in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.output


def test_sql_errors_are_one_line_exit_2(tmp_path):
    result = invoke(["query", str(two_steps(tmp_path)), "SELECT nope FROM spans"], width=120)
    assert result.exit_code == 2 and result.stderr.startswith("Error: SQL: ")


def test_bad_option_values_are_usage_errors(tmp_path):
    path = str(two_steps(tmp_path))
    assert invoke(["report", path, "--iterations", "x"], width=120).exit_code == 2
    assert invoke(["report", path, "--by", "host"], width=120).exit_code == 2
    bad = invoke(["report", path, "--precedence", "idle,productive"], width=120)
    assert bad.exit_code == 2 and "--precedence" in bad.stderr


# --- formats, buckets and processes that are not there ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("command", [["check"], ["spans", "-i", "1"], ["query", "SELECT 1"]])
@pytest.mark.parametrize("suffix", [".html", ".jsonl"])
def test_the_reports_own_formats_are_refused_by_other_commands_naming_those_they_write(tmp_path, command, suffix):
    out = tmp_path / f"r{suffix}"
    trace = str(three_steps(tmp_path))
    args = [command[0], trace, *command[1:], "-o", str(out)]
    result = invoke(args, width=80)
    assert result.exit_code == 2
    text = " ".join(result.stderr.split())
    assert "format of `goodput report` only" in text and "table, json, csv, markdown" in text
    assert not out.exists()
    by_flag = invoke([command[0], trace, *command[1:], "--format", suffix[1:]], width=80)
    assert by_flag.exit_code == 2 and "--format" in by_flag.stderr
    diff = invoke(["diff", trace, trace, "-o", str(out)], width=80)
    assert diff.exit_code == 2


@pytest.mark.parametrize("width", WIDTHS)
def test_an_unknown_bucket_is_refused_naming_the_four(tmp_path, width):
    result = invoke(["spans", str(three_steps(tmp_path)), "-i", "2", "--bucket", "prod"], width=width)
    assert result.exit_code == 2
    text = " ".join(result.stderr.split())
    assert "'prod' is not a bucket" in text and "productive, overhead, idle, wasted" in text
    assert result.stdout == ""


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_an_unknown_process_is_an_error_naming_the_processes(tmp_path, width):
    result = invoke(["spans", str(service_processes(tmp_path)), "--process", "grpo-gen"], width=width)
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert "no process 'grpo-gen'" in line
    assert "grpo-driver@vm:10, grpo-generation@vm:11, grpo-generation@vm:12" in line


# --- iterations that are not there ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [["report", "-i", "99"], ["spans", "-i", "99"], ["check", "-i", "99"], ["report", "-f", "json", "-i", "99"]],
)
def test_an_iteration_asked_for_that_is_not_there_is_exit_2_everywhere_naming_those_there_are(tmp_path, args):
    result = invoke([args[0], str(three_steps(tmp_path)), *args[1:]], width=80)
    assert result.exit_code == 2, result.output
    assert one_error_line(result.stderr) == "Error: no iteration 99 in these traces; they hold iterations 1-3"
    assert result.stdout == ""


@pytest.mark.slow
@pytest.mark.parametrize("command", ["report", "check"])
def test_a_range_that_holds_no_iteration_is_an_empty_result_with_a_note_naming_those_there_are(tmp_path, command):
    spans = [step(f"s{i}", i, i, i + 1) for i in (1, 2, 3, 7, 9, 10)]
    path = str(write_trace(tmp_path / "run.otlp", spans))
    result = invoke([command, path, "--iterations", "4:6", "-f", "json"], width=80)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["iterations" if command == "report" else "findings"] == []
    assert result.stderr == "note: no iteration in the range 4:6 in these traces; they hold iterations 1-3, 7, 9-10\n"
    result = invoke([command, path, "--iterations", "11:", "-f", "json"], width=80)
    assert result.exit_code == 0 and "no iteration in the range 11: in these traces" in result.stderr
    result = invoke([command, path, "--iterations", "3:7", "-f", "json"], width=80)
    assert result.exit_code == 0 and result.stderr == ""


def test_many_iterations_are_named_by_their_first_runs_and_their_last(tmp_path):
    spans = [step(f"s{i}", i, i, i + 1) for i in range(0, 40, 2)]  # 0, 2, ..., 38: twenty runs of one
    result = invoke(["spans", str(write_trace(tmp_path / "run.otlp", spans)), "-i", "5"], width=80)
    assert one_error_line(result.stderr) == (
        "Error: no iteration 5 in these traces; they hold iterations 0, 2, 4, 6, 8, 10, ..., 38 (20 in all)"
    )


def test_no_iteration_at_all_is_named_as_such(tmp_path):
    path = write_trace(tmp_path / "run.otlp", [S("a", "rl.grpo.generation", 0, 1, bucket="productive")])
    result = invoke(["spans", str(path), "-i", "1"], width=80)
    assert result.exit_code == 2
    assert "they hold no iteration" in one_error_line(result.stderr)


def test_console_exporter_output_is_named_for_what_it_is(tmp_path):
    """The SDK's ConsoleSpanExporter prints each span as a JSON object of its own: not a corrupt OTLP file."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    path = tmp_path / "console.json"
    with path.open("w") as out:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
        for i in range(3):
            with provider.get_tracer("job").start_as_current_span(f"step{i}"):
                pass
        provider.shutdown()
    result = invoke(["report", str(path)], width=120)
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert line.startswith(f"Error: {path}: ConsoleSpanExporter output") and "not OTLP" in line
    assert "json-file or otlp-file exporter" in line and "not valid JSON" not in line


def test_an_error_in_a_pretty_printed_document_names_its_real_line_and_the_id_as_written(tmp_path):
    record = to_json_record([step("s1", 1, 0, 10), S("g", "rl.grpo.generation", 1, 2, parent="s1")])
    text = json.dumps(record, indent=2).replace(record["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["spanId"],
                                                "ABCDEF012345678Z")  # fmt: skip
    line = next(n for n, content in enumerate(text.splitlines(), 1) if "ABCDEF012345678Z" in content)
    assert line > 1
    path = tmp_path / "pretty.json"
    path.write_text(text)
    result = invoke(["report", str(path)], width=120)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == (
        f"Error: {path}: line {line}: a span has spanId 'ABCDEF012345678Z', expected an 8-byte span id"
    )
