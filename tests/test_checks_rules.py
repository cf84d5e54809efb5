"""goodput check on hand-built traces: each rule of SPEC section 5 triggered alone, and a clean run that triggers none.
(self-overlap has a file of its own: tests/test_checks_self_overlap.py.)

Every trace is the smallest timeline that makes one accounting mistake; the test names the span the finding must
point at, the span it must relate to, and (for the double-counting rules) the seconds counted twice, derived from
the timeline.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PROPERTY_TESTS, WIDTHS, check, invoke, only_finding, run_json, span_rules_only
from tracebuild import S, run_resource, span_id_of, step, write_trace

FINDING_KEYS = {
    "rule",
    "severity",
    "trace_id",
    "span_id",
    "name",
    "iteration",
    "related_span_id",
    "message",
    "overlap_s",
}


def run(args: list[str]):
    return invoke(args, width=160)


def grpo_step(n: int, t0: float) -> list[S]:
    """One realistic GRPO step of 15 s: rollout umbrella, generation on two Ray workers, reward, logprob, training,
    a refit bubble; every leaf under an umbrella, never under another leaf."""
    s, r = f"step{n}", f"rollout{n}"
    return [
        step(s, n, t0, t0 + 15, parent="job"),
        S(r, "rl.grpo.rollout", t0 + 0, t0 + 8, parent=s, group="rollout", iteration=n),
        # Ray workers: other processes, no rl.iteration of their own, parented through the carrier.
        S(
            f"gen-a{n}",
            "rl.grpo.generation",
            t0 + 1,
            t0 + 6,
            parent=r,
            bucket="productive",
            group="generation",
            process="worker-a",
        ),
        S(
            f"gen-b{n}",
            "rl.grpo.generation",
            t0 + 1,
            t0 + 7,
            parent=r,
            bucket="productive",
            group="generation",
            process="worker-b",
        ),
        S(f"reward{n}", "rl.grpo.reward", t0 + 7, t0 + 8, parent=r, bucket="productive", group="reward", iteration=n),
        S(
            f"lp{n}",
            "rl.grpo.logprob",
            t0 + 8,
            t0 + 10,
            parent=s,
            bucket="overhead",
            group="logprob",
            process="worker-a",
        ),
        S(
            f"train{n}",
            "rl.grpo.policy_training",
            t0 + 10,
            t0 + 14,
            parent=s,
            bucket="productive",
            group="policy_update",
            iteration=n,
        ),
        S(
            f"bubble{n}",
            "rl.idle.refit_bubble",
            t0 + 14,
            t0 + 15,
            parent=s,
            bucket="idle",
            group="efficiency",
            iteration=n,
            attrs={"rl.efficiency.category": "idle/refit_bubble"},
        ),
    ]


def clean_run() -> list[S]:
    return [
        S("job", "rl.grpo.job", 0, 40, group="job"),
        S("startup", "rl.startup", 0, 4, parent="job", group="setup"),
        S("setup-model", "rl.setup.model", 0.5, 3, parent="startup", group="setup"),
        S(
            "init",
            "rl.init.total",
            0,
            4,
            parent="startup",
            group="efficiency",
            attrs={"rl.efficiency.category": "init/total"},
        ),  # emitted unbucketed (SPEC section 1)
        *grpo_step(1, 5),
        *grpo_step(2, 20),
        S("ckpt", "rl.checkpoint.finalize", 35, 38, parent="job", bucket="overhead", group="checkpoint"),
        # The collector loop's waits are unbucketed too, in their own process, concurrent with everything.
        S(
            "wait",
            "rl.idle.refit_event_wait",
            18,
            21,
            group="efficiency",
            process="collector",
            attrs={"rl.efficiency.category": "idle/refit_event_wait"},
        ),
    ]


# --- a clean run --------------------------------------------------------------------------------------------------


def test_a_clean_run_has_no_findings(tmp_path):
    payload = check(tmp_path, clean_run(), expect_exit=0)
    assert payload == {"findings": [], "summary": {"errors": 0, "warnings": 0}}


def test_a_clean_run_table_says_zero_errors_zero_warnings(tmp_path):
    path = write_trace(tmp_path / "run.otlp", clean_run())
    result = run(["check", str(path)])
    assert result.exit_code == 0, result.output
    assert "0 errors, 0 warnings" in result.stdout


# --- nested-bucket ------------------------------------------------------------------------------------------------


def test_nested_bucket_flags_the_inner_span_and_its_bucketed_parent(tmp_path):
    payload = check(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("gen", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive", group="generation"),
            S("detok", "rl.grpo.detokenize", 2, 3, parent="gen", bucket="overhead", group="data_processing"),
        ],
        expect_exit=1,
    )
    finding = only_finding(payload, "nested-bucket")
    assert finding["severity"] == "error"
    assert finding["span_id"] == span_id_of("detok")
    assert finding["related_span_id"] == span_id_of("gen")
    assert finding["name"] == "rl.grpo.detokenize"
    assert finding["iteration"] == 1  # inherited from the step through the generation span
    assert finding["overlap_s"] == 3.0 - 2.0
    assert payload["summary"] == {"errors": 1, "warnings": 0}


def test_nested_bucket_relates_to_the_nearest_bucketed_ancestor_through_unbucketed_ones(tmp_path):
    payload = check(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("train", "rl.grpo.policy_training", 1, 9, parent="step1", bucket="productive"),
            S("mb", "rl.grpo.microbatch", 2, 8, parent="train", group="per_prompt"),  # an umbrella between them
            S("opt", "rl.grpo.optimizer_step", 6, 8, parent="mb", bucket="overhead"),
        ],
        expect_exit=1,
    )
    finding = only_finding(payload, "nested-bucket")
    assert (finding["span_id"], finding["related_span_id"]) == (span_id_of("opt"), span_id_of("train"))
    assert finding["overlap_s"] == 8.0 - 6.0


def test_nested_bucket_three_deep_gives_one_finding_per_inner_span(tmp_path):
    payload = check(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("outer", "rl.grpo.generation", 0, 9, parent="step1", bucket="productive"),
            S("middle", "rl.grpo.data_plane", 1, 6, parent="outer", bucket="overhead"),
            S("inner", "rl.grpo.advantage", 2, 4, parent="middle", bucket="overhead"),
        ],
        expect_exit=1,
    )
    pairs = {(f["span_id"], f["related_span_id"], f["overlap_s"]) for f in payload["findings"]}
    assert {f["rule"] for f in payload["findings"]} == {"nested-bucket"}
    assert pairs == {
        (span_id_of("middle"), span_id_of("outer"), 6.0 - 1.0),
        (span_id_of("inner"), span_id_of("middle"), 4.0 - 2.0),  # the nearest, not the root
    }


def test_nested_bucket_counts_only_the_stretch_inside_the_ancestor(tmp_path):
    # An async child that outlives its parent: only the shared stretch is counted twice.
    payload = check(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("gen", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive"),
            S("tail", "rl.grpo.data_plane", 3, 8, parent="gen", bucket="overhead"),
        ],
    )
    assert only_finding(payload, "nested-bucket")["overlap_s"] == 5.0 - 3.0


@pytest.mark.slow
def test_nested_bucket_across_processes(tmp_path):
    """The driver times a Ray call as productive and the worker times its own work as productive too: the
    worker's span is parented through the carrier, so the same seconds are counted on both sides."""
    payload = check(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("call", "rl.grpo.generation", 1, 9, parent="step1", bucket="productive", group="generation"),
            S(
                "remote",
                "rl.grpo.generation",
                2,
                8.5,
                parent="call",
                bucket="productive",
                group="generation",
                process="worker",
            ),
        ],
        expect_exit=1,
    )
    finding = only_finding(payload, "nested-bucket")  # same name, other process: not a self-overlap
    assert (finding["span_id"], finding["related_span_id"]) == (span_id_of("remote"), span_id_of("call"))
    assert finding["iteration"] == 1
    assert finding["overlap_s"] == 8.5 - 2.0


