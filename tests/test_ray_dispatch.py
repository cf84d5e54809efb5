"""The Ray hand-off of the trace context: the wrapper on its own, then real actors on the session's local cluster."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from pathlib import Path

import pytest
import ray
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import instrument
from conftest import read_framed_spans, read_json_lines_spans
from instrument import RLSpanGroup, accepts_trace_context, dispatch_with_trace_context, managed_span, umbrella_span
from instrument.context import TRACE_CARRIER_KWARG, current_trace_carrier
from instrument.provider import STATE
from instrument.ray_dispatch import _dispatch_method_name

LEAF = RLSpanGroup.REWARD  # any leaf group; "all" is enabled below


def parent_of(span):
    return span.parent.span_id if span.parent is not None else None


# --- the wrapper, without Ray -------------------------------------------------------------------------------------


@accepts_trace_context
def sync_callee(x: int, *, y: int = 1) -> int:
    with managed_span(LEAF, "callee"):
        return x + y


@accepts_trace_context
async def async_callee(x: int) -> int:
    await asyncio.sleep(0)
    with managed_span(LEAF, "callee"):
        return x


@accepts_trace_context
def sync_stream(n: int):
    for index in range(n):
        with managed_span(LEAF, f"callee{index}"):
            pass
        yield index


@accepts_trace_context
async def async_stream(n: int):
    for index in range(n):
        await asyncio.sleep(0)
        with managed_span(LEAF, f"callee{index}"):
            pass
        yield index


def consume_sync_stream(carrier):
    stream = sync_stream(2, **{TRACE_CARRIER_KWARG: carrier})
    items = []
    for item in stream:
        # Between steps the caller's context is its own again: nothing stays attached across the yield.
        assert not trace.get_current_span().get_span_context().is_valid
        items.append(item)
    return items


async def consume_async_stream(carrier):
    items = []
    async for item in async_stream(2, **{TRACE_CARRIER_KWARG: carrier}):
        assert not trace.get_current_span().get_span_context().is_valid
        items.append(item)
    return items


CALLS = {
    "sync": (lambda carrier: sync_callee(1, y=2, **{TRACE_CARRIER_KWARG: carrier}), 1 + 2, ["callee"]),
    "async": (lambda carrier: asyncio.run(async_callee(5, **{TRACE_CARRIER_KWARG: carrier})), 5, ["callee"]),
    "sync-generator": (consume_sync_stream, [0, 1], ["callee0", "callee1"]),
    "async-generator": (lambda carrier: asyncio.run(consume_async_stream(carrier)), [0, 1], ["callee0", "callee1"]),
}


@pytest.mark.parametrize("kind", CALLS)
def test_wrapper_strips_the_carrier_and_parents_the_body_to_it(memory, kind):
    call, expected, callee_names = CALLS[kind]
    with umbrella_span(RLSpanGroup.U_STEP, "driver"):
        carrier = current_trace_carrier()
    assert carrier  # the driver span is recording, so there is something to hand over

    assert call(carrier) == expected

    spans = {span.name: span for span in memory.spans()}
    driver = spans["driver"]
    for name in callee_names:
        assert spans[name].context.trace_id == driver.context.trace_id
        assert parent_of(spans[name]) == driver.context.span_id
    assert not trace.get_current_span().get_span_context().is_valid  # detached again after the call


def test_wrapper_runs_the_body_unparented_without_a_carrier(memory):
    assert sync_callee(1) == 2
    spans = {span.name: span for span in memory.spans()}
    assert spans["callee"].parent is None


def test_abandoned_async_stream_detaches_cleanly(memory, caplog):
    """A consumer that stops early (a cancelled Ray stream) leaves the generator to be closed from another task."""

    async def take_one(carrier):
        stream = async_stream(3, **{TRACE_CARRIER_KWARG: carrier})
        return await stream.__anext__()  # abandoned here; asyncio.run finalizes it in a task of its own

    with umbrella_span(RLSpanGroup.U_STEP, "driver"):
        carrier = current_trace_carrier()
    with caplog.at_level(logging.ERROR):
        assert asyncio.run(take_one(carrier)) == 0
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    spans = {span.name: span for span in memory.spans()}
    assert parent_of(spans["callee0"]) == spans["driver"].context.span_id


def test_generator_wrapper_forwards_send_and_throw():
    @accepts_trace_context
    def echo():
        received = yield "ready"
        try:
            yield received
        except KeyError:
            yield "caught"

    stream = echo(**{TRACE_CARRIER_KWARG: {}})
    assert next(stream) == "ready"
    assert stream.send("ping") == "ping"
    assert stream.throw(KeyError("k")) == "caught"


def test_signature_advertises_the_carrier_once_even_when_decorated_twice():
    def original(self, x, *, y=1):
        return x

    twice = accepts_trace_context(accepts_trace_context(original))
    parameters = inspect.signature(inspect.unwrap(twice)).parameters
    assert list(parameters) == ["self", "x", "y", TRACE_CARRIER_KWARG]
    assert parameters[TRACE_CARRIER_KWARG].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters[TRACE_CARRIER_KWARG].default is None
    assert "__signature__" not in vars(original)  # the user's function is left alone

    def takes_kwargs(self, **kwargs):
        return kwargs

    assert TRACE_CARRIER_KWARG not in inspect.signature(accepts_trace_context(takes_kwargs)).parameters


class RecordingHandle:
    """The whole dispatch contract, `.remote(*args, **kwargs)`, answered with what it was handed."""

    def remote(self, *args, **kwargs):
        return args, kwargs


def test_no_kwarg_is_sent_without_a_recording_span(memory):
    handle = RecordingHandle()
    assert dispatch_with_trace_context(handle, 1, y=2) == ((1,), {"y": 2})
    instrument.configure(exporter=InMemorySpanExporter(), span_groups="default")  # `step` is off here
    with umbrella_span(RLSpanGroup.U_STEP, "driver") as span:
        assert span is None
        assert dispatch_with_trace_context(handle, 1) == ((1,), {})


def test_the_carrier_is_sent_from_inside_a_recording_span(memory):
    with umbrella_span(RLSpanGroup.U_STEP, "driver") as span:
        args, kwargs = dispatch_with_trace_context(RecordingHandle(), 1)
    assert args == (1,)
    assert f"{span.get_span_context().span_id:016x}" in kwargs[TRACE_CARRIER_KWARG]["traceparent"]


# --- real actors --------------------------------------------------------------------------------------------------


@ray.remote
class RolloutWorker:
    """A worker as a training job writes one: set up telemetry bare, open spans in decorated methods."""

    def __init__(self):
        instrument.configure()  # exporter, path and groups come from the GOODPUT_* environment

    @accepts_trace_context
    def score(self, x):
        with managed_span(LEAF, "worker.sync"):
            return x * 2

    @accepts_trace_context
    async def generate(self, x):
        await asyncio.sleep(0)
        with managed_span(LEAF, "worker.async"):
            return x + 1

    @accepts_trace_context
    async def stream(self, n):
        for index in range(n):
            await asyncio.sleep(0)
            with managed_span(LEAF, f"worker.stream{index}"):
                pass
            yield index

    def flush(self):
        instrument.shutdown()
        return os.getpid()


def read_spans(directory: Path) -> dict[str, dict]:
    """Every span in the trace files under `directory`, by name, with its ids as hex and the file it was read from."""
    spans = {}
    for path in directory.iterdir():
        if path.suffix == ".jsonl":
            for span in read_json_lines_spans(path):
                spans[span["name"]] = {
                    "trace_id": span["traceId"],
                    "span_id": span["spanId"],
                    "parent_id": span.get("parentSpanId") or None,
                    "file": path.name,
                }
        elif path.suffix == ".otlp":
            for span in read_framed_spans(path):
                spans[span.name] = {
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_id": span.parent_span_id.hex() or None,
                    "file": path.name,
                }
    return spans


@pytest.mark.slow
@pytest.mark.ray
def test_a_worker_of_a_cluster_started_after_configure_inherits_it_bare(ray_cluster, ray_inherited_trace_dir):
    # No runtime_env here: the worker's bare configure() finds the GOODPUT_* variables the session's driver had
    # when it called ray.init() (see the ray_cluster fixture), as a job that configures first gets them.
    instrument.configure(exporter=InMemorySpanExporter(), span_groups="all", service_name="driver")
    worker = RolloutWorker.remote()
    try:
        with instrument.iteration_scope(5), umbrella_span(RLSpanGroup.U_STEP, "driver.inherit") as step:
            assert ray.get(dispatch_with_trace_context(worker.score, 5)) == 10
        worker_pid = ray.get(worker.flush.remote())
    finally:
        ray.kill(worker)
    (written,) = [p for p in ray_inherited_trace_dir.iterdir() if p.name.endswith(f"-{worker_pid}.jsonl")]
    (span,) = [s for s in read_json_lines_spans(written) if s["name"] == "worker.sync"]
    assert span["traceId"] == f"{step.get_span_context().trace_id:032x}"
    assert span["parentSpanId"] == f"{step.get_span_context().span_id:016x}"
    assert span["attributes"]["rl.bucket"] == "productive"
    assert span["attributes"]["rl.iteration"] == 5  # the driver's iteration_scope, carried as baggage


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("exporter", ["json-file", "otlp-file"])
def test_worker_spans_join_the_driver_trace(ray_cluster, tmp_path, exporter):
    instrument.configure(exporter=exporter, path=tmp_path, span_groups="all", service_name="driver")
    # The session's cluster was started before this configure(), so its workers did not inherit the GOODPUT_*
    # variables configure() just exported. A job that configures before ray.init() gets them for free; one that
    # joins a running cluster (as here, and as `ray start` clusters do) hands them over through the runtime env.
    env_vars = {k: v for k, v in os.environ.items() if k.startswith("GOODPUT_")}
    worker = RolloutWorker.options(runtime_env={"env_vars": env_vars}).remote()
    try:
        with umbrella_span(RLSpanGroup.U_STEP, "driver.step"):
            assert ray.get(dispatch_with_trace_context(worker.score, 3)) == 3 * 2
            assert ray.get(dispatch_with_trace_context(worker.generate, 3)) == 3 + 1
            stream = dispatch_with_trace_context(worker.stream.options(num_returns="streaming"), 2)
            assert [ray.get(ref) for ref in stream] == [0, 1]
        worker_pid = ray.get(worker.flush.remote())
    finally:
        ray.kill(worker)
    instrument.shutdown()

    spans = read_spans(tmp_path)
    driver = spans["driver.step"]
    worker_names = ["worker.sync", "worker.async", "worker.stream0", "worker.stream1"]
    for name in worker_names:
        assert spans[name]["trace_id"] == driver["trace_id"]
        assert spans[name]["parent_id"] == driver["span_id"]
        assert str(worker_pid) in spans[name]["file"]  # written by the worker's own exporter
    assert str(os.getpid()) in driver["file"]


@ray.remote
class UntracedWorker:
    def plain(self, x):
        return x


@ray.remote
def untraced_task(x):
    return x


@ray.remote
@accepts_trace_context
def traced_task(x):
    return trace.get_current_span().get_span_context().trace_id + x


def refusals(caplog, name):
    return [record for record in caplog.records if record.name == "instrument" and name in record.getMessage()]


@pytest.mark.slow
@pytest.mark.ray
def test_undecorated_actor_method_still_runs_and_warns_once(ray_cluster, memory, caplog):
    actor = UntracedWorker.remote()
    try:
        with caplog.at_level(logging.WARNING, logger="instrument"), umbrella_span(RLSpanGroup.U_STEP, "driver"):
            assert ray.get(dispatch_with_trace_context(actor.plain, 7)) == 7
            assert len(refusals(caplog, "UntracedWorker.plain")) == 1
            # The same method behind .options(): the key is the method's name, not the wrapper's address.
            assert _dispatch_method_name(actor.plain.options(name="again")) == "UntracedWorker.plain"
            assert ray.get(dispatch_with_trace_context(actor.plain.options(name="again"), 8)) == 8
            assert ray.get(dispatch_with_trace_context(actor.plain, 9)) == 9
    finally:
        ray.kill(actor)
    assert "UntracedWorker.plain" in STATE.carrier_refused
    [record] = refusals(caplog, "UntracedWorker.plain")
    assert "test_ray_dispatch.py" in record.stack_info  # points at the dispatching call site


@pytest.mark.ray
def test_undecorated_remote_function_still_runs_and_warns_once(ray_cluster, memory, caplog):
    name = f"{__name__}.untraced_task"
    with caplog.at_level(logging.WARNING, logger="instrument"), umbrella_span(RLSpanGroup.U_STEP, "driver"):
        assert ray.get(dispatch_with_trace_context(untraced_task.options(num_cpus=1), 7)) == 7
        assert ray.get(dispatch_with_trace_context(untraced_task, 8)) == 8
    assert _dispatch_method_name(untraced_task.options(num_cpus=1)) == _dispatch_method_name(untraced_task) == name
    assert name in STATE.carrier_refused
    assert len(refusals(caplog, name)) == 1


@pytest.mark.ray
def test_decorated_remote_function_is_parented(ray_cluster, memory):
    with umbrella_span(RLSpanGroup.U_STEP, "driver") as span:
        assert ray.get(dispatch_with_trace_context(traced_task, 1)) == span.get_span_context().trace_id + 1
    assert f"{__name__}.traced_task" not in STATE.carrier_refused


@pytest.mark.ray
def test_a_type_error_not_about_the_carrier_propagates(ray_cluster, memory):
    with (
        umbrella_span(RLSpanGroup.U_STEP, "driver"),
        pytest.raises(TypeError, match="too many positional arguments"),
    ):
        dispatch_with_trace_context(traced_task, 1, 2)
    assert f"{__name__}.traced_task" not in STATE.carrier_refused


@ray.remote
class PairWorker:
    @ray.method(num_returns=2)
    @accepts_trace_context
    def options_outside(self):
        return "a", trace.get_current_span().get_span_context().trace_id

    @accepts_trace_context
    @ray.method(num_returns=2)
    def options_inside(self):
        return "b", trace.get_current_span().get_span_context().trace_id


@pytest.mark.slow
@pytest.mark.ray
def test_ray_method_options_survive_either_decorator_order(ray_cluster, memory):
    worker = PairWorker.remote()
    try:
        with umbrella_span(RLSpanGroup.U_STEP, "driver") as span:
            outside = dispatch_with_trace_context(worker.options_outside)
            inside = dispatch_with_trace_context(worker.options_inside)
        assert len(outside) == 2 and len(inside) == 2
        trace_id = span.get_span_context().trace_id
        assert ray.get(outside) == ["a", trace_id]
        assert ray.get(inside) == ["b", trace_id]
    finally:
        ray.kill(worker)
    assert not STATE.carrier_refused & {"PairWorker.options_outside", "PairWorker.options_inside"}
