"""A synthetic trace of a GRPO training job, N spans, written in both trace-file formats the rollup reads.

The benchmarks need traces far bigger than the sample ones, shaped like what the instrumentation emits (SPEC section 1):
a driver and eight Ray workers, each its own resource; a job span; one step span per iteration; bucketed leaves under
the step on the driver; generation workers whose spans are parented across processes and carry no `rl.iteration`
(their per-prompt umbrellas are a third of all spans); policy workers training micro-batches under the step (half);
idle and wasted efficiency spans; a checkpoint and an evaluation now and then. About six attributes a span, of every
type (string, int, double, bool).

Each process exports batches of `BATCH_SPANS` spans, as the SDK's batch processor does, and every batch lands in
- `rl-trace-<N>.otlp`: framed protobuf as the Collector `file` exporter writes it (`format: proto`): each
  `ExportTraceServiceRequest` preceded by its length as a 4-byte big-endian int;
- `rl-trace-<N>.jsonl`: OTLP JSON Lines, byte for byte what `opentelemetry-exporter-otlp-json-file` writes
  (`python bench/tracegen.py --check` compares both encodings against the official encoders).
Spans are built straight as protobuf messages and JSON text, not as SDK spans, so a million take seconds, not minutes.
The files go to `bench/out/` with a `.json` sidecar (the span count and the per-(iteration, bucket) duration sums a
correct reader must reproduce) and are reused while the sidecar matches. Everything is seeded: same N, same bytes.

Usage: python bench/tracegen.py [--spans N] [--seed S] [--force] [--check]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GENERATOR_VERSION = 1  # bump whenever the output changes, so stale files in bench/out are rebuilt
DEFAULT_SEED = 20_260_101
OUT_DIR = Path(__file__).resolve().parent / "out"
BATCH_SPANS = 4096  # spans per exported message
EPOCH_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
SECOND_NS = 1_000_000_000
MIN_SPANS = 300  # below this a single step does not fit beside the job's fixed spans

SCOPE_NAME = "goodput.instrument"
SCOPE_VERSION = "0.1.0"
SDK_VERSION = "1.45.2"
ALGORITHM = "grpo"

GENERATION_WORKERS = 4
POLICY_WORKERS = 4
PROMPTS_PER_GENERATION_WORKER = 8
MICROBATCHES_PER_POLICY_WORKER = 12
CHECKPOINT_EVERY = 25
EVALUATE_EVERY = 10

# OTLP span flags as the SDK sets them: "has is_remote" always, "is remote" when the parent came from another process.
LOCAL_PARENT_FLAGS = 0x100
REMOTE_PARENT_FLAGS = 0x300
SPAN_KIND_INTERNAL = 1

Attributes = tuple[tuple[str, Any], ...]
# One span: span id, parent span id (None for the root), name, start_ns, end_ns, flags, attributes.
SpanRow = tuple[bytes, bytes | None, str, int, int, int, Attributes]
SumKey = tuple[int | None, str | None]


@dataclass(frozen=True)
class Process:
    """One emitting process and its OTLP resource attributes, in the order the SDK's `Resource.create` puts them."""

    service_name: str
    host_name: str
    pid: int
    instance_id: str

    @property
    def resource_attributes(self) -> Attributes:
        return (
            ("telemetry.sdk.language", "python"),
            ("telemetry.sdk.name", "opentelemetry"),
            ("telemetry.sdk.version", SDK_VERSION),
            ("service.name", self.service_name),
            ("service.instance.id", self.instance_id),
            ("host.name", self.host_name),
            ("process.pid", self.pid),
        )


@dataclass(frozen=True)
class TraceFiles:
    """The two files of one synthetic trace and what a correct reader must find in them."""

    spans: int
    iterations: int
    processes: int
    proto_path: Path
    jsonl_path: Path
    # (iteration, bucket) -> sum of end_ns - start_ns over spans carrying exactly that own `rl.iteration` and
    # `rl.bucket` (None where absent): what `SELECT iteration, bucket, sum(duration_ns) ... GROUP BY ALL` returns.
    duration_sums_ns: dict[SumKey, int]
    generation_s: float  # how long writing both files took, whenever they were written
    reused: bool  # True when the files were already there


