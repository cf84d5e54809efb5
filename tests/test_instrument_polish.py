"""Issue 11, instrumentation: what a new user and a code review tripped over, each hit the way a user hits it.

Real OTel SDK throughout: files on disk, a bare child process as a Ray worker is, or the SDK's in-memory exporter
handed to configure(); logging read with caplog on the "instrument" logger.
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
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

import instrument
from conftest import read_framed_spans
from instrument import (
    SPAN_GROUP_PRESETS,
    EveryGroupBut,
    RLSpanGroup,
    checkpoint_finalize_span,
    iteration_scope,
    managed_span,
    span_cm,
    umbrella_span,
)
from instrument.provider import STATE


def instrument_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "instrument" and r.levelno >= logging.WARNING]


class BatchRecorder(SpanExporter):
    """Keeps every span and the size of every batch the processor handed over."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.names: list[str] = []

    def export(self, spans):
        self.batches.append(len(spans))
        self.names.extend(span.name for span in spans)
        return SpanExportResult.SUCCESS


# --- OTEL_BSP_*: read as the SDK reads them, never a reason for configure() to raise --------------------------------


def test_the_sdks_own_default_queue_size_works(tmp_path, monkeypatch):
    """OTEL_BSP_MAX_QUEUE_SIZE=2048 is what the SDK uses by default; goodput's larger batch default gives way."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "2048")
    instrument.configure(span_groups="all", exporter="otlp-file", path=tmp_path / "run.otlp")
    with umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step"), managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
        pass
    instrument.shutdown()
    assert {s.name for s in read_framed_spans(tmp_path / "run.otlp")} == {"rl.grpo.step", "rl.grpo.generation"}


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_BSP_MAX_QUEUE_SIZE", "lots"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "-5"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "1e4"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "many"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0"),
        ("OTEL_BSP_SCHEDULE_DELAY", "0"),
        ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
        ("OTEL_BSP_EXPORT_TIMEOUT", "never"),
    ],
)
def test_a_value_the_sdk_would_refuse_is_logged_and_ignored(tmp_path, monkeypatch, caplog, variable, value):
    monkeypatch.setenv(variable, value)
    caplog.set_level(logging.WARNING, logger="instrument")
    instrument.configure(span_groups="all", exporter="otlp-file", path=tmp_path / "run.otlp")
    with managed_span(RLSpanGroup.REWARD, "rl.grpo.reward"):
        pass
    instrument.shutdown()
    assert [s.name for s in read_framed_spans(tmp_path / "run.otlp")] == ["rl.grpo.reward"]
    (message,) = [m for m in instrument_warnings(caplog) if variable in m]
    assert repr(value) in message or value in message


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_variable_counts_as_unset(monkeypatch, caplog, value):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", value)
    caplog.set_level(logging.WARNING, logger="instrument")
    instrument.configure(span_groups="all", exporter=BatchRecorder())
    assert STATE.processor is not None and STATE.processor._capacity == 65_536
    assert instrument_warnings(caplog) == []


def test_what_the_sdk_accepts_is_used(monkeypatch, caplog):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "5")
    caplog.set_level(logging.WARNING, logger="instrument")
    recorder = BatchRecorder()
    instrument.configure(span_groups="all", exporter=recorder)
    for i in range(12):
        with managed_span(RLSpanGroup.REWARD, f"rl.grpo.reward.{i}"):
            pass
    instrument.force_flush()
    assert len(recorder.names) == 12
    assert max(recorder.batches) <= 5
    assert instrument_warnings(caplog) == []


def test_a_batch_larger_than_the_queue_is_cut_to_the_queue_with_one_message(monkeypatch, caplog):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64")
    caplog.set_level(logging.WARNING, logger="instrument")
    recorder = BatchRecorder()
    instrument.configure(span_groups="all", exporter=recorder)
    for i in range(8):
        with managed_span(RLSpanGroup.REWARD, f"rl.grpo.reward.{i}"):
            pass
    instrument.force_flush()
    assert len(recorder.names) == 8 and max(recorder.batches) <= 8
    (message,) = instrument_warnings(caplog)
    assert "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=64" in message and "OTEL_BSP_MAX_QUEUE_SIZE=8" in message


def test_a_batch_larger_than_goodputs_default_queue_grows_the_queue(monkeypatch, caplog):
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100000")
    caplog.set_level(logging.WARNING, logger="instrument")
    instrument.configure(span_groups="all", exporter=BatchRecorder())
    assert STATE.processor is not None and STATE.processor._capacity == 100_000
    assert instrument_warnings(caplog) == []


@pytest.mark.parametrize("queue", ["2048", "lots"])
def test_a_worker_that_calls_configure_bare_survives_a_cluster_wide_variable(tmp_path, queue):
    """Ray workers call configure() bare: a variable set for the whole cluster must not stop any of them."""
    trace_dir = tmp_path / "run"
    instrument.configure(service_name="driver", span_groups="all", exporter="otlp-file", path=trace_dir)
    instrument.shutdown()
    child = """
        import instrument
        from instrument import RLSpanGroup, managed_span
        instrument.configure(service_name="worker")
        with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
            pass
    """
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(child)],
        env={**os.environ, "OTEL_BSP_MAX_QUEUE_SIZE": queue},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (written,) = trace_dir.iterdir()
    assert written.name.startswith("worker-")
    assert [s.name for s in read_framed_spans(written)] == ["rl.grpo.generation"]


# --- typos: an unknown group name is reported once, with the valid names; presets in any case ---------------------


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
    assert record.stack_info and "test_instrument_polish.py" in record.stack_info
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


# --- the reference module's missing names ------------------------------------------------------------------------


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


def test_span_cm_is_an_ungrouped_span_recorded_whatever_the_groups(memory_with):
    memory = memory_with("default")  # generation is off; span_cm belongs to no group
    with iteration_scope(5), span_cm("rl.grpo.custom_phase", team="rl") as outer:
        assert outer is not None
        with span_cm("rl.grpo.inner"):
            pass
    with pytest.raises(RuntimeError), span_cm("rl.grpo.fails"):
        raise RuntimeError("boom")
    with pytest.raises(KeyError), span_cm("rl.grpo.fails_quietly", record_exception=False):
        raise KeyError("quiet")
    spans = {s.name: s for s in memory.spans()}
    custom = spans["rl.grpo.custom_phase"]
    assert dict(custom.attributes) == {"rl.iteration": 5, "team": "rl"}  # no rl.span_group, no rl.bucket
    assert spans["rl.grpo.inner"].parent.span_id == custom.context.span_id
    assert spans["rl.grpo.fails"].status.status_code is StatusCode.ERROR
    assert [e.name for e in spans["rl.grpo.fails"].events] == ["exception"]
    assert spans["rl.grpo.fails_quietly"].status.status_code is StatusCode.ERROR
    assert spans["rl.grpo.fails_quietly"].events == ()
    instrument.shutdown()
    with span_cm("rl.grpo.unconfigured") as nothing:
        assert nothing is None


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


def test_checkpoint_finalize_span_records_async_save_as_newer_callers_pass_it(memory):
    with checkpoint_finalize_span(7, async_save=True):
        pass
    with checkpoint_finalize_span(8, async_save=False):
        pass
    with checkpoint_finalize_span(9):
        pass
    spans = {s.attributes["rl.iteration"]: s.attributes for s in memory.spans()}
    assert spans[7]["rl.checkpoint.async_save"] is True
    assert spans[8]["rl.checkpoint.async_save"] is False
    assert "rl.checkpoint.async_save" not in spans[9]
    assert not any("async_save" in key for attributes in spans.values() for key in attributes if key[:3] != "rl.")
    assert instrument.RL_CHECKPOINT_ASYNC_SAVE_ATTR == "rl.checkpoint.async_save"


def test_iteration_scope_of_none_changes_nothing(memory, caplog):
    caplog.set_level(logging.WARNING, logger="instrument")
    step = None  # a loop that learns its step only later
    with iteration_scope(step), managed_span(RLSpanGroup.GENERATION, "before"):
        pass
    with iteration_scope(3), iteration_scope(None), managed_span(RLSpanGroup.GENERATION, "inside"):
        pass
    with iteration_scope("not a step"), managed_span(RLSpanGroup.GENERATION, "garbled"):
        pass
    spans = {s.name: s.attributes for s in memory.spans()}
    assert "rl.iteration" not in spans["before"] and "rl.iteration" not in spans["garbled"]
    assert spans["inside"]["rl.iteration"] == 3
    assert [m for m in instrument_warnings(caplog) if "iteration_scope" in m] == [
        "goodput: iteration_scope('not a step') is not an integer iteration; spans inside it carry no rl.iteration"
    ]


# --- "every group but": a type of its own that means what it says under every set operation -----------------------

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
