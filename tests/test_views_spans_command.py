"""goodput spans --iteration N: every span active in window N, whatever its own iteration or process.

The question it answers is "what else was happening in step N": work spilling over from step N-1, a checkpoint of
the job, a collector process with no iteration at all. Offsets are from the window's start, derived in each test.
Without --iteration it lists every span; --bucket and --process filter either way.
"""

from __future__ import annotations

import json

import pytest

from conftest import WIDTHS, invoke
from tracebuild import S, service_processes, span_id_of, step, three_steps, write_trace

COLUMNS = [
    "start_offset_s",
    "duration_s",
    "process",
    "bucket",
    "span_group",
    "name",
    "iteration",
    "span_id",
    "parent_span_id",
    "trace_id",
]
WINDOW_START, WINDOW_END = 10.0, 20.0  # step 2 of `timeline`


def run(args: list[str]):
    return invoke(args, width=160)


def timeline() -> list[S]:
    return [
        S("job", "rl.grpo.job", 0, 40, group="job"),
        step("step1", 1, 0, 10, parent="job"),
        S("gen1", "rl.grpo.generation", 1, 10, parent="step1", bucket="productive", process="worker-a"),
        # Step 1's checkpoint spills into step 2's window.
        S("save1", "rl.checkpoint.save", 8, 13, parent="step1", bucket="overhead", group="checkpoint"),
        step("step2", 2, 10, 20, parent="job"),
        S("gen2", "rl.grpo.generation", 11, 15, parent="step2", bucket="productive", process="worker-a"),
        S("lp2", "rl.grpo.logprob", 14, 18, parent="step2", bucket="overhead", process="worker-b"),
        # A collector loop with no iteration anywhere, crossing into step 3.
        S("wait", "rl.idle.refit_event_wait", 19, 25, process="collector", trace="t2", group="efficiency"),
        step("step3", 3, 20, 30, parent="job"),
        S("gen3", "rl.grpo.generation", 20, 24, parent="step3", bucket="productive", process="worker-a"),
    ]