def _processes(rng: random.Random) -> list[Process]:
    def instance_id() -> str:
        value = f"{rng.getrandbits(128):032x}"
        return f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"

    processes = [Process("grpo-driver", "node-00", 4121, instance_id())]
    for rank in range(GENERATION_WORKERS):
        processes.append(Process("vllm-generation-worker", f"node-{1 + rank // 2:02d}", 5200 + rank, instance_id()))
    for rank in range(POLICY_WORKERS):
        processes.append(Process("megatron-policy-worker", f"node-{3 + rank // 2:02d}", 6300 + rank, instance_id()))
    return processes


# --- encoding one exported batch -------------------------------------------------------------------------------------


class ProtoBatchEncoder:
    """`ExportTraceServiceRequest` bytes for one process's batch, built with the `opentelemetry.proto` messages.

    Attribute `KeyValue` messages are made once per distinct (key, value) and copied in, which is most of the speed.
    A key always holds one type here, so (key, 1) and (key, True) never meet in the cache.
    """

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
        from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
        from opentelemetry.proto.trace.v1.trace_pb2 import Status

        self._request_type = ExportTraceServiceRequest
        self._key_value = KeyValue
        self._any_value = AnyValue
        self._status = Status()
        self._cache: dict[tuple[str, Any], Any] = {}

    def _value(self, value: Any) -> Any:
        if isinstance(value, bool):
            return self._any_value(bool_value=value)
        if isinstance(value, int):
            return self._any_value(int_value=value)
        if isinstance(value, float):
            return self._any_value(double_value=value)
        return self._any_value(string_value=value)

    def _attributes(self, attributes: Attributes) -> list[Any]:
        cache = self._cache
        messages = []
        for pair in attributes:
            message = cache.get(pair)
            if message is None:
                message = self._key_value(key=pair[0], value=self._value(pair[1]))
                if not isinstance(pair[1], float):  # doubles rarely repeat; caching them would only grow the dict
                    cache[pair] = message
            messages.append(message)
        return messages

    def encode(self, trace_id: bytes, process: Process, rows: list[SpanRow]) -> bytes:
        request = self._request_type()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.extend(self._attributes(process.resource_attributes))
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = SCOPE_NAME
        scope_spans.scope.version = SCOPE_VERSION
        add = scope_spans.spans.add
        attributes = self._attributes
        status = self._status
        for span_id, parent_id, name, start_ns, end_ns, flags, span_attributes in rows:
            add(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=parent_id or b"",
                name=name,
                kind=SPAN_KIND_INTERNAL,
                start_time_unix_nano=start_ns,
                end_time_unix_nano=end_ns,
                attributes=attributes(span_attributes),
                status=status,
                flags=flags,
            )
        return request.SerializeToString()


