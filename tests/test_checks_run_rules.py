"""The rules about the whole run (SPEC 5): a step whose span was lost with its process (`lost-step`), two runs read
as one (`duplicate-step`, a later attempt starting afresh), nothing read at all (`no-spans`); and the span rules'
edges that cried wolf (an inheriting step span, the async prefetch pattern, an orphan left by a crash)."""

from __future__ import annotations

import json

import pytest

from conftest import invoke, json_report, only_finding, run_json, span_rule_findings
from tracebuild import S, span_id_of, step, write_trace


def resource(process: str, run_id: str | None = None) -> dict:
    out = {"service.name": "toy", "service.instance.id": process, "host.name": "h", "process.pid": 1}
    if run_id is not None:
        out["goodput.run.id"] = run_id
    return out


def crashed_in_step_3(tmp_path):
    """Steps 1, 2 and 4 have their step spans; step 3's was lost with its process, but a worker wrote the
    generation it ran under that step (its own `rl.iteration = 3`, its parent never written)."""
    spans = [
        step("s1", 1, 0, 10),
        S("g1", "rl.grpo.generation", 1, 9, parent="s1", bucket="productive"),
        step("s2", 2, 10, 20),
        S("g2", "rl.grpo.generation", 11, 19, parent="s2", bucket="productive"),
        S(
            "g3",
            "rl.grpo.generation",
            21,
            28,
            parent="s3",
            bucket="productive",
            iteration=3,
            process="worker",
            trace="t1",
        ),  # fmt: skip
        step("s4", 4, 30, 40, trace="t2"),
        S("g4", "rl.grpo.generation", 31, 39, parent="s4", bucket="productive", trace="t2"),
    ]
    return write_trace(tmp_path / "run.otlp", spans)


def test_a_step_whose_span_was_lost_is_a_lost_step_warning_on_its_earliest_span(tmp_path):
    path = crashed_in_step_3(tmp_path)
    findings = [f for f in span_rule_findings(path) if f["rule"] == "lost-step"]
    assert [(f["iteration"], f["span_id"], f["severity"]) for f in findings] == [(3, span_id_of("g3"), "warning")]
    assert "not its step span" in findings[0]["message"]


def test_the_report_says_which_iterations_lost_their_step_span_under_the_table(tmp_path):
    path = crashed_in_step_3(tmp_path)
    result = invoke(["report", str(path)])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert notes == [
        "note: iteration 3: spans were read but not the step span (its process ended before writing it), so that "
        "time is counted outside; `goodput check` lists it as lost-step"
    ]
    payload = json_report(path)
    assert [row["iteration"] for row in payload["iterations"]] == [1, 2, 4]
    assert payload["outside"]["productive_s"] == 28.0 - 21.0  # step 3's generation, in no window


def test_the_last_step_in_progress_is_not_a_lost_step(tmp_path):
    """A crash loses the step in progress: an iteration above every step span read is not flagged."""
    spans = [
        step("s1", 1, 0, 10),
        S("g1", "rl.grpo.generation", 1, 9, parent="s1", bucket="productive"),
        S("g2", "rl.grpo.generation", 11, 19, parent="s2", bucket="productive", iteration=2),
    ]
    path = write_trace(tmp_path / "run.otlp", spans)
    assert "lost-step" not in {f["rule"] for f in span_rule_findings(path)}


def two_runs_without_run_ids(tmp_path):
    """A sync run, then an async one, into one folder, neither with a run id: one attempt, every step twice."""
    sync = [step(f"a{i}", i, 10 * i, 10 * i + 8, trace="a") for i in (1, 2, 3)]
    later = [step(f"b{i}", i, 100 + 10 * i, 100 + 10 * i + 8, process="driver2", trace="b") for i in (1, 2, 3)]
    write_trace(tmp_path / "run" / "sync.otlp", sync, resources={"driver": resource("driver")})
    write_trace(tmp_path / "run" / "async.otlp", later, resources={"driver2": resource("driver2")})
    return tmp_path / "run"


def test_two_runs_without_run_ids_are_a_duplicate_step_for_each_iteration(tmp_path):
    path = two_runs_without_run_ids(tmp_path)
    findings = [f for f in span_rule_findings(path) if f["rule"] == "duplicate-step"]
    assert [(f["iteration"], f["span_id"], f["related_span_id"]) for f in findings] == [
        (i, span_id_of(f"b{i}", "b"), span_id_of(f"a{i}", "a")) for i in (1, 2, 3)
    ]
    result = invoke(["report", str(path)])
    assert "note: 3 iterations (1-3) have two step spans that do not overlap" in result.stderr