def spans_json(tmp_path, *extra: str, spans=None) -> list[dict]:
    path = write_trace(tmp_path / "run.otlp", timeline() if spans is None else spans)
    result = run(["spans", str(path), "--format", "json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_span_active_in_the_window_whatever_its_iteration_or_process(tmp_path):
    rows = spans_json(tmp_path, "--iteration", "2")
    assert [r["span_id"] for r in rows] == [
        span_id_of("job"),  # starts 0
        span_id_of("save1"),  # starts 8: step 1's, spilling in
        span_id_of("step2"),  # starts 10
        span_id_of("gen2"),  # 11
        span_id_of("lp2"),  # 14
        span_id_of("wait", trace="t2"),  # 19, no iteration
    ]
    # Not listed: step1 and gen1 end exactly at the window's start; step3 and gen3 start exactly at its end.
    by_id = {r["span_id"]: r for r in rows}
    save = by_id[span_id_of("save1")]
    assert save["start_offset_s"] == 8.0 - WINDOW_START
    assert save["duration_s"] == 13.0 - 8.0
    assert save["iteration"] == 1  # its own effective iteration, not the window's
    assert save["bucket"] == "overhead" and save["span_group"] == "checkpoint"
    assert by_id[span_id_of("job")]["start_offset_s"] == 0.0 - WINDOW_START
    assert by_id[span_id_of("job")]["iteration"] is None
    gen = by_id[span_id_of("gen2")]
    assert gen["start_offset_s"] == 11.0 - WINDOW_START
    assert gen["iteration"] == 2  # inherited from the step across processes
    assert (gen["process"], gen["parent_span_id"]) == ("worker-a", span_id_of("step2"))
    wait = by_id[span_id_of("wait", trace="t2")]
    assert wait["start_offset_s"] == 19.0 - WINDOW_START and wait["duration_s"] == 25.0 - 19.0
    assert (wait["process"], wait["iteration"], wait["bucket"]) == ("collector", None, None)
    assert by_id[span_id_of("step2")]["start_offset_s"] == 0.0


def test_rows_are_sorted_by_start(tmp_path):
    rows = spans_json(tmp_path, "--iteration", "2")
    offsets = [r["start_offset_s"] for r in rows]
    assert offsets == sorted(offsets)
    assert offsets == [0.0 - 10.0, 8.0 - 10.0, 10.0 - 10.0, 11.0 - 10.0, 14.0 - 10.0, 19.0 - 10.0]


def test_json_rows_have_every_column(tmp_path):
    rows = spans_json(tmp_path, "--iteration", "2")
    assert all(list(r) == COLUMNS for r in rows)
    step2 = next(r for r in rows if r["span_id"] == span_id_of("step2"))
    assert step2 == {
        "start_offset_s": 0.0,
        "duration_s": 20.0 - 10.0,
        "process": "driver",
        "bucket": None,
        "span_group": "step",
        "name": "rl.grpo.step",
        "iteration": 2,
        "span_id": span_id_of("step2"),
        "parent_span_id": span_id_of("job"),
        "trace_id": S("step2", "", 0, 0).trace_id,
    }


def test_the_first_window_lists_what_ends_at_its_end_but_not_what_starts_there(tmp_path):
    rows = spans_json(tmp_path, "--iteration", "1")
    assert [r["span_id"] for r in rows] == [
        span_id_of("job"),
        span_id_of("step1"),
        span_id_of("gen1"),
        span_id_of("save1"),
    ]
    assert [r["start_offset_s"] for r in rows] == [0.0, 0.0, 1.0 - 0.0, 8.0 - 0.0]


@pytest.mark.slow
def test_bucket_filter(tmp_path):
    rows = spans_json(tmp_path, "--iteration", "2", "--bucket", "productive")
    assert [r["span_id"] for r in rows] == [span_id_of("gen2")]
    rows = spans_json(tmp_path, "--iteration", "2", "--bucket", "overhead")
    assert [r["span_id"] for r in rows] == [span_id_of("save1"), span_id_of("lp2")]


@pytest.mark.slow
def test_process_filter(tmp_path):
    rows = spans_json(tmp_path, "--iteration", "2", "--process", "worker-a")
    assert [r["span_id"] for r in rows] == [span_id_of("gen2")]  # gen1 ends at the window's start
    rows = spans_json(tmp_path, "--iteration", "3", "--process", "collector")
    assert [(r["span_id"], r["start_offset_s"]) for r in rows] == [(span_id_of("wait", trace="t2"), 19.0 - 20.0)]


@pytest.mark.slow
def test_bucket_and_process_filters_combine(tmp_path):
    assert spans_json(tmp_path, "--iteration", "2", "--bucket", "overhead", "--process", "worker-b") == [
        next(r for r in spans_json(tmp_path, "--iteration", "2") if r["span_id"] == span_id_of("lp2"))
    ]
    assert spans_json(tmp_path, "--iteration", "2", "--bucket", "idle", "--process", "worker-b") == []


def test_the_window_is_the_envelope_of_several_step_spans(tmp_path):
    spans = [
        step("trainer", 4, 0, 5, process="trainer"),
        step("collector", 4, 3, 9, process="collector"),
        S("early", "rl.grpo.data_plane", -2, 0.5, bucket="overhead", process="io"),
        S("late", "rl.grpo.data_plane", 8.5, 12, bucket="overhead", process="io"),
        S("after", "rl.grpo.data_plane", 9, 12, bucket="overhead", process="io"),
    ]
    rows = spans_json(tmp_path, "--iteration", "4", spans=spans)
    assert [(r["span_id"], r["start_offset_s"]) for r in rows] == [
        (span_id_of("early"), -2.0 - 0.0),
        (span_id_of("trainer"), 0.0),
        (span_id_of("collector"), 3.0 - 0.0),
        (span_id_of("late"), 8.5 - 0.0),
    ]


def test_without_step_spans_the_window_is_the_iterations_envelope(tmp_path):
    spans = [
        S("a", "rl.grpo.generation", 1, 3, bucket="productive", iteration=1),
        S("b", "rl.grpo.reward", 2, 7, bucket="productive", iteration=1),
        S("c", "rl.grpo.generation", 6, 9, bucket="productive", iteration=2),
    ]
    rows = spans_json(tmp_path, "--iteration", "2", spans=spans)
    assert [(r["span_id"], r["start_offset_s"], r["iteration"]) for r in rows] == [
        (span_id_of("b"), 2.0 - 6.0, 1),
        (span_id_of("c"), 0.0, 2),
    ]


def test_an_unknown_iteration_is_an_error_naming_it(tmp_path):
    path = write_trace(tmp_path / "run.otlp", timeline())
    result = run(["spans", str(path), "--iteration", "7"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error:")
    assert "iteration 7" in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_without_iteration_every_span_is_listed_from_the_first_start(tmp_path):
    rows = spans_json(tmp_path)
    assert len(rows) == len(timeline())
    assert rows[0]["span_id"] == span_id_of("job") and rows[0]["start_offset_s"] == 0.0 - 0.0
    wait = next(r for r in rows if r["span_id"] == span_id_of("wait", trace="t2"))
    assert wait["start_offset_s"] == 19.0 - 0.0


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["table", "csv", "markdown"])
def test_other_formats_carry_the_same_rows(tmp_path, fmt):
    path = write_trace(tmp_path / "run.otlp", timeline())
    result = run(["spans", str(path), "--iteration", "2", "--format", fmt])
    assert result.exit_code == 0, result.output
    for name in ("rl.checkpoint.save", "rl.grpo.logprob", "rl.idle.refit_event_wait", "worker-b"):
        assert name in result.stdout
    if fmt == "table":
        assert "iteration 2: 10.000s window, 6 spans" in result.stdout
    else:
        assert span_id_of("lp2") in result.stdout
        assert "-2" in result.stdout  # the checkpoint's offset


def test_spans_to_an_output_file(tmp_path):
    path = write_trace(tmp_path / "run.otlp", timeline())
    out = tmp_path / "spans.json"
    result = run(["spans", str(path), "--iteration", "2", "--format", "json", "--output", str(out)])
    assert result.exit_code == 0 and result.stdout == ""
    assert len(json.loads(out.read_text())) == 6


# --- filters as a user types them -------------------------------------------------------------------------------------


def test_a_bucket_in_capitals_is_the_bucket(tmp_path):
    result = invoke(["spans", str(three_steps(tmp_path)), "-i", "2", "--bucket", "Overhead", "-f", "json"])
    assert [row["span_id"] for row in json.loads(result.stdout)] == [span_id_of("l2")]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("process", "expected"),
    [
        ("grpo-generation", ["ga", "gb"]),  # the service name: every process of it
        ("grpo-generation@vm:12", ["gb"]),  # the name as listed
        ("run7-rank0", ["rb", "ra"]),  # a name two processes share, listed with [host:pid] appended
        ("run7-rank0 [vm:21]", ["rb"]),
    ],
)
def test_process_is_matched_as_listed_or_by_its_service_name(tmp_path, process, expected):
    path = str(service_processes(tmp_path))
    for extra in (["-i", "1"], []):
        result = invoke(["spans", path, *extra, "--process", process, "-f", "json"], width=200)
        assert result.exit_code == 0, result.output
        assert [row["span_id"] for row in json.loads(result.stdout)] == [span_id_of(label) for label in expected]


# --- every span -------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_spans_without_iteration_lists_every_span_in_a_table(tmp_path, width):
    result = invoke(["spans", str(three_steps(tmp_path))], width=width)
    assert result.exit_code == 0, result.output
    assert "every span: 12.000s from the first start to the last end, 7 spans" in result.stdout
    for name in ("rl.grpo.job", "rl.grpo.logprob", "rl.idle.buffer_starvation"):
        assert name in result.stdout


def test_spans_without_iteration_filter_by_bucket(tmp_path):
    result = invoke(["spans", str(three_steps(tmp_path)), "--bucket", "productive", "-f", "csv"])
    rows = result.stdout.splitlines()
    assert rows[0].startswith("start_offset_s,duration_s,process,bucket")
    assert len(rows) == 2 and span_id_of("g1") in rows[1]
