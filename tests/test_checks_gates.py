"""`goodput check` as a gate (SPEC section 10): the window rules no-iterations, mostly-unaccounted and missing-group,
`--strict`, `--expect`, and the table that groups findings of one rule and span name; and the report's own gate,
`--fail-under`.

Each trace is a hand-made timeline; the expected seconds, shares and iteration ranges keep their derivation from it.
"""

from __future__ import annotations

import csv
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cli
from conftest import PROPERTY_TESTS, invoke
from tracebuild import S, span_id_of, step, steps_lasting, write_trace

WINDOW_RULES = ["no-iterations", "mostly-unaccounted", "missing-group"]


def check_json(path, *extra: str, expect_exit: int = 0) -> dict:
    result = invoke(["check", str(path), "--format", "json", *extra])
    assert result.exit_code == expect_exit, result.output
    return json.loads(result.stdout)


def of_rule(payload: dict, rule: str) -> list[dict]:
    return [f for f in payload["findings"] if f["rule"] == rule]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the boxed table in `text`, one per row (a message folded onto more lines is left out)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("│"):
            cells = [cell.strip() for cell in line.strip("│").split("│")]
            if cells[0]:
                rows.append(cells)
    return rows


def gen(label: str, start: float, end: float, parent: str, **kw) -> S:
    return S(label, "rl.grpo.generation", start, end, parent=parent, bucket="productive", group="generation", **kw)


# --- the rules' table -----------------------------------------------------------------------------------------------


def test_the_window_rules_are_warnings_after_overlapping_attempts_in_spec_order():
    from rollup.checks.findings import RULES

    rules = list(RULES)
    assert rules[rules.index("overlapping-attempts") + 1 :] == WINDOW_RULES
    assert all(RULES[rule] == "warning" for rule in WINDOW_RULES)


# --- mostly-unaccounted ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_window_60_percent_unaccounted_is_flagged_and_one_50_percent_is_not(tmp_path):
    path = write_trace(
        tmp_path / "run.otlp",
        [
            step("step1", 1, 0, 10),
            gen("g1", 0, 4, "step1"),  # 10 - 4 = 6 s of 10 charged to no bucket: 60%
            step("step2", 2, 10, 20),
            gen("g2", 10, 15, "step2"),  # 20 - 15 = 5 s of 10: exactly half, not more
        ],
    )
    payload = check_json(path)
    (finding,) = payload["findings"]
    assert finding["rule"] == "mostly-unaccounted" and finding["severity"] == "warning"
    assert (finding["trace_id"], finding["span_id"]) == (step("step1", 1, 0, 10).trace_id, span_id_of("step1"))
    assert (finding["name"], finding["iteration"], finding["related_span_id"]) == ("rl.grpo.step", 1, None)
    assert f"{10.0 - 4.0:.3f}s of its {10.0 - 0.0:.3f}s window ({(10 - 4) / 10:.1%})" in finding["message"]
    assert payload["summary"] == {"errors": 0, "warnings": 1}
    # The report agrees: window 1's unaccounted seconds are more than half its wall clock, window 2's exactly half.
    rows = json.loads(invoke(["report", str(path), "-f", "json"]).stdout)["iterations"]
    assert [(r["unaccounted_s"], r["wall_s"]) for r in rows] == [(10.0 - 4.0, 10.0), (20.0 - 15.0, 10.0)]


def test_a_window_without_a_step_span_is_flagged_on_no_span(tmp_path):
    """No step span: window 1 is the envelope [0, 10] of the spans of iteration 1; 2 s of it are bucketed."""
    path = write_trace(
        tmp_path / "run.otlp",
        [
            S("loop", "rl.grpo.rollout", 0, 10, group="rollout", iteration=1),
            S("g", "rl.grpo.generation", 1, 3, parent="loop", bucket="productive", group="generation"),
        ],
    )
    (finding,) = check_json(path)["findings"]
    assert finding["rule"] == "mostly-unaccounted"
    assert (finding["trace_id"], finding["span_id"], finding["name"], finding["iteration"]) == ("", "", "", 1)
    assert f"{10.0 - 2.0:.3f}s of its {10.0:.3f}s window" in finding["message"]


