"""`goodput diff BASELINE CANDIDATE` (SPEC sections 9 and 14) on hand-built runs whose medians are worked out here."""

from __future__ import annotations

import csv
import io
import json
from statistics import median

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import invoke
from tracebuild import S, step, write_trace

FIGURES = ["wall_s", "productive_s", "overhead_s", "idle_s", "wasted_s", "unaccounted_s", "goodput"]
# SPEC section 9's keys, then section 14's, in that order; and the keys of one `durations` entry.
DIFF_KEYS = ["baseline", "candidate", "delta", "ratio", "names", "critical", "durations"]
DURATION_KEYS = ["name", "bucket", "baseline_s", "candidate_s", "delta_s", "ratio"]


def run_of(path, steps: list[tuple[float, float]]):
    """A run whose step i lasts `wall`, with `generation` (productive) for `gen` seconds from its start, and a
    `refit` idle stretch of 0.5 s in odd steps."""
    spans, t = [], 0.0
    for i, (wall, gen) in enumerate(steps):
        spans.append(step(f"s{i}", i, t, t + wall))
        spans.append(S(f"g{i}", "generation", t, t + gen, parent=f"s{i}", bucket="productive"))
        if i % 2:
            spans.append(S(f"r{i}", "refit", t + gen, t + gen + 0.5, parent=f"s{i}", bucket="idle"))
        t += wall + 1.0
    path.mkdir(parents=True, exist_ok=True)
    write_trace(path / "run.trace", spans)
    return path


