"""The span helpers and scopes, read back through the SDK's in-memory exporter injected via configure().

Which groups record, and what a misspelt one says, is in tests/test_instrument_span_groups.py.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

import instrument
from conftest import instrument_warnings
from instrument import (
    Bucket,
    RLSpanGroup,
    bucket_scope,
    checkpoint_finalize_span,
    efficiency_span,
    evaluate_span,
    iteration_scope,
    managed_span,
    setup_span,
    span_cm,
    start_efficiency_span,
    startup_span,
    streaming_umbrella_span,
    trace_fn,
    umbrella_span,
    umbrella_trace_fn,
)


def by_name(spans):
    out = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


# The public names of `nemo_rl.telemetry.instrumentation`, as its documentation lists them, with `is_span_group_enabled`
# and `span_cm`, which its `__all__` re-exports from nemo-lens (a copy: the repository reads nothing outside itself).
REFERENCE_PUBLIC_NAMES = {
    "Bucket", "COLLECTOR_LOOP_CATEGORIES", "EFFICIENCY_CATEGORY_BUCKET", "NO_SPAN", "RL_ALGORITHM", "RL_BUCKET_ATTR",
    "RL_EFFICIENCY_CATEGORY_ATTR", "RL_IDLE_POLLS_ATTR", "RL_ITERATION_ATTR", "TRACE_CARRIER_KWARG", "UMBRELLA_GROUPS",
    "UNBUCKETED_SPAN_CATEGORIES", "accepts_trace_context", "attached_context", "bucket_for_efficiency_category",
    "bucket_for_span_group", "bucket_scope", "checkpoint_finalize_span", "current_trace_carrier",
    "dispatch_with_trace_context", "efficiency_span", "evaluate_span", "goodput_span_attributes",
    "in_per_prompt_scope", "iteration_scope", "logger", "managed_span", "per_prompt_scope", "remote_trace_context",
    "remote_trace_parent", "safe_set_span_attributes", "setup_span", "start_efficiency_span", "startup_span",
    "streaming_umbrella_span", "trace_context_kwargs", "trace_fn", "umbrella_span", "umbrella_trace_fn",
    "is_span_group_enabled", "span_cm",
}  # fmt: skip
# What the reference's RLSpanGroup has besides the group names and their U_ aliases.
REFERENCE_RLSPANGROUP_NAMES = {"ALL_GROUPS", "resolve"}


def test_every_public_name_of_the_reference_module_exists():
    missing = sorted(name for name in REFERENCE_PUBLIC_NAMES if not hasattr(instrument, name))
    assert missing == []
    assert sorted(name for name in REFERENCE_RLSPANGROUP_NAMES if not hasattr(RLSpanGroup, name)) == []
    assert instrument.TRACE_CARRIER_KWARG == "_otel_carrier"
    assert [b.value for b in Bucket] == ["productive", "overhead", "idle", "wasted"]
    for alias in ("JOB", "STEP", "ROLLOUT", "MODEL_INIT", "EVALUATE", "SETUP", "PER_PROMPT"):
        assert getattr(RLSpanGroup, "U_" + alias) == getattr(RLSpanGroup, alias)
        assert getattr(RLSpanGroup, alias) in instrument.UMBRELLA_GROUPS


# The reference module's private state and helpers its own tests reach for (NeMo-RL's tests `.clear()` the warning
# sets between tests), and the names NeMo-RL's module added since the documented version.
REFERENCE_PRIVATE_NAMES = {
    "_F", "_CARRIER_REFUSED", "_LEAF_GROUP_AT_UMBRELLA_CALL", "_BUCKET_OVERRIDE", "_PER_PROMPT_SCOPE",
    "_DEFAULT_GROUP_BUCKET", "_advertise_carrier", "_dispatch_method_name", "_efficiency_span_name_and_attrs",
    "_no_span_activation", "_warn_leaf_group_at_umbrella_call",
}  # fmt: skip
NEWER_REFERENCE_NAMES = {
    "RL_CHECKPOINT_ASYNC_ATTR", "UMBRELLA_GROUP_VALUES", "INIT_TOTAL_CATEGORY", "RUN_WINDOW_WALL_CLOCK_CATEGORIES",
}  # fmt: skip


def test_the_reference_modules_private_names_and_newer_names_exist():
    assert sorted(n for n in REFERENCE_PRIVATE_NAMES | NEWER_REFERENCE_NAMES if not hasattr(instrument, n)) == []
    umbrella_values = frozenset(getattr(g, "value", g) for g in instrument.UMBRELLA_GROUPS)
    assert umbrella_values == instrument.UMBRELLA_GROUP_VALUES
    assert instrument.INIT_TOTAL_CATEGORY == "init/total"
    assert instrument.INIT_TOTAL_CATEGORY in instrument.UNBUCKETED_SPAN_CATEGORIES
    assert instrument._DEFAULT_GROUP_BUCKET["generation"] == Bucket.PRODUCTIVE


def test_the_leaf_group_warning_set_is_the_real_state_a_test_can_clear(memory, caplog):
    """`_LEAF_GROUP_AT_UMBRELLA_CALL` is the set the warning is said once for: cleared, it is said again."""
    with caplog.at_level(logging.WARNING, logger="instrument"):
        for _ in range(2):
            with umbrella_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                pass
        assert len(instrument_warnings(caplog)) == 1
        assert "rl.grpo.generation" in " ".join(instrument._LEAF_GROUP_AT_UMBRELLA_CALL)
        instrument._LEAF_GROUP_AT_UMBRELLA_CALL.clear()
        with umbrella_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
            pass
        assert len(instrument_warnings(caplog)) == 2
    instrument._CARRIER_REFUSED.clear()  # the other warning set, cleared in place as NeMo-RL's tests do
    assert set() == instrument._CARRIER_REFUSED


def test_an_iteration_out_of_64_bit_range_warns_once_and_keeps_the_span(memory, caplog):
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            with iteration_scope(2**64), managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                pass
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "2**64" not in said[0].getMessage() and "64-bit" in said[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)  # no OpenTelemetry traceback in the job's log
    spans = memory.spans()
    assert [s.name for s in spans] == ["rl.grpo.generation"] * 2
    assert all("rl.iteration" not in s.attributes for s in spans)


def test_bucket_tables_match_the_spec():
    assert instrument.bucket_for_span_group("generation") is Bucket.PRODUCTIVE
    assert instrument.bucket_for_span_group("policy_update") is Bucket.PRODUCTIVE
    assert instrument.bucket_for_span_group("checkpoint") is Bucket.OVERHEAD
    assert instrument.bucket_for_span_group("a_brand_new_leaf") is Bucket.OVERHEAD
    assert instrument.bucket_for_span_group("rollout") is None
    assert instrument.bucket_for_efficiency_category("idle/refit_bubble") is Bucket.IDLE
    assert instrument.bucket_for_efficiency_category("wasted/failed_trajectory") is Bucket.WASTED
    assert instrument.bucket_for_efficiency_category("init/total") is Bucket.OVERHEAD
    assert {"idle/refit_event_wait", "idle/generation_limit_pause"} == instrument.COLLECTOR_LOOP_CATEGORIES
    assert instrument.COLLECTOR_LOOP_CATEGORIES | {"init/total"} == instrument.UNBUCKETED_SPAN_CATEGORIES


def test_leaf_spans_carry_their_groups_bucket_and_umbrellas_none(memory):
    with umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step") as step:
        with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation") as gen:
            assert gen is not None
        with managed_span(RLSpanGroup.LOGPROB, "rl.grpo.logprob"):
            pass
        with managed_span("my_new_leaf", "rl.grpo.custom"):
            pass
    spans = by_name(memory.spans())
    assert spans["rl.grpo.generation"][0].attributes["rl.bucket"] == "productive"
    assert spans["rl.grpo.logprob"][0].attributes["rl.bucket"] == "overhead"
    assert spans["rl.grpo.custom"][0].attributes["rl.bucket"] == "overhead"
    assert "rl.bucket" not in spans["rl.grpo.step"][0].attributes
    assert spans["rl.grpo.generation"][0].parent.span_id == step.get_span_context().span_id
    for span in memory.spans():
        assert span.attributes["rl.span_group"]


def test_explicit_bucket_wins_and_bucket_scope_only_moves_group_buckets(memory):
    with bucket_scope(Bucket.OVERHEAD):
        with managed_span(RLSpanGroup.GENERATION, "scoped"):
            pass
        with managed_span(RLSpanGroup.GENERATION, "explicit", **{"rl.bucket": Bucket.WASTED}):
            pass
        with umbrella_span(RLSpanGroup.U_ROLLOUT, "umbrella"):
            pass
        with efficiency_span("idle/refit_bubble"):
            pass
    with managed_span(RLSpanGroup.GENERATION, "after"):
        pass
    spans = {s.name: s for s in memory.spans()}
    assert spans["scoped"].attributes["rl.bucket"] == "overhead"
    assert spans["explicit"].attributes["rl.bucket"] == "wasted"
    assert "rl.bucket" not in spans["umbrella"].attributes
    assert spans["rl.idle.refit_bubble"].attributes["rl.bucket"] == "idle"
    assert spans["after"].attributes["rl.bucket"] == "productive"


def test_iteration_scope_stamps_every_span_on_the_provider_but_explicit_values_win(memory):
    foreign = trace.get_tracer("some.auto.instrumentation")
    with iteration_scope(412), umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step"):
        with managed_span(RLSpanGroup.REWARD, "rl.grpo.reward"), foreign.start_as_current_span("aiohttp GET"):
            pass
        with checkpoint_finalize_span(411):
            pass
        with evaluate_span("grpo", **{"rl.iteration": 0}):
            pass
    with managed_span(RLSpanGroup.REWARD, "outside"):
        pass
    spans = {s.name: s for s in memory.spans()}
    assert spans["rl.grpo.step"].attributes["rl.iteration"] == 412
    assert spans["rl.grpo.reward"].attributes["rl.iteration"] == 412
    assert spans["aiohttp GET"].attributes["rl.iteration"] == 412
    assert spans["aiohttp GET"].parent.span_id == spans["rl.grpo.reward"].context.span_id
    assert spans["rl.checkpoint.finalize"].attributes["rl.iteration"] == 411
    assert spans["rl.grpo.evaluate"].attributes["rl.iteration"] == 0
    assert "rl.iteration" not in spans["outside"].attributes


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


def test_umbrella_span_given_a_leaf_group_warns_once_per_name_and_emits_a_leaf(memory, caplog):
    caplog.set_level(logging.WARNING, logger="instrument")
    for _ in range(3):
        with umbrella_span(RLSpanGroup.GENERATION, "rl.grpo.misfiled"):
            pass
    with umbrella_span(RLSpanGroup.GENERATION, "rl.grpo.misfiled_too"):
        pass
    records = [r for r in caplog.records if "leaf group" in r.getMessage()]
    assert len(records) == 2
    assert records[0].stack_info and "test_instrument_spans.py" in records[0].stack_info
    spans = by_name(memory.spans())
    assert all(s.attributes["rl.bucket"] == "productive" for s in spans["rl.grpo.misfiled"])


def test_efficiency_spans_take_the_category_bucket_and_collector_waits_are_unbucketed(memory):
    with efficiency_span("wasted/failed_trajectory"):
        pass
    with efficiency_span("idle/refit_event_wait"):
        pass
    with efficiency_span("init/total"):
        pass
    spans = {s.name: s for s in memory.spans()}
    assert spans["rl.wasted.failed_trajectory"].attributes["rl.bucket"] == "wasted"
    assert spans["rl.wasted.failed_trajectory"].attributes["rl.efficiency.category"] == "wasted/failed_trajectory"
    assert "rl.bucket" not in spans["rl.idle.refit_event_wait"].attributes
    assert "rl.bucket" not in spans["rl.init.total"].attributes
    assert all(s.attributes["rl.span_group"] == "efficiency" for s in spans.values())


def test_start_efficiency_span_is_not_attached(memory):
    with umbrella_span(RLSpanGroup.U_ROLLOUT, "rl.grpo.rollout") as rollout:
        wait = start_efficiency_span("idle/buffer_starvation", **{"rl.idle.polls": 0})
        with managed_span(RLSpanGroup.DATA_PLANE, "rl.grpo.data_plane"):
            pass
        wait.set_attribute("rl.idle.polls", 7)
        wait.end()
    spans = {s.name: s for s in memory.spans()}
    starvation = spans["rl.idle.buffer_starvation"]
    assert starvation.attributes["rl.bucket"] == "idle"
    assert starvation.attributes["rl.idle.polls"] == 7
    assert starvation.parent.span_id == rollout.get_span_context().span_id
    assert spans["rl.grpo.data_plane"].parent.span_id == rollout.get_span_context().span_id


def test_evaluate_span_makes_generation_overhead(memory):
    with evaluate_span("grpo") as evaluate, managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
        pass
    spans = {s.name: s for s in memory.spans()}
    assert evaluate is not None
    assert spans["rl.grpo.generation"].attributes["rl.bucket"] == "overhead"
    assert spans["rl.grpo.evaluate"].attributes["rl.algorithm"] == "grpo"
    assert "rl.bucket" not in spans["rl.grpo.evaluate"].attributes


def test_startup_and_setup_spans_are_unbucketed_umbrellas(memory):
    with startup_span(), setup_span("workers"), setup_span("collectives"):
        pass
    spans = {s.name: s for s in memory.spans()}
    assert set(spans) == {"rl.startup", "rl.setup.workers", "rl.setup.collectives"}
    assert all("rl.bucket" not in s.attributes and s.attributes["rl.span_group"] == "setup" for s in spans.values())
    assert spans["rl.setup.collectives"].parent.span_id == spans["rl.setup.workers"].context.span_id


def test_checkpoint_finalize_on_a_thread_keeps_its_explicit_iteration_and_no_bucket(memory):
    def finalize():
        with checkpoint_finalize_span(7):
            time.sleep(0.01)

    with iteration_scope(8):
        thread = threading.Thread(target=finalize)
        thread.start()
        thread.join()
    (span,) = memory.spans()
    assert span.attributes["rl.iteration"] == 7
    assert span.attributes["rl.span_group"] == "checkpoint"
    assert "rl.bucket" not in span.attributes


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


def test_trace_fn_covers_sync_and_awaited_bodies_and_keeps_exceptions(memory):
    @trace_fn(RLSpanGroup.REWARD, "rl.grpo.reward")
    def reward(x):
        time.sleep(0.02)
        return x + 1

    @trace_fn(RLSpanGroup.GENERATION, "rl.grpo.generation")
    async def generate(x):
        await asyncio.sleep(0.05)
        return x * 2

    @umbrella_trace_fn(RLSpanGroup.U_JOB, "rl.grpo.job")
    def job():
        raise RuntimeError("boom")

    assert reward(1) == 2
    assert asyncio.run(generate(3)) == 6
    with pytest.raises(RuntimeError, match="boom"):
        job()
    spans = {s.name: s for s in memory.spans()}
    assert (spans["rl.grpo.reward"].end_time - spans["rl.grpo.reward"].start_time) / 1e9 >= 0.02
    assert (spans["rl.grpo.generation"].end_time - spans["rl.grpo.generation"].start_time) / 1e9 >= 0.05
    assert spans["rl.grpo.job"].status.status_code.name == "ERROR"
    assert spans["rl.grpo.job"].events[0].name == "exception"


def test_trace_fn_on_an_async_generator_spans_the_stream_and_parents_each_step(memory):
    @umbrella_trace_fn(RLSpanGroup.U_ROLLOUT, "rl.grpo.rollout")
    async def rollouts(n):
        for i in range(n):
            with managed_span(RLSpanGroup.GENERATION, f"gen{i}"):
                await asyncio.sleep(0.001)
            yield i

    async def consume():
        return [item async for item in rollouts(3)]

    assert asyncio.run(consume()) == [0, 1, 2]
    spans = {s.name: s for s in memory.spans()}
    rollout_id = spans["rl.grpo.rollout"].context.span_id
    assert [spans[f"gen{i}"].parent.span_id for i in range(3)] == [rollout_id] * 3


def test_streaming_umbrella_span_abandoned_stream_never_fails_to_detach(memory, caplog):
    caplog.set_level(logging.DEBUG)

    async def stream():
        i = 0
        while True:
            with managed_span(RLSpanGroup.GENERATION, f"item{i}"):
                await asyncio.sleep(0)
            yield i
            i += 1

    async def consumer():
        gen = stream()
        with streaming_umbrella_span(RLSpanGroup.U_ROLLOUT, "rl.grpo.stream") as activate:
            for _ in range(2):
                with activate():
                    await gen.__anext__()
        return gen  # abandoned mid-stream, never closed, like a cancelled Ray streaming call

    gen = asyncio.run(consumer())
    del gen
    gc.collect()
    assert not [r for r in caplog.records if "Failed to detach" in r.getMessage()]
    spans = {s.name: s for s in memory.spans()}
    stream_id = spans["rl.grpo.stream"].context.span_id
    assert spans["item0"].parent.span_id == stream_id and spans["item1"].parent.span_id == stream_id


def test_per_prompt_scope():
    assert not instrument.in_per_prompt_scope()
    with instrument.per_prompt_scope():
        assert instrument.in_per_prompt_scope()
        group = RLSpanGroup.PER_PROMPT if instrument.in_per_prompt_scope() else RLSpanGroup.DATA_PLANE
        assert group == "per_prompt"
    assert not instrument.in_per_prompt_scope()


def test_configure_twice_replaces_the_setup_without_the_sdks_refusal(memory_with, caplog):
    caplog.set_level(logging.WARNING)
    first = memory_with("all")
    foreign = trace.get_tracer("auto")
    with foreign.start_as_current_span("one"):
        pass
    second = memory_with("all")
    with foreign.start_as_current_span("two"):
        pass
    assert [s.name for s in first.spans()] == ["one"]
    assert [s.name for s in second.spans()] == ["two"]
    assert not [r for r in caplog.records if "Overriding" in r.getMessage()]


def test_carrier_functions_hand_the_parent_to_a_raw_thread(memory):
    assert instrument.current_trace_carrier() == {}
    assert instrument.trace_context_kwargs() == {}
    assert instrument.remote_trace_parent(None) is None
    assert instrument.remote_trace_parent({"traceparent": "garbage"}) is None
    seen = {}

    def worker(carrier):
        with (
            instrument.remote_trace_context(carrier),
            managed_span(RLSpanGroup.CHECKPOINT, "rl.checkpoint.write") as span,
        ):
            seen["span"] = span

    with umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step") as step:
        carrier = instrument.current_trace_carrier()
        assert carrier["traceparent"].startswith("00-")
        assert instrument.trace_context_kwargs() == {"_otel_carrier": carrier}
        thread = threading.Thread(target=worker, args=(carrier,))
    thread.start()
    thread.join()
    spans = {s.name: s for s in memory.spans()}
    assert spans["rl.checkpoint.write"].parent.span_id == step.get_span_context().span_id
    assert spans["rl.checkpoint.write"].context.trace_id == step.get_span_context().trace_id


class _BlockingExporter(SpanExporter):
    """A real exporter that holds its first batch until released: the queue behind it fills up."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.exported = 0

    def export(self, spans):
        self.release.wait(10)
        self.exported += len(spans)
        return SpanExportResult.SUCCESS