def test_a_bucketed_span_of_another_process_and_iteration_covers_the_window_as_the_report_charges_it(tmp_path):
    """Window 2 [10, 20] holds no span of iteration 2 but worker-a's iteration-1 tail 10-18: 2 s unaccounted."""
    path = write_trace(
        tmp_path / "run.otlp",
        [
            step("step1", 1, 0, 10),
            gen("g1", 0, 18, "step1", process="worker-a"),
            step("step2", 2, 10, 20),
        ],
    )
    assert check_json(path)["findings"] == []


# --- no-iterations --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_trace_with_no_iteration_is_one_warning_on_no_span(tmp_path):
    path = write_trace(
        tmp_path / "run.otlp",
        [
            S("job", "rl.grpo.job", 0, 10, group="job"),
            S("g", "rl.grpo.generation", 1, 5, parent="job", bucket="productive", group="generation"),
            S("t", "rl.grpo.policy_training", 5, 9, parent="job", bucket="productive", group="policy_update"),
        ],
    )
    payload = check_json(path)
    (finding,) = payload["findings"]
    assert finding["rule"] == "no-iterations" and finding["severity"] == "warning"
    assert (finding["trace_id"], finding["span_id"], finding["name"], finding["iteration"]) == ("", "", "", None)
    assert finding["related_span_id"] is None
    assert "3 spans" in finding["message"] and "iteration_scope" in finding["message"]
    assert payload["summary"] == {"errors": 0, "warnings": 1}
    check_json(path, "--strict", expect_exit=1)


def test_an_iteration_inherited_from_an_ancestor_is_an_iteration(tmp_path):
    path = write_trace(
        tmp_path / "run.otlp",
        [
            S("outer", "rl.grpo.rollout", 0, 10, group="rollout", iteration=4),
            S("g", "rl.grpo.generation", 0, 10, parent="outer", bucket="productive", group="generation"),
        ],
    )
    assert check_json(path, "--strict")["findings"] == []


# --- missing-group --------------------------------------------------------------------------------------------------


def three_steps(tmp_path):
    """Three steps of 10 s, generation and reward in each but reward missing from step 2. Step 2 holds a rollout
    umbrella (unbucketed), a reward that ends exactly where step 2 starts, and a zero-length reward inside it:
    neither of the last two is active in the window (SPEC section 4)."""
    spans = []
    for n, t0 in ((1, 0), (2, 10), (3, 20)):
        spans += [step(f"step{n}", n, t0, t0 + 10), gen(f"g{n}", t0, t0 + 8, f"step{n}")]
        if n != 2:
            spans.append(S(f"r{n}", "rl.grpo.reward", t0 + 8, t0 + 10, parent=f"step{n}", bucket="productive",
                           group="reward"))  # fmt: skip
    spans += [
        S("roll2", "rl.grpo.rollout", 10, 18, parent="step2", group="rollout"),
        S("r2-point", "rl.grpo.reward", 15, 15, parent="step2", bucket="productive", group="reward"),
    ]
    return write_trace(tmp_path / "run.otlp", spans)


@pytest.mark.slow
def test_a_group_missing_from_one_window_of_three(tmp_path):
    path = three_steps(tmp_path)
    assert check_json(path)["findings"] == []  # without --expect, no missing-group
    payload = check_json(path, "--expect", "generation,reward,rollout")
    missing = of_rule(payload, "missing-group")
    assert [(f["iteration"], f["span_id"], f["name"]) for f in missing] == [
        (1, span_id_of("step1"), "rl.grpo.step"),  # rollout: only step 2 has one
        (2, span_id_of("step2"), "rl.grpo.step"),  # reward: r1 ends at 10, where the window starts; r2 is a point
        (3, span_id_of("step3"), "rl.grpo.step"),  # rollout
    ]
    assert [("reward" in f["message"], "rollout" in f["message"]) for f in missing] == [
        (False, True), (True, False), (False, True),
    ]  # fmt: skip
    assert all(f["severity"] == "warning" and f["related_span_id"] is None for f in missing)
    assert payload["summary"] == {"errors": 0, "warnings": 3}