class JsonBatchEncoder:
    """One OTLP JSON line for one process's batch, as the official file exporter writes it.

    The official exporter runs `json.dumps(..., separators=(",", ":"))` over the proto-JSON dict of the batch. Dumping
    a million nested dicts costs most of a minute, so the repeating pieces (each distinct attribute, the span names,
    the resource) are dumped once and joined as text; `--check` holds the result to the official bytes.
    """

    def __init__(self) -> None:
        self._attribute_cache: dict[tuple[str, Any], str] = {}
        self._key_cache: dict[str, str] = {}
        self._name_cache: dict[str, str] = {}

    @staticmethod
    def _value_dict(value: Any) -> dict[str, Any]:
        if isinstance(value, bool):
            return {"boolValue": value}
        if isinstance(value, int):
            return {"intValue": str(value)}  # proto3 JSON: 64-bit integers are strings
        if isinstance(value, float):
            return {"doubleValue": value}
        return {"stringValue": value}

    def _attribute(self, pair: tuple[str, Any]) -> str:
        text = self._attribute_cache.get(pair)
        if text is not None:
            return text
        key, value = pair
        if isinstance(value, float):  # not cached; the finite float's repr is what json.dumps writes
            prefix = self._key_cache.get(key)
            if prefix is None:
                prefix = self._key_cache[key] = json.dumps({"key": key}, separators=(",", ":"))[:-1]
            return f'{prefix},"value":{{"doubleValue":{value!r}}}}}'
        text = json.dumps({"key": key, "value": self._value_dict(value)}, separators=(",", ":"))
        self._attribute_cache[pair] = text
        return text

    def _attributes(self, attributes: Attributes) -> str:
        attribute = self._attribute
        return ",".join([attribute(pair) for pair in attributes])

    def encode(self, trace_id: bytes, process: Process, rows: list[SpanRow]) -> str:
        trace_hex = trace_id.hex()
        names = self._name_cache
        attributes = self._attributes
        spans = []
        for span_id, parent_id, name, start_ns, end_ns, flags, span_attributes in rows:
            name_json = names.get(name)
            if name_json is None:
                name_json = names[name] = json.dumps(name)
            parent = f'"parentSpanId":"{parent_id.hex()}",' if parent_id else ""
            spans.append(
                f'{{"traceId":"{trace_hex}","spanId":"{span_id.hex()}",{parent}"flags":{flags},"name":{name_json},'
                f'"kind":{SPAN_KIND_INTERNAL},"startTimeUnixNano":"{start_ns}","endTimeUnixNano":"{end_ns}",'
                f'"attributes":[{attributes(span_attributes)}],"status":{{}}}}'
            )
        scope = json.dumps({"name": SCOPE_NAME, "version": SCOPE_VERSION}, separators=(",", ":"))
        return (
            f'{{"resourceSpans":[{{"resource":{{"attributes":[{attributes(process.resource_attributes)}]}},'
            f'"scopeSpans":[{{"scope":{scope},"spans":[{",".join(spans)}]}}]}}]}}\n'
        )


# --- the job -----------------------------------------------------------------------------------------------------


BatchSink = Callable[[Process, list[SpanRow]], None]


