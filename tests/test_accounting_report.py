"""goodput report on hand-built traces: every expected number is derived in the test from the timeline it draws.

Besides the plain cases: accounting edges a differential fuzz found (SPEC sections 4 and 5; zero-length steps, every
process over every window, which spans make a window), the report's JSON numbers (section 6: exact to the
nanosecond, null where there is no wall clock), and what the report says when there is nothing to show.
"""

from __future__ import annotations

import json

import pytest

from conftest import WIDTHS, invoke, json_report, span_rule_findings
from tracebuild import S, step, write_trace

FIGURES = ("wall_s", "productive_s", "overhead_s", "idle_s", "wasted_s", "unaccounted_s")
BUCKETS = ("productive", "overhead", "idle", "wasted")


def run(args: list[str]):
    return invoke(args, width=160)


def report(tmp_path, spans, *extra: str, shape: str = "framed") -> dict:
    path = write_trace(tmp_path / "run.trace", spans, shape)
    result = run(["report", str(path), "--format", "json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def buckets(item: dict) -> tuple[float, ...]:
    return tuple(item[k] for k in ("productive_s", "overhead_s", "idle_s", "wasted_s", "unaccounted_s"))


def test_nested_bucketed_spans_count_once_in_wall_clock_and_twice_in_span_seconds(tmp_path):
    out = report(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("gen", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive", group="generation"),
            S("inner", "rl.grpo.inner", 2, 3, parent="gen", bucket="productive"),
        ],
    )
    (it,) = out["iterations"]
    assert it["iteration"] == 1
    assert it["wall_s"] == 10.0 - 0.0
    assert buckets(it) == (5.0 - 1.0, 0.0, 0.0, 0.0, 10.0 - (5.0 - 1.0))
    assert it["span_seconds"]["productive"] == (5.0 - 1.0) + (3.0 - 2.0)
    assert it["goodput"] == pytest.approx((5.0 - 1.0) / 10.0)


def test_concurrent_spans_across_processes_charge_their_union(tmp_path):
    out = report(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("a", "rl.grpo.generation", 1, 4, parent="step1", bucket="productive", process="worker-a"),
            S("b", "rl.grpo.generation", 2, 6, parent="step1", bucket="productive", process="worker-b"),
            S("lp", "rl.grpo.logprob", 5, 8, parent="step1", bucket="overhead", process="worker-a"),
        ],
    )
    (it,) = out["iterations"]
    assert it["productive_s"] == 6.0 - 1.0  # union of [1,4] and [2,6]
    assert it["overhead_s"] == 8.0 - 6.0  # [5,8] less the productive [5,6]
    assert it["unaccounted_s"] == 10.0 - (8.0 - 1.0)
    assert it["span_seconds"]["productive"] == (4.0 - 1.0) + (6.0 - 2.0)
    assert it["span_seconds"]["overhead"] == 8.0 - 5.0


def test_a_span_crossing_window_edges_is_clipped_to_each_window(tmp_path):
    out = report(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            step("step2", 2, 10, 20),
            S("ckpt", "rl.checkpoint.save", 8, 13, parent="step1", bucket="overhead", group="checkpoint"),
        ],
    )
    one, two = out["iterations"]
    assert one["overhead_s"] == 10.0 - 8.0
    assert two["overhead_s"] == 13.0 - 10.0
    assert one["span_seconds"]["overhead"] == 13.0 - 8.0  # span-seconds follow the span's own iteration
    assert two["span_seconds"]["overhead"] == 0.0
    assert out["total"]["overhead_s"] == 13.0 - 8.0
    assert out["total"]["wall_s"] == 20.0 - 0.0


def test_spans_without_iteration_inherit_through_parents_across_processes(tmp_path):
    out = report(
        tmp_path,
        [
            step("step3", 3, 0, 10),
            S("rollout", "rl.grpo.rollout", 0, 9, parent="step3", group="rollout"),
            # A Ray worker's span: another process, no rl.iteration of its own, parented through the carrier.
            S("wgen", "rl.grpo.generation", 1, 7, parent="rollout", bucket="productive", process="worker"),
            # A root span with no iteration anywhere still charges the wall clock it overlaps.
            S("stray", "rl.grpo.data_plane", 8, 9.5, bucket="overhead", process="worker"),
        ],
    )
    (it,) = out["iterations"]
    assert it["span_seconds"]["productive"] == 7.0 - 1.0
    assert it["span_seconds"]["overhead"] == 0.0
    assert it["productive_s"] == 7.0 - 1.0
    assert it["overhead_s"] == 9.5 - 8.0


