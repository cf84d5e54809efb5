"""Span groups: which record under each preset or list, names matched in any case, a misspelt group or preset
reported once with the valid names (in the job and in a bare worker that inherits it), and `EveryGroupBut`, the
type of "every group but these", which means what it says under every set operation.

Real OTel SDK throughout: the SDK's in-memory exporter handed to configure(), or a bare child process as a Ray
worker is; logging read with caplog on the "instrument" logger.
"""

from __future__ import annotations

import copy
import logging
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import instrument
from conftest import BatchRecorder, instrument_warnings
from instrument import (
    NO_SPAN,
    SPAN_GROUP_PRESETS,
    EveryGroupBut,
    RLSpanGroup,
    managed_span,
    start_efficiency_span,
    streaming_umbrella_span,
    umbrella_span,
)
from instrument.provider import STATE

# --- which groups record ----------------------------------------------------------------------------------------------


def test_disabled_groups_yield_none_and_emit_nothing(memory_with):
    memory = memory_with("default")
    with managed_span(RLSpanGroup.GENERATION, "off") as off:
        assert off is None
    with umbrella_span(RLSpanGroup.U_JOB, "rl.grpo.job") as job:
        assert job is not None
    assert managed_span(RLSpanGroup.GENERATION, "off") is NO_SPAN
    assert start_efficiency_span("idle/buffer_starvation") is None
    with streaming_umbrella_span(RLSpanGroup.U_ROLLOUT, "rl.grpo.rollout") as activate, activate() as nothing:
        assert nothing is None
    instrument.safe_set_span_attributes(off, {"a": 1})
    assert [s.name for s in memory.spans()] == ["rl.grpo.job"]


@pytest.mark.parametrize(
    ("preset", "on", "off"),
    [
        ("default", {"job", "checkpoint", "evaluate", "model_init", "setup"}, {"generation", "step", "efficiency"}),
        ("per_step", {"generation", "step", "efficiency", "rollout"}, {"per_prompt"}),
        ("all", {"per_prompt", "generation"}, set()),
        ("generation, reward", {"generation", "reward"}, {"job", "step"}),
        (["step", "default"], {"step", "job"}, {"generation"}),
    ],
)
def test_span_group_presets_and_lists(memory_with, preset, on, off):
    memory_with(preset)
    for group in on:
        with managed_span(group, f"x.{group}") as span:
            assert span is not None, group
    for group in off:
        with managed_span(group, f"x.{group}") as span:
            assert span is None, group


def test_is_span_group_enabled_follows_the_configuration(memory_with, caplog):
    caplog.set_level(logging.WARNING, logger="instrument")
    instrument.shutdown()
    assert instrument.is_span_group_enabled(RLSpanGroup.JOB) is False  # nothing configured
    memory_with("default")
    assert instrument.is_span_group_enabled(RLSpanGroup.JOB) is True
    assert instrument.is_span_group_enabled(RLSpanGroup.GENERATION) is False
    memory_with("per_step")
    assert instrument.is_span_group_enabled(RLSpanGroup.GENERATION) is True
    assert instrument.is_span_group_enabled(RLSpanGroup.PER_PROMPT) is False
    assert instrument.is_span_group_enabled("a_groups_own_leaf") is True  # as managed_span would record it
    assert len(unknown_group_messages(caplog, "a_groups_own_leaf")) == 1
    instrument.shutdown()
    assert instrument.is_span_group_enabled(RLSpanGroup.GENERATION) is False


def test_rlspangroup_lists_its_groups_and_resolves_specs():
    groups = list(RLSpanGroup)
    assert len(groups) == len(set(groups)) == len(RLSpanGroup) == 16  # every group once; the U_ aliases are not groups
    assert set(groups) == RLSpanGroup.ALL_GROUPS
    leaves = {"generation", "reward", "policy_update", "logprob", "advantage", "data_processing", "data_plane"}
    assert set(groups) == instrument.UMBRELLA_GROUPS | leaves | {"checkpoint", "efficiency"}
    assert RLSpanGroup.GENERATION in RLSpanGroup and "generaton" not in RLSpanGroup
    assert RLSpanGroup.resolve("default") == SPAN_GROUP_PRESETS["default"]
    assert RLSpanGroup.resolve("per_step") == SPAN_GROUP_PRESETS["per_step"]
    assert RLSpanGroup.resolve("Job, generation") == frozenset({"job", "generation"})
    assert RLSpanGroup.resolve(["per_step", "per_prompt"]) == SPAN_GROUP_PRESETS["all"]
    assert RLSpanGroup.resolve(RLSpanGroup) == RLSpanGroup.ALL_GROUPS  # the class itself is a list of its groups


