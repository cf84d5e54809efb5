"""Accounting edges a differential fuzz found (SPEC sections 4 and 5) and the report's JSON numbers (section 6),
each hit as a user hits it: a hand-made trace on disk and the real command line. Expected numbers keep their
derivation from the timeline the test draws."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PROPERTY_TESTS, invoke
from tracebuild import S, span_id_of, step, to_json_record, to_request, write_trace

FIGURES = ("wall_s", "productive_s", "overhead_s", "idle_s", "wasted_s", "unaccounted_s")
BUCKETS = ("productive", "overhead", "idle", "wasted")


def run_json(*args: str, expect_exit: int = 0) -> dict:
    result = invoke([*args, "--format", "json"])
    assert result.exit_code == expect_exit, result.output
    return json.loads(result.stdout)


def report(path: Path, *extra: str) -> dict:
    return run_json("report", str(path), *extra)


def check(path: Path, *extra: str, expect_exit: int = 0) -> list[dict]:
    """The span rules' findings: the window rules (tests/test_check_gates.py) also flag these tiny timelines,
    whose steps are mostly time no bucketed span covers."""
    findings = run_json("check", str(path), *extra, expect_exit=expect_exit)["findings"]
    return [f for f in findings if f["rule"] not in ("no-iterations", "mostly-unaccounted", "missing-group")]


def rules(findings: list[dict]) -> list[tuple[str, str]]:
    return sorted((f["rule"], f["span_id"]) for f in findings)


# --- self-overlap whatever the nesting depth ------------------------------------------------------------------------


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
    findings = check(path, expect_exit=1)
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
    findings = check(path, expect_exit=1)
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


# --- zero-length steps ----------------------------------------------------------------------------------------------


def test_a_zero_length_step_overlaps_nothing_and_its_window_has_no_goodput(tmp_path):
    path = write_trace(
        tmp_path / "run.otlp",
        [
            step("step1", 1, 0, 10),
            S("gen", "rl.grpo.generation", 1, 4, parent="step1", bucket="productive"),
            step("step2", 2, 5, 5),  # inside step 1's window, but zero-length: no stretch is charged twice
        ],
    )
    assert check(path) == []
    one, two = report(path)["iterations"]
    assert (one["wall_s"], one["goodput"]) == (10.0 - 0.0, (4.0 - 1.0) / (10.0 - 0.0))
    assert two["wall_s"] == 5.0 - 5.0
    assert two["goodput"] is None  # no wall clock, so no share of it


# --- --by process: every process over every window ------------------------------------------------------------------


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
    plain = report(path)
    out = report(path, "--by", "process")
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


PROCESSES = ("driver", "worker-a", "worker-b")
grid = st.integers(0, 60).map(lambda k: k / 2)  # 0.5 s steps in [0, 30]


@st.composite
def multi_process_traces(draw) -> list[S]:
    """1-4 steps of distinct iterations on random processes, then up to 12 leaves on random processes, parented to
    a step or to nothing, bucketed or not, anywhere in time (inside their step's window or not)."""
    spans: list[S] = []
    for n in draw(st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True)):
        start, end = sorted(draw(st.lists(grid, min_size=2, max_size=2)))
        spans.append(step(f"step{n}", n, start, end, process=draw(st.sampled_from(PROCESSES))))
    steps = [s.label for s in spans]
    for j in range(draw(st.integers(0, 12))):
        start, end = sorted(draw(st.lists(grid, min_size=2, max_size=2)))
        spans.append(
            S(
                f"leaf{j}",
                "rl.grpo.generation",
                start,
                end,
                parent=draw(st.none() | st.sampled_from(steps)),
                bucket=draw(st.sampled_from([*BUCKETS, None])),
                process=draw(st.sampled_from(PROCESSES)),
            )
        )
    return spans