@pytest.mark.slow
def test_expect_takes_names_in_any_case_repeated_and_unknown_ones(tmp_path):
    path = three_steps(tmp_path)
    comma = check_json(path, "--expect", "generation,reward")
    assert [(f["rule"], f["iteration"]) for f in comma["findings"]] == [("missing-group", 2)]
    assert check_json(path, "--expect", " Generation ", "--expect", "REWARD,reward") == comma
    # A group these traces never use is every window's finding, not an error: other emitters name their own.
    unknown = check_json(path, "--expect", "my_sampler")
    assert [(f["rule"], f["iteration"]) for f in unknown["findings"]] == [("missing-group", n) for n in (1, 2, 3)]


@pytest.mark.parametrize("value", ["", ",", " , "])
def test_an_empty_expect_is_a_bad_option_value(tmp_path, value):
    result = invoke(["check", str(three_steps(tmp_path)), "--expect", value])
    assert result.exit_code == 2
    assert "--expect" in result.output and "at least one span group" in result.output
    assert "Traceback" not in result.output


# --- --attempt and --iteration ---------------------------------------------------------------------------------------


def resource(run_id: str) -> dict:
    return {"service.name": "toy", "service.instance.id": "driver", "host.name": "h", "process.pid": 1,
            "goodput.run.id": run_id}  # fmt: skip


def restarted(tmp_path):
    """Attempt a: step 1 covered, step 2 begun and never charged (the crash). Attempt b redoes step 2, covered."""
    a = [step("step1", 1, 0, 10, trace="a"), gen("g1", 0, 10, "step1", trace="a"), step("step2", 2, 10, 20, trace="a")]
    b = [step("step2", 2, 30, 40, trace="b"), gen("g2", 30, 40, "step2", trace="b")]
    write_trace(tmp_path / "run" / "a.otlp", a, resources={"driver": resource("run-a")})
    write_trace(tmp_path / "run" / "b.otlp", b, resources={"driver": resource("run-b")})
    return tmp_path / "run"


@pytest.mark.slow
def test_the_window_rules_read_the_reports_rows_and_respect_attempt(tmp_path):
    path = restarted(tmp_path)
    assert check_json(path, "--expect", "generation")["findings"] == []  # row 2 is b's window, covered
    alone = check_json(path, "--attempt", "run-a", "--expect", "generation")
    assert [(f["rule"], f["span_id"]) for f in alone["findings"]] == [
        ("mostly-unaccounted", span_id_of("step2", "a")), ("missing-group", span_id_of("step2", "a")),
    ]  # fmt: skip


@pytest.mark.slow
def test_the_iteration_filter_keeps_the_window_findings_of_those_iterations(tmp_path):
    path = three_steps(tmp_path)
    payload = check_json(path, "--expect", "rollout", "--iterations", "2:3")
    assert [(f["rule"], f["iteration"]) for f in payload["findings"]] == [("missing-group", 3)]
    # no-iterations has no iteration: a filter leaves it out.
    bare = write_trace(tmp_path / "bare.otlp", [S("x", "rl.grpo.generation", 0, 1, bucket="productive")])
    result = invoke(["check", str(bare), "-f", "json", "--iterations", "1:"])
    assert json.loads(result.stdout)["findings"] == [] and "no iteration" in result.stderr


# --- --strict -------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_strict_makes_warnings_exit_1_in_every_format(tmp_path):
    warned = three_steps(tmp_path)
    clean = write_trace(tmp_path / "clean.otlp", [step("s", 1, 0, 10), gen("g", 0, 10, "s")])
    erred = write_trace(tmp_path / "err.otlp", [step("s", 1, 0, 10), gen("g", 0, 10, "s"),
                                                S("x", "rl.grpo.x", 1, 2, parent="g", bucket="overhead")])  # fmt: skip
    for fmt in ("table", "json", "csv", "markdown"):
        assert invoke(["check", str(clean), "--strict", "-f", fmt]).exit_code == 0
        assert invoke(["check", str(warned), "--expect", "reward", "-f", fmt]).exit_code == 0
        assert invoke(["check", str(warned), "--expect", "reward", "--strict", "-f", fmt]).exit_code == 1
        assert invoke(["check", str(erred), "-f", fmt]).exit_code == 1
        assert invoke(["check", str(erred), "--strict", "-f", fmt]).exit_code == 1