# --- typos: an unknown group name is reported once, with the valid names; presets in any case -------------------------


def unknown_group_messages(caplog, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "instrument" and f"{name!r} is not a span group" in r.getMessage()]


def test_a_misspelt_preset_is_reported_once_with_the_valid_names(memory_with, caplog):
    caplog.set_level(logging.WARNING, logger="instrument")
    memory = memory_with("per-step")
    memory_with("per-step")  # configured again, as a notebook or a relaunch does: still one message
    with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
        pass
    assert memory.spans() == []  # as before: the typo enables nothing of goodput's, but now it says so
    (record,) = unknown_group_messages(caplog, "per-step")
    message = record.getMessage()
    assert "did you mean 'per_step'" in message
    assert all(group in message for group in RLSpanGroup) and "default, per_step, all" in message


@pytest.mark.parametrize("spec", ["Per_Step", "PER_STEP", " per_step ", "ALL", "Default,Generation"])
def test_preset_and_group_names_are_matched_in_any_case(memory_with, caplog, spec):
    caplog.set_level(logging.WARNING, logger="instrument")
    memory = memory_with(spec)
    with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
        pass
    assert [s.name for s in memory.spans()] == ["rl.grpo.generation"]
    assert instrument_warnings(caplog) == []


def test_a_misspelt_group_at_a_call_site_is_reported_once_with_its_call_site(memory_with, caplog):
    caplog.set_level(logging.WARNING, logger="instrument")
    memory = memory_with("per_step")
    for _ in range(100):
        with managed_span("generaton", "rl.grpo.generation"):
            pass
    (record,) = unknown_group_messages(caplog, "generaton")
    assert "did you mean 'generation'" in record.getMessage() and "overhead" in record.getMessage()
    assert record.stack_info and "test_instrument_span_groups.py" in record.stack_info
    spans = memory.spans()
    assert len(spans) == 100 and {s.attributes["rl.bucket"] for s in spans} == {"overhead"}  # SPEC 1, unchanged


def test_a_misspelt_group_is_reported_even_where_it_is_off(memory_with, caplog):
    """Enabled by name, the real group records; the misspelt one records nothing and is no longer silent."""
    caplog.set_level(logging.WARNING, logger="instrument")
    memory = memory_with(["generation"])
    with managed_span("generatoin", "rl.grpo.generation") as span:
        assert span is None
    with umbrella_span("stpe", "rl.grpo.step") as span:
        assert span is None
    assert memory.spans() == []
    assert len(unknown_group_messages(caplog, "generatoin")) == 1
    assert len(unknown_group_messages(caplog, "stpe")) == 1


def test_a_jobs_own_leaf_group_is_reported_once_and_recorded_as_overhead(memory_with, caplog):
    caplog.set_level(logging.WARNING, logger="instrument")
    memory = memory_with("default,tokenizer_warmup")
    for _ in range(3):
        with managed_span("tokenizer_warmup", "rl.grpo.tokenizer_warmup"):
            pass
    assert len(unknown_group_messages(caplog, "tokenizer_warmup")) == 1  # the spec and the call site: one message
    spans = memory.spans()
    assert len(spans) == 3
    assert spans[0].attributes["rl.span_group"] == "tokenizer_warmup" and spans[0].attributes["rl.bucket"] == "overhead"


