"""Invariants of the wall-clock accounting (SPEC section 4) over random small traces, checked with hypothesis.

A trace here is 1-4 step spans of distinct iterations (possibly overlapping) and up to 15 leaves on a 0.5 s grid in
[0, 40]: random buckets (an invalid one among them), processes, parents among the steps and earlier leaves (so some
nest), some with an iteration of their own, some roots. The expected figures are computed in plain Python from the
same timeline: interval unions, clipped to each window. With `--by process`, every process's total covers the
whole report and no span-second is lost (the traces of `multi_process_traces`).
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli import app
from conftest import PROPERTY_TESTS, json_report
from rollup.report.as_json import report_json
from rollup.report.build import ReportOptions, build_report
from rollup.store.span_store import open_store
from tracebuild import ORIGIN_NS, S, step, write_trace

pytestmark = [pytest.mark.slow]

BUCKETS = ("productive", "overhead", "idle", "wasted")
FIGURES = ("productive_s", "overhead_s", "idle_s", "wasted_s", "unaccounted_s")
LEAF_NAMES = ("rl.grpo.generation", "rl.grpo.reward", "rl.grpo.logprob", "rl.idle.refit_bubble", "rl.grpo.data_plane")
PROCESSES = ("driver", "worker-a", "worker-b")

grid = st.integers(0, 80).map(lambda k: k / 2)  # 0.5 s steps in [0, 40]


@st.composite
def traces(draw) -> list[S]:
    iterations = draw(st.lists(st.integers(1, 9), min_size=1, max_size=4, unique=True))
    spans: list[S] = []
    for n in iterations:
        start, end = sorted(draw(st.lists(grid, min_size=2, max_size=2, unique=True)))
        spans.append(
            S(
                f"step{n}",
                "rl.grpo.step",
                start,
                end,
                iteration=n,
                group="step",
                process=draw(st.sampled_from(PROCESSES)),
            )
        )
    for j in range(draw(st.integers(0, 15))):
        start, end = sorted(draw(st.lists(grid, min_size=2, max_size=2)))  # zero-length leaves too
        spans.append(
            S(
                f"leaf{j}",
                draw(st.sampled_from(LEAF_NAMES)),
                start,
                end,
                parent=draw(st.none() | st.sampled_from([s.label for s in spans])),
                bucket=draw(st.sampled_from([*BUCKETS, None, "bogus"])),
                iteration=draw(st.none() | st.sampled_from([*iterations, 42])),
                process=draw(st.sampled_from(PROCESSES)),
            )
        )
    return spans


# --- plain-Python expectations ------------------------------------------------------------------------------------


def union_length(intervals) -> float:
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def clipped(spans: list[S], low: float, high: float) -> list[tuple[float, float]]:
    return [(max(s.start, low), min(s.end, high)) for s in spans if s.start < high and s.end > low and s.end > s.start]


def effective_iteration(span: S, by_label: dict[str, S]):
    while span is not None:
        if span.iteration is not None:
            return span.iteration
        span = by_label.get(span.parent) if span.parent else None
    return None


def seconds(ns: int) -> float:
    return (ns - ORIGIN_NS) / 1e9


def report_of(paths, *, precedence=None, use_cache=False) -> dict:
    with open_store([str(p) for p in paths], use_cache=use_cache) as store:
        return report_json(build_report(store, ReportOptions(precedence=precedence)))


def assert_adds_up(item: dict) -> None:
    assert sum(item[k] for k in FIGURES) == pytest.approx(item["wall_s"], rel=1e-12, abs=1e-9)


# --- the invariants -----------------------------------------------------------------------------------------------


@settings(PROPERTY_TESTS, max_examples=12)
@given(spans=traces())
def test_buckets_and_unaccounted_add_up_to_wall_clock(tmp_path_factory, spans):
    path = write_trace(tmp_path_factory.mktemp("sum") / "run.otlp", spans)
    out = report_of([path])
    assert [it["iteration"] for it in out["iterations"]] == sorted(s.iteration for s in spans if s.group == "step")
    for item in [*out["iterations"], out["total"], out["outside"]]:
        assert_adds_up(item)
        assert all(item[k] >= 0 for k in FIGURES)
    for figure in ("wall_s", *FIGURES):
        assert out["total"][figure] == pytest.approx(sum(it[figure] for it in out["iterations"]), abs=1e-9)
    # Outside: the run's extent (no job span here, so every span's envelope) less the union of the windows.
    extent = (min(s.start for s in spans), max(s.end for s in spans))
    windows = [(s.start, s.end) for s in spans if s.group == "step"]
    assert out["outside"]["wall_s"] == pytest.approx((extent[1] - extent[0]) - union_length(windows), abs=1e-9)


@settings(PROPERTY_TESTS, max_examples=12)
@given(spans=traces(), order=st.permutations(BUCKETS))
def test_exclusive_figures_never_exceed_union_figures(tmp_path_factory, spans, order):
    path = write_trace(tmp_path_factory.mktemp("union") / "run.otlp", spans)
    out = report_of([path], precedence=",".join(order))
    steps = {s.iteration: s for s in spans if s.group == "step"}
    by_label = {s.label: s for s in spans}
    for item in out["iterations"]:
        step = steps[item["iteration"]]
        low, high = seconds(item["start_ns"]), seconds(item["end_ns"])
        assert (low, high) == (step.start, step.end)  # the window is the step span
        assert item["wall_s"] == high - low
        unions = {b: union_length(clipped([s for s in spans if s.bucket == b], low, high)) for b in BUCKETS}
        for bucket in BUCKETS:
            assert item[f"{bucket}_s"] <= unions[bucket] + 1e-9
        assert item[f"{order[0]}_s"] == pytest.approx(unions[order[0]], abs=1e-9)
        every_bucketed = clipped([s for s in spans if s.bucket in BUCKETS], low, high)
        assert sum(item[f"{b}_s"] for b in BUCKETS) == pytest.approx(union_length(every_bucketed), abs=1e-9)
        assert item["unaccounted_s"] == pytest.approx((high - low) - union_length(every_bucketed), abs=1e-9)
        # Exactly: each bucket gets what it adds to the union of the buckets that precede it.
        for k, bucket in enumerate(order):
            before = clipped([s for s in spans if s.bucket in order[:k]], low, high)
            upto = clipped([s for s in spans if s.bucket in order[: k + 1]], low, high)
            assert item[f"{bucket}_s"] == pytest.approx(union_length(upto) - union_length(before), abs=1e-9)
        # Span-seconds: full durations of the bucketed spans whose effective iteration is this one.
        for bucket in BUCKETS:
            naive = sum(
                s.end - s.start
                for s in spans
                if s.bucket == bucket and effective_iteration(s, by_label) == item["iteration"]
            )
            assert item["span_seconds"][bucket] == pytest.approx(naive, abs=1e-9)


SHAPES = ("bare", "jsonl", "json-document", "jsonl+gz", "framed+zst")


@settings(PROPERTY_TESTS, max_examples=4)
@given(
    spans=traces(),
    split_shapes=st.lists(st.sampled_from(("framed", *SHAPES)), min_size=2, max_size=3),
    assignment=st.randoms(use_true_random=False),
)
def test_every_file_shape_split_or_duplicated_gives_the_same_report(tmp_path_factory, spans, split_shapes, assignment):
    folder = tmp_path_factory.mktemp("shapes")
    expected = report_of([write_trace(folder / "run.framed", spans, "framed")])

    for shape in SHAPES:
        assert report_of([write_trace(folder / f"run.{shape}", spans, shape)]) == expected, shape

    # Split over 2-3 files of mixed shapes, each file non-empty, spans of one process in several files.
    shuffled = list(spans)
    assignment.shuffle(shuffled)
    parts = min(len(split_shapes), len(shuffled))
    cuts = sorted(assignment.sample(range(1, len(shuffled)), parts - 1)) if parts > 1 else []
    pieces = [shuffled[a:b] for a, b in itertools.pairwise([0, *cuts, len(shuffled)])]
    split = [
        write_trace(folder / f"part{i}.{shape}", piece, shape)
        # fewer pieces than shapes when there are fewer spans than shapes
        for i, (piece, shape) in enumerate(zip(pieces, split_shapes, strict=False))
    ]
    assert report_of(split) == expected, "split"

    # The same batch twice in one file, and that file's spans again in a second file: each span counts once.
    doubled = [
        write_trace(folder / "doubled.pb", spans + spans, "framed", batches=2),
        write_trace(folder / "doubled.jsonl", spans + spans, "jsonl", batches=2),
    ]
    assert report_of(doubled) == expected, "duplicated"
    assert report_of([*split, folder / "run.framed"]) == expected, "split plus whole"

    # Through the cache: the first load fills it, the second reads only the cache.
    cached = [folder / "run.framed", folder / "run.jsonl+gz"]
    assert report_of(cached, use_cache=True) == expected
    assert report_of(cached, use_cache=True) == expected


def test_the_command_line_gives_the_same_report_from_every_shape_with_and_without_cache(tmp_path):
    """The CLI's JSON for one realistic trace, read from each shape, afresh and from the cache."""
    spans = [
        S("job", "rl.grpo.job", 0, 30, group="job"),
        S("step1", "rl.grpo.step", 2, 14, parent="job", iteration=1, group="step"),
        S("gen", "rl.grpo.generation", 3, 9, parent="step1", bucket="productive", process="worker-a"),
        S("gen-b", "rl.grpo.generation", 4, 10, parent="step1", bucket="productive", process="worker-b"),
        S("lp", "rl.grpo.logprob", 8, 12, parent="step1", bucket="overhead", process="worker-a"),
        S("ckpt", "rl.checkpoint.save", 12.5, 16, parent="step1", bucket="overhead", group="checkpoint"),
        S("step2", "rl.grpo.step", 14, 26, parent="job", iteration=2, group="step"),
        S("bubble", "rl.idle.refit_bubble", 14, 15.5, parent="step2", bucket="idle"),
        S("fail", "rl.wasted.failed_trajectory", 20, 24, parent="step2", bucket="wasted", process="worker-b"),
    ]
    runner = CliRunner()

    def cli_report(paths, *extra):
        result = runner.invoke(app, ["report", *map(str, paths), "--format", "json", *extra], terminal_width=160)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    framed = write_trace(tmp_path / "run.framed", spans, "framed")
    expected = cli_report([framed], "--no-cache")
    assert expected == report_of([framed])
    (one, two) = expected["iterations"]
    assert one["productive_s"] == 10.0 - 3.0 and one["overhead_s"] == (12.0 - 10.0) + (14.0 - 12.5)
    assert two["overhead_s"] == 16.0 - 14.0 and two["idle_s"] == 0.0 and two["wasted_s"] == 24.0 - 20.0
    for shape in ("framed", *SHAPES):
        path = write_trace(tmp_path / f"run-{shape}", spans, shape)
        assert cli_report([path], "--no-cache") == expected, shape
        assert cli_report([path]) == expected, shape  # fills the cache
        assert cli_report([path]) == expected, shape  # reads it
    halves = [write_trace(tmp_path / "a.jsonl", spans[:4], "jsonl"), write_trace(tmp_path / "b.pb", spans[4:], "bare")]
    assert cli_report(halves, "--no-cache") == expected
    assert cli_report([*halves, framed]) == expected


