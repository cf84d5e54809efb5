"""The toy GRPO job (examples/grpo_toy) end to end on the session's Ray cluster, and the sample traces it wrote.

Each run goes through `goodput report` and `goodput check` as a user would read it. The goodput each step must
show is derived from the job's seeded schedule (`schedule.expected_goodput`, formula in its docstring), within
`GOODPUT_TOLERANCE`: scheduling noise only adds wall clock no productive span covers, so a step may sit a little
below its figure, hardly above it. A sync step is held to figures no load can move instead of the band's floor:
its productive seconds are at least the planned ones (a sleep never ends early), and its wall clock at least the
planned step; on a machine busy enough, a cold first step's Ray dispatch alone took it below the band.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from conftest import TOY_SEED, TOY_STEPS, read_framed_records, read_json_lines_records
from examples.grpo_toy import schedule

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_traces"
STEPS, SEED = TOY_STEPS, TOY_SEED
SAMPLE_STEPS = 6  # what examples/regenerate_sample_traces.py runs
PROCESSES = 5  # the driver, two generation actors (async: the stream and validation) and two training actors
BELOW, ABOVE = schedule.GOODPUT_TOLERANCE
# --buggy plants, in the failed step only, a reward span inside a worker's generation span and three concurrent
# reward spans in the driver: the second and third each overlap an earlier one.
PLANTED = [
    ("nested-bucket", "rl.grpo.reward"),
    ("self-overlap", "rl.grpo.reward"),
    ("self-overlap", "rl.grpo.reward"),
]

runner = CliRunner()


def goodput(*args: str):
    return runner.invoke(app, list(args), terminal_width=160)


def report(path: Path) -> dict:
    result = goodput("report", str(path), "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def check(path: Path) -> tuple[int, dict]:
    result = goodput("check", str(path), "--format", "json")
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def span_name(path: Path, span_id: str) -> str:
    result = goodput("query", str(path), f"SELECT name FROM spans WHERE span_id = '{span_id}'", "--format", "json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    return row["name"]


def assert_goodput_follows_the_schedule(payload: dict, mode: str, steps: int) -> None:
    plans = schedule.make_plan(SEED, steps)
    expected = schedule.expected_goodput(plans, mode)
    floor_wall_s = schedule.planned_step_work_s(plans, mode)
    floor_productive_s = schedule.planned_productive_s(plans) if mode == "sync" else {}
    assert [item["iteration"] for item in payload["iterations"]] == list(range(1, steps + 1))
    for item in payload["iterations"]:
        step = item["iteration"]
        assert item["goodput"] <= expected[step] + ABOVE, (step, item, expected[step])
        if mode == "sync":
            assert item["productive_s"] >= floor_productive_s[step] - 0.002, (step, item, floor_productive_s[step])
        else:
            assert expected[step] - BELOW <= item["goodput"], (step, item, expected[step])
        assert item["wall_s"] >= 0.97 * floor_wall_s[step], (step, item["wall_s"], floor_wall_s[step])
        parts = sum(item[f"{bucket}_s"] for bucket in ("productive", "overhead", "idle", "wasted", "unaccounted"))
        assert parts == pytest.approx(item["wall_s"], abs=1e-6)


def processes_in(path: Path) -> int:
    result = goodput("query", str(path), "SELECT count(DISTINCT process) AS n FROM spans", "--format", "json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    return row["n"]


def assert_one_file_per_process(path: Path, suffix: str, processes: int = PROCESSES) -> None:
    files = sorted(path.iterdir())
    assert len(files) == processes and all(file.suffix == suffix for file in files), files
    read = read_framed_records if suffix == ".otlp" else read_json_lines_records
    for file in files:
        assert read(file), file  # every record whole: no torn or interleaved writes


def assert_planted_findings(path: Path, failed_step: int) -> None:
    exit_code, payload = check(path)
    assert exit_code == 1
    assert [(f["rule"], f["name"]) for f in payload["findings"]] == PLANTED
    assert {f["iteration"] for f in payload["findings"]} == {failed_step}
    assert payload["summary"] == {"errors": len(PLANTED), "warnings": 0}
    nested, *overlaps = payload["findings"]
    assert span_name(path, nested["related_span_id"]) == "rl.grpo.generation"
    assert all(span_name(path, f["related_span_id"]) == "rl.grpo.reward" for f in overlaps)


@pytest.mark.slow
@pytest.mark.ray
def test_sync_run_is_clean_and_its_goodput_follows_the_schedule(toy_sync_run):
    assert_one_file_per_process(toy_sync_run, ".otlp")
    assert check(toy_sync_run) == (0, {"findings": [], "summary": {"errors": 0, "warnings": 0}})
    payload = report(toy_sync_run)
    assert_goodput_follows_the_schedule(payload, "sync", STEPS)
    # The hung trajectory is the only wasted time. The wall clock charges it only once actor 0's generation has
    # ended (productive comes first), so FAIL_S - generation_s of it; a little more when actor 0, dispatched first,
    # starts ahead of actor 1 on a busy machine.
    plans = schedule.make_plan(SEED, STEPS)
    failed = schedule.failed_step(plans)
    for item in payload["iterations"]:
        if item["iteration"] == failed:
            alone_s = schedule.FAIL_S - plans[failed - 1].generation_s[0]
            assert alone_s - 0.03 <= item["wasted_s"] <= schedule.FAIL_S
            assert item["span_seconds"]["wasted"] == pytest.approx(schedule.FAIL_S, abs=0.05)
        else:
            assert item["wasted_s"] == 0.0


@pytest.mark.slow
@pytest.mark.ray
def test_async_run_is_clean_and_its_goodput_follows_the_schedule(toy_async_run):
    assert_one_file_per_process(toy_async_run, ".jsonl")
    assert check(toy_async_run) == (0, {"findings": [], "summary": {"errors": 0, "warnings": 0}})
    assert_goodput_follows_the_schedule(report(toy_async_run), "async", STEPS)


@pytest.mark.slow
@pytest.mark.ray
def test_buggy_run_gives_exactly_the_planted_findings(toy_buggy_colocated_run):
    assert_planted_findings(toy_buggy_colocated_run, schedule.failed_step(schedule.make_plan(SEED, STEPS)))


def test_the_expected_goodput_of_a_sync_step_is_the_documented_formula():
    (plan,) = schedule.make_plan(SEED, 1)  # one step: it is also the failed one
    assert plan.failed and not plan.validation and not plan.checkpoint
    wall_s = (
        max(plan.generation_s[0], schedule.FAIL_S)
        + schedule.RETRY_S
        + plan.reward_s
        + plan.logprob_s
        + plan.advantage_s
        + plan.train_s
        + plan.refit_s
    )
    productive_s = plan.generation_s[0] + schedule.RETRY_S + plan.reward_s + plan.train_s
    assert schedule.expected_goodput([plan], "sync") == {1: pytest.approx(productive_s / wall_s)}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "mode", "suffix"), [("grpo_sync", "sync", ".otlp"), ("grpo_async", "async", ".jsonl")]
)
def test_committed_clean_samples_report_and_check_clean(name, mode, suffix):
    path = SAMPLES / name
    assert_one_file_per_process(path, suffix, processes_in(path))  # how many: test_example_gpus.py
    assert check(path) == (0, {"findings": [], "summary": {"errors": 0, "warnings": 0}})
    assert_goodput_follows_the_schedule(report(path), mode, SAMPLE_STEPS)


@pytest.mark.slow
def test_committed_buggy_sample_gives_exactly_the_planted_findings():
    assert_planted_findings(SAMPLES / "grpo_buggy", schedule.failed_step(schedule.make_plan(SEED, SAMPLE_STEPS)))
    assert report(SAMPLES / "grpo_buggy")["iterations"]


def test_committed_samples_stay_small():
    assert sum(path.stat().st_size for path in SAMPLES.rglob("*") if path.is_file()) < 2_000_000