@pytest.mark.slow
def test_an_unknown_group_from_the_environment_is_reported_in_a_bare_worker(tmp_path):
    instrument.configure(service_name="driver", span_groups="per_stpe", exporter="otlp-file", path=tmp_path)
    instrument.shutdown()
    child = """
        import instrument
        instrument.configure(service_name="worker")
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(child)], env=dict(os.environ), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    assert "'per_stpe' is not a span group" in result.stderr and "did you mean 'per_step'" in result.stderr


# --- "every group but": a type of its own that means what it says under every set operation ---------------------------

per_step = SPAN_GROUP_PRESETS["per_step"]


every = SPAN_GROUP_PRESETS["all"]


known = RLSpanGroup.ALL_GROUPS


def test_every_group_but_is_never_empty_and_keeps_its_meaning_under_union():
    assert bool(every) and bool(per_step)
    for enabled in (per_step | {"my_leaf"}, {"my_leaf"} | per_step, set() | per_step, per_step.union(["my_leaf"])):
        assert isinstance(enabled, EveryGroupBut), enabled  # "every group but", not "only these"
        assert "generation" in enabled and "my_leaf" in enabled and "per_prompt" not in enabled
    assert per_step | {"per_prompt"} == every == frozenset({"per_prompt"}) | per_step
    assert per_step | every == every


def test_every_group_but_under_intersection_difference_and_symmetric_difference():
    assert per_step & {"generation", "per_prompt"} == frozenset({"generation"})
    assert {"generation", "per_prompt"} & per_step == frozenset({"generation"})
    assert known & per_step == known - {"per_prompt"}
    assert per_step & every == per_step
    without = per_step - {"data_plane"}
    assert isinstance(without, EveryGroupBut) and "data_plane" not in without and "generation" in without
    assert {"generation", "per_prompt"} - per_step == frozenset({"per_prompt"})
    assert every - per_step == frozenset({"per_prompt"}) and per_step - every == frozenset()
    assert per_step ^ {"per_prompt", "generation"} == EveryGroupBut({"generation"})
    assert {"per_prompt", "generation"} ^ per_step == EveryGroupBut({"generation"})
    assert every ^ per_step == frozenset({"per_prompt"})
    assert per_step.intersection(["generation", "per_prompt"]) == frozenset({"generation"})
    assert per_step.difference(["generation"]) == EveryGroupBut({"generation", "per_prompt"})
    assert per_step.symmetric_difference(["per_prompt"]) == every


def test_every_group_but_equality_order_and_hashing():
    assert per_step == EveryGroupBut({"per_prompt"}) == EveryGroupBut(["per_prompt"]) == EveryGroupBut("per_prompt")
    assert per_step != known - {"per_prompt"} and known != every
    assert per_step != set() and every != frozenset()
    assert len({per_step, EveryGroupBut({"per_prompt"}), every}) == 2
    assert per_step < every and every > per_step and per_step <= per_step and not every <= per_step
    assert {"generation"} <= per_step and {"generation"} < per_step and not {"per_prompt"} <= per_step
    assert not per_step <= known  # a set without end is inside no set with one
    assert per_step.issuperset(["generation"]) and per_step.isdisjoint(["per_prompt"])
    assert not per_step.isdisjoint(["per_prompt", "job"]) and per_step.issubset(every)


def test_every_group_but_refuses_to_be_listed_with_a_clear_error():
    for attempt in (list, set, frozenset, len, sorted, iter):
        with pytest.raises(TypeError, match=r"every span group but 'per_prompt'.*RLSpanGroup\.ALL_GROUPS & groups"):
            attempt(per_step)
    with pytest.raises(TypeError, match="preset's name"):
        instrument.configure(span_groups=per_step, exporter=BatchRecorder())


def test_every_group_but_reads_as_what_it_is_and_stays_as_it_is():
    assert repr(per_step) == "EveryGroupBut({'per_prompt'})"
    assert repr(every) == "EveryGroupBut()"
    assert repr(per_step - {"data_plane"}) == "EveryGroupBut({'data_plane', 'per_prompt'})"
    assert pickle.loads(pickle.dumps(per_step)) == per_step and copy.deepcopy(every) == every
    with pytest.raises(AttributeError):
        per_step.excluded = frozenset()  # type: ignore[misc]
    assert per_step == EveryGroupBut({"per_prompt"})  # the preset is unchanged


def test_a_composed_every_group_but_gates_spans_as_it_reads(memory_with):
    """What a user does with the value: everything per_step has, and the per-prompt spans too."""
    wanted = RLSpanGroup.resolve("per_step") | {RLSpanGroup.PER_PROMPT}
    memory = memory_with(["per_step", "per_prompt"])
    assert STATE.enabled == wanted
    with managed_span(RLSpanGroup.PER_PROMPT, "rl.grpo.per_prompt"), managed_span("my_leaf", "rl.grpo.my_leaf"):
        pass
    assert {s.name for s in memory.spans()} == {"rl.grpo.per_prompt", "rl.grpo.my_leaf"}