class _JobBuilder:
    """Plays a GRPO job forward in time, handing each process's spans to `sink` in batches as its exporter would.

    Process 0 is the driver, then the generation workers, then the policy workers. A span is queued when it ends, so
    children come before their parents, as an exporter sees them.
    """

    def __init__(self, spans: int, seed: int, sink: BatchSink, batch_spans: int) -> None:
        if spans < MIN_SPANS:
            raise ValueError(f"a synthetic trace needs at least {MIN_SPANS} spans, not {spans}")
        self.rng = random.Random(seed)
        self.target = spans
        self.sink = sink
        self.batch_spans = batch_spans
        self.processes = _processes(self.rng)
        self.trace_id = self.rng.getrandbits(128).to_bytes(16, "big")
        self.pending: list[list[SpanRow]] = [[] for _ in self.processes]
        self.emitted = 0
        self.iterations = 0
        self.sums: dict[SumKey, int] = {}

    def new_id(self) -> bytes:
        return (self.rng.getrandbits(64) or 1).to_bytes(8, "big")

    def seconds(self, low: float, high: float) -> int:
        """A random duration between `low` and `high` seconds, in nanoseconds."""
        return int((low + (high - low) * self.rng.random()) * SECOND_NS)

    def emit(
        self, process: int, span_id: bytes, parent_id: bytes | None, name: str, start_ns: int, end_ns: int,
        attributes: Attributes, remote_parent: bool = False,
    ) -> None:  # fmt: skip
        """Queue one ended span on its process's exporter, which exports a batch whenever it has `batch_spans`."""
        flags = REMOTE_PARENT_FLAGS if remote_parent else LOCAL_PARENT_FLAGS
        pending = self.pending[process]
        pending.append((span_id, parent_id, name, start_ns, end_ns, flags, attributes))
        iteration = bucket = None
        for key, value in attributes:
            if key == "rl.iteration":
                iteration = value
            elif key == "rl.bucket":
                bucket = value
        self.sums[(iteration, bucket)] = self.sums.get((iteration, bucket), 0) + (end_ns - start_ns)
        self.emitted += 1
        if len(pending) >= self.batch_spans:
            self.sink(self.processes[process], pending)
            self.pending[process] = []

    def run(self) -> None:
        """Start-up, then steps until the target count is reached exactly, then the job span; flush every exporter."""
        job_id = self.new_id()
        t = self.startup(job_id, EPOCH_NS)
        while True:
            self.iterations += 1
            plan = self.plan_step(self.iterations)
            left = self.target - self.emitted - 1  # the job span comes last
            # The step after this one must fit whole; when it would not, this step takes every span left as prompts.
            last = left < 2 * self.step_size(StepPlan(0, True, True, True, True))
            if last:
                plan.extra_prompts = left - self.step_size(plan)
            t = self.step(job_id, t, plan)
            if last:
                break
        job_attributes = (("rl.span_group", "job"), ("rl.algorithm", ALGORITHM), ("job.name", "grpo-math-7b"))
        self.emit(0, job_id, None, f"rl.{ALGORITHM}.job", EPOCH_NS, t + self.seconds(1, 3), job_attributes)
        for process, pending in zip(self.processes, self.pending, strict=True):
            if pending:
                self.sink(process, pending)
        self.pending = [[] for _ in self.processes]
        assert self.emitted == self.target, (self.emitted, self.target)

    def startup(self, job_id: bytes, start_ns: int) -> int:
        """Driver start-up with model initialisation on every worker; returns when the first step starts."""
        startup_id = self.new_id()
        end_ns = start_ns + self.seconds(80, 120)
        model = (("rl.span_group", "model_init"), ("model.name", "qwen2.5-math-7b"), ("model.tp_size", 2))
        for process in range(1, len(self.processes)):
            begin, end = start_ns + self.seconds(5, 15), end_ns - self.seconds(1, 4)
            self.emit(process, self.new_id(), startup_id, "rl.setup.model_init", begin, end, model, True)
        init = (("rl.span_group", "efficiency"), ("rl.efficiency.category", "init/total"))  # emitted unbucketed
        self.emit(0, self.new_id(), startup_id, "rl.init.total", start_ns + 10**7, end_ns - 10**7, init)
        self.emit(0, startup_id, job_id, "rl.startup", start_ns, end_ns, (("rl.span_group", "setup"),))
        return end_ns + self.seconds(0.05, 0.5)

    def plan_step(self, iteration: int) -> StepPlan:
        random_ = self.rng.random
        evaluate, checkpoint = iteration % EVALUATE_EVERY == 0, iteration % CHECKPOINT_EVERY == 0
        return StepPlan(iteration, random_() < 0.10, random_() < 0.05, checkpoint, evaluate)

    @staticmethod
    def step_size(plan: StepPlan) -> int:
        driver = 8  # step, rollout, reward, logprob, advantage, data_processing, weight sync, refit bubble
        optional = plan.starvation + plan.failed_trajectory + plan.checkpoint + 2 * plan.evaluate
        generation = GENERATION_WORKERS * (1 + PROMPTS_PER_GENERATION_WORKER) + plan.extra_prompts
        return driver + optional + generation + POLICY_WORKERS * MICROBATCHES_PER_POLICY_WORKER

    def step(self, job_id: bytes, start_ns: int, plan: StepPlan) -> int:
        """One iteration from rollout to refit; returns when the next step starts."""
        it, seconds, random_, new_id, emit = plan.iteration, self.seconds, self.rng.random, self.new_id, self.emit
        step_id, rollout_id = new_id(), new_id()
        prompts = GENERATION_WORKERS * PROMPTS_PER_GENERATION_WORKER + plan.extra_prompts

        # Rollout: each generation worker (its own process, parented across) generates for its share of the prompts,
        # a per-prompt umbrella span for each; then the driver scores them. The workers know no iteration.
        rollout_start = start_ns + seconds(0.02, 0.08)
        generation_s = 20 + 20 * random_()
        generation_end = rollout_start
        for worker in range(GENERATION_WORKERS):
            process, leaf_id = 1 + worker, new_id()
            leaf_start = rollout_start + seconds(0.05, 0.3)
            leaf_end = rollout_start + int((generation_s - 2 * random_()) * SECOND_NS)
            share = PROMPTS_PER_GENERATION_WORKER + (plan.extra_prompts + worker) // GENERATION_WORKERS
            for prompt in range(share):
                begin = leaf_start + int((leaf_end - leaf_start) * 0.6 * random_())
                end = begin + int((leaf_end - begin) * (0.2 + 0.8 * random_()))
                tokens = int(4096 * random_())
                attributes = (
                    ("rl.span_group", "per_prompt"), ("prompt.index", worker * PROMPTS_PER_GENERATION_WORKER + prompt),
                    ("prompt.output_tokens", tokens), ("prompt.reward", round(random_(), 4)),
                    ("prompt.truncated", tokens > 4000), ("prompt.dataset", "openmathinstruct-2"),
                )  # fmt: skip
                emit(process, new_id(), leaf_id, f"rl.{ALGORITHM}.per_prompt", begin, end, attributes)
            attributes = (
                ("rl.bucket", "productive"), ("rl.span_group", "generation"), ("vllm.num_prompts", share),
                ("vllm.tokens_per_s", round(1500 + 1000 * random_(), 2)), ("vllm.prefix_caching", True),
            )  # fmt: skip
            emit(process, leaf_id, rollout_id, f"rl.{ALGORITHM}.generation", leaf_start, leaf_end, attributes, True)
            generation_end = max(generation_end, leaf_end)
        if plan.starvation:
            self.efficiency(it, rollout_id, rollout_start, rollout_start + seconds(0.1, 2), "idle/buffer_starvation")
        if plan.failed_trajectory:
            begin = rollout_start + seconds(2, 15)
            self.efficiency(it, rollout_id, begin, begin + seconds(0.5, 3), "wasted/failed_trajectory")
        t = generation_end + seconds(0.005, 0.02)
        samples = prompts * 4
        reward = (("reward.mean", round(random_(), 4)), ("reward.samples", samples), ("reward.model", "math-verify"))
        t = self.leaf(it, rollout_id, "reward", t, seconds(1, 3), reward)
        rollout = (("rl.span_group", "rollout"), ("rl.iteration", it), ("rollout.samples", samples))
        emit(0, rollout_id, step_id, f"rl.{ALGORITHM}.rollout", rollout_start, t, rollout)

        # Preparation on the driver, training on the policy workers (parented across), then the weights go back.
        t += seconds(0.005, 0.02)
        logprob = (("logprob.tokens", samples * 1024), ("logprob.reference", True), ("logprob.backend", "megatron"))
        t = self.leaf(it, step_id, "logprob", t, seconds(3, 6), logprob) + seconds(0.002, 0.01)
        advantage = (("advantage.std", round(random_(), 4)), ("advantage.normalize", True), ("advantage.kind", "grpo"))
        t = self.leaf(it, step_id, "advantage", t, seconds(0.2, 0.5), advantage) + seconds(0.002, 0.01)
        seq_len_mean = round(900 + 500 * random_(), 1)
        data = (("data.samples", samples), ("data.packed", True), ("data.seq_len_mean", seq_len_mean))
        t = self.leaf(it, step_id, "data_processing", t, seconds(0.5, 1), data)
        training_start = t + seconds(0.02, 0.1)
        training_end = training_start
        for worker in range(POLICY_WORKERS):
            process = 1 + GENERATION_WORKERS + worker
            begin = training_start + seconds(0, 0.05)
            for microbatch in range(MICROBATCHES_PER_POLICY_WORKER):
                end = begin + seconds(1.2, 2.5)
                attributes = (
                    ("rl.bucket", "productive"), ("rl.span_group", "policy_update"), ("rl.iteration", it),
                    ("train.microbatch", microbatch), ("train.loss", round(0.5 * random_(), 5)),
                    ("train.grad_clipped", random_() < 0.1),
                )  # fmt: skip
                emit(process, new_id(), step_id, f"rl.{ALGORITHM}.policy_training", begin, end, attributes, True)
                training_end = max(training_end, end)
                begin = end + seconds(0.005, 0.02)
        t = training_end + seconds(0.01, 0.03)
        sync = (("sync.bytes", 15_231_233_024), ("sync.backend", "nccl"), ("sync.colocated", False))
        t = self.leaf(it, step_id, "data_plane", t, seconds(1, 3), sync, phase="weight_sync")
        end = t + seconds(0.2, 1)
        self.efficiency(it, step_id, t, end, "idle/refit_bubble", (("rl.idle.polls", int(50 * random_())),))
        t = end + seconds(0.005, 0.02)
        if plan.checkpoint:
            checkpoint = (
                ("rl.bucket", "overhead"), ("rl.span_group", "checkpoint"), ("rl.iteration", it),
                ("checkpoint.bytes", 30_462_466_048), ("checkpoint.path", f"/checkpoints/grpo-math-7b/step_{it}"),
                ("checkpoint.async", False),
            )  # fmt: skip
            end = t + seconds(10, 30)
            emit(0, new_id(), step_id, "rl.checkpoint.finalize", t, end, checkpoint)
            t = end + seconds(0.005, 0.02)
        if plan.evaluate:
            evaluate_id, end = new_id(), t + seconds(8, 15)
            self.efficiency(it, evaluate_id, t + 10**7, end - 10**7, "idle/validation")
            evaluate = (
                ("rl.span_group", "evaluate"), ("rl.iteration", it), ("eval.dataset", "math-500"),
                ("eval.accuracy", round(random_(), 4)),
            )  # fmt: skip
            emit(0, evaluate_id, step_id, f"rl.{ALGORITHM}.evaluate", t, end, evaluate)
            t = end
        step_end = t + seconds(0.01, 0.05)
        step = (
            ("rl.span_group", "step"), ("rl.iteration", it), ("rl.algorithm", ALGORITHM), ("step.prompts", prompts),
            ("step.kl_coef", 0.001),
        )  # fmt: skip
        emit(0, step_id, job_id, f"rl.{ALGORITHM}.step", start_ns, step_end, step)
        return step_end + seconds(0.05, 0.5)

    def leaf(
        self, it: int, parent_id: bytes, group: str, start_ns: int, duration_ns: int, extra: Attributes, phase: str = ""
    ) -> int:
        """A bucketed driver span `rl.<algo>.<phase or group>`: its group's bucket, the iteration, `extra`; its end."""
        bucket = "productive" if group in ("generation", "reward", "policy_update") else "overhead"
        attributes = (("rl.bucket", bucket), ("rl.span_group", group), ("rl.iteration", it)) + extra
        end_ns = start_ns + duration_ns
        self.emit(0, self.new_id(), parent_id, f"rl.{ALGORITHM}.{phase or group}", start_ns, end_ns, attributes)
        return end_ns

    def efficiency(
        self, it: int, parent_id: bytes, start_ns: int, end_ns: int, category: str, extra: Attributes = ()
    ) -> None:
        """An efficiency span of an `idle/...` or `wasted/...` category on the driver, bucketed by that prefix."""
        bucket = category.split("/", 1)[0]
        attributes = (
            ("rl.bucket", bucket), ("rl.span_group", "efficiency"), ("rl.efficiency.category", category),
            ("rl.iteration", it),
        ) + extra  # fmt: skip
        self.emit(0, self.new_id(), parent_id, "rl." + category.replace("/", "."), start_ns, end_ns, attributes)