def diff_json(baseline, candidate, *extra: str) -> dict:
    result = invoke(["diff", str(baseline), str(candidate), "--format", "json", "--no-cache", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow
def test_medians_deltas_ratios_and_movers_worked_out_by_hand(tmp_path):
    base = run_of(tmp_path / "base", [(2.0, 1.0), (3.0, 1.0), (4.0, 2.0)])
    cand = run_of(tmp_path / "cand", [(2.0, 1.0), (4.0, 2.0), (6.0, 3.0), (8.0, 3.0)])
    out = diff_json(base, cand)
    assert list(out) == DIFF_KEYS
    assert out["baseline"]["paths"] == [str(base)] and out["baseline"]["iterations"] == 3
    assert out["candidate"]["iterations"] == 4
    # walls: baseline 2, 3, 4 -> 3; candidate 2, 4, 6, 8 -> (4 + 6) / 2 = 5
    assert out["baseline"]["median"]["wall_s"] == 3.0 and out["candidate"]["median"]["wall_s"] == (4.0 + 6.0) / 2
    assert out["delta"]["wall_s"] == 5.0 - 3.0 and out["ratio"]["wall_s"] == 5.0 / 3.0 - 1
    # productive (generation): 1, 1, 2 -> 1; 1, 2, 3, 3 -> 2.5
    assert out["delta"]["productive_s"] == 2.5 - 1.0 and out["ratio"]["productive_s"] == 2.5 / 1.0 - 1
    # idle (refit in odd steps): 0, 0.5, 0 -> 0; 0, 0.5, 0, 0.5 -> 0.25; ratio has no baseline to divide by
    assert out["delta"]["idle_s"] == 0.25 and out["ratio"]["idle_s"] is None
    # goodput: 1/2, 1/3, 2/4 -> 0.5; 1/2, 2/4, 3/6, 3/8 -> 0.5
    assert out["delta"]["goodput"] == 0.0
    # unaccounted: 1, 1.5, 2 -> 1.5; 1, 1.5, 3, 4.5 -> 2.25
    assert out["delta"]["unaccounted_s"] == 2.25 - 1.5
    assert set(out["delta"]) == set(out["ratio"]) == set(FIGURES) == set(out["baseline"]["median"])
    assert out["names"] == [
        {"name": "generation", "bucket": "productive", "baseline_s": 1.0, "candidate_s": 2.5, "delta_s": 1.5},
        {"name": "refit", "bucket": "idle", "baseline_s": 0.0, "candidate_s": 0.25, "delta_s": 0.25},
    ]
    # on the path (SPEC section 14): generation from each step's start, then refit in odd steps, the rest waiting
    assert out["critical"] == [
        {"name": "generation", "bucket": "productive", "baseline_s": 1.0, "candidate_s": 2.5, "delta_s": 1.5},
        {"name": "refit", "bucket": "idle", "baseline_s": 0.0, "candidate_s": 0.25, "delta_s": 0.25},
    ]
    # span lengths, each span counted: generation 1, 1, 2 -> 1 and 1, 2, 3, 3 -> 2.5; refit 0.5 wherever it ran
    assert out["durations"] == [
        {"name": "generation", "bucket": "productive", "baseline_s": 1.0, "candidate_s": 2.5, "delta_s": 1.5,
         "ratio": 2.5 / 1.0 - 1},
        {"name": "refit", "bucket": "idle", "baseline_s": 0.5, "candidate_s": 0.5, "delta_s": 0.0, "ratio": 0.0},
    ]  # fmt: skip
    table = invoke(["diff", str(base), str(cand)], width=80)
    assert table.exit_code == 0, table.output
    first = table.stdout.splitlines()[0]
    assert first == (
        "median step +66.7% (3.000 s -> 5.000 s): generation (productive) +1.500 s longer (median span 1.000 s -> "
        "2.500 s); on the critical path: generation (productive) +1.500 s a step"
    )
    assert "median span length by phase, largest change first" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()[1:]) <= 80


@pytest.mark.slow
def test_iterations_applies_to_both_sides(tmp_path):
    base = run_of(tmp_path / "base", [(2.0, 1.0), (3.0, 1.0), (4.0, 2.0)])
    cand = run_of(tmp_path / "cand", [(2.0, 1.0), (4.0, 2.0), (6.0, 3.0)])
    out = diff_json(base, cand, "--iterations", "0:1")
    assert out["baseline"]["iterations"] == out["candidate"]["iterations"] == 2
    assert out["baseline"]["median"]["wall_s"] == (2.0 + 3.0) / 2 and out["candidate"]["median"]["wall_s"] == 3.0


@pytest.mark.slow
def test_fail_over_gates_on_the_median_step(tmp_path):
    base = run_of(tmp_path / "base", [(2.0, 1.0)] * 3)
    cand = run_of(tmp_path / "cand", [(3.0, 1.0)] * 3)  # 50% slower
    fails = invoke(["diff", str(base), str(cand), "--fail-over", "40"])
    assert fails.exit_code == 1
    assert "median step +50.0% (2.000 s -> 3.000 s), more than --fail-over 40%" in fails.stderr
    assert fails.stdout.startswith("median step +50.0%")  # printed before failing
    assert invoke(["diff", str(base), str(cand), "--fail-over", "50%"]).exit_code == 0
    assert invoke(["diff", str(cand), str(base), "--fail-over", "0"]).exit_code == 0  # faster passes
    bad = invoke(["diff", str(base), str(cand), "--fail-over", "a lot"])
    assert bad.exit_code == 2 and "--fail-over" in bad.output


def test_a_missing_side_is_bad_input(tmp_path):
    base = run_of(tmp_path / "base", [(2.0, 1.0)])
    result = invoke(["diff", str(base), str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "nowhere" in result.stderr and "Traceback" not in result.output


@pytest.mark.slow
def test_diff_of_a_run_with_itself_is_all_zeros():
    out = diff_json("sample_traces/grpo_async/", "sample_traces/grpo_async/")
    assert all(value == 0 for value in out["delta"].values() if value is not None)
    assert all(value in (0, None) for value in out["ratio"].values())
    assert out["names"] and all(n["delta_s"] == 0 and n["baseline_s"] == n["candidate_s"] for n in out["names"])
    assert out["baseline"]["median"] == out["candidate"]["median"]


steps_strategy = st.lists(
    st.tuples(st.integers(10, 60), st.integers(0, 10)).map(lambda t: (t[0] / 10, min(t[1], t[0]) / 10)),
    min_size=1, max_size=6,
)  # fmt: skip


@pytest.mark.slow
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps_strategy, steps_strategy)
def test_swapping_the_sides_negates_every_delta(tmp_path, first, second):
    a, b = run_of(tmp_path / "a", first), run_of(tmp_path / "b", second)
    forward, backward = diff_json(a, b), diff_json(b, a)
    for key, value in forward["delta"].items():
        assert value == -backward["delta"][key] or (value is None and backward["delta"][key] is None)
    for listed in ("names", "critical", "durations"):
        back = {(n["name"], n["bucket"]): n for n in backward[listed]}
        assert len(back) == len(forward[listed])
        for n in forward[listed]:
            other = back[(n["name"], n["bucket"])]
            assert n["delta_s"] == -other["delta_s"]
            assert (n["baseline_s"], n["candidate_s"]) == (other["candidate_s"], other["baseline_s"])


def medians_from_report(path: str, *extra: str) -> tuple[dict, dict]:
    """SPEC section 9 worked from `report --by name` JSON: each figure's median over the rows, and each (name,
    bucket)'s median per-iteration wall seconds, 0 in a row without it."""
    result = invoke(["report", path, "--by", "name", "--format", "json", "--no-cache", *extra])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["iterations"]
    figures = {f: median([r[f] for r in rows if r[f] is not None]) for f in FIGURES}
    keys = {(n["name"], n["bucket"]) for r in rows for n in r["names"]}
    names = {k: median([sum(n["wall_s"] for n in r["names"] if (n["name"], n["bucket"]) == k) for r in rows])
             for k in keys}  # fmt: skip
    return figures, names


@pytest.mark.slow
@pytest.mark.parametrize(
    ("run", "extra"),
    [(run, []) for run in ("grpo_sync", "grpo_async", "grpo_restart", "grpo_buggy")]
    + [("grpo_restart", ["--precedence", "idle,wasted,overhead,productive"]), ("grpo_async", ["--iterations", "2:4"])],
)
def test_each_side_is_the_medians_of_its_report_by_name(run, extra):
    path = f"sample_traces/{run}/"
    figures, names = medians_from_report(path, *extra)
    out = diff_json(path, path, *extra)
    for figure, value in figures.items():
        assert out["baseline"]["median"][figure] == pytest.approx(value, abs=1e-9), figure
    assert {(n["name"], n["bucket"]): n["baseline_s"] for n in out["names"]} == pytest.approx(names, abs=1e-9)


def overlapped_run(path, generation_s: float):
    """An async-shaped run: three 1 s steps on the trainer, each waiting 0.2 s for its batch, training [0.2, 0.9]
    and a refit to the step's end; generation of the next batch on the rollout worker from 0.2 for `generation_s`,
    overlapping training, never what the step waits on."""
    spans, named = [], {"trainer": "grpo-training", "rollout": "grpo-rollout"}
    for i in range(3):
        t = 2.0 * i
        spans += [
            step(f"s{i}", i, t, t + 1, process="trainer"),
            S(f"w{i}", "rl.idle.buffer_starvation", t, t + 0.2, parent=f"s{i}", bucket="idle", process="trainer"),
            S(f"t{i}", "rl.grpo.policy_training", t + 0.2, t + 0.9, parent=f"s{i}", bucket="productive",
              process="trainer"),
            S(f"r{i}", "rl.idle.refit_bubble", t + 0.9, t + 1, parent=f"s{i}", bucket="idle", process="trainer"),
            S(f"g{i}", "rl.grpo.generation", t + 0.2, t + 0.2 + generation_s, bucket="productive", process="rollout",
              iteration=i + 1),
        ]  # fmt: skip
    resources = {
        p: {"service.name": s, "host.name": "vm", "process.pid": 1 + n} for n, (p, s) in enumerate(named.items())
    }
    path.mkdir(parents=True, exist_ok=True)
    write_trace(path / "run.otlp", spans, resources=resources)
    return path


@pytest.mark.slow
def test_halving_overlapped_generation_moves_no_phase_on_the_path(tmp_path):
    # The shares of --by name move (training takes generation's half of [0.55, 0.9]: +0.175 s); the path does not;
    # the spans' lengths say which phase changed: generation, 0.35 s shorter, training not at all.
    base = overlapped_run(tmp_path / "base", 0.7)
    faster = overlapped_run(tmp_path / "faster", 0.35)
    out = diff_json(base, faster)
    moved = {(n["name"], n["bucket"]): n["delta_s"] for n in out["names"]}
    assert moved[("rl.grpo.policy_training", "productive")] == pytest.approx(0.175)
    assert all(c["delta_s"] == 0 for c in out["critical"]), out["critical"]
    training = next(c for c in out["critical"] if c["name"] == "rl.grpo.policy_training")
    assert training["baseline_s"] == training["candidate_s"] == pytest.approx(0.7)
    # generation made for iterations 1 and 2 counts (iteration 3 has no window): 0.7, 0.7 -> 0.35, 0.35
    lengths = {(d["name"], d["bucket"]): d for d in out["durations"]}
    generation = lengths[("rl.grpo.generation", "productive")]
    assert (generation["baseline_s"], generation["candidate_s"]) == (0.7, 0.35)
    assert generation["delta_s"] == 0.35 - 0.7 and generation["ratio"] == pytest.approx(0.35 / 0.7 - 1)
    assert out["durations"][0] == generation
    assert all(d["delta_s"] == 0 for d in out["durations"][1:]), out["durations"]
    verdict = invoke(["diff", str(base), str(faster), "--no-cache"]).stdout.splitlines()[0]
    assert verdict == (
        "median step +0.0% (1.000 s -> 1.000 s): rl.grpo.generation (productive) -0.350 s shorter (median span "
        "0.700 s -> 0.350 s); on the critical path: no phase moved"
    )


def sync_run(path, generation_s: float):
    """A sync run: three steps of generation for `generation_s`, then 0.5 s of policy training, then the step ends."""
    spans = []
    for i in range(3):
        t = 3.0 * i
        spans += [
            step(f"s{i}", i, t, t + generation_s + 0.5),
            S(f"g{i}", "rl.grpo.generation", t, t + generation_s, parent=f"s{i}", bucket="productive"),
            S(f"t{i}", "rl.grpo.policy_training", t + generation_s, t + generation_s + 0.5, parent=f"s{i}",
              bucket="productive"),
        ]  # fmt: skip
    path.mkdir(parents=True, exist_ok=True)
    write_trace(path / "run.trace", spans)
    return path


@pytest.mark.slow
def test_only_generation_longer_is_the_phase_that_got_longer(tmp_path):
    base, slower = sync_run(tmp_path / "base", 1.0), sync_run(tmp_path / "slower", 1.25)
    out = diff_json(base, slower)
    assert out["durations"] == [
        {"name": "rl.grpo.generation", "bucket": "productive", "baseline_s": 1.0, "candidate_s": 1.25,
         "delta_s": 1.25 - 1.0, "ratio": 1.25 / 1.0 - 1},
        {"name": "rl.grpo.policy_training", "bucket": "productive", "baseline_s": 0.5, "candidate_s": 0.5,
         "delta_s": 0.0, "ratio": 0.0},
    ]  # fmt: skip
    assert [list(d) for d in out["durations"]] == [DURATION_KEYS] * 2
    # the step waits on both in turn: generation's time on the path grows by what it took longer, training's not
    assert [(c["name"], c["delta_s"]) for c in out["critical"]] == [
        ("rl.grpo.generation", 1.25 - 1.0),
        ("rl.grpo.policy_training", 0.0),
    ]
    table = invoke(["diff", str(base), str(slower), "--no-cache"], width=80)
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[0] == (
        "median step +16.7% (1.500 s -> 1.750 s): rl.grpo.generation (productive) +0.250 s longer (median span "
        "1.000 s -> 1.250 s); on the critical path: rl.grpo.generation (productive) +0.250 s a step"
    )
    table_csv = invoke(["diff", str(base), str(slower), "--no-cache", "--format", "csv"])
    rows = list(csv.reader(io.StringIO(table_csv.stdout)))
    assert rows[0] == ["kind", "what", "bucket", "baseline", "candidate", "delta", "ratio"]
    durations = [(what, bucket, *map(float, figures)) for kind, what, bucket, *figures in rows if kind == "duration"]
    assert durations == [("rl.grpo.generation", "productive", 1.0, 1.25, 0.25, 0.25),
                         ("rl.grpo.policy_training", "productive", 0.5, 0.5, 0.0, 0.0)]  # fmt: skip


def phases_run(path, generation_tail_s: float, checkpoint: bool):
    """Two steps of five phases one after another: generation (productive, 1 s) and its tail in the overhead bucket
    (the weight sync: `generation_tail_s`), reward 0.25 s, advantage 0.125 s, a 0.25 s refit bubble; with
    `checkpoint`, a 0.25 s checkpoint last."""
    spans = []
    for i in range(2):
        t = 10.0 * i
        phases = [("rl.grpo.generation", "productive", 1.0), ("rl.grpo.generation", "overhead", generation_tail_s),
                  ("rl.grpo.reward", "productive", 0.25), ("rl.grpo.advantage", "overhead", 0.125),
                  ("rl.idle.refit_bubble", "idle", 0.25)]  # fmt: skip
        if checkpoint:
            phases.append(("rl.grpo.checkpointing", "overhead", 0.25))
        at = t
        for n, (name, bucket, length) in enumerate(phases):
            spans.append(S(f"p{i}.{n}", name, at, at + length, parent=f"s{i}", bucket=bucket))
            at += length
        spans.append(step(f"s{i}", i, t, at))
    path.mkdir(parents=True, exist_ok=True)
    write_trace(path / "run.trace", spans)
    return path


@pytest.mark.slow
def test_durations_keep_a_names_buckets_apart_and_a_new_phase_has_no_ratio(tmp_path):
    base = phases_run(tmp_path / "base", 0.25, checkpoint=False)
    cand = phases_run(tmp_path / "cand", 0.5, checkpoint=True)
    out = diff_json(base, cand)
    # Two moved by 0.25 s: the checkpoint (none in the baseline: 0, so no ratio) and generation's overhead tail
    # (0.25 -> 0.5); generation's productive spans did not move. Ties by name, then bucket order.
    assert out["durations"] == [
        {"name": "rl.grpo.checkpointing", "bucket": "overhead", "baseline_s": 0.0, "candidate_s": 0.25,
         "delta_s": 0.25, "ratio": None},
        {"name": "rl.grpo.generation", "bucket": "overhead", "baseline_s": 0.25, "candidate_s": 0.5,
         "delta_s": 0.5 - 0.25, "ratio": 0.5 / 0.25 - 1},
        {"name": "rl.grpo.advantage", "bucket": "overhead", "baseline_s": 0.125, "candidate_s": 0.125,
         "delta_s": 0.0, "ratio": 0.0},
        {"name": "rl.grpo.generation", "bucket": "productive", "baseline_s": 1.0, "candidate_s": 1.0,
         "delta_s": 0.0, "ratio": 0.0},
        {"name": "rl.grpo.reward", "bucket": "productive", "baseline_s": 0.25, "candidate_s": 0.25, "delta_s": 0.0,
         "ratio": 0.0},
        {"name": "rl.idle.refit_bubble", "bucket": "idle", "baseline_s": 0.25, "candidate_s": 0.25,
         "delta_s": 0.0, "ratio": 0.0},
    ]  # fmt: skip
    # steps: 1 + 0.25 + 0.25 + 0.125 + 0.25 = 1.875 s; 1 + 0.5 + 0.25 + 0.125 + 0.25 + 0.25 = 2.375 s (+26.7%)
    first = invoke(["diff", str(base), str(cand), "--no-cache"]).stdout.splitlines()[0]
    assert first.startswith(
        "median step +26.7% (1.875 s -> 2.375 s): rl.grpo.checkpointing (overhead) +0.250 s longer (median span "
        "0.000 s -> 0.250 s); on the critical path: "
    )


@pytest.mark.slow
def test_durations_count_each_span_of_the_report_rows_own_attempt_and_iteration(tmp_path):
    def resource(process: str, run_id: str) -> dict:
        return {"service.name": "toy", "service.instance.id": process, "host.name": "host", "process.pid": 1,
                "goodput.run.id": run_id}  # fmt: skip

    spans = [
        # attempt a: iteration 0 kept; its iteration 1 (generation 1.5 s) superseded by attempt b's
        step("a0", 0, 0, 2, process="a"),
        S("ga0", "rl.grpo.generation", 0, 1, parent="a0", bucket="productive", process="a"),
        step("a1", 1, 3, 5, process="a"),
        S("ga1", "rl.grpo.generation", 3, 4.5, parent="a1", bucket="productive", process="a"),
        # attempt b: iteration 1 fanned out to three workers, iteration 2; then a 9 s span of no iteration
        step("b1", 1, 10, 12, process="b", trace="b"),
        *[S(f"gb1.{w}", "rl.grpo.generation", 10, end, parent="b1", bucket="productive", process=f"b-w{w}",
            trace="b") for w, end in enumerate([10.5, 10.5, 12])],
        step("b2", 2, 13, 15, process="b", trace="b"),
        S("gb2", "rl.grpo.generation", 13, 13.5, parent="b2", bucket="productive", process="b", trace="b"),
        S("gb9", "rl.grpo.generation", 20, 29, bucket="productive", process="b", trace="b"),
    ]  # fmt: skip
    runs = {"a": "run-a", "b": "run-b", "b-w0": "run-b", "b-w1": "run-b", "b-w2": "run-b"}
    path = tmp_path / "run"
    path.mkdir()
    write_trace(path / "run.otlp", spans, resources={p: resource(p, run) for p, run in runs.items()})
    out = diff_json(path, path)
    # the rows: iteration 0 of a (1 s), 1 of b (0.5, 0.5, 2), 2 of b (0.5): 0.5, 0.5, 0.5, 1, 2 -> 0.5; with the
    # superseded 1.5 s and the 9 s of no iteration it would be 1
    assert out["durations"] == [
        {"name": "rl.grpo.generation", "bucket": "productive", "baseline_s": 0.5, "candidate_s": 0.5, "delta_s": 0.0,
         "ratio": 0.0}
    ]  # fmt: skip