# --- bucketed-umbrella --------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("group", ["job", "step", "rollout", "model_init", "evaluate", "setup", "per_prompt"])
def test_bucketed_umbrella_by_group(tmp_path, group):
    payload = check(
        tmp_path,
        [S("u", f"rl.grpo.something_{group}", 0, 5, bucket="overhead", group=group, iteration=1)],
        expect_exit=1,
    )
    finding = only_finding(payload, "bucketed-umbrella")
    assert finding["severity"] == "error"
    assert (finding["span_id"], finding["related_span_id"]) == (span_id_of("u"), None)
    assert finding["iteration"] == 1
    assert finding["overlap_s"] is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rl.grpo.step", "rl.dpo.job", "rl.grpo.evaluate", "rl.startup", "rl.setup.x"])
def test_bucketed_umbrella_known_only_by_name(tmp_path, name):
    """Emitters that set no rl.span_group still name their umbrellas the NeMo-RL way."""
    payload = check(
        tmp_path,
        [S("u", name, 0, 5, bucket="productive", iteration=3)],  # no group attribute
        expect_exit=1,
    )
    finding = only_finding(payload, "bucketed-umbrella")
    assert (finding["span_id"], finding["related_span_id"], finding["iteration"]) == (span_id_of("u"), None, 3)
    assert finding["name"] == name