@settings(PROPERTY_TESTS, max_examples=30)
@given(spans=multi_process_traces())
def test_every_process_total_covers_the_whole_report(tmp_path_factory, spans):
    path = write_trace(tmp_path_factory.mktemp("by-process") / "run.otlp", spans)
    plain = report(path, "--no-cache")
    out = report(path, "--no-cache", "--by", "process")
    for total in out["processes"]:
        assert total["wall_s"] == plain["total"]["wall_s"]
        assert sum(total[f] for f in FIGURES[1:]) == pytest.approx(total["wall_s"], abs=1e-9)
    # No span-second is lost: each process's rows together hold every span-second the plain rows hold.
    for bucket in BUCKETS:
        by_process = sum(total["span_seconds"][bucket] for total in out["processes"])
        assert by_process == pytest.approx(plain["total"]["span_seconds"][bucket], abs=1e-9)


# --- which spans make a window; an all-zero parent id ---------------------------------------------------------------


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
    out = report(path)
    (one,) = out["iterations"]
    assert (one["wall_s"], one["productive_s"]) == (10.0 - 0.0, 10.0 - 3.0)
    assert one["span_seconds"]["productive"] == 13.0 - 3.0  # the worker's span still belongs to iteration 1
    assert out["outside"]["wall_s"] == 14.0 - 10.0
    assert out["outside"]["productive_s"] == 13.0 - 10.0


ZERO_PARENT_SPANS = [
    step("step1", 1, 0, 10),
    S("gen", "rl.grpo.generation", 1, 4, bucket="productive", iteration=1, process="worker"),
]


def write_with_zero_parent(path: Path, shape: str) -> Path:
    """ZERO_PARENT_SPANS with `gen`'s parent id written as sixteen zeros, as some emitters write a root's."""
    if shape == "framed":
        request = to_request(ZERO_PARENT_SPANS)
        request.resource_spans[1].scope_spans[0].spans[0].parent_span_id = bytes(8)
        body = request.SerializeToString()
        path.write_bytes(struct.pack(">I", len(body)) + body)
    else:
        record = to_json_record(ZERO_PARENT_SPANS)
        record["resourceSpans"][1]["scopeSpans"][0]["spans"][0]["parentSpanId"] = "0" * 16
        path.write_text(json.dumps(record) + "\n")
    return path


# Each reader: protobuf; JSON Lines read by DuckDB itself (no cache to fill); JSON Lines read by the careful reader.
@pytest.mark.parametrize(
    ("shape", "cache"), [("framed", []), ("jsonl", ["--no-cache"]), ("jsonl", [])], ids=["proto", "duckdb", "json"]
)
def test_an_all_zero_parent_id_means_no_parent(tmp_path, monkeypatch, shape, cache):
    monkeypatch.setenv("GOODPUT_CACHE_DIR", str(tmp_path / "cache"))
    path = write_with_zero_parent(tmp_path / f"run.{shape}", shape)
    assert check(path, *cache) == []  # no orphan-span: the span is a root
    (listed,) = [row for row in run_json("spans", str(path), "-i", "1", *cache) if row["name"] == "rl.grpo.generation"]
    assert listed["parent_span_id"] is None
    roots = run_json("query", str(path), "SELECT name FROM spans WHERE parent_span_id IS NULL ORDER BY name", *cache)
    assert roots == [{"name": "rl.grpo.generation"}, {"name": "rl.grpo.step"}]
    (one,) = report(path, *cache)["iterations"]
    assert (one["productive_s"], one["span_seconds"]["productive"]) == (4.0 - 1.0, 4.0 - 1.0)


# --- the report's JSON numbers --------------------------------------------------------------------------------------


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
    out = report(path, "--by", "process")
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
    out = report(path, "--iterations", "5:9")
    assert out["iterations"] == []
    assert (out["total"]["wall_s"], out["total"]["goodput"]) == (0.0, None)
    assert set(out["outside"]) == set(FIGURES) | {"goodput"}
