"""A span whose end precedes its start (SPEC sections 3 and 5): zero-length everywhere in the accounting, and a
warning from `check`.

A clock stepped back mid-span, or an exporter that swapped the two fields, must not subtract time from a bucket,
shrink a window below nothing, or pull the run's extent back; it counts as a point at its start.
"""

from __future__ import annotations

import json

import pytest

from conftest import invoke
from tracebuild import S, span_id_of, step, write_trace

SHAPES = ["framed", "jsonl"]


def run(args: list[str]):
    return invoke(args, width=160)


def inverted_run() -> list[S]:
    return [
        step("step1", 1, 0, 10),
        S("gen", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive"),
        # Ends 2 s before it starts: as a plain difference it would take 2 s off productive.
        S("bad", "rl.grpo.reward", 8, 6, parent="step1", bucket="productive"),
        # A step that ends before it starts: its window is the point 20, yet it reaches the run's extent to 20.
        step("step2", 2, 20, 12),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("cache", [[], ["--no-cache"]])
def test_an_inverted_span_counts_as_zero_length_in_every_figure(tmp_path, shape, cache):
    path = write_trace(tmp_path / "run.trace", inverted_run(), shape)
    result = run(["report", str(path), "--format", "json", *cache])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    one, two = out["iterations"]
    assert one["wall_s"] == 10.0 - 0.0
    assert one["productive_s"] == 5.0 - 1.0  # `bad` charges nothing
    assert one["span_seconds"]["productive"] == (5.0 - 1.0) + 0.0  # and sums to nothing, not to -2
    assert (two["start_ns"], two["wall_s"]) == (one["start_ns"] + 20 * 10**9, 0.0)
    # No job span: the extent is every span's envelope, [0, 20] with step2 a point at 20 (its raw end, 12, would
    # end the run at 12).
    assert out["outside"]["wall_s"] == 20.0 - 10.0


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_check_warns_inverted_span_and_nothing_else(tmp_path, shape):
    path = write_trace(tmp_path / "run.trace", inverted_run(), shape)
    result = run(["check", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    # Besides: step 1's window is mostly time no bucketed span covers (1-5 of 0-10), a window rule's business.
    assert [f["rule"] for f in payload["findings"]][2:] == ["mostly-unaccounted"]
    payload["findings"] = payload["findings"][:2]
    findings = {f["span_id"]: f for f in payload["findings"]}
    assert [f["rule"] for f in payload["findings"]] == ["inverted-span", "inverted-span"]
    bad, step2 = findings[span_id_of("bad")], findings[span_id_of("step2")]
    assert bad["severity"] == "warning" and bad["iteration"] == 1 and bad["related_span_id"] is None
    assert "2.000s" in bad["message"]  # 8 - 6
    assert "8.000s" in step2["message"] and step2["iteration"] == 2  # 20 - 12
    assert payload["summary"] == {"errors": 0, "warnings": 2 + 1}


def test_an_inverted_step_inside_another_step_overlaps_nothing(tmp_path):
    path = write_trace(tmp_path / "run.trace", [step("step1", 1, 0, 10), step("step2", 2, 6, 4)])
    payload = json.loads(run(["check", str(path), "--format", "json"]).stdout)
    # Not overlapping-steps: step2 is the point 6, and a point overlaps nothing. (Step 1's window, with no bucketed
    # span, is mostly-unaccounted; step 2's, a point, is not.)
    assert [f["rule"] for f in payload["findings"]] == ["inverted-span", "mostly-unaccounted"]


def test_the_spans_listing_shows_an_inverted_span_with_no_duration(tmp_path):
    path = write_trace(tmp_path / "run.trace", inverted_run())
    result = run(["spans", str(path), "--iteration", "1", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {row["span_id"]: row for row in json.loads(result.stdout)}
    assert (rows[span_id_of("bad")]["start_offset_s"], rows[span_id_of("bad")]["duration_s"]) == (8.0 - 0.0, 0.0)


def test_inverted_span_is_a_warning_rule_after_iteration_mismatch():
    from rollup.checks.findings import RULES

    rules = list(RULES)
    assert RULES["inverted-span"] == "warning"
    assert rules.index("inverted-span") == rules.index("iteration-mismatch") + 1
