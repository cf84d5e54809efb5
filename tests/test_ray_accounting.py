"""`report --ray` and `check --ray`: the accounting as Ray tasks, by ranges of iteration windows, on the session's
local cluster, gives byte for byte what the local run gives.

Ranges are made small (`GOODPUT_RAY_RANGE_WINDOWS`) so that every run here is several tasks, and the generated job
is drawn so that something crosses every range boundary: a wasted span over most of the run, worker spans that spill
into the next step (their effective iteration is the step that dispatched them, their time is charged where they
ran), the accounting bugs of SPEC section 5 placed on both sides of boundaries, and a second attempt that redoes the
last iterations.
"""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PROPERTY_TESTS, invoke
from rollup.accounting.frames import report_frames
from rollup.accounting.intervals import Stretches
from rollup.accounting.windows import Windows
from rollup.base.errors import GoodputError
from rollup.checks.check import CheckOptions, check_findings
from rollup.report.as_json import report_json
from rollup.report.build import ReportOptions, build_report
from rollup.runners.on_ray import ENV_RANGE_WINDOWS, RayRunner, plan_ranges, run_ranges
from rollup.runners.ray_slices import Dataset, RangeWork, load_slice, report_task, task_spill
from rollup.store.span_store import open_store
from tracebuild import S, ns, step, write_trace

NO_STRETCHES = Stretches(array("q"), array("q"))

SAMPLES = sorted(p for p in (Path(__file__).parent.parent / "sample_traces").iterdir() if p.is_dir())
ITERATIONS = 1500
REDONE = 60  # the second attempt redoes the last REDONE iterations
RANGE_WINDOWS = 200  # about eight ranges of the generated job


def resource(process: str, run_id: str) -> dict:
    return {"service.name": "toy", "service.instance.id": process, "host.name": "host", "process.pid": 1,
            "goodput.run.id": run_id}  # fmt: skip


def attempt_spans(first: int, last: int, origin: float, tag: str) -> list[S]:
    """Iterations `first`..`last` of one attempt, a step a second from `origin` (0.9 s of step, 0.1 s between).

    Each step: generation on the driver [0, 0.5], a reward on a worker [0.4, 0.6] (in odd steps [0.4, 1.2]: it spills
    into the next step) that carries no iteration, an idle bubble [0.7, 0.95] that outlives the step; the wasted
    span over most of the run fills what they leave. Placed every so often: a bucketed span
    nested in a bucketed span that ended seconds before (nested-bucket across steps), two overlapping same-name
    spans of one process that start in different steps (self-overlap), a step that runs into the next one
    (overlapping-steps), an orphan, an inverted span, an iteration that disagrees with its step's."""
    driver, trace = f"{tag}-driver", tag
    end = origin + (last - first + 1) + 1.0
    spans = [S("job", "rl.grpo.job", origin, end, group="job", process=driver, trace=trace)]
    spans.append(S("waste", "rl.wasted.failed_trajectory", origin + 50, end - 40, parent="job", bucket="wasted",
                   group="efficiency", process=f"{tag}-worker9", trace=trace))  # fmt: skip
    for i in range(first, last + 1):
        t = origin + 0.5 + (i - first)
        stretch = 1.3 if i % 389 == 0 else 0.9  # overlapping-steps: runs 0.3 s into the next step
        spans.append(step(f"step{i}", i, t, t + stretch, parent="job", process=driver, trace=trace))
        spans += [
            S(f"gen{i}", "rl.grpo.generation", t, t + 0.5, parent=f"step{i}", bucket="productive",
              group="generation", process=driver, trace=trace),
            S(f"rew{i}", "rl.grpo.reward", t + 0.4, t + (1.2 if i % 2 else 0.6), parent=f"step{i}",
              bucket="overhead", group="reward", process=f"{tag}-worker{i % 3}", trace=trace),
            S(f"idle{i}", "rl.idle.refit_bubble", t + 0.7, t + 0.95, parent=f"step{i}", bucket="idle",
              group="efficiency", process=driver, trace=trace),
        ]  # fmt: skip
        if i % 97 == 0:  # a bucketed parent that ended before its bucketed child started, seconds later
            spans += [
                S(f"ckpt{i}", "rl.checkpoint.save", t + 0.1, t + 0.2, parent=f"step{i}", bucket="overhead",
                  group="checkpoint", process=driver, trace=trace),
                S(f"late{i}", "rl.checkpoint.upload", t + 3.1, t + 3.3, parent=f"ckpt{i}", bucket="overhead",
                  group="checkpoint", process=f"{tag}-worker4", trace=trace),
            ]  # fmt: skip
        if i % 211 == 0:  # same name, same process, overlapping, started in steps i and i + 1
            spans += [
                S(f"pre{i}", "rl.grpo.prefetch", t + 0.6, t + 1.8, parent=f"step{i}", bucket="overhead",
                  process=f"{tag}-worker5", trace=trace),
                S(f"pre{i}b", "rl.grpo.prefetch", t + 1.1, t + 1.4, parent="job", bucket="overhead",
                  process=f"{tag}-worker5", trace=trace),
            ]  # fmt: skip
        if i % 500 == 0:
            spans.append(S(f"orphan{i}", "rl.grpo.generation", t + 0.2, t + 0.3, parent=f"lost{i}",
                           bucket="productive", process=f"{tag}-worker6", trace=trace))  # fmt: skip
        if i % 613 == 0:
            spans.append(S(f"inv{i}", "rl.grpo.logprob", t + 0.6, t + 0.55, parent=f"step{i}", bucket="overhead",
                           process=driver, trace=trace))  # fmt: skip
        if i % 701 == 0:  # filed under the step before: a leaked scope (a later one is the async prefetch pattern)
            spans.append(S(f"mis{i}", "rl.grpo.advantage", t + 0.5, t + 0.6, parent=f"step{i}", iteration=i - 1,
                           bucket="overhead", process=driver, trace=trace))  # fmt: skip
    return spans