# --- --by process -----------------------------------------------------------------------------------------------------


by_process_grid = st.integers(0, 60).map(lambda k: k / 2)  # 0.5 s steps in [0, 30]


@st.composite
def multi_process_traces(draw) -> list[S]:
    """1-4 steps of distinct iterations on random processes, then up to 12 leaves on random processes, parented to
    a step or to nothing, bucketed or not, anywhere in time (inside their step's window or not)."""
    spans: list[S] = []
    for n in draw(st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True)):
        start, end = sorted(draw(st.lists(by_process_grid, min_size=2, max_size=2)))
        spans.append(step(f"step{n}", n, start, end, process=draw(st.sampled_from(PROCESSES))))
    steps = [s.label for s in spans]
    for j in range(draw(st.integers(0, 12))):
        start, end = sorted(draw(st.lists(by_process_grid, min_size=2, max_size=2)))
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


@settings(PROPERTY_TESTS, max_examples=7)
@given(spans=multi_process_traces())
def test_every_process_total_covers_the_whole_report(tmp_path_factory, spans):
    path = write_trace(tmp_path_factory.mktemp("by-process") / "run.otlp", spans)
    plain = json_report(path, "--no-cache")
    out = json_report(path, "--no-cache", "--by", "process")
    for total in out["processes"]:
        assert total["wall_s"] == plain["total"]["wall_s"]
        assert sum(total[f] for f in FIGURES) == pytest.approx(total["wall_s"], abs=1e-9)
    # No span-second is lost: each process's rows together hold every span-second the plain rows hold.
    for bucket in BUCKETS:
        by_process = sum(total["span_seconds"][bucket] for total in out["processes"])
        assert by_process == pytest.approx(plain["total"]["span_seconds"][bucket], abs=1e-9)