def test_a_later_attempt_that_starts_at_the_first_ones_first_iteration_is_said_to_be_a_fresh_start(tmp_path):
    first = [step(f"a{i}", i, 10 * i, 10 * i + 8, trace="a") for i in (1, 2, 3)]
    second = [step(f"b{i}", i, 100 + 10 * i, 100 + 10 * i + 8, process="d2", trace="b") for i in (1, 2)]
    write_trace(tmp_path / "run" / "a.otlp", first, resources={"driver": resource("driver", "sync")})
    write_trace(tmp_path / "run" / "b.otlp", second, resources={"d2": resource("d2", "async")})
    result = invoke(["report", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert (
        'note: attempt "async" starts at iteration 1, at or below attempt "sync"\'s first (1): a new job, or a restart '
        "from nothing, in the same folder?"
    ) in result.stderr
    assert "--attempt ID" in result.stderr
    resumed = [step(f"b{i}", i, 100 + 10 * i, 100 + 10 * i + 8, process="d2", trace="b") for i in (3, 4)]
    write_trace(tmp_path / "run" / "b.otlp", resumed, resources={"d2": resource("d2", "async")})
    assert "a new job" not in invoke(["report", str(tmp_path / "run")]).stderr  # a resumption starts past 1


def test_check_strict_on_a_folder_of_empty_files_fails_with_no_spans(tmp_path):
    for name in ("a.otlp", "b.jsonl"):
        (tmp_path / "run").mkdir(exist_ok=True)
        (tmp_path / "run" / name).write_bytes(b"")
    payload = run_json(["check", str(tmp_path / "run")], expect_exit=0)
    assert only_finding(payload, "no-spans")["span_id"] == ""
    assert invoke(["check", str(tmp_path / "run"), "--strict"]).exit_code == 1


def test_a_step_span_that_only_inherits_its_iteration_overlaps_no_step(tmp_path):
    """SPEC 4: a step span without an `rl.iteration` of its own makes no window, so it charges nothing twice."""
    spans = [
        step("s1", 1, 0, 10),
        S("inner", "rl.grpo.step", 5, 15, parent="s1", group="step"),  # inherits iteration 1, runs past its end
        step("s2", 2, 10, 20),
    ]
    path = write_trace(tmp_path / "run.otlp", spans)
    assert "overlapping-steps" not in {f["rule"] for f in span_rule_findings(path)}
    spans[1] = S("inner", "rl.grpo.step", 5, 15, parent="s1", group="step", iteration=3)  # its own: a window
    path = write_trace(tmp_path / "run.otlp", spans)
    assert "overlapping-steps" in {f["rule"] for f in span_rule_findings(path)}


def test_the_async_prefetch_pattern_is_not_an_iteration_mismatch_but_a_leaked_scope_is(tmp_path):
    """`with iteration_scope(step + 1): dispatch(...)` inside step N files the next step's generation (higher: not
    flagged); a span under step N saying N - 1 is work filed under a step that had ended."""
    spans = [
        step("s2", 2, 0, 10),
        S("prefetch", "rl.grpo.generation", 5, 9, parent="s2", bucket="productive", iteration=3),
        S("leaked", "rl.grpo.logprob", 2, 4, parent="s2", bucket="overhead", iteration=1),
    ]
    path = write_trace(tmp_path / "run.otlp", spans)
    mismatches = [f for f in span_rule_findings(path) if f["rule"] == "iteration-mismatch"]
    assert [f["span_id"] for f in mismatches] == [span_id_of("leaked")]


def test_an_orphan_whose_trace_has_no_root_says_its_parent_was_open_when_the_process_ended(tmp_path):
    spans = [
        step("s1", 1, 0, 10),
        S("g1", "rl.grpo.generation", 1, 9, parent="s1", bucket="productive"),
        S("after", "rl.grpo.generation", 11, 19, parent="s2", bucket="productive", trace="crashed"),
    ]
    path = write_trace(tmp_path / "run.otlp", spans)
    orphans = [f for f in span_rule_findings(path) if f["rule"] == "orphan-span"]
    assert len(orphans) == 1
    assert "still open when its process ended" in orphans[0]["message"]
    rooted = [*spans[:2], S("lost", "rl.grpo.reward", 2, 3, parent="nowhere")]
    path = write_trace(tmp_path / "run.otlp", rooted)
    orphans = [f for f in span_rule_findings(path) if f["rule"] == "orphan-span"]
    assert "a lost span or a broken trace-context hand-off" in orphans[0]["message"]


@pytest.mark.parametrize("typo, hint", [("generaton", "generation"), ("chekpoint", "checkpoint")])
def test_an_expected_group_that_is_a_typo_names_the_nearest_group_in_its_warnings(tmp_path, typo, hint):
    """A group goodput does not know may be a foreign emitter's own, so it is looked for (and missed) all the same;
    each warning says which known group it is probably a typo of."""
    path = write_trace(tmp_path / "run.otlp", [step("s1", 1, 0, 10), step("s2", 2, 10, 20)])
    findings = run_json(["check", str(path), "--expect", typo], expect_exit=0)["findings"]
    missing = [f for f in findings if f["rule"] == "missing-group"]
    assert len(missing) == 2
    assert all(f"(did you mean '{hint}'?" in f["message"] for f in missing)
    known = run_json(["check", str(path), "--expect", hint], expect_exit=0)["findings"]
    assert not any("did you mean" in f["message"] for f in known)


def test_findings_are_sorted_by_iteration_then_start(tmp_path):
    spans = [step(f"s{i}", i, 10 * i, 10 * i + 8) for i in (1, 2, 3, 4)]
    for i in (4, 3, 2, 1):  # nested bucketed pairs, written in reverse
        spans.append(S(f"o{i}", "outer", 10 * i + 1, 10 * i + 7, parent=f"s{i}", bucket="overhead"))
        spans.append(S(f"n{i}", "inner", 10 * i + 2, 10 * i + 3, parent=f"o{i}", bucket="productive"))
    path = write_trace(tmp_path / "run.otlp", spans)
    result = invoke(["check", str(path), "--format", "json"])
    findings = json.loads(result.stdout)["findings"]
    nested = [f["iteration"] for f in findings if f["rule"] == "nested-bucket"]
    assert nested == [1, 2, 3, 4]