@dataclass
class StepPlan:
    """What one step will hold, drawn before it is played so the last step can be sized to hit N exactly."""

    iteration: int
    starvation: bool
    failed_trajectory: bool
    checkpoint: bool
    evaluate: bool
    extra_prompts: int = 0


def generate(spans: int, sink: BatchSink, *, seed: int = DEFAULT_SEED, batch_spans: int = BATCH_SPANS) -> _JobBuilder:
    """Play a job of exactly `spans` spans, handing every exported batch to `sink`; returns the finished builder."""
    builder = _JobBuilder(spans, seed, sink, batch_spans)
    builder.run()
    return builder


def framed_batches(
    spans: int, sink: Callable[[bytes, int], None], *, seed: int = DEFAULT_SEED, batch_spans: int = BATCH_SPANS
) -> _JobBuilder:
    """Play a job of exactly `spans` spans, handing each exported batch to `sink` as one framed protobuf record (a
    4-byte big-endian length, then the message: the Collector's file exporter's) with the spans it holds."""
    encoder = ProtoBatchEncoder()

    def write_batch(process: Process, rows: list[SpanRow]) -> None:
        message = encoder.encode(builder.trace_id, process, rows)
        sink(struct.pack(">I", len(message)) + message, len(rows))

    builder = _JobBuilder(spans, seed, write_batch, batch_spans)
    builder.run()
    return builder