def test_the_help_says_what_exit_1_means():
    text = " ".join(invoke(["--help"], width=200).stdout.split())
    gate = "1 a gate failed (check found errors, or warnings with --strict; report --fail-under; diff --fail-over)"
    assert gate in text
    text = invoke(["check", "--help"], width=200).stdout
    assert "--strict" in text and "--expect" in text and "--all" in text


# --- the grouped table ----------------------------------------------------------------------------------------------


def buggy(tmp_path):
    """A detokenize span nested in generation in steps 2-5 (nested-bucket, 4 findings), a reward nested in one
    step (1 finding), and a lost parent (orphan-span, no iteration)."""
    spans = []
    for n in range(1, 6):
        t0 = 10.0 * n
        spans += [step(f"step{n}", n, t0, t0 + 10), gen(f"g{n}", t0, t0 + 10, f"step{n}")]
        if n >= 2:
            spans.append(S(f"d{n}", "rl.grpo.detokenize", t0 + 1, t0 + 2, parent=f"g{n}", bucket="overhead"))
    spans += [
        S("r3", "rl.grpo.reward", 33, 34, parent="g3", bucket="productive"),
        S("lost", "rl.grpo.logprob", 1, 2, parent="never-written", bucket="overhead"),
    ]
    return write_trace(tmp_path / "run.otlp", spans)


@pytest.mark.slow
def test_the_table_has_a_line_per_rule_and_name_with_its_count_and_iterations(tmp_path):
    path = buggy(tmp_path)
    findings = check_json(path, expect_exit=1)["findings"]
    assert len(findings) == 4 + 1 + 1
    result = invoke(["check", str(path)], width=200)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert [c.strip() for c in lines[1].strip("┃").split("┃")] == [
        "severity", "rule", "name", "count", "iterations", "span_id", "message",
    ]  # fmt: skip
    rows = table_rows(result.stdout)
    assert [row[:6] for row in rows] == [
        ["error", "nested-bucket", "rl.grpo.detokenize", str(4), "2-5", span_id_of("d2")],  # the earliest one
        ["error", "nested-bucket", "rl.grpo.reward", str(1), "3", span_id_of("r3")],
        ["warning", "orphan-span", "rl.grpo.logprob", str(1), "", span_id_of("lost")],
    ]
    first_d2 = next(f for f in findings if f["span_id"] == span_id_of("d2"))
    assert rows[0][6] in first_d2["message"]  # its message, folded from the first line on
    assert lines[-1] == "5 errors, 1 warning"


@pytest.mark.slow
def test_missing_group_lines_are_one_per_group(tmp_path):
    """One rule and span name (the step's) but two groups: two lines, so no group hides behind the other; in the
    order their first findings come (window 1 lacks a rollout, window 2 a reward)."""
    result = invoke(["check", str(three_steps(tmp_path)), "--expect", "reward,rollout"], width=200)
    rows = table_rows(result.stdout)
    assert [row[:5] for row in rows] == [
        ["warning", "missing-group", "rl.grpo.step", str(2), "1-3"],  # rollout: steps 1 and 3
        ["warning", "missing-group", "rl.grpo.step", str(1), "2"],  # reward
    ]
    assert "rollout" in rows[0][6] and "reward" in rows[1][6]


