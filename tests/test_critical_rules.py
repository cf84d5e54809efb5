"""SPEC section 14's dependencies as DuckDB works them out (`rollup.critical.causes`) are the rules read literally
(`critical_reference`): joined children, sequence anchors, wakeups, and every event's causes for re-timing, on the
shipped samples and on generated traces of a few processes with ties, zero-length spans, lost parents and made-ahead
work; and the re-timing with nothing sped up gives back every time as recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import critical_reference as reference
from rollup import open_store
from rollup.critical.causes import attempt_graph
from rollup.critical.graph import NONE
from rollup.store.attempts import ATTEMPT_SQL
from tracebuild import S, step, write_trace

REPO = Path(__file__).resolve().parents[1]
WAKEUP_NS = 20 * 10**6


def _held_to_the_reference(path: Path, wakeup_ns: int = WAKEUP_NS) -> int:
    """Compare every attempt of `path`; how many spans were compared."""
    compared = 0
    with open_store([str(path)], use_cache=False) as store:
        spans = store.spans()
        for (run_id,) in spans.rows(f"SELECT DISTINCT {ATTEMPT_SQL} FROM {spans.lineage}"):
            read, deps, graph = attempt_graph(spans, f"{ATTEMPT_SQL} = '{run_id}'", wakeup_ns)
            assert [list(deps.children(r)) for r in range(len(read))] == reference.joined(read)
            assert list(deps.anchor) == reference.anchors(read)
            assert list(deps.wakeup) == reference.wakeups(read, wakeup_ns)
            for e, (binding, gap, others) in enumerate(reference.causes(read, wakeup_ns)):
                tied = {(cause, NONE if who == NONE else read.name[who]) for cause, who in graph.ties.get(e, ())}
                found = {(graph.bind[e], graph.owner_name[e]), *tied} if graph.bind[e] != NONE else set()
                assert found == binding, e
                assert graph.gap[e] == gap, e
                assert set(graph.other[graph.other_at[e] : graph.other_at[e + 1]]) == others, e
            assert list(graph.retimed({})) == list(graph.times)  # nothing sped up: nothing moves
            compared += len(read)
    return compared


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["grpo_sync", "grpo_async", "grpo_restart", "grpo_buggy"])
def test_the_samples_dependencies_are_the_rules_read_literally(sample):
    assert _held_to_the_reference(REPO / "sample_traces" / sample) > 40


_PROCESSES = ["driver", "worker-a", "worker-b"]
_NAMES = [("rl.grpo.generation", "productive"), ("rl.grpo.policy_training", "productive"),
          ("rl.idle.refit_bubble", "idle"), ("rl.grpo.logprob", "overhead"), ("rl.grpo.rollout", None)]  # fmt: skip


@st.composite
def _traces(draw) -> list[S]:
    """A few steps, each with spans in three processes: children of the step, of each other, parentless ones
    carrying an iteration, spans made for the next step; times on a coarse grid, so ties and zero lengths happen."""
    spans: list[S] = []
    steps = draw(st.integers(1, 3))
    t = 0
    for n in range(1, steps + 1):
        length = draw(st.integers(4, 12))
        spans.append(step(f"step{n}", n, t, t + length))
        labels = [f"step{n}"]
        for k in range(draw(st.integers(1, 8))):
            name, bucket = draw(st.sampled_from(_NAMES))
            start = t + draw(st.integers(0, length))
            end = min(t + length, start + draw(st.integers(0, 4)))
            kind = draw(st.sampled_from(["child", "nested", "orphan", "ahead"]))
            label = f"s{n}_{k}"
            parent = {"child": f"step{n}", "nested": draw(st.sampled_from(labels)), "orphan": None,
                      "ahead": f"step{n}"}[kind]  # fmt: skip
            iteration = n + 1 if kind == "ahead" else (n if kind == "orphan" else None)
            trace = "t-orphan" if kind == "orphan" else "t1"
            spans.append(S(label, name, start, end, parent=parent, bucket=bucket, iteration=iteration,
                           process=draw(st.sampled_from(_PROCESSES)), trace=trace))  # fmt: skip
            labels.append(label)
        t += length + draw(st.integers(0, 2))
    return spans


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spans=_traces())
def test_generated_traces_dependencies_are_the_rules_read_literally(tmp_path_factory, spans):
    path = write_trace(tmp_path_factory.mktemp("rules") / "run.otlp", spans)
    _held_to_the_reference(path, wakeup_ns=2 * 10**9)  # a wide wakeup: the grid's seconds wake waits