class _FailingExporter(SpanExporter):
    def export(self, spans):
        raise OSError("disk full")


def test_a_full_queue_drops_and_counts(monkeypatch, caplog):
    caplog.set_level(logging.WARNING)
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    exporter = _BlockingExporter()
    instrument.configure(exporter=exporter, span_groups="all")
    for i in range(200):
        with managed_span(RLSpanGroup.DATA_PLANE, f"burst{i}"):
            pass
    dropped = instrument.dropped_spans()
    exporter.release.set()
    instrument.shutdown()
    assert dropped > 0
    assert exporter.exported + dropped >= 200 - 8
    assert any("dropped" in r.getMessage() for r in caplog.records)


def test_an_exporter_failure_never_reaches_the_training_loop(caplog):
    caplog.set_level(logging.ERROR)
    instrument.configure(exporter=_FailingExporter(), span_groups="all")
    with managed_span(RLSpanGroup.POLICY_UPDATE, "rl.grpo.policy_training") as span:
        pass
    span.set_attribute("late", 1)  # on an ended span: the SDK logs and returns
    instrument.force_flush()
    instrument.shutdown()
    assert any(
        "disk full" in (r.exc_text or "") or "Exception while exporting" in r.getMessage() for r in caplog.records
    )


def test_iteration_and_bucket_scopes_ride_the_carrier_to_another_thread(memory):
    def remote_generation(carrier):
        with (
            instrument.remote_trace_context(carrier),
            managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"),
        ):
            pass

    with iteration_scope(9), evaluate_span("grpo"):
        carrier = instrument.current_trace_carrier()
        thread = threading.Thread(target=remote_generation, args=(carrier,))
    thread.start()
    thread.join()
    assert "goodput.iteration=9" in carrier["baggage"] and "goodput.bucket_scope=overhead" in carrier["baggage"]
    spans = {s.name: s for s in memory.spans()}
    assert spans["rl.grpo.generation"].attributes["rl.bucket"] == "overhead"  # validation, even in another thread
    assert spans["rl.grpo.generation"].attributes["rl.iteration"] == 9
    assert instrument.in_per_prompt_scope() is False


# --- span_cm: a span of no group --------------------------------------------------------------------------------------


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