@pytest.mark.slow
def test_all_json_csv_and_markdown_list_each_finding(tmp_path):
    path = buggy(tmp_path)
    findings = check_json(path, expect_exit=1)["findings"]
    each = invoke(["check", str(path), "--all"], width=200)
    assert [row[4] for row in table_rows(each.stdout)] == [f["span_id"] for f in findings]
    assert each.stdout.splitlines()[-1] == "5 errors, 1 warning"
    text = invoke(["check", str(path), "-f", "csv"]).stdout
    assert [row["span_id"] for row in csv.DictReader(io.StringIO(text))] == [f["span_id"] for f in findings]
    markdown = invoke(["check", str(path), "-f", "markdown"]).stdout.splitlines()
    assert len(markdown) == 2 + len(findings)
    assert all(f["span_id"] in line for f, line in zip(findings, markdown[2:], strict=True))


@pytest.mark.slow
def test_the_grouped_table_fits_80_columns_with_counts_and_ranges_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(cli.shell, "terminal_width", lambda: 80)
    path = buggy(tmp_path)
    for extra in ([], ["--all"], ["--expect", "data_processing,policy_update"]):
        result = invoke(["check", str(path), *extra], width=80)
        assert all(len(line) <= 80 for line in result.stdout.splitlines()), result.stdout
    result = invoke(["check", str(path)], width=80)
    rows = table_rows(result.stdout)
    assert [row[1:] for row in rows] == [
        ["error", "nested-bucket", "rl.grpo.detokenize", "4", "2-5"],
        ["error", "nested-bucket", "rl.grpo.reward", "1", "3"],
        ["warning", "orphan-span", "rl.grpo.logprob", "1", ""],
    ]
    assert f"1. span_id: {span_id_of('d2')}" in result.stdout  # the example and its message below the table


# --- the rule against the report ------------------------------------------------------------------------------------


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=8)
@given(st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10)), min_size=1, max_size=4))
def test_mostly_unaccounted_flags_exactly_the_report_rows_more_than_half_unaccounted(tmp_path_factory, covered):
    """Steps of 10 s, each with a productive span [a, b) inside it (none when a >= b)."""
    spans = []
    for n, (a, b) in enumerate(covered, 1):
        t0 = 10 * n
        spans.append(step(f"s{n}", n, t0, t0 + 10))
        if a < b:
            spans.append(gen(f"g{n}", t0 + a, t0 + b, f"s{n}"))
    path = write_trace(tmp_path_factory.mktemp("run") / "run.otlp", spans)
    rows = json.loads(invoke(["report", str(path), "-f", "json"]).stdout)["iterations"]
    flagged = [f["iteration"] for f in check_json(path)["findings"]]
    assert flagged == [r["iteration"] for r in rows if r["unaccounted_s"] > 0.5 * r["wall_s"]]
    assert flagged == [n for n, (a, b) in enumerate(covered, 1) if 10 - max(b - a, 0) > 5]


# --- the report's gate: --fail-under ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("gate", "code"), [("0.8", 0), ("80%", 0), ("0.81", 1), ("81%", 1), ("0", 0)])
def test_fail_under_fails_after_printing_when_the_total_goodput_is_below(tmp_path, gate, code):
    path = write_trace(tmp_path / "run.trace", steps_lasting([1.0, 2.0], gen_share=0.8))  # goodput 0.8
    result = invoke(["report", str(path), "--fail-under", gate, "--format", "json"])
    assert result.exit_code == code, result.output
    assert json.loads(result.stdout)["total"]["goodput"] == pytest.approx(0.8)
    if code:
        assert "total goodput 80.00% is below --fail-under" in result.stderr


@pytest.mark.parametrize("gate", ["60", "1.5", "-1%", "most", "120%"])
def test_fail_under_refuses_values_that_are_not_a_share(tmp_path, gate):
    path = write_trace(tmp_path / "run.trace", steps_lasting([1.0]))
    result = invoke(["report", str(path), "--fail-under", gate])
    assert result.exit_code == 2 and "--fail-under" in result.output
    if gate == "60":
        assert "60%" in result.output  # the hint: write 60% for sixty percent


def test_fail_under_fails_a_run_with_no_goodput_to_measure(tmp_path):
    path = write_trace(tmp_path / "run.trace", [S("x", "work", 0, 1, bucket="productive")])  # no iteration
    result = invoke(["report", str(path), "--fail-under", "0.1"])
    assert result.exit_code == 1
    assert "no iteration was measured" in result.stderr
