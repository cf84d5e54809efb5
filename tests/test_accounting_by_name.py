"""`report --by name` / `--by group` (SPEC section 8) on hand-built traces: each charged instant shared equally among
the distinct names active in its bucket, whatever their process; the names add up to their bucket exactly."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import invoke
from tracebuild import S, ns, step, write_trace

BUCKETS = ("productive", "overhead", "idle", "wasted")


def by_name(tmp_path, spans, *extra: str, by: str = "name") -> dict:
    path = write_trace(tmp_path / "run.trace", spans)
    result = invoke(["report", str(path), "--by", by, "--format", "json", "--no-cache", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def names_of(item: dict, key: str = "name") -> dict[tuple[str, str], tuple[float, float]]:
    return {(n[key], n["bucket"]): (n["wall_s"], n["span_s"]) for n in item["names"]}


@pytest.mark.slow
def test_concurrent_names_share_their_overlap_equally(tmp_path):
    out = by_name(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("gen", "generation", 0, 6, parent="step1", bucket="productive"),
            S("train", "training", 4, 10, parent="step1", bucket="productive"),
            S("ckpt", "checkpoint", 5, 8, parent="step1", bucket="overhead"),
        ],
    )
    (row,) = out["iterations"]
    names = names_of(row)
    # 0-4 generation alone, 4-6 both (split in two), 6-10 training alone
    assert names[("generation", "productive")] == (4.0 + 2.0 / 2, 6.0)
    assert names[("training", "productive")] == (4.0 + 2.0 / 2, 6.0)
    # the checkpoint ran under productive time the whole while: no wall clock, but its span-seconds
    assert names[("checkpoint", "overhead")] == (0.0, 3.0)
    # sorted by bucket order, then wall seconds descending, then name
    assert [(n["name"], n["bucket"]) for n in row["names"]] == [
        ("generation", "productive"), ("training", "productive"), ("checkpoint", "overhead"),
    ]  # fmt: skip
    assert set(row["names"][0]) == {"name", "bucket", "wall_s", "span_s"}
    assert out["total"]["names"] == row["names"]


def test_a_name_counts_once_however_many_processes_run_it(tmp_path):
    out = by_name(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("g1", "generation", 0, 8, parent="step1", bucket="productive", process="worker-0"),
            S("g2", "generation", 0, 8, parent="step1", bucket="productive", process="worker-1"),
            S("r", "reward", 6, 10, parent="step1", bucket="productive"),
        ],
    )
    names = names_of(out["iterations"][0])
    # one distinct name 0-6, then generation and reward share 6-8, reward alone 8-10
    assert names[("generation", "productive")] == (6.0 + 2.0 / 2, 8.0 + 8.0)
    assert names[("reward", "productive")] == (2.0 / 2 + 2.0, 4.0)


def test_a_name_crossing_a_window_edge_is_shared_in_each_window_but_counted_in_its_iteration(tmp_path):
    out = by_name(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            step("step2", 2, 10, 20),
            S("gen", "generation", 8, 12, parent="step1", bucket="productive"),
            S("train", "training", 14, 18, parent="step2", bucket="productive"),
        ],
    )
    first, second = out["iterations"]
    assert names_of(first) == {("generation", "productive"): (10.0 - 8.0, 12.0 - 8.0)}
    # in window 2 generation is charged 10-12 but its span-seconds stay with iteration 1
    assert names_of(second) == {
        ("generation", "productive"): (12.0 - 10.0, 0.0), ("training", "productive"): (4.0, 4.0),
    }  # fmt: skip
    assert names_of(out["total"]) == {("generation", "productive"): (4.0, 4.0), ("training", "productive"): (4.0, 4.0)}


def test_a_name_in_two_buckets_has_a_line_in_each(tmp_path):
    out = by_name(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("gen", "generation", 0, 4, parent="step1", bucket="productive"),
            S("warm", "generation", 4, 6, parent="step1", bucket="overhead"),
        ],
    )
    row = out["iterations"][0]
    assert names_of(row) == {("generation", "productive"): (4.0, 4.0), ("generation", "overhead"): (2.0, 2.0)}
    assert row["productive_s"] == 4.0 and row["overhead_s"] == 6.0 - 4.0 and row["unaccounted_s"] == 10.0 - 6.0


@pytest.mark.slow
def test_precedence_decides_which_bucket_and_so_which_names_share_an_instant(tmp_path):
    spans = [
        step("step1", 1, 0, 10),
        S("gen", "generation", 0, 10, parent="step1", bucket="productive"),
        S("lp", "logprob", 2, 4, parent="step1", bucket="overhead"),
    ]
    assert names_of(by_name(tmp_path, spans)["iterations"][0])[("logprob", "overhead")] == (0.0, 2.0)
    flipped = by_name(tmp_path, spans, "--precedence", "overhead,productive,idle,wasted")["iterations"][0]
    assert names_of(flipped) == {("generation", "productive"): (10.0 - 2.0, 10.0), ("logprob", "overhead"): (2.0, 2.0)}


def test_by_group_keys_by_span_group_and_a_missing_group_is_empty(tmp_path):
    out = by_name(
        tmp_path,
        [
            step("step1", 1, 0, 10),
            S("gen", "rl.grpo.generation", 0, 6, parent="step1", bucket="productive", group="generation"),
            S("val", "rl.grpo.validation", 6, 8, parent="step1", bucket="overhead", group="validation"),
            S("x", "something.else", 8, 9, parent="step1", bucket="overhead"),
        ],
        by="group",
    )
    row = out["iterations"][0]
    assert set(row["names"][0]) == {"group", "bucket", "wall_s", "span_s"}
    assert names_of(row, "group") == {
        ("generation", "productive"): (6.0, 6.0), ("validation", "overhead"): (2.0, 2.0), ("", "overhead"): (1.0, 1.0),
    }  # fmt: skip


def test_shares_that_do_not_divide_evenly_still_add_up_to_the_bucket_to_the_nanosecond(tmp_path):
    end = 1.000000001  # 1,000,000,001 ns among three names: 333,333,333.67 each
    spans = [step("step1", 1, 0, end)] + [
        S(label, label, 0, end, parent="step1", bucket="productive") for label in ("a", "b", "c")
    ]
    row = by_name(tmp_path, spans)["iterations"][0]
    walls = {n["name"]: round(n["wall_s"] * 1e9) for n in row["names"]}
    assert sum(walls.values()) == 1_000_000_001 == round(row["productive_s"] * 1e9)
    # the two nanoseconds left over go to the largest remainders, ties to the earlier name
    assert walls == {"a": 333_333_334, "b": 333_333_334, "c": 333_333_333}


@pytest.mark.slow
def test_the_table_has_a_block_per_iteration_and_total_only_gives_the_last(tmp_path):
    path = write_trace(
        tmp_path / "run.trace",
        [
            step("step1", 1, 0, 10),
            step("step2", 2, 10, 20),
            S("gen", "generation", 0, 5, parent="step1", bucket="productive"),
            S("gen2", "generation", 10, 12, parent="step2", bucket="productive"),
            S("bub", "refit_bubble", 12, 14, parent="step2", bucket="idle"),
        ],
    )
    table = invoke(["report", str(path), "--by", "name"], width=80)
    assert table.exit_code == 0, table.output
    text = table.stdout
    assert "iteration 1: 10.000 s window, goodput 50.0%" in text
    assert "iteration 2: 10.000 s window, goodput 20.0%" in text
    assert "total: 20.000 s over 2 iterations, goodput 35.0%" in text
    assert "refit_bubble" in text and "10.0%" in text  # 2 s of the 20 s total, and of window 2's 10 s: 20.0%
    assert max(len(line) for line in text.splitlines()) <= 80
    only = invoke(["report", str(path), "--by", "name", "--total"], width=80).stdout
    assert "iteration 1" not in only and only.startswith("total: 20.000 s")
    csv_out = invoke(["report", str(path), "--by", "name", "--format", "csv"]).stdout.splitlines()
    assert csv_out[0] == "iteration,name,bucket,wall_s,span_s,share"
    assert "total,generation,productive,7,7,0.35" in csv_out


def test_total_is_refused_without_a_breakdown_and_by_takes_four_values(tmp_path):
    path = write_trace(tmp_path / "run.trace", [step("step1", 1, 0, 10)])
    assert invoke(["report", str(path), "--total"]).exit_code == 2
    bad = invoke(["report", str(path), "--by", "phase"])
    assert bad.exit_code == 2 and "process, name, group or pool" in bad.output


# --- the sharing, checked against exact rationals over every elementary segment ----------------------------------


def exact_shares(spans: list[S], window: tuple[float, float]) -> dict[tuple[str, str], Fraction]:
    """Brute force: cut the window at every span edge, charge each piece to the first active bucket and split it
    equally among that bucket's distinct active names."""
    lo, hi = ns(window[0]), ns(window[1])
    bucketed = [(ns(s.start), ns(s.end), s.name, s.bucket) for s in spans if s.bucket in BUCKETS and s.end > s.start]
    cuts = sorted({lo, hi} | {t for s, e, _, _ in bucketed for t in (s, e) if lo < t < hi})
    out: dict[tuple[str, str], Fraction] = {}
    for a, b in zip(cuts, cuts[1:], strict=False):
        active = [(name, bucket) for s, e, name, bucket in bucketed if s < b and e > a]
        for bucket in BUCKETS:
            names = sorted({name for name, bk in active if bk == bucket})
            if names:
                for name in names:
                    out[(name, bucket)] = out.get((name, bucket), Fraction(0)) + Fraction(b - a, len(names))
                break
    return out