def test_several_step_spans_of_one_iteration_make_their_envelope(tmp_path):
    out = report(
        tmp_path,
        [
            step("s4a", 4, 0, 5, process="trainer"),
            step("s4b", 4, 3, 9, process="collector"),
            S("g", "rl.grpo.generation", 6, 8, parent="s4b", bucket="productive", process="collector"),
        ],
    )
    (it,) = out["iterations"]
    assert (it["wall_s"], it["productive_s"]) == (9.0 - 0.0, 8.0 - 6.0)


@pytest.mark.slow
def test_precedence_decides_instants_where_several_buckets_are_active(tmp_path):
    spans = [
        step("step1", 1, 0, 6),
        S("p", "rl.grpo.policy_training", 0, 4, parent="step1", bucket="productive"),
        S("i", "rl.idle.refit_bubble", 2, 6, parent="step1", bucket="idle"),
    ]
    (default,) = report(tmp_path, spans)["iterations"]
    assert (default["productive_s"], default["idle_s"]) == (4.0 - 0.0, 6.0 - 4.0)
    (flipped,) = report(tmp_path, spans, "--precedence", "idle,productive,overhead,wasted")["iterations"]
    assert (flipped["productive_s"], flipped["idle_s"]) == (2.0 - 0.0, 6.0 - 2.0)
    assert flipped["span_seconds"] == default["span_seconds"]


def test_without_step_spans_windows_are_envelopes_of_each_iteration(tmp_path):
    out = report(
        tmp_path,
        [
            S("a", "rl.grpo.generation", 1, 3, bucket="productive", iteration=1),
            S("b", "rl.grpo.reward", 2, 7, bucket="productive", iteration=1),
            S("c", "rl.grpo.generation", 8, 9, bucket="productive", iteration=2),
            S("w", "rl.wasted.failed_trajectory", 8.5, 10, bucket="wasted", iteration=2),
        ],
    )
    one, two = out["iterations"]
    assert (one["start_ns"], one["end_ns"]) == (1_700_000_001_000_000_000, 1_700_000_007_000_000_000)
    assert one["wall_s"] == 7.0 - 1.0 and one["productive_s"] == 7.0 - 1.0
    assert two["wall_s"] == 10.0 - 8.0
    assert buckets(two) == (9.0 - 8.0, 0.0, 0.0, 10.0 - 9.0, 0.0)


def test_outside_is_the_job_less_every_window(tmp_path):
    out = report(
        tmp_path,
        [
            S("job", "rl.grpo.job", 0, 30, group="job"),
            S("init", "rl.init.total", 0, 3, parent="job", bucket="overhead"),
            step("step1", 1, 5, 10, parent="job"),
            step("step2", 2, 12, 20, parent="job"),
            S("ckpt", "rl.checkpoint.finalize", 19, 24, parent="job", bucket="overhead"),
        ],
    )
    outside = out["outside"]
    assert outside["wall_s"] == (5.0 - 0.0) + (12.0 - 10.0) + (30.0 - 20.0)
    assert outside["overhead_s"] == (3.0 - 0.0) + (24.0 - 20.0)
    assert outside["unaccounted_s"] == outside["wall_s"] - outside["overhead_s"]
    assert set(outside) == {"wall_s", "productive_s", "overhead_s", "idle_s", "wasted_s", "unaccounted_s", "goodput"}
    assert outside["goodput"] == 0.0 / outside["wall_s"]  # nothing productive outside the windows


@pytest.mark.slow
def test_iteration_filters_select_windows(tmp_path):
    spans = [step(f"s{i}", i, 10 * i, 10 * i + 5) for i in range(1, 6)]
    assert [it["iteration"] for it in report(tmp_path, spans, "--iteration", "3")["iterations"]] == [3]
    assert [it["iteration"] for it in report(tmp_path, spans, "--iterations", "2:4")["iterations"]] == [2, 3, 4]
    assert [it["iteration"] for it in report(tmp_path, spans, "--iterations", "4:")["iterations"]] == [4, 5]
    filtered = report(tmp_path, spans, "--iterations", "2:3")
    assert filtered["total"]["wall_s"] == 2 * (5.0 - 0.0)


