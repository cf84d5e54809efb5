"""self-overlap (SPEC section 5): two instances of one span name in one process, bucketed, overlapping in time, and
neither the ancestor of the other: their time is counted twice.

Hand-built traces give each case alone (concurrent instances, the same name in two processes, back to back, nested
in a same-name parent, at different depths of bucketed ancestry, past an ancestor); every finding names the span it
points at, the span it relates to and the seconds counted twice, derived from the timeline. The one sweep over
every group that finds them is held to the pairwise definition over random spans, and swept in runs of a few
instances as a long trace is.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PROPERTY_TESTS, check, only_finding, run_json, span_rule_findings
from rollup.checks.span_rules import self_overlap_findings
from rollup.store.span_store import open_store
from tracebuild import S, span_id_of, step, write_trace

pytestmark = [pytest.mark.slow]


def rules(findings: list[dict]) -> list[tuple[str, str]]:
    return sorted((f["rule"], f["span_id"]) for f in findings)


# --- one process, one name --------------------------------------------------------------------------------------------


def test_self_overlap_flags_concurrent_instances_in_one_process(tmp_path):
    """Three asyncio tasks each open rl.grpo.reward under the step: one process, one name, overlapping."""
    payload = check(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("r1", "rl.grpo.reward", 1, 4, parent="step1", bucket="productive", group="reward"),
            S("r2", "rl.grpo.reward", 2, 5, parent="step1", bucket="productive", group="reward"),
            S("r3", "rl.grpo.reward", 3, 6, parent="step1", bucket="productive", group="reward"),
        ],
        expect_exit=1,
    )
    findings = payload["findings"]
    assert {f["rule"] for f in findings} == {"self-overlap"}
    assert all(f["severity"] == "error" and f["iteration"] == 1 for f in findings)
    by_span = {f["span_id"]: f for f in findings}
    # The first task starts alone; each later one overlaps the earlier tasks still running when it starts.
    assert set(by_span) == {span_id_of("r2"), span_id_of("r3")}
    assert by_span[span_id_of("r2")]["related_span_id"] == span_id_of("r1")
    assert by_span[span_id_of("r2")]["overlap_s"] == 4.0 - 2.0  # r1 ends at 4
    # r3 overlaps both earlier tasks; it relates to the one reaching furthest into it (r2, until 5).
    assert by_span[span_id_of("r3")]["related_span_id"] == span_id_of("r2")
    assert by_span[span_id_of("r3")]["overlap_s"] == 5.0 - 3.0
    # Together the findings name every second counted more than once: span-seconds less their union.
    assert sum(f["overlap_s"] for f in findings) == 3 * 3.0 - (6.0 - 1.0)
    assert payload["summary"] == {"errors": 2, "warnings": 0}


def test_self_overlap_ignores_the_same_name_in_two_processes(tmp_path):
    payload = check(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("ra", "rl.grpo.reward", 1, 4, parent="step1", bucket="productive", process="worker-a"),
            S("rb", "rl.grpo.reward", 2, 5, parent="step1", bucket="productive", process="worker-b"),
        ],
        expect_exit=0,
    )
    assert payload["findings"] == []


def test_self_overlap_ignores_back_to_back_instances(tmp_path):
    payload = check(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("r1", "rl.grpo.reward", 1, 3, parent="step1", bucket="productive"),
            S("r2", "rl.grpo.reward", 3, 5, parent="step1", bucket="productive"),  # starts as r1 ends
        ],
        expect_exit=0,
    )
    assert payload["findings"] == []


@pytest.mark.parametrize("same_start", [False, True], ids=["child-starts-later", "child-starts-with-parent"])
def test_a_same_name_child_nested_in_its_parent_is_nested_bucket_only(tmp_path, same_start):
    child_start = 1.0 if same_start else 2.0
    payload = check(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("outer", "rl.grpo.reward", 1, 5, parent="step1", bucket="productive"),
            S("inner", "rl.grpo.reward", child_start, 4, parent="outer", bucket="productive"),
        ],
        expect_exit=1,
    )
    finding = only_finding(payload, "nested-bucket")
    assert (finding["span_id"], finding["related_span_id"]) == (span_id_of("inner"), span_id_of("outer"))
    assert finding["overlap_s"] == 4.0 - child_start


def test_self_overlap_between_concurrent_children_of_a_same_name_bucketed_parent(tmp_path):
    """A batch reward span that also wraps two asyncio tasks opening the same span: c1 and c2 overlap each other and
    neither is an ancestor of the other, so SPEC section 5 flags them, besides the two nested-bucket findings."""
    payload = check(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("batch", "rl.grpo.reward", 1, 9, parent="step1", bucket="productive"),
            S("c1", "rl.grpo.reward", 2, 5, parent="batch", bucket="productive"),
            S("c2", "rl.grpo.reward", 3, 6, parent="batch", bucket="productive"),
        ],
        expect_exit=1,
    )
    overlaps = [f for f in payload["findings"] if f["rule"] == "self-overlap"]
    assert [(f["span_id"], f["related_span_id"]) for f in overlaps] == [(span_id_of("c2"), span_id_of("c1"))]
    assert overlaps[0]["overlap_s"] == 5.0 - 3.0


# --- whatever the nesting depth ---------------------------------------------------------------------------------------


def test_self_overlap_between_a_root_span_and_one_nested_in_an_idle_span(tmp_path):
    """The fuzz's case: a root `rl.grpo.reward` [0, 10) ms and another inside an idle span [5, 15) ms are one
    self-overlap (besides the inner one's nested-bucket under the idle span): they sit at different depths of
    bucketed ancestry, and neither is an ancestor of the other."""
    path = write_trace(
        tmp_path / "run.otlp",
        [
            step("step1", 1, 0.000, 0.020),
            S("root", "rl.grpo.reward", 0.000, 0.010, bucket="productive", group="reward"),
            S("idle", "rl.idle.refit_bubble", 0.004, 0.016, parent="step1", bucket="idle"),
            S("inner", "rl.grpo.reward", 0.005, 0.015, parent="idle", bucket="productive", group="reward"),
        ],
    )
    findings = span_rule_findings(path, expect_exit=1)
    assert rules(findings) == [("nested-bucket", span_id_of("inner")), ("self-overlap", span_id_of("inner"))]
    (overlap,) = [f for f in findings if f["rule"] == "self-overlap"]
    assert overlap["related_span_id"] == span_id_of("root")
    assert overlap["overlap_s"] == pytest.approx(0.010 - 0.005, abs=1e-12)
    assert overlap["iteration"] == 1


def test_self_overlap_looks_past_an_ancestor_to_an_earlier_instance(tmp_path):
    """`inner` runs inside a same-name `outer` (nested-bucket, not self-overlap), but also overlaps `other`, a root
    instance of the same name in the same process: that pair is a self-overlap, though `outer` reaches further."""
    path = write_trace(
        tmp_path / "run.otlp",
        [
            step("step1", 1, 0, 30),
            S("outer", "rl.grpo.reward", 0, 20, parent="step1", bucket="productive"),
            S("other", "rl.grpo.reward", 1, 4, bucket="productive", trace="t2"),
            S("inner", "rl.grpo.reward", 2, 6, parent="outer", bucket="productive"),
        ],
    )
    findings = span_rule_findings(path, expect_exit=1)
    by_rule = {(f["rule"], f["span_id"]): f for f in findings}
    assert set(by_rule) == {
        ("nested-bucket", span_id_of("inner")),
        ("self-overlap", span_id_of("other", "t2")),  # overlaps outer, which is no relative of it
        ("self-overlap", span_id_of("inner")),
    }
    assert by_rule[("self-overlap", span_id_of("other", "t2"))]["related_span_id"] == span_id_of("outer")
    assert by_rule[("self-overlap", span_id_of("other", "t2"))]["overlap_s"] == 4.0 - 1.0
    inner = by_rule[("self-overlap", span_id_of("inner"))]
    assert inner["related_span_id"] == span_id_of("other", "t2")
    assert inner["overlap_s"] == 4.0 - 2.0  # other ends at 4


# --- the one sweep over every group, against the pairwise definition --------------------------------------------------


@st.composite
def same_name_spans(draw) -> list[S]:
    """A step and 2-12 bucketed spans of two names in two processes, some nested in others, on a coarse grid."""
    spans = [step("step1", 1, 0, 40)]
    for j in range(draw(st.integers(2, 12))):
        start, end = sorted(draw(st.lists(st.integers(0, 40), min_size=2, max_size=2, unique=True)))
        parent = draw(st.sampled_from([s.label for s in spans]))
        name = draw(st.sampled_from(["rl.grpo.generation", "rl.grpo.reward"]))
        spans.append(S(f"s{j}", name, start, end, parent=parent, bucket="productive",
                       process=draw(st.sampled_from(["p", "q"]))))  # fmt: skip
    return spans


def expected_self_overlaps(spans: list[S]) -> dict[str, str]:
    """SPEC section 5, pairwise: each bucketed span overlapped by an earlier (by start, then id) same-name
    bucketed span of its process that is not its ancestor or descendant -> the one reaching furthest into it."""
    parent = {s.label: s.parent for s in spans}

    def ancestors(label: str | None) -> set[str]:
        found: set[str] = set()
        while label is not None and (label := parent.get(label)) is not None and label not in found:
            found.add(label)
        return found

    def key(s: S) -> tuple[float, int]:
        return (s.start, int(s.span_id, 16))

    leaves = [s for s in spans if s.bucket and s.end > s.start]
    out = {}
    for f in leaves:
        partners = [
            p for p in leaves
            if p.process == f.process and p.name == f.name and key(p) < key(f) and p.end > f.start
            and p.label not in ancestors(f.label) and f.label not in ancestors(p.label)
        ]  # fmt: skip
        if partners:
            out[f.span_id] = max(partners, key=lambda p: (p.end, p.start, int(p.span_id, 16))).span_id
    return out


@settings(PROPERTY_TESTS, max_examples=6)
@given(spans=same_name_spans())
def test_self_overlap_is_what_the_pairwise_definition_finds(tmp_path_factory, spans):
    path = str(write_trace(tmp_path_factory.mktemp("overlap") / "run.otlp", spans))
    findings = run_json(["check", path, "--no-cache"])["findings"]
    found = {f["span_id"]: f["related_span_id"] for f in findings if f["rule"] == "self-overlap"}
    assert found == expected_self_overlaps(spans)
    with open_store([path], use_cache=False) as store:  # swept in runs of a few instances, as a long trace is
        for most in (1, 2, 3):
            runs = self_overlap_findings(store.spans(), batch_spans=most)
            assert {f.span_id: f.related_span_id for f in runs} == found