span_strategy = st.tuples(
    st.integers(0, 40), st.integers(0, 20), st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(BUCKETS),
    st.sampled_from(["p0", "p1"]),
)  # fmt: skip


@pytest.mark.slow
@settings(max_examples=7, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(span_strategy, min_size=1, max_size=12))
def test_names_sum_to_their_bucket_and_match_exact_shares_in_every_window_and_the_total(tmp_path, drawn):
    steps = [step("s1", 1, 0, 2.0), step("s2", 2, 2.0, 4.0)]
    spans = list(steps)
    for index, (start, length, name, bucket, process) in enumerate(drawn):
        parent = "s1" if start < 20 else "s2"
        spans.append(S(f"x{index}", name, start / 10, (start + length) / 10, parent=parent, bucket=bucket,
                       process=process))  # fmt: skip
    out = by_name(tmp_path, spans)
    plain = json.loads(invoke(["report", str(tmp_path / "run.trace"), "--format", "json", "--no-cache"]).stdout)
    # The breakdown's own sweep charges the windows; what it charges is what the report charges without it.
    assert [{k: v for k, v in row.items() if k != "names"} for row in out["iterations"]] == plain["iterations"]
    assert {k: v for k, v in out["total"].items() if k != "names"} == plain["total"]
    for row, window in zip(out["iterations"], [(0, 2.0), (2.0, 4.0)], strict=True):
        expected = exact_shares(spans, window)
        got = {(n["name"], n["bucket"]): round(n["wall_s"] * 1e9) for n in row["names"]}
        for key, value in expected.items():
            assert abs(got.get(key, 0) - value) < 1, (key, got.get(key), float(value))
        for bucket in BUCKETS:
            charged = sum(v for (_, b), v in got.items() if b == bucket)
            assert charged == round(row[f"{bucket}_s"] * 1e9)
    for bucket in BUCKETS:
        total = sum(round(n["wall_s"] * 1e9) for n in out["total"]["names"] if n["bucket"] == bucket)
        assert total == round(out["total"][f"{bucket}_s"] * 1e9)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["json", "csv", "markdown", "table"])
def test_the_sample_runs_break_down_in_every_format(fmt):
    result = invoke(["report", "sample_traces/grpo_sync/", "--by", "name", "--format", fmt])
    assert result.exit_code == 0, result.output
    assert "rl.grpo.generation" in result.stdout
