"""`goodput diff BASELINE CANDIDATE` (SPEC section 9) on hand-built runs whose medians are worked out here."""

from __future__ import annotations

import json
from statistics import median

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import invoke
from tracebuild import S, step, write_trace

FIGURES = ["wall_s", "productive_s", "overhead_s", "idle_s", "wasted_s", "unaccounted_s", "goodput"]


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
    assert set(out) == {"baseline", "candidate", "delta", "ratio", "names", "critical"}
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
    table = invoke(["diff", str(base), str(cand)], width=80)
    assert table.exit_code == 0, table.output
    first = table.stdout.splitlines()[0]
    assert first.startswith("median step +66.7% (3.000 s -> 5.000 s): generation (productive) +1.500 s")
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
    back = {(n["name"], n["bucket"]): n for n in backward["names"]}
    assert len(back) == len(forward["names"])
    for n in forward["names"]:
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
@pytest.mark.parametrize("run", ["grpo_sync", "grpo_async", "grpo_restart", "grpo_buggy"])
@pytest.mark.parametrize("extra", [[], ["--precedence", "idle,wasted,overhead,productive"], ["--iterations", "2:4"]])
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
    # The shares of --by name move (training takes generation's half of [0.55, 0.9]: +0.175 s); the path does not.
    base = overlapped_run(tmp_path / "base", 0.7)
    faster = overlapped_run(tmp_path / "faster", 0.35)
    out = diff_json(base, faster)
    moved = {(n["name"], n["bucket"]): n["delta_s"] for n in out["names"]}
    assert moved[("rl.grpo.policy_training", "productive")] == pytest.approx(0.175)
    assert all(c["delta_s"] == 0 for c in out["critical"]), out["critical"]
    training = next(c for c in out["critical"] if c["name"] == "rl.grpo.policy_training")
    assert training["baseline_s"] == training["candidate_s"] == pytest.approx(0.7)
    verdict = invoke(["diff", str(base), str(faster), "--no-cache"]).stdout.splitlines()[0]
    assert verdict == "median step +0.0% (1.000 s -> 1.000 s): no phase moved on the critical path"