@pytest.fixture(scope="module")
def generated_job(tmp_path_factory) -> Path:
    """A job of ITERATIONS steps whose last REDONE are redone by a second attempt after 30 s of downtime."""
    folder = tmp_path_factory.mktemp("generated-job")
    first = attempt_spans(1, ITERATIONS, 0.0, "a")
    second = attempt_spans(ITERATIONS - REDONE + 1, ITERATIONS, ITERATIONS + 40.0, "b")
    for spans, run_id, name in ((first, "run-a", "a.otlp"), (second, "run-b", "b.otlp")):
        resources = {s.process: resource(s.process, run_id) for s in spans}
        write_trace(folder / name, spans, "framed", batches=4, resources=resources)
    return folder


@pytest.fixture
def small_ranges(monkeypatch):
    monkeypatch.setenv(ENV_RANGE_WINDOWS, "3")  # two ranges or more of every sample


def same_output(args: list[str]) -> str:
    """`goodput ARGS` and `goodput ARGS --ray` (exit codes and stdout equal); the local stdout."""
    local = invoke(args)
    on_ray = invoke([*args, "--ray"])
    assert on_ray.exit_code == local.exit_code, on_ray.output
    assert on_ray.stdout == local.stdout
    return local.stdout


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_report_on_ray_is_the_local_json_on_every_sample(ray_cluster, small_ranges, sample):
    for extra in ([], ["--by", "name"], ["--by", "process"], ["--by", "group"], ["--iterations", "2:3"]):
        payload = json.loads(same_output(["report", str(sample), "--format", "json", *extra]))
        assert payload["iterations"], extra


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_check_on_ray_finds_what_the_local_check_finds_on_every_sample(ray_cluster, small_ranges, sample):
    same_output(["check", str(sample), "--format", "json", "--expect", "generation,policy_update"])


@pytest.mark.slow
@pytest.mark.ray
def test_a_restarted_job_on_ray_keeps_its_attempts_apart(ray_cluster, small_ranges):
    restart = next(s for s in SAMPLES if s.name == "grpo_restart")
    payload = json.loads(same_output(["report", str(restart), "--format", "json"]))
    assert payload["rework"]["wall_s"] > 0 and payload["downtime"]["wall_s"] > 0
    latest = json.loads(same_output(["report", str(restart), "--format", "json", "--attempt", "latest"]))
    assert len(latest["attempts"]) == 1
    same_output(["check", str(restart), "--format", "json", "--attempt", "latest"])