def test_an_umbrella_like_name_under_a_leaf_group_is_a_leaf(tmp_path):
    # rl.span_group says what the span was opened under; the name is only a fallback when it is absent.
    payload = check(tmp_path, [S("x", "rl.setup.x", 0, 5, bucket="overhead", group="checkpoint")], expect_exit=0)
    assert payload["findings"] == []


def test_a_bucketed_umbrella_around_bucketed_leaves_is_also_nested_bucket(tmp_path):
    payload = check(
        tmp_path,
        [
            step("step1", 1, 0, 10, bucket="productive"),
            S("gen", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive"),
        ],
        expect_exit=1,
    )
    rules = [(f["rule"], f["span_id"], f["related_span_id"]) for f in payload["findings"]]
    assert sorted(rules, key=str) == sorted(
        [
            ("nested-bucket", span_id_of("gen"), span_id_of("step1")),
            ("bucketed-umbrella", span_id_of("step1"), None),
        ],
        key=str,
    )


# --- unknown-bucket -----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("bucket", ["useful", "Productive", "idle ", ""])
def test_unknown_bucket(tmp_path, bucket):
    payload = check(
        tmp_path,
        [step("step1", 2, 0, 10), S("g", "rl.grpo.generation", 1, 5, parent="step1", bucket=bucket)],
        expect_exit=1,
    )
    finding = only_finding(payload, "unknown-bucket")
    assert finding["severity"] == "error"
    assert (finding["span_id"], finding["related_span_id"], finding["iteration"]) == (span_id_of("g"), None, 2)
    assert repr(bucket) in finding["message"]


@pytest.mark.slow
def test_an_unknown_bucket_inside_a_bucketed_span_is_not_nested(tmp_path):
    # An unknown bucket is counted nowhere, so it cannot count anything twice.
    payload = check(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("gen", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive"),
            S("odd", "rl.grpo.detok", 2, 3, parent="gen", bucket="useful"),
        ],
    )
    assert only_finding(payload, "unknown-bucket")["span_id"] == span_id_of("odd")


# --- overlapping-steps --------------------------------------------------------------------------------------------


def test_overlapping_steps_warns_on_the_later_step(tmp_path):
    payload = check(tmp_path, [step("step1", 1, 0, 10), step("step2", 2, 8, 20)], expect_exit=0)
    finding = only_finding(payload, "overlapping-steps")
    assert finding["severity"] == "warning"
    assert (finding["span_id"], finding["related_span_id"]) == (span_id_of("step2"), span_id_of("step1"))
    assert finding["iteration"] == 2
    assert "2.000s" in finding["message"]  # 10 - 8
    assert payload["summary"] == {"errors": 0, "warnings": 1}


def test_steps_of_one_iteration_or_back_to_back_do_not_overlap(tmp_path):
    payload = check(
        tmp_path,
        [
            step("s1-trainer", 1, 0, 10, process="trainer"),
            step("s1-collector", 1, 4, 12, process="collector"),  # one iteration: its window is the envelope
            step("s2", 2, 12, 20),  # starts as the envelope ends
        ],
        expect_exit=0,
    )
    assert payload["findings"] == []


def test_steps_known_only_by_name_overlap_too(tmp_path):
    payload = check(
        tmp_path,
        [S("a", "rl.grpo.step", 0, 10, iteration=1), S("b", "rl.grpo.step", 9, 20, iteration=2)],
        expect_exit=0,
    )
    finding = only_finding(payload, "overlapping-steps")
    assert (finding["span_id"], finding["related_span_id"]) == (span_id_of("b"), span_id_of("a"))


# overlapping-steps finds its candidates with a running maximum instead of joining every step with every other:
# held here to the pairwise definition of SPEC section 5 over random steps.
grid = st.integers(0, 24).map(lambda k: k / 2)


@st.composite
def step_sets(draw) -> list[S]:
    """2-7 step spans on a 0.5 s grid, in one or two attempts (processes `a` and `b`), iterations 1-4 (so some
    share one), some zero-length."""
    spans = []
    for i in range(draw(st.integers(2, 7))):
        start, end = sorted(draw(st.lists(grid, min_size=2, max_size=2)))
        process = draw(st.sampled_from(["a", "b"]))
        spans.append(step(f"s{i}", draw(st.integers(1, 4)), start, end, process=process))
    return spans


def expected_overlaps(spans: list[S]) -> dict[str, tuple[str, float]]:
    """SPEC section 5, pairwise: each step overlapped by an earlier step (by start, then span id) of another
    iteration in its attempt -> (the earliest-starting such step's id, seconds counted twice)."""
    steps = [s for s in spans if s.end > s.start]
    out = {}
    for b in steps:
        partners = [
            a for a in steps
            if a.process == b.process and a.iteration != b.iteration and a.start <= b.start < a.end
            and (a.start, a.span_id) < (b.start, b.span_id)
        ]  # fmt: skip
        if partners:
            a = min(partners, key=lambda a: (a.start, a.span_id))
            out[b.span_id] = (a.span_id, min(a.end, b.end) - b.start)
    return out


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=10)
@given(spans=step_sets())
def test_overlapping_steps_are_the_pairs_the_definition_names(tmp_path_factory, spans):
    folder = tmp_path_factory.mktemp("steps")
    resources = {p: run_resource(p, f"job-{p}") for p in ("a", "b")}
    path = write_trace(folder / "steps.otlp", spans, resources=resources)
    payload = run_json(["check", str(path), "--no-cache"])
    found = {
        f["span_id"]: (f["related_span_id"], f["message"])
        for f in payload["findings"] if f["rule"] == "overlapping-steps"
    }  # fmt: skip
    expected = expected_overlaps(spans)
    assert {k: related for k, (related, _) in found.items()} == {k: a for k, (a, _) in expected.items()}
    for span_id, (_, seconds) in expected.items():
        assert f"for {seconds:.3f}s" in found[span_id][1]