# --- the files ---------------------------------------------------------------------------------------------------


def _paths(out_dir: Path, spans: int) -> tuple[Path, Path, Path]:
    stem = out_dir / f"rl-trace-{spans}"
    return stem.with_suffix(".otlp"), stem.with_suffix(".jsonl"), stem.with_suffix(".json")


def _sums_to_json(sums: dict[SumKey, int]) -> list[list[Any]]:
    return [[iteration, bucket, total] for (iteration, bucket), total in sorted(sums.items(), key=_sum_order)]


def _sum_order(item: tuple[SumKey, int]) -> tuple[int, int, str, str]:
    (iteration, bucket), _ = item
    return (iteration is None, iteration or 0, bucket is None, bucket or "")


def _load_existing(spans: int, seed: int, out_dir: Path) -> TraceFiles | None:
    proto_path, jsonl_path, meta_path = _paths(out_dir, spans)
    try:
        meta = json.loads(meta_path.read_text())
        sizes = (proto_path.stat().st_size, jsonl_path.stat().st_size)
        sizes_match = sizes == (meta["proto_bytes"], meta["jsonl_bytes"])
    except (OSError, ValueError, KeyError):
        return None
    if not sizes_match or meta.get("generator_version") != GENERATOR_VERSION or meta.get("seed") != seed:
        return None
    return TraceFiles(
        spans=meta["spans"],
        iterations=meta["iterations"],
        processes=meta["processes"],
        proto_path=proto_path,
        jsonl_path=jsonl_path,
        duration_sums_ns={(row[0], row[1]): row[2] for row in meta["duration_sums_ns"]},
        generation_s=meta["generation_s"],
        reused=True,
    )