def test_by_process_charges_each_process_within_the_same_windows(tmp_path):
    out = report(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("a", "rl.grpo.generation", 1, 4, parent="step1", bucket="productive", process="worker-a"),
            S("b", "rl.grpo.generation", 2, 6, parent="step1", bucket="productive", process="worker-b"),
        ],
        "--by",
        "process",
    )
    rows = {it["process"]: it for it in out["iterations"]}
    assert set(rows) == {"worker-a", "worker-b"}
    assert rows["worker-a"]["productive_s"] == 4.0 - 1.0 and rows["worker-a"]["wall_s"] == 10.0
    assert rows["worker-b"]["productive_s"] == 6.0 - 2.0
    assert out["total"]["productive_s"] == 6.0 - 1.0  # the whole-run view is unchanged
    assert {p["process"] for p in out["processes"]} == {"worker-a", "worker-b"}


def test_a_trace_without_iterations_reports_an_empty_list_and_a_note(tmp_path):
    path = write_trace(tmp_path / "run.otlp", [S("x", "rl.startup", 0, 2, group="setup")])
    result = run(["report", str(path), "--format", "json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["iterations"] == []
    assert "no iterations" in result.stderr
    assert json.loads(result.stdout)["outside"]["wall_s"] == 2.0 - 0.0


def test_report_json_has_exactly_the_spec_shape(tmp_path):
    out = report(tmp_path, [step("step1", 1, 0, 1)])
    figures = {"wall_s", "productive_s", "overhead_s", "idle_s", "wasted_s", "unaccounted_s"}
    assert set(out) == {"iterations", "total", "outside", "attempts", "rework", "downtime", "job"}
    row_keys = {"iteration", "start_ns", "end_ns", "goodput", "span_seconds", "outliers"}  # outliers: SPEC 10
    assert set(out["iterations"][0]) == row_keys | figures
    assert set(out["total"]) == {"goodput", "span_seconds"} | figures
    assert set(out["total"]["span_seconds"]) == {"productive", "overhead", "idle", "wasted"}
    assert set(out["rework"]) == set(out["outside"]) == figures | {"goodput"}
    assert set(out["downtime"]) == {"wall_s"}
    assert set(out["job"]) == {"wall_s", "productive_s", "goodput"}
    assert set(out["attempts"][0]) == {
        "run_id", "start_ns", "end_ns", "first_iteration", "last_iteration", "processes", "superseded",
    }  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["table", "csv", "markdown"])
def test_other_formats_carry_the_same_rows(tmp_path, fmt):
    path = write_trace(
        tmp_path / "run.otlp",
        [step("step1", 7, 0, 4), S("g", "rl.grpo.generation", 0, 3, parent="step1", bucket="productive")],
    )
    result = run(["report", str(path), "--format", fmt])
    assert result.exit_code == 0, result.output
    assert "75.0%" in result.stdout if fmt == "table" else "0.75" in result.stdout
    assert "total" in result.stdout and "outside" in result.stdout


def test_report_to_an_output_file(tmp_path):
    path = write_trace(tmp_path / "run.otlp", [step("step1", 1, 0, 1)])
    result = run(["report", str(path), "--format", "json", "--output", str(tmp_path / "out.json")])
    assert result.exit_code == 0 and result.stdout == ""
    assert json.loads((tmp_path / "out.json").read_text())["iterations"][0]["iteration"] == 1


@pytest.mark.slow
def test_a_second_report_on_the_same_files_reads_the_cached_lineage(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_CACHE_DIR", str(tmp_path / "cache"))
    path = write_trace(
        tmp_path / "run.otlp",
        [step("step1", 1, 0, 10), S("g", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive")],
    )
    first = run(["report", str(path), "--format", "json"])
    cached = list((tmp_path / "cache").rglob("*.lineage-*.parquet"))
    assert len(cached) == 1
    second = run(["report", str(path), "--format", "json"])
    assert second.stdout == first.stdout
    assert json.loads(second.stdout)["iterations"][0]["productive_s"] == 5.0 - 1.0
    path.write_bytes(path.read_bytes() + path.read_bytes())  # a changed file is a new set: the lineage is rebuilt
    assert run(["report", str(path), "--format", "json"]).exit_code == 0
    assert len(list((tmp_path / "cache").rglob("*.lineage-*.parquet"))) == 2


# --- zero-length steps ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_zero_length_step_overlaps_nothing_and_its_window_has_no_goodput(tmp_path):
    path = write_trace(
        tmp_path / "run.otlp",
        [
            step("step1", 1, 0, 10),
            S("gen", "rl.grpo.generation", 1, 4, parent="step1", bucket="productive"),
            step("step2", 2, 5, 5),  # inside step 1's window, but zero-length: no stretch is charged twice
        ],
    )
    assert span_rule_findings(path) == []
    one, two = json_report(path)["iterations"]
    assert (one["wall_s"], one["goodput"]) == (10.0 - 0.0, (4.0 - 1.0) / (10.0 - 0.0))
    assert two["wall_s"] == 5.0 - 5.0
    assert two["goodput"] is None  # no wall clock, so no share of it


# --- --by process: every process over every window --------------------------------------------------------------------


@pytest.mark.slow
def test_by_process_keeps_span_seconds_and_covers_every_window_for_every_process(tmp_path):
    """worker-a works in step 1's window, and also on iteration 2 after step 2's window ended (span-seconds of
    iteration 2, but no wall clock in its window); worker-b works in step 2's window only."""
    path = write_trace(
        tmp_path / "run.otlp",
        [
            step("step1", 1, 0, 10),
            step("step2", 2, 10, 20),
            S("a1", "rl.grpo.generation", 1, 4, parent="step1", bucket="productive", process="worker-a"),
            S("a2", "rl.grpo.generation", 21, 24, parent="step2", bucket="productive", process="worker-a"),
            S("b2", "rl.grpo.logprob", 11, 17, parent="step2", bucket="overhead", process="worker-b"),
        ],
    )
    plain = json_report(path)
    out = json_report(path, "--by", "process")
    rows = {(it["iteration"], it["process"]): it for it in out["iterations"]}
    assert set(rows) == {(1, "worker-a"), (2, "worker-a"), (2, "worker-b")}
    assert rows[(2, "worker-a")]["span_seconds"]["productive"] == 24.0 - 21.0
    assert rows[(2, "worker-a")]["productive_s"] == 0.0
    assert rows[(2, "worker-a")]["unaccounted_s"] == 20.0 - 10.0
    totals = {p["process"]: p for p in out["processes"]}
    assert plain["total"]["wall_s"] == (10.0 - 0.0) + (20.0 - 10.0)
    for process in ("worker-a", "worker-b"):
        assert totals[process]["wall_s"] == plain["total"]["wall_s"]
    assert totals["worker-a"]["productive_s"] == 4.0 - 1.0
    assert totals["worker-a"]["unaccounted_s"] == plain["total"]["wall_s"] - (4.0 - 1.0)
    assert totals["worker-a"]["span_seconds"]["productive"] == (4.0 - 1.0) + (24.0 - 21.0)
    assert totals["worker-b"]["overhead_s"] == 17.0 - 11.0
    assert totals["worker-b"]["unaccounted_s"] == plain["total"]["wall_s"] - (17.0 - 11.0)  # window 1 included
    assert totals["worker-b"]["goodput"] == 0.0


# --- which spans make a window ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_step_that_only_inherits_its_iteration_does_not_widen_the_window(tmp_path):
    """A worker's step span (group `step`, no `rl.iteration` of its own) under the driver's step 1 runs past it."""
    path = write_trace(
        tmp_path / "run.otlp",
        [
            step("step1", 1, 0, 10),
            S("wstep", "rl.grpo.step", 2, 14, parent="step1", group="step", process="worker"),
            S("wgen", "rl.grpo.generation", 3, 13, parent="wstep", bucket="productive", process="worker"),
        ],
    )
    out = json_report(path)
    (one,) = out["iterations"]
    assert (one["wall_s"], one["productive_s"]) == (10.0 - 0.0, 10.0 - 3.0)
    assert one["span_seconds"]["productive"] == 13.0 - 3.0  # the worker's span still belongs to iteration 1
    assert out["outside"]["wall_s"] == 14.0 - 10.0
    assert out["outside"]["productive_s"] == 13.0 - 10.0


# --- the report's JSON numbers ----------------------------------------------------------------------------------------


def numbers(value, key: str = ""):
    """Every (key, number) in a JSON value, nested ones included."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from numbers(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from numbers(v, key)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield key, value


def test_seconds_are_exact_to_the_nanosecond(tmp_path):
    """Windows of 0.1 s and 0.2 s: summed as floats, the total would read 0.30000000000000004."""
    path = write_trace(
        tmp_path / "run.otlp",
        [
            S("job", "rl.grpo.job", 0, 1.137898161, group="job"),
            step("step1", 1, 0.1, 0.2, parent="job"),
            step("step2", 2, 0.2, 0.4, parent="job"),
            S("g1", "rl.grpo.generation", 0.1, 0.17, parent="step1", bucket="productive"),
            S("g2", "rl.grpo.generation", 0.2, 0.31, parent="step2", bucket="productive"),
            S("ck", "rl.checkpoint.finalize", 0.4, 1.037898161, parent="job", bucket="overhead"),
        ],
    )
    out = json_report(path, "--by", "process")
    assert out["total"]["wall_s"] == 0.3  # (0.2 - 0.1) + (0.4 - 0.2), in integer nanoseconds
    assert out["total"]["productive_s"] == 0.18  # (0.17 - 0.1) + (0.31 - 0.2)
    assert out["job"]["wall_s"] == 1.137898161
    assert out["outside"]["overhead_s"] == 0.637898161  # 1.037898161 - 0.4
    for key, value in numbers(out):
        if key.endswith("_s") or key in BUCKETS:
            assert isinstance(value, float), key
            assert len(repr(value).partition(".")[2]) <= 9, (key, value)  # no float noise below a nanosecond


def test_no_wall_clock_means_null_goodput_and_float_zeros(tmp_path):
    """A trace without iterations: no window, so the total has no wall clock; `outside` does, and has a goodput."""
    path = write_trace(
        tmp_path / "run.otlp",
        [S("x", "my.service.handle", 0, 2), S("y", "rl.grpo.generation", 0.5, 1.5, bucket="productive")],
    )
    result = invoke(["report", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert '"wall_s": 0.0' in result.stdout and '"wall_s": 0,' not in result.stdout
    out = json.loads(result.stdout)
    assert out["iterations"] == []
    assert out["total"]["goodput"] is None
    assert all(isinstance(out["total"][f], float) and out["total"][f] == 0.0 for f in FIGURES)
    assert out["outside"]["wall_s"] == 2.0 - 0.0
    assert out["outside"]["goodput"] == (1.5 - 0.5) / (2.0 - 0.0)
    assert out["rework"]["goodput"] is None  # rework has outside's keys (SPEC section 7)
    assert out["job"]["goodput"] == 0.0  # the job has wall clock, and none of it productive in a window


def test_an_empty_range_has_null_goodput(tmp_path):
    path = write_trace(
        tmp_path / "run.otlp",
        [step("step1", 1, 0, 10), S("g", "rl.grpo.generation", 1, 4, parent="step1", bucket="productive")],
    )
    out = json_report(path, "--iterations", "5:9")
    assert out["iterations"] == []
    assert (out["total"]["wall_s"], out["total"]["goodput"]) == (0.0, None)
    assert set(out["outside"]) == set(FIGURES) | {"goodput"}


# --- nothing to show, said as such ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_a_trace_of_no_rl_job_says_what_was_read(tmp_path, width):
    write_trace(tmp_path / "api.otlp", [S("a", "http.request", 0, 1), S("b", "db.query", 0.2, 0.5, parent="a")])
    write_trace(tmp_path / "web.otlp", [S("c", "http.request", 2, 3, process="web")])
    for fmt in ("table", "json"):
        result = invoke(["report", str(tmp_path), "-f", fmt], width=width)
        assert result.exit_code == 0
        assert result.stderr.strip() == (
            "note: no iterations: read 3 spans from 2 files, and none carries rl.bucket or rl.iteration (nothing to "
            "charge)"
        )


def test_spans_without_an_iteration_are_named_for_what_they_lack(tmp_path):
    path = write_trace(tmp_path / "run.otlp", [S("a", "rl.grpo.generation", 0, 1, bucket="productive")])
    result = invoke(["report", str(path)], width=80)
    assert result.exit_code == 0
    assert result.stderr.strip() == (
        "note: no iterations: read 1 span from 1 file, and none carries rl.iteration (on a step span or an ancestor)"
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_a_folder_of_empty_files_has_no_spans_not_no_iterations(tmp_path, width):
    (tmp_path / "driver.otlp").write_bytes(b"")
    (tmp_path / "worker.jsonl").write_bytes(b"")
    result = invoke(["report", str(tmp_path), "-f", "json"], width=width)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["iterations"] == []
    notes = result.stderr.strip().splitlines()
    assert notes[-1] == "note: no spans in these traces (2 files, all empty)"
    assert sum("empty file skipped" in note for note in notes) == 2
    assert "no iterations" not in result.stderr