# --- orphan-span --------------------------------------------------------------------------------------------------


def _handoff_files(tmp_path):
    """The driver's file holds the step and its rollout; the worker's file a generation parented to the rollout."""
    driver = write_trace(
        tmp_path / "driver.otlp",
        [step("step1", 1, 0, 10), S("rollout", "rl.grpo.rollout", 0, 9, parent="step1", group="rollout")],
    )
    worker = write_trace(
        tmp_path / "worker.jsonl",
        [S("wgen", "rl.grpo.generation", 1, 7, parent="rollout", bucket="productive", process="worker")],
        "jsonl",
    )
    return driver, worker


def test_orphan_span_when_the_parent_file_is_not_given(tmp_path):
    _, worker = _handoff_files(tmp_path)
    result = run(["check", str(worker), "--format", "json"])
    assert result.exit_code == 0, result.output  # a warning only
    payload = span_rules_only(json.loads(result.stdout))
    finding = only_finding(payload, "orphan-span")
    assert finding["severity"] == "warning"
    assert finding["span_id"] == span_id_of("wgen")
    assert finding["related_span_id"] == span_id_of("rollout")  # the parent id no loaded span has
    assert finding["iteration"] is None  # nothing to inherit from
    assert payload["summary"] == {"errors": 0, "warnings": 1}