@pytest.mark.slow
def test_the_generated_job_is_cut_into_ranges_that_spans_cross(generated_job):
    with open_store([generated_job], accounting=True) as store:
        windows = report_frames(store.spans(), None).windows
    works = plan_ranges(windows, NO_STRETCHES, NO_STRETCHES, RANGE_WINDOWS)
    assert len(works) == -(-ITERATIONS // RANGE_WINDOWS)
    assert sorted(i for w in works for i in w.positions) == list(range(ITERATIONS))  # each window in one range
    boundaries = [w.windows[0].start_ns for w in works[1:]]
    waste = next(s for s in attempt_spans(1, ITERATIONS, 0.0, "a") if s.label == "waste")
    assert all(ns(waste.start) < b < ns(waste.end) for b in boundaries)  # the wasted span crosses every one


@pytest.mark.slow
@pytest.mark.ray
def test_report_on_ray_is_the_local_json_on_a_generated_job(ray_cluster, generated_job, monkeypatch):
    monkeypatch.setenv(ENV_RANGE_WINDOWS, str(RANGE_WINDOWS))
    path = str(generated_job)
    plain = json.loads(same_output(["report", path, "--format", "json"]))
    assert len(plain["iterations"]) == ITERATIONS
    assert plain["total"]["wasted_s"] > 0 and plain["rework"]["wall_s"] > 0 and plain["downtime"]["wall_s"] > 0
    for extra in (["--by", "name"], ["--by", "process"], ["--by", "group"], ["--iterations", "500:1200"],
                  ["--attempt", "run-a"], ["--precedence", "idle,wasted,productive,overhead"]):  # fmt: skip
        payload = json.loads(same_output(["report", path, "--format", "json", *extra]))
        assert payload["iterations"], extra


@pytest.mark.slow
@pytest.mark.ray
def test_check_on_ray_finds_what_the_local_check_finds_on_a_generated_job(ray_cluster, generated_job, monkeypatch):
    monkeypatch.setenv(ENV_RANGE_WINDOWS, str(RANGE_WINDOWS))
    path = str(generated_job)
    payload = json.loads(same_output(["check", path, "--format", "json", "--expect", "generation,reward,nothing"]))
    rules = {f["rule"] for f in payload["findings"]}
    assert {"nested-bucket", "self-overlap", "overlapping-steps", "orphan-span", "inverted-span",
            "iteration-mismatch", "missing-group"} <= rules  # fmt: skip
    same_output(["check", path, "--format", "json", "--iterations", "1:750"])


@pytest.mark.slow
@pytest.mark.ray
def test_no_cache_on_ray_writes_the_lineage_for_the_tasks_and_gives_the_same_json(ray_cluster, small_ranges):
    sample = str(next(s for s in SAMPLES if s.name == "grpo_buggy"))
    local = invoke(["report", sample, "--format", "json"])
    on_ray = invoke(["report", sample, "--format", "json", "--no-cache", "--ray"])
    assert on_ray.exit_code == 0, on_ray.output
    assert on_ray.stdout == local.stdout


@pytest.mark.slow
@pytest.mark.ray
def test_ingest_on_ray_then_report_on_ray(ray_cluster, small_ranges, tmp_path):
    sample = str(next(s for s in SAMPLES if s.name == "grpo_sync"))
    dataset = tmp_path / "dataset"
    assert invoke(["ingest", "--ray", sample, "--to", str(dataset)]).exit_code == 0
    from_dataset = invoke(["report", str(dataset), "--format", "json", "--ray"])
    assert from_dataset.exit_code == 0, from_dataset.output
    assert from_dataset.stdout == invoke(["report", sample, "--format", "json"]).stdout


@pytest.mark.slow
@pytest.mark.ray
@settings(PROPERTY_TESTS, max_examples=4)
@given(
    steps=st.lists(st.tuples(st.floats(0.2, 3.0), st.floats(0.0, 1.0)), min_size=1, max_size=6),
    leaves=st.lists(
        st.tuples(
            st.integers(0, 5),
            st.floats(-1.0, 3.0),
            st.floats(0.0, 4.0),
            st.sampled_from(["productive", "overhead", "idle", "wasted"]),
            st.sampled_from(["gen", "rew"]),
            st.sampled_from(["driver", "w1", "w2"]),
        ),
        max_size=12,
    ),  # fmt: skip
    range_windows=st.integers(1, 3),
)
def test_any_small_job_accounts_the_same_on_ray(ray_cluster, tmp_path_factory, steps, leaves, range_windows):
    """Steps of random lengths and gaps, leaves of any bucket anywhere (inside, across, outside steps), any
    process, parented to a step or not: every --by and check agree with the local run for any range size."""
    spans: list[S] = []
    t = 0.0
    for i, (length, gap) in enumerate(steps, start=1):
        t += gap
        spans.append(step(f"step{i}", i, t, t + length))
        t += length
    for j, (parent, offset, length, bucket, name, process) in enumerate(leaves):
        under = f"step{parent}" if 1 <= parent <= len(steps) else None
        spans.append(S(f"leaf{j}", f"rl.grpo.{name}", offset + j * 0.1, offset + j * 0.1 + length, parent=under,
                       bucket=bucket, process=process))  # fmt: skip
    path = write_trace(tmp_path_factory.mktemp("job") / "job.otlp", spans)
    runner = RayRunner(range_windows=range_windows)
    for by in (None, "name", "process"):
        with open_store([path], accounting=True) as store:
            local = report_json(build_report(store, ReportOptions(by=by)))
        with open_store([path], accounting=True) as store:
            on_ray = report_json(build_report(store, ReportOptions(by=by), runner))
        assert json.dumps(on_ray) == json.dumps(local)
    expect = CheckOptions(expect=["generation"])
    with open_store([path], accounting=True) as store:
        local_findings = check_findings(store, expect).findings
    with open_store([path], accounting=True) as store:
        ray_findings = check_findings(store, expect, runner).findings
    assert ray_findings == local_findings


def test_a_span_crossing_a_range_boundary_is_read_by_both_ranges(tmp_path):
    spans = [step("s1", 1, 0, 10), step("s2", 2, 10, 20),
             S("long", "rl.grpo.generation", 5, 15, bucket="productive"),
             S("first", "rl.grpo.reward", 1, 2, bucket="overhead", parent="s1"),
             S("spill", "rl.grpo.reward", 30, 31, bucket="overhead", parent="s2")]  # fmt: skip
    path = write_trace(tmp_path / "job.otlp", spans)
    with open_store([path], accounting=True) as store:
        windows = report_frames(store.spans(), None).windows
        works = plan_ranges(windows, NO_STRETCHES, NO_STRETCHES, 1)
        dataset = Dataset((str(store.lineage_cache),))
        names = []
        for work in works:
            spill = task_spill()
            connection = load_slice(dataset, work, spill)
            names.append({n for (n,) in connection.execute("SELECT name FROM spans_ex").fetchall()})
            connection.close()
            spill.remove()
    assert len(works) == 2
    assert "rl.grpo.generation" in names[0] and "rl.grpo.generation" in names[1]  # the long span: both ranges
    assert "rl.grpo.reward" in names[1]  # its own iteration's span-seconds, though it ran after every window
    assert works[0].iterations == (1, 1) and works[1].iterations == (2, 2)


@pytest.mark.ray
def test_a_bad_range_setting_is_exit_2_naming_it(ray_cluster, monkeypatch):
    monkeypatch.setenv(ENV_RANGE_WINDOWS, "many")
    result = invoke(["report", str(SAMPLES[0]), "--ray"])
    assert result.exit_code == 2
    assert result.stderr == f"Error: {ENV_RANGE_WINDOWS} must be a whole number of windows, at least 1; got 'many'\n"


@pytest.mark.ray
def test_a_lineage_table_the_workers_cannot_see_names_the_shared_filesystem_assumption(ray_cluster, tmp_path):
    one = Windows(array("q", [1]), Stretches(array("q", [0]), array("q", [10])), array("q", [0]), ("",))
    work = RangeWork(0, one, array("q", [0]), NO_STRETCHES, NO_STRETCHES, cover=((0, 10),), iterations=(1, 1))
    missing = Dataset((str(tmp_path / "elsewhere" / "lineage.parquet"),))
    with pytest.raises(GoodputError, match="must be on a filesystem every Ray node shares"):
        list(run_ranges(ray_cluster, report_task, [(missing, work, ["productive"], None)]))


@pytest.mark.slow
@pytest.mark.ray
def test_unreachable_cluster_is_exit_2_naming_the_address(tmp_path):
    # In a fresh process: this one is connected to the session's cluster, whatever address a command names.
    import subprocess
    import sys

    sample = str(SAMPLES[0])
    result = subprocess.run(
        [sys.executable, "-m", "cli", "report", sample, "--ray", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("Error: cannot connect to the Ray cluster at 127.0.0.1:1: ")
    assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.ray
def test_the_html_page_on_ray_is_the_local_page(ray_cluster, small_ranges, tmp_path):
    """The page holds the report by name and the check summary: both come from Ray, in one connection."""
    sample = str(next(s for s in SAMPLES if s.name == "grpo_buggy"))
    local, on_ray = tmp_path / "local.html", tmp_path / "ray.html"
    assert invoke(["report", sample, "-o", str(local)]).exit_code == 0
    result = invoke(["report", sample, "-o", str(on_ray), "--ray"])
    assert result.exit_code == 0, result.output
    assert on_ray.read_bytes() == local.read_bytes()
    assert ray_cluster.is_initialized()  # the session's connection, kept