def trace_files(
    spans: int,
    *,
    seed: int = DEFAULT_SEED,
    out_dir: Path = OUT_DIR,
    force: bool = False,
    log: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
) -> TraceFiles:
    """The synthetic trace of `spans` spans in both formats, generated into `out_dir` unless already there."""
    if not force:
        existing = _load_existing(spans, seed, out_dir)
        if existing is not None:
            return existing
    out_dir.mkdir(parents=True, exist_ok=True)
    proto_path, jsonl_path, meta_path = _paths(out_dir, spans)
    proto_tmp = proto_path.with_name(proto_path.name + ".partial")
    jsonl_tmp = jsonl_path.with_name(jsonl_path.name + ".partial")
    proto_encoder, json_encoder = ProtoBatchEncoder(), JsonBatchEncoder()
    started = time.perf_counter()
    log(f"generating {spans:,} spans into {out_dir} ...")
    with open(proto_tmp, "wb") as proto_file, open(jsonl_tmp, "w", encoding="utf-8", newline="\n") as jsonl_file:
        trace_id: list[bytes] = []

        def write_batch(process: Process, rows: list[SpanRow]) -> None:
            message = proto_encoder.encode(trace_id[0], process, rows)
            proto_file.write(struct.pack(">I", len(message)))
            proto_file.write(message)
            jsonl_file.write(json_encoder.encode(trace_id[0], process, rows))

        builder = _JobBuilder(spans, seed, write_batch, BATCH_SPANS)
        trace_id.append(builder.trace_id)
        builder.run()
    os.replace(proto_tmp, proto_path)
    os.replace(jsonl_tmp, jsonl_path)
    meta = {
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "spans": spans,
        "iterations": builder.iterations,
        "processes": len(builder.processes),
        "proto_bytes": proto_path.stat().st_size,
        "jsonl_bytes": jsonl_path.stat().st_size,
        "generation_s": round(time.perf_counter() - started, 2),
        "duration_sums_ns": _sums_to_json(builder.sums),
    }
    meta_path.write_text(json.dumps(meta) + "\n")
    log(f"generated {spans:,} spans ({builder.iterations:,} iterations) in {meta['generation_s']:.1f} s")
    loaded = _load_existing(spans, seed, out_dir)
    assert loaded is not None
    return dataclasses.replace(loaded, reused=False)