@pytest.mark.slow
def test_no_orphan_when_the_parent_is_in_another_file_given(tmp_path):
    driver, worker = _handoff_files(tmp_path)
    result = run(["check", str(worker), str(driver), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"findings": [], "summary": {"errors": 0, "warnings": 0}}


@pytest.mark.slow
def test_the_parent_in_another_file_lends_its_iteration(tmp_path):
    driver, worker = _handoff_files(tmp_path)
    write_trace(
        tmp_path / "worker2.jsonl",
        [S("w2", "rl.grpo.generation", 2, 6, parent="rollout", bucket="productive", process="worker-2", iteration=0)],
        "jsonl",
    )
    result = run(["check", str(driver), str(worker), str(tmp_path / "worker2.jsonl"), "--format", "json"])
    finding = only_finding(span_rules_only(json.loads(result.stdout)), "iteration-mismatch")
    assert (finding["span_id"], finding["iteration"]) == (span_id_of("w2"), 0)  # below the step's 1, in another file


# --- iteration-mismatch -------------------------------------------------------------------------------------------


def test_iteration_mismatch_against_the_nearest_ancestor_with_an_iteration(tmp_path):
    payload = check(
        tmp_path,
        [
            step("step2", 2, 0, 10),
            S("rollout", "rl.grpo.rollout", 0, 9, parent="step2", group="rollout"),  # no iteration of its own
            S("gen", "rl.grpo.generation", 1, 7, parent="rollout", bucket="productive", iteration=1),
            S("detail", "rl.grpo.detail", 2, 3, parent="gen"),  # inherits 1: no mismatch of its own
        ],
        expect_exit=0,
    )
    finding = only_finding(payload, "iteration-mismatch")
    assert finding["severity"] == "warning"
    assert finding["span_id"] == span_id_of("gen")
    assert finding["iteration"] == 1  # the span's own
    assert finding["related_span_id"] == span_id_of("step2")  # the nearest ancestor carrying an iteration
    assert "rl.iteration=1" in finding["message"] and "2" in finding["message"]


def test_iteration_mismatch_uses_the_nearest_not_the_root(tmp_path):
    payload = check(
        tmp_path,
        [
            step("step3", 3, 0, 10),
            S("a", "rl.grpo.async_rollout", 0, 9, parent="step3", group="rollout", iteration=2),
            S("b", "rl.grpo.generation", 1, 7, parent="a", bucket="productive", iteration=2),  # agrees with a
        ],
        expect_exit=0,
    )
    assert only_finding(payload, "iteration-mismatch")["span_id"] == span_id_of("a")


# --- output and exit codes ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_check_json_has_exactly_the_spec_shape_with_lowercase_hex_ids(tmp_path):
    spans = [
        step("step1", 1, 0, 10),
        step("step2", 2, 9, 20),
        S("gen", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive"),
        S("inner", "rl.grpo.inner", 2, 3, parent="gen", bucket="productive"),
    ]
    path = write_trace(tmp_path / "run.jsonl", spans, "jsonl")
    # OTLP JSON ids in upper case (hex is case-blind): the output must still be lowercase.
    text = path.read_text()
    for span in spans:
        text = text.replace(span.span_id, span.span_id.upper()).replace(span.trace_id, span.trace_id.upper())
    path.write_text(text)
    result = run(["check", str(path), "--format", "json", "--no-cache"])
    assert result.exit_code == 1, result.output
    assert set(json.loads(result.stdout)) == {"findings", "summary"}
    payload = span_rules_only(json.loads(result.stdout))
    assert payload["summary"] == {"errors": 1, "warnings": 1}
    assert [f["rule"] for f in payload["findings"]] == ["nested-bucket", "overlapping-steps"]  # errors first
    for finding in payload["findings"]:
        assert set(finding) == FINDING_KEYS
        assert re.fullmatch(r"[0-9a-f]{32}", finding["trace_id"])
        assert re.fullmatch(r"[0-9a-f]{16}", finding["span_id"])
        assert re.fullmatch(r"[0-9a-f]{16}", finding["related_span_id"])
        assert finding["trace_id"] == spans[0].trace_id
    nested, overlapping = payload["findings"]
    assert (nested["span_id"], nested["related_span_id"]) == (span_id_of("inner"), span_id_of("gen"))
    assert nested["overlap_s"] == 3.0 - 2.0
    assert overlapping["overlap_s"] is None


@pytest.mark.slow
def test_errors_exit_1_and_warnings_alone_exit_0_in_every_format(tmp_path):
    warning_only = write_trace(tmp_path / "warn.otlp", [step("s1", 1, 0, 10), step("s2", 2, 5, 12)])
    error = write_trace(tmp_path / "err.otlp", [S("x", "rl.grpo.gen", 0, 1, bucket="bogus")])
    for fmt in ("table", "json", "csv", "markdown"):
        assert run(["check", str(warning_only), "--format", fmt]).exit_code == 0
        assert run(["check", str(error), "--format", fmt]).exit_code == 1
    table = run(["check", str(warning_only)])
    # Besides overlapping-steps, each step's window is charged to no bucket at all (mostly-unaccounted).
    assert "overlapping-steps" in table.stdout and f"0 errors, {1 + 2} warnings" in table.stdout
    table = run(["check", str(error), str(warning_only)])
    assert table.exit_code == 1 and f"1 error, {1 + 2} warnings" in table.stdout


def one_clean_step(tmp_path: Path) -> Path:
    return write_trace(
        tmp_path / "clean.otlp",
        [step("s1", 1, 0, 4), S("g", "rl.grpo.generation", 0, 3, parent="s1", bucket="productive")],
    )


CHECK_COLUMNS = ["severity", "rule", "iteration", "name", "span_id", "related_span_id", "message"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("csv", [",".join(CHECK_COLUMNS)]),
        ("markdown", ["| " + " | ".join(CHECK_COLUMNS) + " |", "|---|---|---|---|---|---|---|"]),
        ("json", None),
    ],
)
def test_check_without_findings_still_writes_its_header(tmp_path, fmt, expected):
    result = invoke(["check", str(one_clean_step(tmp_path)), "-f", fmt], width=80)
    assert result.exit_code == 0, result.output
    if expected is None:
        assert json.loads(result.stdout) == {"findings": [], "summary": {"errors": 0, "warnings": 0}}
    else:
        assert result.stdout.splitlines() == expected


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_check_table_without_findings_is_the_summary_line(tmp_path, width):
    result = invoke(["check", str(one_clean_step(tmp_path))], width=width)
    assert result.exit_code == 0 and result.stdout == "0 errors, 0 warnings\n"


@pytest.mark.slow
def test_check_iteration_filter_keeps_that_iterations_findings(tmp_path):
    spans = [
        step("step1", 1, 0, 10),
        step("step2", 2, 10, 20),
        S("a", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive"),
        S("a2", "rl.grpo.inner", 2, 3, parent="a", bucket="productive"),
        S("b", "rl.grpo.generation", 11, 15, parent="step2", bucket="productive"),
        S("b2", "rl.grpo.inner", 12, 13, parent="b", bucket="productive"),
    ]
    assert len(check(tmp_path, spans)["findings"]) == 2
    payload = check(tmp_path, spans, "--iteration", "2", expect_exit=1)
    assert [(f["span_id"], f["iteration"]) for f in payload["findings"]] == [(span_id_of("b2"), 2)]
    assert payload["summary"] == {"errors": 1, "warnings": 0}