# --- holding the encoders to the official ones ------------------------------------------------------------------


def check_against_official_encoders(spans: int = 2_000, batch_spans: int = 256) -> int:
    """Encode a small job both ways, ours and through SDK `ReadableSpan`s and the official encoders; count batches.

    Raises AssertionError at the first batch whose protobuf bytes or JSON line differ.
    """
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_proto
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    batches: list[tuple[Process, list[SpanRow]]] = []
    builder = generate(spans, lambda process, rows: batches.append((process, rows)), batch_spans=batch_spans)
    trace_id = int.from_bytes(builder.trace_id, "big")
    scope = InstrumentationScope(SCOPE_NAME, SCOPE_VERSION)
    resources = {process: Resource(dict(process.resource_attributes)) for process in builder.processes}
    proto_encoder, json_encoder = ProtoBatchEncoder(), JsonBatchEncoder()
    for index, (process, rows) in enumerate(batches):
        sdk_spans = []
        for span_id, parent_id, name, start_ns, end_ns, flags, attributes in rows:
            parent = None
            if parent_id is not None:
                parent = SpanContext(trace_id, int.from_bytes(parent_id, "big"), is_remote=flags == REMOTE_PARENT_FLAGS)
            context = SpanContext(
                trace_id, int.from_bytes(span_id, "big"), is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)
            )
            sdk_spans.append(
                ReadableSpan(
                    name=name,
                    context=context,
                    parent=parent,
                    resource=resources[process],
                    attributes=dict(attributes),
                    kind=SpanKind.INTERNAL,
                    start_time=start_ns,
                    end_time=end_ns,
                    instrumentation_scope=scope,
                )
            )
        official_proto = encode_proto(sdk_spans).SerializeToString()
        official_json = json.dumps(encode_json(sdk_spans).to_dict(), separators=(",", ":")) + "\n"
        assert proto_encoder.encode(builder.trace_id, process, rows) == official_proto, f"protobuf batch {index}"
        assert json_encoder.encode(builder.trace_id, process, rows) == official_json, f"JSON batch {index}"
    return len(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--force", action="store_true", help="regenerate even when the files are there")
    parser.add_argument("--check", action="store_true", help="compare a small job's encodings with the official ones")
    args = parser.parse_args()
    if args.check:
        batches = check_against_official_encoders()
        print(f"ok: {batches} batches identical to the official protobuf and JSON encoders")
        return
    files = trace_files(args.spans, seed=args.seed, force=args.force)
    for path in (files.proto_path, files.jsonl_path):
        print(f"{path}  {path.stat().st_size / 1e6:,.1f} MB")
    print(f"{files.spans:,} spans, {files.iterations:,} iterations, {files.processes} processes")


if __name__ == "__main__":
    main()
